//! One file per subcommand, each owning its clap `Args` and a `run(&Args) -> Result<i32, CliError>`.
//!
//! `dispatch` is the only place that maps a `Command` to its handler. Commands print their
//! own results (stdout) and diagnostics (stderr); the library below them never prints.

pub mod bench;
pub mod budget_args;
pub mod completions;
pub mod continue_run;
pub mod endpoint_memory;
pub mod engine;
pub mod exec_planned;
pub mod init;
pub mod list_orchestrations;
pub mod list_runs;
pub mod mock_llm;
pub mod observe;
pub mod orchestrate;
pub mod orchestrate_slurm;
pub mod prompt;
pub mod relay;
pub mod run;
pub mod run_notices;
pub mod serve;
pub mod spawner;
pub mod tool_expand;

use crate::cli::{Command, ToolCommand};
use crate::error::CliError;
use crate::output::progress::Verbosity;

/// Descriptors an engine of this machine's arbiters needs for one run at a time: the floor
/// checked before any engine starts (`orchestrate` needs more per parallel run).
pub fn open_files_baseline() -> u64 {
    let arbiters = std::thread::available_parallelism().map_or(2, |n| n.get());
    crate::limits::open_files_needed(arbiters, 1)
}

/// Runs the chosen command and returns its exit code.
pub fn dispatch(command: &Command, verbose: u8) -> Result<i32, CliError> {
    let verbosity = if verbose > 0 {
        Verbosity::Verbose
    } else {
        Verbosity::Normal
    };
    if matches!(
        command,
        Command::Run(_)
            | Command::Continue(_)
            | Command::Orchestrate(_)
            | Command::MockLlm(_)
            | Command::ExecPlanned(_)
            | Command::Relay(_)
            | Command::Serve(_)
    ) {
        // Before any engine thread exists: too few descriptors used to panic in an arbiter.
        crate::limits::ensure_open_files(open_files_baseline())?;
    }
    match command {
        Command::Orchestrate(args) => orchestrate::run(args),
        Command::Run(args) => run::run(args, verbosity),
        Command::Continue(args) => continue_run::run(args, verbosity),
        Command::ListRuns(args) => list_runs::run(args),
        Command::ListOrchestrations(args) => list_orchestrations::run(args),
        Command::MockLlm(args) => mock_llm::run(args),
        Command::ExecPlanned(args) => exec_planned::run(args),
        Command::Relay(args) => relay::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Init(args) => init::run(args),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
        Command::Bench(command) => bench::run(command),
        Command::Spawner => spawner::run(),
        Command::Tool(ToolCommand::Expand(args)) | Command::ToolExpandLegacy(args) => {
            tool_expand::run(args)
        }
    }
}
