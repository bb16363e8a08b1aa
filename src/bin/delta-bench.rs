//! `delta-bench` (run as `delta bench ...`): the load benchmarks, a program of their own so
//! that the product binary `delta` carries neither the WebSocket client nor the WebDriver
//! client they need. Built with the `bench` feature (`cargo build --features bench`) and
//! installed beside `delta`, which execs it for `delta bench`; it drives that `delta` (runs,
//! the tool spawner, `delta serve`) through the same library the product uses.
//!
//! Owns parsing, logging and the exit code only; the workloads live in `src/bench/`.
//! Must not: change what it measures (it configures the engine as `delta run` does), or
//! write stdout except through `output` (the reports).
#![deny(clippy::print_stdout, clippy::print_stderr)]

// The modules it shares with `delta` (each program uses part of them).
#[path = "../allocator.rs"]
mod allocator;
#[allow(dead_code)]
#[path = "../error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../commands/observe.rs"]
mod observe;
#[allow(dead_code)]
#[path = "../output/mod.rs"]
mod output;
#[allow(dead_code)]
#[path = "../commands/spawner.rs"]
mod spawner;

#[path = "../bench/mod.rs"]
mod bench;

use std::process::ExitCode;

use clap::Parser;

/// Measure the engine under load (`delta bench load --help`).
#[derive(Debug, Parser)]
#[command(name = "delta-bench", bin_name = "delta bench", version)]
struct BenchCli {
    #[command(subcommand)]
    command: bench::BenchCommand,
}

fn main() -> ExitCode {
    let cli = BenchCli::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DELTA_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    // As `delta` does: what this process inherited reaches no tool it starts itself
    // (`load --tool-spawner off`).
    if let Err(error) = delta_actors::tool::isolation::close_inherited_descriptors_on_exec() {
        tracing::warn!("cannot mark inherited descriptors close-on-exec: {error}");
    }
    match bench::run(&cli.command) {
        Ok(code) => u8::try_from(code).map_or(ExitCode::FAILURE, ExitCode::from),
        Err(err) => {
            output::notice(&format!("error: {err}"));
            ExitCode::from(err.exit_code())
        }
    }
}
