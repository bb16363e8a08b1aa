//! Typed errors of the shell and PTY sessions. Every message names the session, file or
//! argument involved and says what to do next. Owns no I/O.

use std::path::PathBuf;

/// What went wrong with a session command.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A session id that is not `sess_` plus hex digits (it could name a path elsewhere).
    #[error(
        "session id `{id}` is malformed; ids look like `sess_` followed by hex digits (see `list`)"
    )]
    InvalidId {
        /// The id as given.
        id: String,
    },

    /// No session with this id in the sessions folder.
    #[error("session {id} not found in {dir}; run `list` to see the sessions of this folder (or pass --sessions-dir)")]
    NotFound {
        /// The session's id.
        id: String,
        /// The sessions folder searched.
        dir: PathBuf,
    },

    /// The shell session was ended; it takes no more commands.
    #[error("session {id} is terminated; start a new one with `start`")]
    Terminated {
        /// The session's id.
        id: String,
    },

    /// An exec with an empty (or blank) command.
    #[error("no command provided for session {id}: pass it as an argument or on stdin")]
    EmptyCommand {
        /// The session's id.
        id: String,
    },

    /// `start` was asked for a program that is not bash or a POSIX sh.
    #[error("`{command}` is not a shell this tool can keep state for (bash, or sh/dash/ash); for REPLs such as python3 use `delta-sessions-pty start {command}`")]
    NotAShell {
        /// The program asked for.
        command: String,
    },

    /// The shell asked for is not on PATH.
    #[error("shell `{command}` was not found on PATH; give an absolute path or install it")]
    ShellNotFound {
        /// The program asked for.
        command: String,
    },

    /// A file or folder operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done (`cannot read`, `cannot create`...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },

    /// A session's metadata.json does not parse (or could not be serialised).
    #[error(
        "metadata file {path} is unreadable ({reason}); remove the session folder if it is stale"
    )]
    CorruptMetadata {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        reason: String,
    },

    /// The session's lock file could not be taken.
    #[error("could not lock {path}: {reason}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        reason: String,
    },

    /// The shell process of an exec could not be started or waited for.
    #[error("could not run the shell for session {id}: {reason}")]
    Spawn {
        /// The session's id.
        id: String,
        /// Why.
        reason: String,
    },

    /// The PTY holders' socket folder is not private to this user (owner, mode, symlink).
    #[error("socket directory {path} is unsafe: {reason}; remove it or set XDG_RUNTIME_DIR to a private folder")]
    UnsafeSocketDir {
        /// The folder.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// An existing folder that should be private (a state or sessions folder) is not: delta
    /// never changes the mode of a folder it did not create, nor follows a symlink there.
    #[error("{path} cannot be used as a private folder: {problem}; {}", problem.hint(path))]
    NotPrivate {
        /// The folder.
        path: PathBuf,
        /// What is wrong with it.
        problem: DirProblem,
    },

    /// The PTY session's program exited or its holder is gone.
    #[error("session {id} is not running (its program exited or its holder is gone); check `status {id}`, then `cleanup`")]
    Dead {
        /// The session's id.
        id: String,
    },

    /// `write-key` with a key name it does not know.
    #[error("invalid key name `{key}`; valid keys: arrow_up/down/left/right, enter, tab, escape, space, backspace, ctrl+a..ctrl+z, f1..f12, home, end, page_up, page_down, delete, insert")]
    InvalidKey {
        /// The key name given.
        key: String,
    },

    /// The PTY holder answered something unexpected (or nothing).
    #[error("session {id}: holder protocol error: {reason}")]
    Protocol {
        /// The session's id.
        id: String,
        /// What was wrong with the exchange.
        reason: String,
    },

    /// The [`SessionManager`](crate::api::SessionManager)'s actor system stopped.
    #[error("session {id}: the session runtime stopped ({reason}); create a new SessionManager")]
    RuntimeGone {
        /// The session's id.
        id: String,
        /// Why, as far as known.
        reason: String,
    },

    /// A PTY session's holder or program could not be started.
    #[error("session {id} could not start `{command}`: {reason}")]
    StartFailed {
        /// The session's id.
        id: String,
        /// The command line asked for.
        command: String,
        /// Why (the holder's `start_error` when it wrote one).
        reason: String,
    },
}

/// Why an existing folder is not private to this user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DirProblem {
    /// A symlink: it could lead anywhere (the system temp folder), so it is not followed.
    #[error("it is a symlink")]
    Symlink,
    /// Something other than a folder.
    #[error("it is not a folder")]
    NotAFolder,
    /// Another user's folder.
    #[error("it belongs to uid {owner}, not to you (uid {me})")]
    OtherOwner {
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// Group or others may enter it.
    #[error("its mode is {mode:o}: others may enter it")]
    OpenMode {
        /// Its permission bits.
        mode: u32,
    },
}

impl DirProblem {
    /// What to do about it.
    pub fn hint(&self, path: &std::path::Path) -> String {
        match self {
            DirProblem::Symlink => "point at the real folder instead of the link".into(),
            DirProblem::NotAFolder | DirProblem::OtherOwner { .. } => {
                "choose another folder (a missing one is created with mode 700)".into()
            }
            DirProblem::OpenMode { .. } => format!(
                "delta does not change the mode of a folder it did not create: if the folder is \
                 yours alone, `chmod 700 {}`; otherwise choose another folder (a missing one \
                 is created with mode 700)",
                path.display()
            ),
        }
    }
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
