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
    /// A file the request reads is not a plain file delta wrote (a FIFO, a link, too large):
    /// reported, never waited on or followed (422).
    Unreadable,
    /// The server could not do it (500): disk, PTY or process failures.
    Internal,
    /// Something the server started has not done its part in time; it goes on (504).
    Timeout,
}

/// Why `delta serve` could not start (from [`crate::api::serve::run`]) or a request to it
/// failed. Each has a stable [`code`](ServeError::code) for JSON error bodies.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// An id or name from a request that cannot be used (it would leave its folder).
    #[error("invalid {what} `{value}`: {hint}")]
    InvalidId {
        /// What it names (`session id`, `run id`...).
        what: &'static str,
        /// The value given.
        value: String,
        /// What a valid one looks like.
        hint: &'static str,
    },
    /// The request body or its parameters are malformed.
    #[error("invalid request: {0}")]
    BadRequest(String),
    /// No session with this id.
    #[error("no session `{0}`")]
    SessionNotFound(String),
    /// No worker with this id in the session.
    #[error("no worker `{worker}` in session `{session}`")]
    WorkerNotFound {
        /// The session's id.
        session: String,
        /// The worker's id.
        worker: String,
    },
    /// The agent named is neither built in nor in serve.yaml.
    #[error("unknown agent `{0}`; list the agents with GET /api/agents or add it to serve.yaml")]
    UnknownAgent(String),
    /// A session's folder does not exist.
    #[error("folder {} does not exist (locationPath must be an existing folder: an absolute path, `~/...`, or a path relative to the folder delta serve was started in)", .0.display())]
    NoSuchFolder(PathBuf),
    /// A session's folder given as a path the server cannot place (empty, `~user`, `~`
    /// without a home folder).
    #[error("locationPath `{given}`: {reason}")]
    BadLocation {
        /// The path as given.
        given: String,
        /// Why, and what to give instead.
        reason: String,
    },
    /// A session on this folder exists already; the request did not say `allowDuplicate`.
    #[error("a session on {} exists already (session `{session}`): open it from the list, or ask again with allowDuplicate: true to open a second one", .path.display())]
    DuplicateFolder {
        /// The folder.
        path: PathBuf,
        /// The session already on it.
        session: String,
    },
    /// "Restart & continue" asked of a worker whose agent has no continue args.
    #[error("worker `{worker}` runs {what}, which has no continue args (continue_args in serve.yaml): restart it without continueConversation")]
    NoContinueArgs {
        /// The worker's id.
        worker: String,
        /// `agent <id>` or `a terminal`.
        what: String,
    },
    /// A request carried more than a limit allows.
    #[error("{what} is {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// What was too big (`input data`, `answer`...).
        what: &'static str,
        /// Its size, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The request is valid but the current state forbids it (a worker still starting, a
    /// run no longer waiting).
    #[error("{0}")]
    Conflict(String),
    /// serve.yaml or the state folder's files are invalid.
    #[error("{}: {reason}", .path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, with a hint.
        reason: String,
    },
    /// A file, folder or socket operation failed.
    #[error("{action} {}: {source}", .path.display())]
    Io {
        /// What was being done (`cannot read`, `cannot listen on`...).
        action: &'static str,
        /// The path or address involved.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A run's file the request reads is not a plain file delta wrote (a FIFO, a link,
    /// larger than delta writes it): it was neither waited on nor followed.
    #[error("cannot read {}: {reason}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why, with a hint.
        reason: String,
    },
    /// A worker's PTY holder or program could not be started or reached.
    #[error("{0}")]
    Worker(String),
    /// Another `delta serve` holds the state folder's lock.
    #[error(
        "state folder {} is in use by another delta serve{}; stop that one first, or give this one another --state-dir",
        .dir.display(),
        describe_holder(*.pid, .address.as_deref())
    )]
    StateInUse {
        /// The state folder.
        dir: PathBuf,
        /// The holding server's pid, as its lock file says (unknown while it writes it).
        pid: Option<u32>,
        /// Where it listens (`host:port`), once it does.
        address: Option<String>,
    },
}

/// ` (pid N, listening on http://ADDR)` for the message of [`ServeError::StateInUse`].
fn describe_holder(pid: Option<u32>, address: Option<&str>) -> String {
    match (pid, address) {
        (Some(pid), Some(address)) => format!(" (pid {pid}, listening on http://{address})"),
        (Some(pid), None) => format!(" (pid {pid}, still starting)"),
        (None, _) => String::new(),
    }
}

impl ServeError {
    /// An [`Io`](ServeError::Io) error.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        ServeError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// How the web layer reports it (the HTTP status class).
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            ServeError::InvalidId { .. }
            | ServeError::BadRequest(_)
            | ServeError::UnknownAgent(_)
            | ServeError::NoSuchFolder(_)
            | ServeError::BadLocation { .. }
            | ServeError::NoContinueArgs { .. } => ErrorClass::BadRequest,
            ServeError::SessionNotFound(_) | ServeError::WorkerNotFound { .. } => {
                ErrorClass::NotFound
            }
            ServeError::TooLarge { .. } => ErrorClass::TooLarge,
            ServeError::Unreadable { .. } => ErrorClass::Unreadable,
            ServeError::Conflict(_)
            | ServeError::StateInUse { .. }
            | ServeError::DuplicateFolder { .. } => ErrorClass::Conflict,
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
            ServeError::BadLocation { .. } => "bad_location",
            ServeError::DuplicateFolder { .. } => "duplicate_folder",
            ServeError::NoContinueArgs { .. } => "no_continue_args",
            ServeError::TooLarge { .. } => "too_large",
            ServeError::Conflict(_) => "conflict",
            ServeError::Config { .. } => "config",
            ServeError::Io { .. } => "io",
            ServeError::Unreadable { .. } => "unreadable",
            ServeError::Worker(_) => "worker_failed",
            ServeError::StateInUse { .. } => "state_in_use",
        }
    }
}
