//! `delta`: parse the command line, install logging, dispatch, map the outcome to an exit code.
//!
//! This is the only place that turns a `CliError` into the `error: <message>` line on
//! stderr (an exhausted open-files limit is worded as such) and the process exit code that
//! `error.rs` maps it to. Usage errors are clap's own (exit 2).
// Only `output/` writes stdout or stderr (its module allows it); a print anywhere else fails
// the build's lint.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod allocator;
mod cli;
mod commands;
mod error;
mod limits;
mod output;
mod token;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Whether log and error lines may carry ANSI colour: only on a terminal, and never when
/// `NO_COLOR` is set to anything but the empty string (no-color.org). A file or a pipe gets
/// plain text, so `2> log.txt` stays readable and greppable.
fn colour_allowed(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

fn install_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env("DELTA_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    // A second installation (impossible here) would only be ignored.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_allowed(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .try_init();
}

/// Keeps what this process holds out of the programs it starts (docs/tool-spawner.md, "What
/// a tool cannot reach"): descriptors it inherited are closed on exec, whatever the command;
/// a command that holds a model key or a token is made non-dumpable, so that a tool cannot
/// read it from `/proc/<pid>/environ` or the process's memory.
fn isolate_from_children(command: &cli::Command) {
    use delta_actors::tool::isolation;
    if let Err(error) = isolation::close_inherited_descriptors_on_exec() {
        tracing::warn!("cannot mark inherited descriptors close-on-exec: {error}");
    }
    let holds_secrets = matches!(
        command,
        cli::Command::Run(_)
            | cli::Command::Continue(_)
            | cli::Command::Orchestrate(_)
            | cli::Command::ExecPlanned(_)
            | cli::Command::Relay(_)
            | cli::Command::Serve(_)
    );
    if holds_secrets {
        if let Err(error) = isolation::forbid_inspection() {
            tracing::warn!("cannot make this process non-dumpable: {error}");
        }
    }
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    install_logging(cli.verbose);
    isolate_from_children(&cli.command);
    match commands::dispatch(&cli.command, cli.verbose) {
        // A command's own outcome (0, 1, 101, 126, 130), from a run or an orchestration.
        Ok(code) => u8::try_from(code).map_or(ExitCode::FAILURE, ExitCode::from),
        Err(err) => {
            let message = err.to_string();
            match limits::explain_open_files(&message, commands::open_files_baseline()) {
                Some(explained) => crate::notice!("error: {explained}\ncaused by: {message}"),
                None => crate::notice!("error: {message}"),
            }
            ExitCode::from(err.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::colour_allowed;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some(OsStr::new(""))));
        assert!(!colour_allowed(true, Some(OsStr::new("1"))));
        assert!(!colour_allowed(false, None));
    }
}
