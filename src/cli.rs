//! Top-level clap types of the `delta` command line.
//!
//! Owns the global flags and the `Command` enum. Each subcommand's arguments live in its own
//! file under `commands/`; adding a command is one variant here, one arm in
//! `commands::dispatch` and one file. It must not execute anything.

use clap::{Parser, Subcommand};

use crate::commands::init::InitArgs;
use crate::commands::tool_expand::ToolExpandArgs;

const AFTER_HELP: &str = "\
Quick start:
  delta init demo -t hello-world     create an agent folder from a template
  delta tool expand demo             show the tools the model will be offered

Exit codes: 0 success, 1 runtime error, 2 usage error, 126 invalid agent configuration.";

/// delta runs AI agents: folders of agent.yaml, system_prompt.md and context.yaml whose tools
/// are ordinary commands.
#[derive(Debug, Parser)]
#[command(name = "delta", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// More logging on stderr: -v info, -vv debug, -vvv trace (DELTA_LOG overrides)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new agent folder from a template
    Init(InitArgs),

    /// Inspect an agent's tools
    #[command(subcommand)]
    Tool(ToolCommand),

    /// Same as `delta tool expand` (the original engine's spelling)
    #[command(name = "tool:expand", hide = true)]
    ToolExpandLegacy(ToolExpandArgs),
}

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Show each tool's internal form: argv template, parameters, injection and positions
    Expand(ToolExpandArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn both_expand_spellings_parse() {
        for argv in [
            ["delta", "tool", "expand", "x"].as_slice(),
            ["delta", "tool:expand", "x"].as_slice(),
        ] {
            let cli = Cli::try_parse_from(argv);
            assert!(cli.is_ok(), "{argv:?}: {cli:?}");
        }
    }
}
