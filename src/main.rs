//! `delta`: parse the command line, install logging, dispatch, map the outcome to an exit code.
//!
//! This is the only place that turns a `CliError` into the `error: <message>` line on
//! stderr (an exhausted open-files limit is worded as such) and the process exit code that
//! `error.rs` maps it to. Usage errors are clap's own (exit 2).

mod cli;
mod commands;
mod error;
mod limits;
mod output;
mod token;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

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
        .try_init();
}

/// mimalloc (the default `mimalloc` feature): glibc's malloc spent a fifth of the engine's CPU in its arenas
/// (`_int_malloc`, `malloc_consolidate`, `unlink_chunk`; BENCHMARKS.md). Built without
/// mimalloc's transparent huge pages, which took a single run from 13 to 29 MiB resident.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    install_logging(cli.verbose);
    match commands::dispatch(&cli.command, cli.verbose) {
        // A command's own outcome (0, 1, 101, 126, 130), from a run or an orchestration.
        Ok(code) => u8::try_from(code).map_or(ExitCode::FAILURE, ExitCode::from),
        Err(err) => {
            let message = err.to_string();
            match limits::explain_open_files(&message, commands::open_files_baseline()) {
                Some(explained) => eprintln!("error: {explained}\ncaused by: {message}"),
                None => eprintln!("error: {message}"),
            }
            ExitCode::from(err.exit_code())
        }
    }
}
