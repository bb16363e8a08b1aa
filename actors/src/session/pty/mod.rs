//! PTY sessions (`delta-sessions-pty`, spec v1.4, experimental). A session is a detached
//! holder process ([`holder`]) that owns a PTY running the program, and a folder
//! `<sessions_dir>/<id>/` (default `.sessions-pty/`, 0700) with `metadata.json`, `output.log`
//! and `input.log` (input written while the terminal echoes it: never a password typed at a
//! prompt that hides it). The CLI is a short-lived client: [`PtySessions`] talks to the holder over
//! a Unix socket in a private per-user folder ([`socket_dir`]) with newline-delimited JSON
//! (`protocol.rs`). `write` input goes through [`escape::parse_escapes`]; `write-key` through
//! [`keys::key_bytes`].
//!
//! Nothing here reads the process environment: [`PtyConfig`] is resolved at the edge,
//! including the path of the executable that runs the holder. No actix, no printing.

#[cfg(feature = "serve")]
pub(crate) mod buffer;
pub mod escape;
#[cfg(feature = "serve")]
pub mod holder;
pub mod keys;
pub(crate) mod protocol;
pub mod socket_dir;

mod client;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use client::{PtySessionInfo, PtySessions, ReadOptions, StartOptions};

use crate::session::error::SessionError;

pub(crate) const METADATA_FILE: &str = "metadata.json";
pub(crate) const START_ERROR_FILE: &str = "start_error";

/// Where PTY sessions live and how to run a holder.
#[derive(Debug, Clone)]
pub struct PtyConfig {
    /// Session folders (default `<cwd>/.sessions-pty`).
    pub sessions_dir: PathBuf,
    /// Private socket folder (see [`socket_dir::default_runtime_dir`]).
    pub runtime_dir: PathBuf,
    /// Program started as `<holder_exe> __holder ...` (the `delta-sessions-pty` binary).
    pub holder_exe: PathBuf,
}

/// The terminal size a session's program sees (`stty size`, `$COLUMNS`/`$LINES` in shells,
/// the layout of full-screen programs). Fixed for the session's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    /// Columns (characters per line).
    pub cols: u16,
    /// Rows (lines).
    pub rows: u16,
}

impl TerminalSize {
    /// Wide enough that most programs do not wrap their output.
    pub const DEFAULT: TerminalSize = TerminalSize {
        cols: 120,
        rows: 30,
    };
}

impl Default for TerminalSize {
    fn default() -> Self {
        TerminalSize::DEFAULT
    }
}

/// Whether a PTY session's program is still running, as its holder records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PtyStatus {
    /// The program runs.
    Running,
    /// The program exited (its output may still be read for a short grace period).
    Dead,
}

/// `metadata.json` of a PTY session, written by its holder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PtyMetadata {
    pub session_id: String,
    pub command: Vec<String>,
    pub pid: Option<u32>,
    pub holder_pid: u32,
    pub created_at: String,
    pub last_accessed_at: String,
    pub status: PtyStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub socket: PathBuf,
    pub work_dir: PathBuf,
}

pub(crate) fn read_pty_metadata(dir: &Path) -> Result<PtyMetadata, SessionError> {
    let path = dir.join(METADATA_FILE);
    let bytes = crate::bounded_read::read(
        &path,
        crate::bounded_read::RECORD,
        crate::bounded_read::Links::Refuse,
    )
    .map_err(|e| SessionError::io("cannot read", &path, e.into()))?;
    serde_json::from_slice(&bytes).map_err(|e| SessionError::CorruptMetadata {
        path,
        reason: e.to_string(),
    })
}

#[cfg(feature = "serve")]
pub(crate) fn write_pty_metadata(dir: &Path, metadata: &PtyMetadata) -> Result<(), SessionError> {
    let path = dir.join(METADATA_FILE);
    let bytes = serde_json::to_vec_pretty(metadata).map_err(|e| SessionError::CorruptMetadata {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    crate::session::files::replace_private(&path, &bytes)
}
