//! `delta tool expand <agent-dir-or-yaml> [--format yaml|json]` (alias `delta tool:expand`):
//! prints each tool's internal form (spec §2.2.7) after following imports, and for an agent
//! the built-in `ask_human` last, as the model is offered it (or that it is off).
//!
//! Owns the expansion document's shape and its rendering. Loading and validation are the
//! library's (`load_agent` / `load_tool_library`); this file only presents the result.
//! stdout carries the document only; warnings and the summary go to stderr.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use delta_actors::agent::{is_agent_path, load_agent, load_tool_library};
use delta_actors::tool::ask_human;
use delta_actors::tool::compile::{CompiledTool, ToolSyntax};
use serde::Serialize;

use crate::error::CliError;

const AFTER_HELP: &str = "\
Examples:
  delta tool expand my-agent                   the agent folder (imports are followed)
  delta tool expand my-agent/agent.yaml --format json
  delta tool expand my-agent/tools/files.yaml  a tools file on its own

The agent is fully validated first: a broken agent exits 126 with the file and a hint.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExpandFormat {
    Yaml,
    Json,
}

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct ToolExpandArgs {
    /// Agent folder, its agent.yaml / config.yaml, or a standalone tools file
    pub path: PathBuf,

    /// Output format of the expansion on stdout
    #[arg(long, value_enum, default_value_t = ExpandFormat::Yaml)]
    pub format: ExpandFormat,
}

#[derive(Debug, Serialize)]
struct ExpandedDocument {
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    source: String,
    /// `false` for an agent that turned the built-in tool off (`ask_human: false`): it is
    /// then neither listed nor offered. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    ask_human: Option<bool>,
    tools: Vec<ExpandedTool>,
}

#[derive(Debug, Serialize)]
struct ExpandedTool {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// `exec`, `shell` or `legacy` (`command:` + `parameters:`).
    syntax: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<String>,
    /// Empty only for the built-in ask_human, which runs no command.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    command: Vec<String>,
    parameters: Vec<ExpandedParameter>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    defined_in: String,
}

#[derive(Debug, Serialize)]
struct ExpandedParameter {
    name: String,
    #[serde(rename = "type")]
    param_type: &'static str,
    /// How the value reaches the process; none for the built-in ask_human.
    #[serde(skip_serializing_if = "Option::is_none")]
    inject_as: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    option_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<usize>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    raw: bool,
    required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    default: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// The accepted values of an enumeration (ask_human's `input_type`).
    #[serde(rename = "enum", skip_serializing_if = "<[_]>::is_empty")]
    values: &'static [&'static str],
}

/// The syntax and `defined_in` shown for the built-in tool.
const BUILT_IN: &str = "built-in";

fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn expand_tool(tool: &CompiledTool, base: &Path) -> ExpandedTool {
    ExpandedTool {
        name: tool.name.clone(),
        description: tool.description.clone(),
        syntax: tool.syntax.as_str(),
        template: tool.template.clone(),
        command: tool.command.clone(),
        parameters: tool
            .parameters
            .iter()
            .map(|p| ExpandedParameter {
                name: p.name.clone(),
                param_type: p.param_type.as_str(),
                inject_as: Some(p.inject_as.as_str()),
                option_name: p.option_name.clone(),
                position: p.position,
                raw: p.raw,
                required: p.required,
                default: p.default.clone(),
                description: p.description.clone(),
                values: &[],
            })
            .collect(),
        timeout_ms: tool.timeout_ms,
        defined_in: relative(&tool.source_file, base),
    }
}

/// The built-in `ask_human`, which an agent offers the model after its own tools (unless
/// its agent.yaml says `ask_human: false`).
fn expand_ask_human() -> ExpandedTool {
    ExpandedTool {
        name: ask_human::ASK_HUMAN.to_string(),
        description: Some(ask_human::DESCRIPTION.to_string()),
        syntax: BUILT_IN,
        template: None,
        command: Vec::new(),
        parameters: ask_human::PARAMETERS
            .iter()
            .map(|p| ExpandedParameter {
                name: p.name.to_string(),
                param_type: p.param_type,
                inject_as: None,
                option_name: None,
                position: None,
                raw: false,
                required: p.required,
                default: None,
                description: Some(p.description.to_string()),
                values: p.values,
            })
            .collect(),
        timeout_ms: None,
        defined_in: BUILT_IN.to_string(),
    }
}

fn summary(tools: &[CompiledTool], source: &Path, ask_human_offered: bool) -> String {
    let count = |s: ToolSyntax| tools.iter().filter(|t| t.syntax == s).count();
    let ask_human = if ask_human_offered {
        "the built-in ask_human is offered too (listed last for an agent; `ask_human: false` in agent.yaml turns it off)"
    } else {
        "the built-in ask_human is off (`ask_human: false` in agent.yaml)"
    };
    format!(
        "expanded {} tool(s) from {} ({} exec, {} shell, {} legacy); {ask_human}",
        tools.len(),
        source.display(),
        count(ToolSyntax::Exec),
        count(ToolSyntax::Shell),
        count(ToolSyntax::Legacy)
    )
}

pub fn run(args: &ToolExpandArgs) -> Result<i32, CliError> {
    let (document, tools, warnings, source) = if is_agent_path(&args.path) {
        let agent = load_agent(&args.path)?;
        let document = ExpandedDocument {
            agent: Some(agent.name.clone()),
            source: relative(&agent.config_file, &agent.home),
            ask_human: (!agent.ask_human).then_some(false),
            tools: agent
                .tools
                .iter()
                .map(|t| expand_tool(t, &agent.home))
                .chain(agent.ask_human.then(expand_ask_human))
                .collect(),
        };
        (document, agent.tools, agent.warnings, agent.config_file)
    } else {
        let library = load_tool_library(&args.path)?;
        let base = library
            .file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let document = ExpandedDocument {
            agent: None,
            source: relative(&library.file, &base),
            ask_human: None,
            tools: library
                .tools
                .iter()
                .map(|t| expand_tool(t, &base))
                .collect(),
        };
        (document, library.tools, library.warnings, library.file)
    };
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let rendered = match args.format {
        ExpandFormat::Yaml => serde_yaml::to_string(&document)
            .map_err(|e| CliError::Runtime(format!("cannot render YAML: {e}")))?,
        ExpandFormat::Json => {
            let mut text = serde_json::to_string_pretty(&document)
                .map_err(|e| CliError::Runtime(format!("cannot render JSON: {e}")))?;
            text.push('\n');
            text
        }
    };
    print!("{rendered}");
    eprintln!(
        "{}",
        summary(&tools, &source, document.ask_human.unwrap_or(true))
    );
    Ok(0)
}
