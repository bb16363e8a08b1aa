//! One file per subcommand, each owning its clap `Args` and a `run(&Args) -> Result<i32, CliError>`.
//!
//! `dispatch` is the only place that maps a `Command` to its handler. Commands print their
//! own results (stdout) and diagnostics (stderr); the library below them never prints.

pub mod bench;
pub mod continue_run;
pub mod engine;
pub mod init;
pub mod list_runs;
pub mod mock_llm;
pub mod orchestrate;
pub mod prompt;
pub mod run;
pub mod spawner;
pub mod tool_expand;

use crate::cli::{Command, ToolCommand};
use crate::error::CliError;
use crate::output::progress::Verbosity;

/// Runs the chosen command and returns its exit code.
pub fn dispatch(command: &Command, verbose: u8) -> Result<i32, CliError> {
    let verbosity = if verbose > 0 {
        Verbosity::Verbose
    } else {
        Verbosity::Normal
    };
    match command {
        Command::Orchestrate(args) => orchestrate::run(args),
        Command::Run(args) => run::run(args, verbosity),
        Command::Continue(args) => continue_run::run(args, verbosity),
        Command::ListRuns(args) => list_runs::run(args),
        Command::MockLlm(args) => mock_llm::run(args),
        Command::Init(args) => init::run(args),
        Command::Bench(command) => bench::run(command),
        Command::Spawner => spawner::run(),
        Command::Tool(ToolCommand::Expand(args)) | Command::ToolExpandLegacy(args) => {
            tool_expand::run(args)
        }
    }
}
