//! The shell shared by the two session binaries (`delta-sessions`, `delta-sessions-pty`):
//! startup (inherited descriptors closed, clap parsing with `--help`/`--version` on stdout,
//! usage errors as clap's text on stderr with exit 2) and the output contract (pretty JSON on
//! stdout; on error the message on stderr, `{"error": ...}` on stdout, exit 1, or 126 for a
//! malformed session id). Each binary includes it with `#[path]`; it owns no
//! session logic.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use delta_actors::session::SessionError;
use serde_json::json;

/// Exit code of a usage error (as clap's own, and as `delta`).
pub const USAGE_EXIT: u8 = 2;

/// Closes descriptors leaked by the caller (an agent's tool runner may hand us its pipes)
/// and parses the command line; `Err` carries the exit code to return at once. `--help` and
/// `--version` print on stdout (exit 0); a usage error prints clap's text on stderr only
/// (exit 2), so a caller parsing stdout as JSON never mistakes it for a result.
pub fn start<C: Parser>() -> Result<C, ExitCode> {
    delta_actors::session::close_inherited_fds();
    match C::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            let _ = e.print();
            Err(ExitCode::from(USAGE_EXIT))
        }
    }
}

/// The current folder, as a session error naming it.
pub fn current_dir() -> Result<PathBuf, SessionError> {
    std::env::current_dir().map_err(|e| SessionError::Io {
        action: "cannot read the current folder",
        path: PathBuf::from("."),
        source: e,
    })
}

/// Two-space pretty JSON; never fails (a serialisation error becomes an error object).
pub fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string())
}

/// Prints a successful command's JSON and exits 0.
pub fn succeed(json: &str) -> ExitCode {
    println!("{json}");
    ExitCode::SUCCESS
}

/// Reports `message` on stderr and as `{"error": ...}` on stdout; exit 1.
pub fn fail(program: &str, message: &str) -> ExitCode {
    let message = message.trim_end();
    eprintln!("{program}: {message}");
    println!("{}", json!({ "error": message }));
    ExitCode::FAILURE
}

/// [`fail`] for a session error: exit 126 for a malformed session id (an invalid invocation,
/// refused before the id becomes a path), 1 for everything else.
pub fn fail_with(program: &str, error: &SessionError) -> ExitCode {
    let _ = fail(program, &error.to_string());
    match error {
        SessionError::InvalidId { .. } => ExitCode::from(126),
        _ => ExitCode::FAILURE,
    }
}
