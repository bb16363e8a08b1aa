//! What a run writes as it goes: the journal (the source of truth), its in-memory prefix
//! (the cache the context builder and the loop's queries read), and `engine.log`.
//!
//! The cache only ever holds events the journal accepted. After a failed write the journal is
//! closed: the run ends FAILED (`journal_error`) without trying to write behind a gap.
//!
//! `engine.log` (sensitive answers redacted, also in its `tracing` copy) opens, appends and closes per line: a run writes only a handful of lines,
//! while a descriptor held for the run's whole life would be copied and closed by every tool
//! spawn of every other run in the process (spawn cost grows with open descriptors). A log
//! that cannot be written is skipped — diagnostics never fail a run.
//! Must not: decide anything about the run.

use std::fs::OpenOptions;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::now_rfc3339;
use crate::journal::PendingQuestion;
use crate::journal::{Event, Journal, JournalEvent};
use crate::redact::Redactor;
use crate::workspace::RunPaths;

use super::human::record_answer;

pub(super) struct Recorder {
    journal: Option<Journal>,
    events: Arc<Vec<JournalEvent>>,
    engine_log: PathBuf,
    secrets: Redactor,
}

impl Recorder {
    pub(super) fn new(
        journal: Journal,
        events: Vec<JournalEvent>,
        engine_log: PathBuf,
        secrets: Redactor,
    ) -> Self {
        Recorder {
            journal: Some(journal),
            events: Arc::new(events),
            engine_log,
            secrets,
        }
    }

    /// Appends one event; the error text names the journal and the OS error.
    pub(super) fn append(&mut self, event: Event) -> Result<(), String> {
        let Some(journal) = self.journal.as_mut() else {
            return Err("the journal was closed after an earlier write failed".into());
        };
        match journal.append(event) {
            Ok(recorded) => {
                Arc::make_mut(&mut self.events).push(recorded);
                Ok(())
            }
            Err(e) => {
                self.journal = None;
                Err(format!("cannot write the journal: {e}"))
            }
        }
    }

    /// Journals an ask_human answer (HUMAN_INPUT_RECEIVED and its result; a sensitive one is
    /// stored under `secrets/` and joins `secrets` first).
    pub(super) fn record_answer(
        &mut self,
        paths: &RunPaths,
        question: &PendingQuestion,
        answer: &str,
        secrets: &Redactor,
    ) -> Result<(), String> {
        let Some(journal) = self.journal.as_mut() else {
            return Err("the journal was closed after an earlier write failed".into());
        };
        match record_answer(journal, paths, question, answer, secrets) {
            Ok(recorded) => {
                Arc::make_mut(&mut self.events).extend(recorded);
                Ok(())
            }
            Err(e) => {
                self.journal = None;
                Err(format!("cannot write the journal: {e}"))
            }
        }
    }

    /// The open journal's file, for an fsync off the run's thread (`None` once it was
    /// closed by a failed write).
    pub(super) fn journal_file(&self) -> Option<Arc<std::fs::File>> {
        self.journal.as_ref().map(Journal::file_handle)
    }

    /// The journal's events so far.
    pub(super) fn events(&self) -> &[JournalEvent] {
        &self.events
    }

    /// A cheap snapshot of the events, for work that awaits (the context build).
    pub(super) fn snapshot(&self) -> Arc<Vec<JournalEvent>> {
        self.events.clone()
    }

    /// One line of `engine.log` (also to `tracing`), sensitive answers redacted.
    pub(super) fn log(&mut self, message: &str) {
        let secrets = self.secrets.snapshot();
        let message = secrets.redact(message);
        tracing::debug!(target: "delta::run", "{message}");
        let mut options = OpenOptions::new();
        // Private like every file of the run; never through a planted symlink or hard link,
        // and never into a FIFO (whose open would block the run's thread).
        options.create(true).append(true).mode(0o600);
        if let Ok(mut file) = crate::private_file::open_own_file(&self.engine_log, &options) {
            let _ = file.write_all(format!("[{}] {message}\n", now_rfc3339()).as_bytes());
        }
    }
}
