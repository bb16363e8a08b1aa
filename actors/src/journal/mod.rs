//! The append-only journal `journal.jsonl`, the source of truth of a run (DESIGN §4).
//!
//! - `event`: the event types and their on-disk shape — one flat compact JSON object per
//!   line, `{"seq":N,"timestamp":"…","type":"THOUGHT",…}`.
//! - `format`: reading a journal: FATAL refusals (JSON arrays, pretty-printed files,
//!   wrong file names), per-line parsing with line numbers, torn-tail detection.
//! - `legacy`: converting lines written by the original TypeScript engine
//!   (`{"seq","timestamp","type","payload":{…}}`) into our events.
//! - `queries`: what a resumed run asks of its journal (a pending question, calls left
//!   without a result, a final answer journaled before a crash).
//! - `writer`: [`Journal`], the open handle that appends one line per `write`.
//! - `secrets`: sensitive answers redacted from each event written, restored when read back.
//! - `repeats`: repeated lines (same seq, same event) replayed once.
//! - `tail`: lenient, bounded reads for views of a run that goes on (`delta serve`): the
//!   journal's last bytes, or its lines from a line number, unknown and torn lines skipped.
//!
//! This module does not interpret a conversation (that is [`crate::context`]) and does not
//! know about run status files or locks (that is [`crate::metadata`]).

mod event;
mod format;
mod legacy;
mod queries;
mod repeats;
mod secrets;
mod tail;
mod writer;

pub use event::{
    ActionStatus, CutResult, Event, JournalEvent, PromptSize, ToolCallRecord, REDACTED,
};
pub use format::read_journal;
pub use queries::recorded_final_answer;
pub(crate) use queries::{
    pending_ask_human, unanswered_calls, PendingQuestion, TRUNCATED_FINISH_REASON,
};
pub use tail::{read_journal_tail, JournalLine, JournalLines, JournalTail};
pub use writer::{Journal, JournalOptions};

use std::io;
use std::path::{Path, PathBuf};

/// The only accepted journal file name.
pub const JOURNAL_FILE: &str = "journal.jsonl";

/// Errors of the journal layer. `Fatal` messages start with `FATAL`, name the file, say what
/// happened and what to do.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The file cannot be a journal and is left untouched: a JSON array, a pretty-printed
    /// file, a wrong file name. The message starts with `FATAL` and says what to do.
    #[error("{message}")]
    Fatal {
        /// The file refused.
        path: PathBuf,
        /// The whole message, hint included.
        message: String,
    },
    /// Creating, reading, appending to or fsyncing the file failed (an existing file on
    /// create included).
    #[error("{}", io_message(path, source))]
    Io {
        /// The journal file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The file is not one delta reads as a journal: a FIFO, a device, a symbolic link, far
    /// too big or too long (the reason says which, with its hint).
    #[error("cannot read journal {}: {reason}", path.display())]
    Unreadable {
        /// The journal file.
        path: PathBuf,
        /// Why it was not read.
        #[source]
        reason: crate::bounded_read::ReadError,
    },
    /// A complete line (not a torn tail) is not an event.
    #[error(
        "journal {} line {line} is not a valid event: {message}; hint: the journal is \
         append-only — restore it from a backup, or remove the run directory",
        path.display()
    )]
    Parse {
        /// The journal file.
        path: PathBuf,
        /// The line's number, 1-based.
        line: usize,
        /// The JSON parser's complaint.
        message: String,
    },
}

fn io_message(path: &Path, source: &io::Error) -> String {
    if crate::private_file::is_other_names(source) {
        return format!("refusing to write journal {}: {source}", path.display());
    }
    match source.kind() {
        io::ErrorKind::AlreadyExists => format!(
            "journal {} already exists; hint: open it with Journal::open (`delta continue`) \
             instead of creating it again",
            path.display()
        ),
        io::ErrorKind::NotFound => format!(
            "journal {} not found: {source}; hint: check the run id and work dir \
             (`delta list-runs -w <work-dir>`)",
            path.display()
        ),
        _ => format!(
            "I/O error on journal {}: {source}; hint: check that the run directory exists \
             and is writable (disk full?)",
            path.display()
        ),
    }
}

impl JournalError {
    /// A bounded read of `path` that failed: the system's error as [`JournalError::Io`], a
    /// refusal as [`JournalError::Unreadable`].
    pub(crate) fn read(path: &Path, error: crate::bounded_read::ReadError) -> JournalError {
        match error {
            crate::bounded_read::ReadError::Io(source) => JournalError::io(path, source),
            reason => JournalError::Unreadable {
                path: path.to_path_buf(),
                reason,
            },
        }
    }

    pub(crate) fn io(path: &Path, source: io::Error) -> JournalError {
        JournalError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn fatal(path: &Path, message: String) -> JournalError {
        JournalError::Fatal {
            path: path.to_path_buf(),
            message,
        }
    }
}
