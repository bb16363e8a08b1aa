//! Top-level clap types of the `delta` command line.
//!
//! Owns the global flags and the `Command` enum. Each subcommand's arguments live in its own
//! file under `commands/`; adding a command is one variant here, one arm in
//! `commands::dispatch` and one file. It must not execute anything.

use clap::{Parser, Subcommand};

use crate::commands::completions::{CompletionsArgs, ManArgs};
use crate::commands::continue_run::ContinueArgs;
use crate::commands::exec_planned::ExecPlannedArgs;
use crate::commands::init::InitArgs;
use crate::commands::list_orchestrations::ListOrchestrationsArgs;
use crate::commands::list_runs::ListRunsArgs;
use crate::commands::mock_llm::MockLlmArgs;
use crate::commands::orchestrate::OrchestrateArgs;
use crate::commands::relay::RelayArgs;
use crate::commands::run::RunArgs;
use crate::commands::serve::ServeArgs;
use crate::commands::tool_expand::ToolExpandArgs;

const AFTER_HELP: &str = "\
Quick start:
  delta init demo -t hello-world     create an agent folder from a template
  delta tool expand demo             show the tools the model will be offered
  delta run --agent demo -m \"Say hello\" -y --llm-script demo/llm-script.yaml   run it offline
  DELTA_BASE_URL=http://127.0.0.1:8080/v1 delta run --agent demo -m \"Say hello\" -y   a model server here

Shell completions: delta completions bash|zsh|fish; the manual: delta man (scripts/install.sh installs both).

Exit codes: 0 success (run COMPLETED), 1 failure (run FAILED), 2 usage error,
101 run waiting for human input, 126 invalid configuration or invocation, 130 interrupted.";

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
    /// Run a plan: many agents' runs, fanned out and gathered, in this one process
    Orchestrate(OrchestrateArgs),

    /// Start a new run of an agent
    Run(RunArgs),

    /// Resume, answer, extend or retry an existing run
    Continue(ContinueArgs),

    /// List the runs of a workspace
    #[command(name = "list-runs")]
    ListRuns(ListRunsArgs),

    /// List the orchestrations of a workspace: id, status, run counts, age, plan
    #[command(name = "list-orchestrations")]
    ListOrchestrations(ListOrchestrationsArgs),

    /// Create a new agent folder from a template
    Init(InitArgs),

    /// Inspect an agent's tools
    #[command(subcommand)]
    Tool(ToolCommand),

    /// Serve the built-in scripted model as an OpenAI-compatible endpoint on 127.0.0.1
    #[command(name = "mock-llm")]
    MockLlm(MockLlmArgs),

    /// Serve an LLM relay: one shared rate limit and no provider key on the machines that call it
    Relay(RelayArgs),

    /// Run one planned run of an orchestration (inside a job of `orchestrate --executor slurm`)
    #[command(name = "exec-planned")]
    ExecPlanned(ExecPlannedArgs),

    /// Watch and steer agents and terminals in the browser; see runs and batches live
    Serve(ServeArgs),

    /// Measure the engine under load (`delta bench load --help`; runs the delta-bench program)
    Bench(crate::commands::bench::BenchArgs),

    /// Print the shell completion script for bash, zsh, fish, elvish or powershell
    Completions(CompletionsArgs),

    /// Print the manual page delta(1), or write every command's page with --dir
    Man(ManArgs),

    /// Same as `delta tool expand` (the original engine's spelling)
    #[command(name = "tool:expand", hide = true)]
    ToolExpandLegacy(ToolExpandArgs),

    /// Internal: the tool spawner process the engine starts for itself
    #[command(name = "__spawner", hide = true)]
    Spawner,
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
