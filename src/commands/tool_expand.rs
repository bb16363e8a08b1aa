//! `delta tool expand <agent-dir-or-yaml> [--format yaml|json] [-w WORKSPACE]` (alias
//! `delta tool:expand`): prints each tool's internal form (spec §2.2.7) after following
//! imports, and for an agent the tools of its MCP servers (started for the listing, then
//! stopped) and the built-in `ask_human` last, as the model is offered them (or that it is
//! off).
//!
//! Owns the expansion document's shape and its rendering. Loading, validation and opening
//! the tool kinds are the library's (`load_agent` / `load_tool_library` /
//! `tool::kind::registry`); this file only presents the result. stdout carries the document
//! only; warnings and the summary go to stderr.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use delta_actors::agent::ResolvedAgent;
use delta_actors::agent::{is_agent_path, load_agent, load_env_cascade, load_tool_library};
use delta_actors::tool::ask_human;
use delta_actors::tool::compile::{CompiledTool, ToolSyntax};
use delta_actors::tool::kind::registry::{
    open_toolbox, server_environment, OpenContext, ToolServices,
};
use delta_actors::tool::kind::{OfferedTool, ToolOrigin};
use serde::Serialize;

use crate::commands::engine::process_env;
use crate::error::CliError;

const AFTER_HELP: &str = "\
Examples:
  delta tool expand my-agent                   the agent folder (imports are followed)
  delta tool expand my-agent/agent.yaml --format json
  delta tool expand my-agent/tools/files.yaml  a tools file on its own
  delta tool expand my-agent -w ws/W001        MCP servers started for workspace ws/W001

The agent is fully validated first: a broken agent exits 126 with the file and a hint.
An agent's MCP servers (`mcp:` in agent.yaml) are started to list their tools, then
stopped; one that does not start is named on stderr and the command exits 1.";

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

    /// The workspace MCP servers are started for (their `${CWD}`; default: the current
    /// folder)
    #[arg(short = 'w', long = "workspace", value_name = "DIR")]
    pub workspace: Option<PathBuf>,
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
    /// The MCP server that lists the tool, and its own name there.
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_tool: Option<String>,
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
    values: Vec<serde_json::Value>,
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
                values: Vec::new(),
            })
            .collect(),
        timeout_ms: tool.timeout_ms,
        server: None,
        server_tool: None,
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
                values: p.values.iter().map(|v| serde_json::json!(v)).collect(),
            })
            .collect(),
        timeout_ms: None,
        server: None,
        server_tool: None,
        defined_in: BUILT_IN.to_string(),
    }
}

