//! Errors of the session/worker server, each with a stable `code` for `{error, code}` bodies
//! and a class the web layer maps to an HTTP status. No HTTP types here.

use std::path::PathBuf;

/// How an error should be reported to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request is malformed or names something invalid (400).
    BadRequest,
    /// The named session, worker, run or file does not exist (404).
    NotFound,
    /// The request is valid but the state forbids it now (409).
    Conflict,
    /// A limit from the request was exceeded (413).
    TooLarge,
    /// The server could not do it (500): disk, PTY or process failures.
    Internal,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid {what} `{value}`: {hint}")]
    InvalidId {
        what: &'static str,
        value: String,
        hint: &'static str,
    },
    #[error("invalid request: {0}")]
    BadRequest(String),
    #[error("no session `{0}`")]
    SessionNotFound(String),
    #[error("no worker `{worker}` in session `{session}`")]
    WorkerNotFound { session: String, worker: String },
    #[error("unknown agent `{0}`; list the agents with GET /api/agents or add it to serve.yaml")]
    UnknownAgent(String),
    #[error("folder {} does not exist (locationPath must be an existing folder)", .0.display())]
    NoSuchFolder(PathBuf),
    #[error("{what} is {size} bytes, more than the limit of {limit}")]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
    },
    #[error("{0}")]
    Conflict(String),
    #[error("{}: {reason}", .path.display())]
    Config { path: PathBuf, reason: String },
    #[error("{action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Worker(String),
}

impl ServeError {
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ServeError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            ServeError::InvalidId { .. }
            | ServeError::BadRequest(_)
            | ServeError::UnknownAgent(_)
            | ServeError::NoSuchFolder(_) => ErrorClass::BadRequest,
            ServeError::SessionNotFound(_) | ServeError::WorkerNotFound { .. } => {
                ErrorClass::NotFound
            }
            ServeError::TooLarge { .. } => ErrorClass::TooLarge,
            ServeError::Conflict(_) => ErrorClass::Conflict,
            ServeError::Config { .. } | ServeError::Io { .. } | ServeError::Worker(_) => {
                ErrorClass::Internal
            }
        }
    }

    /// Stable machine-readable code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            ServeError::InvalidId { .. } => "invalid_id",
            ServeError::BadRequest(_) => "bad_request",
            ServeError::SessionNotFound(_) => "session_not_found",
            ServeError::WorkerNotFound { .. } => "worker_not_found",
            ServeError::UnknownAgent(_) => "unknown_agent",
            ServeError::NoSuchFolder(_) => "no_such_folder",
            ServeError::TooLarge { .. } => "too_large",
            ServeError::Conflict(_) => "conflict",
            ServeError::Config { .. } => "config",
            ServeError::Io { .. } => "io",
            ServeError::Worker(_) => "worker_failed",
        }
    }
}
