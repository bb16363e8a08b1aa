//! One file per subcommand, each owning its clap `Args` and a `run(&Args) -> Result<i32, CliError>`.
//!
//! `dispatch` is the only place that maps a `Command` to its handler. Commands print their
//! own results (stdout) and diagnostics (stderr); the library below them never prints.

pub mod init;
pub mod tool_expand;

use crate::cli::{Command, ToolCommand};
use crate::error::CliError;

/// Runs the chosen command and returns its exit code.
pub fn dispatch(command: &Command) -> Result<i32, CliError> {
    match command {
        Command::Init(args) => init::run(args),
        Command::Tool(ToolCommand::Expand(args)) | Command::ToolExpandLegacy(args) => {
            tool_expand::run(args)
        }
    }
}