/// A tool of an MCP server, from what the model is offered: its description, and its
/// parameters read from the server's input schema.
fn expand_mcp_tool(offered: &OfferedTool, server: &str, tool: &str, source: &str) -> ExpandedTool {
    let function = &offered.schema["function"];
    let parameters = &function["parameters"];
    let required: Vec<&str> = parameters["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    ExpandedTool {
        name: offered.name.clone(),
        description: text(&function["description"]),
        syntax: "mcp",
        template: None,
        command: Vec::new(),
        parameters: parameters["properties"]
            .as_object()
            .map(|properties| {
                properties
                    .iter()
                    .map(|(name, property)| ExpandedParameter {
                        name: name.clone(),
                        param_type: json_type(&property["type"]),
                        inject_as: None,
                        option_name: None,
                        position: None,
                        raw: false,
                        required: required.contains(&name.as_str()),
                        default: property.get("default").cloned(),
                        description: text(&property["description"]),
                        values: property["enum"].as_array().cloned().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        timeout_ms: None,
        server: Some(server.to_string()),
        server_tool: Some(tool.to_string()),
        defined_in: format!("{source} (mcp.{server})"),
    }
}

/// A JSON-schema type as the document names it (`any` when the schema gives none or several).
fn json_type(value: &serde_json::Value) -> &'static str {
    match value.as_str() {
        Some("string") => "string",
        Some("integer") => "integer",
        Some("number") => "number",
        Some("boolean") => "boolean",
        Some("array") => "array",
        Some("object") => "object",
        _ => "any",
    }
}

/// The agent's MCP tools, its servers started for `workspace` (then stopped), and why any
/// server did not start.
fn mcp_tools(
    agent: &ResolvedAgent,
    workspace: &Path,
) -> Result<(Vec<OfferedTool>, Vec<String>), CliError> {
    if agent.mcp.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let cwd = std::env::current_dir()?;
    let env = load_env_cascade(Some(workspace), &agent.home, &cwd, &process_env())?;
    let tool_path_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let agent = Arc::new(agent.clone());
    let server_env = server_environment(&agent, &env.vars, tool_path_dir.as_deref());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(format!("cannot start the async runtime: {e}")))?;
    let services = ToolServices::new();
    let ctx = OpenContext {
        agent: &agent,
        work_dir: workspace,
        server_env: &server_env,
    };
    let (toolbox, unavailable) = runtime.block_on(open_toolbox(&services, &ctx));
    services.shutdown();
    let tools = toolbox
        .offered()
        .iter()
        .filter(|t| matches!(t.origin, ToolOrigin::McpServer { .. }))
        .cloned()
        .collect();
    Ok((tools, unavailable))
}

fn summary(
    tools: &[CompiledTool],
    mcp_tools: usize,
    source: &Path,
    ask_human_offered: bool,
) -> String {
    let count = |s: ToolSyntax| tools.iter().filter(|t| t.syntax == s).count();
    let ask_human = if ask_human_offered {
        "the built-in ask_human is offered too (listed last for an agent; `ask_human: false` in agent.yaml turns it off)"
    } else {
        "the built-in ask_human is off (`ask_human: false` in agent.yaml)"
    };
    let mcp = if mcp_tools > 0 {
        format!(" and {mcp_tools} tool(s) of MCP servers")
    } else {
        String::new()
    };
    format!(
        "expanded {} tool(s) from {} ({} exec, {} shell, {} legacy){mcp}; {ask_human}",
        tools.len(),
        source.display(),
        count(ToolSyntax::Exec),
        count(ToolSyntax::Shell),
        count(ToolSyntax::Legacy)
    )
}

pub fn run(args: &ToolExpandArgs) -> Result<i32, CliError> {
    let mut unavailable = Vec::new();
    let mut mcp_count = 0;
    let (document, tools, warnings, source) = if is_agent_path(&args.path) {
        let agent = load_agent(&args.path)?;
        // `${CWD}` of the servers, which start in the agent folder: an absolute path.
        let workspace = std::path::absolute(args.workspace.as_deref().unwrap_or(Path::new(".")))?;
        let (mcp, not_started) = mcp_tools(&agent, &workspace)?;
        unavailable = not_started;
        mcp_count = mcp.len();
        let source = relative(&agent.config_file, &agent.home);
        let mcp_expanded = mcp.iter().filter_map(|t| match &t.origin {
            ToolOrigin::McpServer { server, tool } => {
                Some(expand_mcp_tool(t, server, tool, &source))
            }
            _ => None,
        });
        let document = ExpandedDocument {
            agent: Some(agent.name.clone()),
            source: source.clone(),
            ask_human: (!agent.ask_human).then_some(false),
            tools: agent
                .tools
                .iter()
                .map(|t| expand_tool(t, &agent.home))
                .chain(mcp_expanded)
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
        crate::notice!("warning: {warning}");
    }
    for reason in &unavailable {
        crate::notice!("error: {reason}");
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
    crate::output::emit(&rendered);
    crate::notice!(
        "{}",
        summary(
            &tools,
            mcp_count,
            &source,
            document.ask_human.unwrap_or(true)
        )
    );
    // The listing is incomplete when a server did not start: say so in the exit code too.
    Ok(if unavailable.is_empty() { 0 } else { 1 })
}
