//! A run's files as the inspector, its calls and the batch view read them: the run's folder
//! from an id that came with a request, its journal's last [`MAX_JOURNAL_BYTES`]
//! through [`crate::journal::read_journal_tail`] (typed events; unknown and torn lines
//! skipped), the reply being streamed (`io/reply.partial`), and [`InspectError`], what the
//! web layer turns into 400, 404 and 422. Also the two small helpers every view shares:
//! [`clip`] and [`epoch_ms`]. Run records are read with the lenient
//! [`crate::metadata::read_metadata_lenient`] (a partial record still shows).
//!
//! Everything is read bounded, never through a link and never waiting on a FIFO (the
//! journal and metadata readers' rules; [`super::bounded_file`] for the rest).
//!
//! Must not: write anything, describe a file's format (the journal and metadata modules
//! do), or read outside `<workspace>/.delta/<run_id>/` (the run's `secrets/` never).

use std::path::{Path, PathBuf};

use super::bounded_file;
use crate::journal::{read_journal_tail, JournalError, JournalTail};
use crate::workspace::live_reply::{partial_reply_path, PartialReply};
use crate::workspace::{control_dir, validate_run_id};

/// Most journal bytes read for one trace: a longer journal is read from its last this many
/// bytes (the trace says so).
pub const MAX_JOURNAL_BYTES: u64 = 8 * 1024 * 1024;
/// Most bytes of `io/reply.partial` read.
pub const MAX_PARTIAL_BYTES: u64 = 4 * 1024 * 1024;

/// Why a run cannot be inspected.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The run id (or another name from the request) cannot name a run folder.
    #[error("invalid {what} `{value}`: {hint}")]
    Invalid {
        /// What it names.
        what: &'static str,
        /// The value, cut to 80 characters.
        value: String,
        /// What a valid one looks like.
        hint: &'static str,
    },
    /// No such run, call or file.
    #[error("{0}")]
    NotFound(String),
    /// A file of the run could not be read (a FIFO, a link, too large, not JSON...).
    #[error("cannot read {}: {reason}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why, with a hint.
        reason: String,
    },
}

impl InspectError {
    pub(crate) fn unreadable(path: &Path, reason: impl ToString) -> InspectError {
        InspectError::Unreadable {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }
}

/// `<workspace>/.delta/<run_id>`, for a valid run id only.
pub fn run_dir(workspace: &Path, run_id: &str) -> Result<PathBuf, InspectError> {
    validate_run_id(run_id).map_err(|_| InspectError::Invalid {
        what: "run id",
        value: run_id.chars().take(80).collect(),
        hint: "run ids are the folder names `delta list-runs` shows",
    })?;
    let dir = control_dir(workspace).join(run_id);
    if !dir.is_dir() {
        return Err(InspectError::NotFound(format!(
            "no run `{run_id}` in {} (no folder {})",
            workspace.display(),
            dir.display()
        )));
    }
    Ok(dir)
}

/// Milliseconds since the Unix epoch of an RFC 3339 time.
pub fn epoch_ms(timestamp: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(timestamp)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Text cut to `limit` bytes (on a character boundary), saying how much was left out.
pub fn clip(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes more)", &text[..end], text.len() - end)
}

/// The journal of the run in `dir`: its last [`MAX_JOURNAL_BYTES`] as typed events.
pub fn read_run_journal(dir: &Path) -> Result<JournalTail, InspectError> {
    let path = dir.join(crate::journal::JOURNAL_FILE);
    read_journal_tail(&path, MAX_JOURNAL_BYTES).map_err(|e| journal_error(&path, e))
}

/// A journal that cannot be read: not there (404), or not a file delta reads (422).
fn journal_error(path: &Path, error: JournalError) -> InspectError {
    match error {
        JournalError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            InspectError::NotFound(format!("no journal {}", path.display()))
        }
        JournalError::Io { source, .. } => InspectError::unreadable(path, source),
        JournalError::Unreadable { reason, .. } => InspectError::unreadable(path, reason),
        other => InspectError::unreadable(path, other),
    }
}

/// The size of the journal of the run in `dir` (to tell a page that nothing changed without
/// reading it).
pub fn journal_size(dir: &Path) -> Result<u64, InspectError> {
    let path = dir.join(crate::journal::JOURNAL_FILE);
    bounded_file::open_regular(&path)
        .map(|(_, size)| size)
        .map_err(|e| InspectError::unreadable(&path, e))
}

/// The streaming reply of a running run, if it writes one.
pub fn read_partial(dir: &Path) -> Option<PartialReply> {
    let bytes = bounded_file::read_capped(&partial_reply_path(dir), MAX_PARTIAL_BYTES).ok()?;
    // A write caught half done does not parse: the next read gets it.
    serde_json::from_slice(&bytes).ok()
}
