//! The only code that writes stdout or stderr. Every command's machine-readable result goes
//! through here; progress, notices and errors go to stderr (see `progress`, [`notice`]).
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod hints;
pub mod orchestration;
pub mod orchestration_list;
pub mod progress;
pub mod run_result;
pub mod runs;

use std::io::Write;

/// Output format of commands that print results (`--format`). What each format holds
/// depends on the command: each command's `--format` help says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    /// For people: a readable summary.
    #[default]
    Text,
    /// For programs: one JSON document.
    Json,
    /// For scripts: the bare data, nothing else.
    Raw,
}

/// `--format` help of the commands that print a RunResult (`run`, `continue`).
pub const RUN_RESULT_FORMAT_HELP: &str =
    "What stdout carries: text (a summary and the next command to type), \
json (the RunResult, schema 2.0, for every final status), raw (only the answer of a COMPLETED run)";

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
        Err(e) => notice(&format!("error: cannot serialize output: {e}")),
    }
}

/// Writes `line` and a newline to stderr: an error, a warning or a notice for the person at
/// the terminal (never data a script reads). [`notice!`](crate::notice) formats one.
pub fn notice(line: &str) {
    eprintln!("{line}");
}

/// Writes `text` to stderr without a newline and flushes: a question's prompt, answered on
/// the same line.
pub fn prompt(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// `notice!("...", args)`: [`notice`] of a formatted line (as `eprintln!` takes it; no
/// argument writes an empty line).
#[macro_export]
macro_rules! notice {
    () => {
        $crate::output::notice("")
    };
    ($($arg:tt)*) => {
        $crate::output::notice(&format!($($arg)*))
    };
}

/// `emit_line!("...", args)`: [`emit`] of a formatted line and its newline (as `println!`
/// takes it).
#[macro_export]
macro_rules! emit_line {
    ($($arg:tt)*) => {
        $crate::output::emit(&format!("{}\n", format_args!($($arg)*)))
    };
}
