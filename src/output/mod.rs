//! The only code that writes stdout. Every command's machine-readable result goes through
//! here; progress and logs go to stderr (see `progress`).
#![allow(clippy::print_stdout)]

pub mod orchestration;
pub mod orchestration_list;
pub mod progress;
pub mod run_result;
pub mod runs;

use std::io::Write;

/// Output format of commands that print results (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    /// Human-readable summary.
    #[default]
    Text,
    /// One JSON document (RunResult schema 2.0 for runs).
    Json,
    /// Just the data: the final answer text for a completed run.
    Raw,
}

/// Writes `text` to stdout and flushes. A closed pipe (`| head`) is not an error.
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Pretty JSON followed by a newline.
pub fn emit_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => emit(&format!("{text}\n")),
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("error: cannot serialize output: {e}");
            }
        }
    }
}
