//! Sessions agents call as tools: file-backed shell sessions (`delta-sessions`, spec v1.5)
//! and PTY sessions held by a detached holder process (`delta-sessions-pty`, spec v1.4).
//!
//! # Layout
//! - [`shell`]: one folder per session under `.sessions/`; every `exec` is a fresh
//!   `bash --noprofile --norc` that restores the saved state (cwd, variables, functions, aliases,
//!   options), runs the command from a file and saves the new state. No long-lived process.
//! - [`pty`]: one detached holder process per session owns a PTY, a ring buffer and a Unix
//!   socket in a private per-user directory; the CLI is a short-lived client of it.
//!   PTY sessions live in `.sessions-pty/`, so neither CLI can see or delete the other's.
//! - [`error`]: the typed errors of both, each naming the session/file and giving a hint.
//!
//! The embedder API that serialises execs per session through a `SessionActor` is
//! [`crate::api::SessionManager`]; the `delta-sessions` CLI goes through it.
//!
//! # Differences from the spec and the original (deliberate)
//! - Shell state really persists (cwd, exported and plain variables, functions, aliases,
//!   `set -o`/`shopt`; for POSIX `sh`: cwd, variables, exports, `set -o`). Each exec's
//!   environment is the session's saved state (the caller's environment at `start`, minus
//!   secrets), not the caller's environment of the moment.
//! - `exec` answers JSON with `timed_out` and `truncated` (+ `stdout_file`/`stderr_file` when
//!   cut); a timeout reports exit code 124, a signal death 128 + signal (never 0).
//! - Shell `end` marks the session terminated and `cleanup` removes it; `cleanup` never
//!   touches folders it cannot read (PTY sessions live in `.sessions-pty/` anyway).
//! - PTY `read --timeout` returns at once when output is already buffered (the original
//!   waited for output beyond what was buffered when the read began); `enter` sends CR, what
//!   a terminal sends; `write --raw` skips escape parsing; no `index.json` or `pid` files.
//!
//! This module never imports actix and never prints.

pub mod error;
pub(crate) mod files;
pub mod pty;
pub mod shell;

pub use error::SessionError;
pub use files::{close_inherited_fds, is_valid_session_id, new_session_id};
