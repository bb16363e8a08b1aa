//! Typed errors of the shell and PTY sessions. Every message names the session, file or
//! argument involved and says what to do next. Owns no I/O.

use std::path::PathBuf;

/// What went wrong with a session command.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "session id `{id}` is malformed; ids look like `sess_` followed by hex digits (see `list`)"
    )]
    InvalidId { id: String },

    #[error("session {id} not found in {dir}; run `list` to see the sessions of this folder (or pass --sessions-dir)")]
    NotFound { id: String, dir: PathBuf },

    #[error("session {id} is terminated; start a new one with `start`")]
    Terminated { id: String },

    #[error("no command provided for session {id}: pass it as an argument or on stdin")]
    EmptyCommand { id: String },

    #[error("`{command}` is not a shell this tool can keep state for (bash, or sh/dash/ash); for REPLs such as python3 use `delta-sessions-pty start {command}`")]
    NotAShell { command: String },

    #[error("shell `{command}` was not found on PATH; give an absolute path or install it")]
    ShellNotFound { command: String },

    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "metadata file {path} is unreadable ({reason}); remove the session folder if it is stale"
    )]
    CorruptMetadata { path: PathBuf, reason: String },

    #[error("could not lock {path}: {reason}")]
    Lock { path: PathBuf, reason: String },

    #[error("could not run the shell for session {id}: {reason}")]
    Spawn { id: String, reason: String },

    #[error("socket directory {path} is unsafe: {reason}; remove it or set XDG_RUNTIME_DIR to a private folder")]
    UnsafeSocketDir { path: PathBuf, reason: String },

    #[error("session {id} is not running (its program exited or its holder is gone); check `status {id}`, then `cleanup`")]
    Dead { id: String },

    #[error("invalid key name `{key}`; valid keys: arrow_up/down/left/right, enter, tab, escape, space, backspace, ctrl+a..ctrl+z, f1..f12, home, end, page_up, page_down, delete, insert")]
    InvalidKey { key: String },

    #[error("session {id}: holder protocol error: {reason}")]
    Protocol { id: String, reason: String },

    #[error("session {id}: the session runtime stopped ({reason}); create a new SessionManager")]
    RuntimeGone { id: String, reason: String },

    #[error("session {id} could not start `{command}`: {reason}")]
    StartFailed {
        id: String,
        command: String,
        reason: String,
    },
}

impl SessionError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        SessionError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
