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
//! `crate::runtime::session::SessionManager`; the `delta-sessions` CLI goes through it.
//!
//! This module never imports actix and never prints.

pub mod error;
pub(crate) mod files;
pub mod pty;
pub mod shell;

pub use error::SessionError;
pub use files::{is_valid_session_id, new_session_id};
