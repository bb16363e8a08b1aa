//! `delta init [name] [-t template] [-y]`: writes a new agent folder from a template.
//!
//! Owns the five templates (files under `init_templates/`, compiled in, and each one's
//! `llm-script.yaml` for a first offline run), the "new or empty
//! folder" rule (dot-entries such as `.git` do not count) and the template menu, which is
//! only offered on a terminal: without one, init never waits for input.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use delta_actors::agent::default_context_yaml;

use crate::error::CliError;

const AFTER_HELP: &str = "\
Examples:
  delta init demo -t hello-world     a new folder `demo` from the hello-world template
  delta init -y                      the minimal template in the current (empty) folder
  delta init api -t api-tester

Then: delta tool expand demo
      delta run --agent demo -m \"Say hello\" -y --llm-script demo/llm-script.yaml   (offline)";

/// A starting point for a new agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Template {
    /// echo and write_to_file
    Minimal,
    /// print, create, write and list files, show the date
    HelloWorld,
    /// list, create folders, move, copy, find, size
    #[value(alias = "file-organizer")]
    FileOps,
    /// curl GET/POST/PUT/DELETE, status codes, JSON formatting
    ApiTester,
    /// a persistent shell through delta-sessions
    BashSession,
}

impl Template {
    const ALL: [Template; 5] = [
        Template::Minimal,
        Template::HelloWorld,
        Template::FileOps,
        Template::ApiTester,
        Template::BashSession,
    ];

    fn name(self) -> &'static str {
        match self {
            Template::Minimal => "minimal",
            Template::HelloWorld => "hello-world",
            Template::FileOps => "file-ops",
            Template::ApiTester => "api-tester",
            Template::BashSession => "bash-session",
        }
    }

    fn summary(self) -> &'static str {
        match self {
            Template::Minimal => "echo and write_to_file",
            Template::HelloWorld => "print, create, write and list files, show the date",
            Template::FileOps => "organise files: list, mkdir, move, copy, find, size",
            Template::ApiTester => "test HTTP APIs with curl",
            Template::BashSession => "a persistent shell through delta-sessions",
        }
    }

    /// `llm-script.yaml`: the scripted model's part for this template, so the new agent
    /// runs offline at once (`delta --help`'s quick start runs it): a first call of one of
    /// the template's tools where one takes a message, then a final answer.
    fn llm_script(self, folder: &str) -> String {
        let first_turn = match self {
            Template::Minimal => {
                "  - tool: echo\n    args: { message: \"Hello! You asked: {{ task }}\" }\n"
            }
            Template::HelloWorld => {
                "  - tool: print_message\n    args: { message: \"Hello! You asked: {{ task }}\" }\n"
            }
            Template::FileOps | Template::ApiTester | Template::BashSession => "",
        };
        format!(
            "# The scripted model for this agent: it runs offline, with no model server or key:\n\
             #   delta run --agent {folder} -m \"Say hello\" -y --llm-script {folder}/llm-script.yaml\n\
             # Each step is one model turn (format: docs/llm-script.md). For a real model, drop\n\
             # --llm-script and set DELTA_BASE_URL (and DELTA_API_KEY for a remote provider).\n\
             steps:\n\
             {first_turn}  - answer: \"(scripted model) Done: {{{{ task }}}}. Set DELTA_BASE_URL to work with a real model.\"\n"
        )
    }

    /// (agent.yaml, system_prompt.md, README.md) with `__AGENT_NAME__` placeholders.
    fn files(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Template::Minimal => (
                include_str!("init_templates/minimal/agent.yaml"),
                include_str!("init_templates/minimal/system_prompt.md"),
                include_str!("init_templates/minimal/README.md"),
            ),
            Template::HelloWorld => (
                include_str!("init_templates/hello-world/agent.yaml"),
                include_str!("init_templates/hello-world/system_prompt.md"),
                include_str!("init_templates/hello-world/README.md"),
            ),
            Template::FileOps => (
                include_str!("init_templates/file-ops/agent.yaml"),
                include_str!("init_templates/file-ops/system_prompt.md"),
                include_str!("init_templates/file-ops/README.md"),
            ),
            Template::ApiTester => (
                include_str!("init_templates/api-tester/agent.yaml"),
                include_str!("init_templates/api-tester/system_prompt.md"),
                include_str!("init_templates/api-tester/README.md"),
            ),
            Template::BashSession => (
                include_str!("init_templates/bash-session/agent.yaml"),
                include_str!("init_templates/bash-session/system_prompt.md"),
                include_str!("init_templates/bash-session/README.md"),
            ),
        }
    }
}

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct InitArgs {
    /// Folder to create the agent in (default: the current folder, which must be empty)
    pub name: Option<PathBuf>,

    /// Template to start from (without -t and -y, a terminal gets a menu)
    #[arg(short, long, value_enum)]
    pub template: Option<Template>,

    /// Do not ask: use the minimal template unless -t is given
    #[arg(short, long)]
    pub yes: bool,
}

/// The agent name written into agent.yaml: the folder's name, quoted when YAML needs it.
fn yaml_name(folder_name: &str) -> String {
    let plain = !folder_name.is_empty()
        && folder_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && folder_name.starts_with(|c: char| c.is_ascii_alphabetic())
        && !["true", "false", "null", "yes", "no", "on", "off"]
            .contains(&folder_name.to_ascii_lowercase().as_str());
    if plain {
        folder_name.to_string()
    } else {
        serde_json::Value::String(folder_name.to_string()).to_string()
    }
}

