//! `delta bench ...`: hands its arguments to the `delta-bench` program installed beside this
//! one (the benchmarks are their own binary, so the product carries none of their crates).
//!
//! Must not: measure anything itself, or look for `delta-bench` anywhere but next to this
//! executable (a `delta-bench` found on PATH may belong to another build).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use clap::Args;

use crate::error::CliError;

/// The benchmark program's file name.
pub const BENCH_PROGRAM: &str = "delta-bench";

/// Everything after `delta bench`, passed on as it is (`delta bench load --help` is
/// delta-bench's help).
#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct BenchArgs {
    /// The benchmark and its flags: load, serve, serve-batch or spawn (`delta bench load --help`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// Replaces this process with `delta-bench ARGS`; returns only when that cannot start.
pub fn run(args: &BenchArgs) -> Result<i32, CliError> {
    let program = bench_program()?;
    let error = std::process::Command::new(&program).args(&args.args).exec();
    Err(CliError::Runtime(format!(
        "cannot start {}: {error}",
        program.display()
    )))
}

fn bench_program() -> Result<PathBuf, CliError> {
    let delta = std::env::current_exe()
        .map_err(|e| CliError::Runtime(format!("cannot find the delta executable: {e}")))?;
    let program = delta.with_file_name(BENCH_PROGRAM);
    if program.is_file() {
        Ok(program)
    } else {
        Err(CliError::Config(format!(
            "delta bench needs the {BENCH_PROGRAM} program beside delta, and {} does not exist: \
             build it with `cargo build --features bench` (or install it next to delta); see BENCHMARKS.md",
            program.display()
        )))
    }
}