/// Refuses a target that is a file or a folder with visible entries.
fn check_target(target: &Path) -> Result<(), CliError> {
    if !target.exists() {
        return Ok(());
    }
    if !target.is_dir() {
        return Err(CliError::Runtime(format!(
            "`{}` exists and is not a folder\n  hint: choose another name",
            target.display()
        )));
    }
    let entries = std::fs::read_dir(target)
        .map_err(|e| CliError::Runtime(format!("cannot read `{}`: {e}", target.display())))?;
    let visible: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    if visible.is_empty() {
        Ok(())
    } else {
        Err(CliError::Runtime(format!(
            "`{}` is not empty (it holds {})\n  hint: run `delta init <new-folder-name>` or empty the folder first",
            target.display(),
            visible.iter().take(3).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        )))
    }
}

/// Asks on the terminal; a bounded number of attempts, never on a non-terminal stdin.
fn choose_interactively() -> Result<Template, CliError> {
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "Choose a template:");
    for (i, t) in Template::ALL.iter().enumerate() {
        let _ = writeln!(stderr, "  {}. {:<13} {}", i + 1, t.name(), t.summary());
    }
    let stdin = std::io::stdin();
    for _ in 0..5 {
        let _ = write!(stderr, "Template (1-{}) [1]: ", Template::ALL.len());
        let _ = stderr.flush();
        let mut line = String::new();
        let read = stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| CliError::Runtime(format!("cannot read the answer: {e}")))?;
        if read == 0 {
            break;
        }
        let answer = line.trim();
        if answer.is_empty() {
            return Ok(Template::Minimal);
        }
        let by_number = answer
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| Template::ALL.get(i));
        let by_name = Template::ALL.iter().find(|t| t.name() == answer);
        if let Some(t) = by_number.or(by_name) {
            return Ok(*t);
        }
        let _ = writeln!(
            stderr,
            "`{answer}` is not one of the templates; type a number or a name."
        );
    }
    Err(CliError::Usage(
        "no template chosen\n  hint: pass -t <template> (or -y for minimal)".to_string(),
    ))
}

pub fn run(args: &InitArgs) -> Result<i32, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::Runtime(format!("cannot read the current folder: {e}")))?;
    let target = match &args.name {
        Some(name) => cwd.join(name),
        None => cwd.clone(),
    };
    check_target(&target)?;
    let template = match (args.template, args.yes) {
        (Some(t), _) => t,
        (None, true) => Template::Minimal,
        (None, false) if std::io::stdin().is_terminal() => choose_interactively()?,
        (None, false) => {
            crate::notice!(
                "note: no terminal to ask on; using the minimal template (choose one with -t)"
            );
            Template::Minimal
        }
    };
    let folder_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "agent".to_string());
    let (agent_yaml, system_prompt, readme) = template.files();
    let files = [
        (
            "agent.yaml",
            agent_yaml.replace("__AGENT_NAME__", &yaml_name(&folder_name)),
        ),
        ("system_prompt.md", system_prompt.to_string()),
        ("context.yaml", default_context_yaml().to_string()),
        ("README.md", readme.replace("__AGENT_NAME__", &folder_name)),
        ("llm-script.yaml", template.llm_script(&shown_folder(args))),
    ];
    std::fs::create_dir_all(&target)
        .map_err(|e| CliError::Runtime(format!("cannot create `{}`: {e}", target.display())))?;
    for (name, content) in &files {
        let path = target.join(name);
        std::fs::write(&path, content)
            .map_err(|e| CliError::Runtime(format!("cannot write `{}`: {e}", path.display())))?;
    }
    let shown = shown_folder(args);
    crate::emit_line!(
        "Created agent `{folder_name}` from template {} in {shown}",
        template.name()
    );
    for (name, _) in &files {
        crate::emit_line!("  {shown}/{name}");
    }
    crate::emit_line!("Next: delta tool expand {shown}");
    crate::emit_line!(
        "Try it offline: delta run --agent {shown} -m \"Say hello\" -y --llm-script {shown}/llm-script.yaml"
    );
    Ok(0)
}

/// The new agent's folder as the printed commands name it (`.` for the current one).
fn shown_folder(args: &InitArgs) -> String {
    args.name
        .as_ref()
        .map_or_else(|| ".".to_string(), |n| n.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_names_are_quoted_only_when_needed() {
        assert_eq!(yaml_name("demo-agent_1"), "demo-agent_1");
        assert_eq!(yaml_name("my agent"), "\"my agent\"");
        assert_eq!(yaml_name("1st"), "\"1st\"");
        assert_eq!(yaml_name("true:x"), "\"true:x\"");
        assert_eq!(yaml_name("null"), "\"null\"");
    }

    #[test]
    fn every_template_has_its_name_placeholder() {
        for t in Template::ALL {
            let (agent, prompt, readme) = t.files();
            assert!(agent.starts_with("name: __AGENT_NAME__\n"), "{}", t.name());
            assert!(!prompt.trim().is_empty());
            assert!(readme.contains(t.name()));
        }
    }
}
