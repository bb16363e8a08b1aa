//! [`Journal`]: the open, append-only handle of one run's `journal.jsonl`.
//!
//! Each event is serialized into a reused buffer with its `\n` and written with one
//! `write_all` on an `O_APPEND` descriptor, so a crash can only tear the last line — which
//! [`Journal::open`] repairs (and where lines were repeated, replays each once: `repeats`).
//! Appending never re-reads the file. The handle assumes its
//! caller owns the run (holds [`crate::metadata::RunLock`]); it takes no lock itself, but
//! it can append through the run lock's own descriptor ([`Journal::open_on`]) and hand its
//! descriptor to the lock ([`Journal::file_handle`]): one descriptor per run for both.
//!
//! With the run's [`Redactor`] set, every sensitive answer in an event is replaced by its
//! marker in the line written, while the caller keeps the event as it was; reading back
//! through [`Journal::open_with_secrets`] restores the markers.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::event::{Event, JournalEvent};
use super::format::{check_file_name, parse_journal, Tail};
use super::repeats::{drop_repeated_lines, seq_list};
use super::secrets::{redact_event, restore_event};
use super::{JournalError, JOURNAL_FILE};
use crate::bounded_read::{self, Links};
use crate::clock::now_rfc3339;
use crate::redact::Redactor;

/// How hard to push each event to disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalOptions {
    /// fsync after every event (slow; for benchmarks and paranoid callers). Without it the
    /// caller fsyncs with [`Journal::sync`] at status changes.
    pub fsync_every_event: bool,
}

/// An open journal; appends are serialized by `&mut self`.
#[derive(Debug)]
pub struct Journal {
    /// Shared with the run's lock when the run's `lock` is a link to this journal.
    file: Arc<File>,
    path: PathBuf,
    next_seq: u64,
    /// File length after our last successful write, to cut back a failed partial write.
    len: u64,
    options: JournalOptions,
    line: Vec<u8>,
    /// Sensitive answers kept out of the lines written.
    secrets: Redactor,
}

impl Journal {
    /// Creates `<run_dir>/journal.jsonl` (mode 0600); fails if it already exists.
    pub fn create(run_dir: &Path, options: JournalOptions) -> Result<Journal, JournalError> {
        let path = run_dir.join(JOURNAL_FILE);
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| JournalError::io(&path, e))?;
        Ok(Journal {
            file: Arc::new(file),
            path,
            next_seq: 1,
            len: 0,
            options,
            line: Vec::with_capacity(512),
            secrets: Redactor::default(),
        })
    }

    /// Opens an existing journal for appending. The file is read and parsed once (FATAL
    /// refusals and line-numbered parse errors as in `read_journal`); a torn last line is
    /// truncated away and a `WARNING` event saying how many bytes were dropped is appended;
    /// an unterminated but complete last line gets its `\n`. Returns the handle and every
    /// event in the file (including that warning). Numbering continues after the highest
    /// `seq` seen, also for journals written by the original engine.
    pub fn open(
        run_dir: &Path,
        options: JournalOptions,
    ) -> Result<(Journal, Vec<JournalEvent>), JournalError> {
        Journal::open_on(run_dir, options, None)
    }

    /// [`Journal::open`] reading and appending through `locked`, the run lock's descriptor
    /// of this same file (opened read-write at offset 0), instead of opening another one.
    pub fn open_on(
        run_dir: &Path,
        options: JournalOptions,
        locked: Option<Arc<File>>,
    ) -> Result<(Journal, Vec<JournalEvent>), JournalError> {
        let path = run_dir.join(JOURNAL_FILE);
        check_file_name(&path)?;
        let lock_name = run_dir.join(crate::metadata::LOCK_FILE);
        if let Some(file) = locked {
            // The lock opened it as a regular file, not through a link; its only other name
            // is the run's `lock`.
            crate::private_file::refuse_other_names(&file, Some(&lock_name))
                .map_err(|e| JournalError::io(&path, e))?;
            let bytes = bounded_read::read_open(&file, bounded_read::JOURNAL)
                .map_err(|e| JournalError::read(&path, e))?;
            set_append(&file).map_err(|e| JournalError::io(&path, e))?;
            return Journal::from_bytes(path, options, file, &bytes);
        }
        // One descriptor, read then appended through: never a link (a journal swapped for a
        // link to a file elsewhere would have `continue` append there), never a FIFO.
        let mut append = OpenOptions::new();
        append.read(true).append(true);
        let file = bounded_read::open_with(&path, &append, Links::Refuse).map_err(|e| {
            // A journal renamed by an editor (journal.json) is the known corruption: say so.
            let renamed = run_dir.join("journal.json");
            if e.is_not_found() && renamed.is_file() {
                if let Err(fatal) = check_file_name(&renamed) {
                    return fatal;
                }
            }
            JournalError::read(&path, e)
        })?;
        // Nor a second name of a file elsewhere (a hard link planted in its place): the
        // appends would go to that file. Its one other name may be the run's `lock`.
        crate::private_file::refuse_other_names(&file, Some(&lock_name))
            .map_err(|e| JournalError::io(&path, e))?;
        let bytes = bounded_read::read_open(&file, bounded_read::JOURNAL)
            .map_err(|e| JournalError::read(&path, e))?;
        Journal::from_bytes(path, options, Arc::new(file), &bytes)
    }

    /// The journal read as `bytes`, appending through `file`: parsed, repaired, warned.
    fn from_bytes(
        path: PathBuf,
        options: JournalOptions,
        file: Arc<File>,
        bytes: &[u8],
    ) -> Result<(Journal, Vec<JournalEvent>), JournalError> {
        let parsed = parse_journal(&path, bytes)?;
        let next_seq = parsed.next_seq();
        let skip_warnings = parsed.pending_skip_warnings();
        let mut journal = Journal {
            file,
            path,
            next_seq,
            len: parsed.valid_len as u64,
            options,
            line: Vec::with_capacity(512),
            secrets: Redactor::default(),
        };
        let mut events = parsed.events;
        let repeated = drop_repeated_lines(&mut events);
        match parsed.tail {
            Tail::Clean => {}
            Tail::Unterminated => journal.write_line(b"\n".to_vec())?,
            Tail::Torn { bytes } => {
                journal
                    .file
                    .set_len(journal.len)
                    .map_err(|e| JournalError::io(&journal.path, e))?;
                let warning = journal.append(Event::Warning {
                    message: format!(
                        "journal ended with a torn line of {bytes} bytes (a write cut short \
                         by a crash); it was truncated on reopen"
                    ),
                })?;
                events.push(warning);
            }
        }
        for warning in skip_warnings {
            events.push(journal.append(warning)?);
        }
        if !repeated.is_empty() {
            let warning = journal.append(Event::Warning {
                message: format!(
                    "journal repeats {} earlier line(s) (seq {}), e.g. pasted twice or replayed \
                     after a crash; the repeats were ignored (the file is left as it is)",
                    repeated.len(),
                    seq_list(&repeated)
                ),
            })?;
            events.push(warning);
        }
        Ok((journal, events))
    }

    /// [`Journal::open`], or, when the run folder has no journal at all (neither
    /// `journal.jsonl` nor an editor-renamed `journal.json`), a fresh journal whose first
    /// event is a WARNING saying so: the original engine continued such runs from scratch,
    /// and the caller restores the task from the run's metadata.
    /// `locked` as in [`Journal::open_on`].
    pub(crate) fn open_or_start(
        run_dir: &Path,
        options: JournalOptions,
        locked: Option<Arc<File>>,
    ) -> Result<(Journal, Vec<JournalEvent>), JournalError> {
        let path = run_dir.join(JOURNAL_FILE);
        if path.exists() || run_dir.join("journal.json").exists() {
            return Journal::open_on(run_dir, options, locked);
        }
        let mut journal = Journal::create(run_dir, options)?;
        let warning = journal.append(Event::Warning {
            message: format!(
                "the run had no journal ({} was missing); a fresh one was started, so the \
                 model sees only the task and what follows",
                path.display()
            ),
        })?;
        Ok((journal, vec![warning]))
    }

    /// [`Journal::open_or_start`] for a run with sensitive answers: the events come back with the
    /// markers restored (what the model saw), and later appends are redacted.
    /// `locked` as in [`Journal::open_on`].
    pub(crate) fn open_with_secrets(
        run_dir: &Path,
        options: JournalOptions,
        secrets: Redactor,
        locked: Option<Arc<File>>,
    ) -> Result<(Journal, Vec<JournalEvent>), JournalError> {
        let (mut journal, mut events) = Journal::open_or_start(run_dir, options, locked)?;
        let known = secrets.snapshot();
        for record in &mut events {
            restore_event(&mut record.event, &known);
        }
        journal.set_secrets(secrets);
        Ok((journal, events))
    }

    /// Redacts the run's sensitive answers from every line written from now on.
    pub(crate) fn set_secrets(&mut self, secrets: Redactor) {
        self.secrets = secrets;
    }

    /// Appends one event as one line and returns it with its `seq` and `timestamp`. The
    /// line has every sensitive answer replaced by its marker; the returned event does not.
    pub fn append(&mut self, event: Event) -> Result<JournalEvent, JournalError> {
        let record = JournalEvent {
            seq: self.next_seq,
            timestamp: now_rfc3339(),
            event,
        };
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        let secrets = self.secrets.snapshot();
        let written = if secrets.is_empty() {
            serde_json::to_writer(&mut line, &record)
        } else {
            let mut shown = record.clone();
            redact_event(&mut shown.event, &secrets);
            serde_json::to_writer(&mut line, &shown)
        };
        written.map_err(|e| JournalError::io(&self.path, std::io::Error::other(e)))?;
        line.push(b'\n');
        self.write_line(line)?;
        self.next_seq += 1;
        if self.options.fsync_every_event {
            self.sync()?;
        }
        Ok(record)
    }

    /// Writes `line` with one `write_all`; on failure cuts the file back to its previous
    /// length so a half-written line never sits in front of the next one.
    fn write_line(&mut self, line: Vec<u8>) -> Result<(), JournalError> {
        let result = (&*self.file).write_all(&line);
        let line_len = line.len() as u64;
        self.line = line;
        match result {
            Ok(()) => {
                self.len += line_len;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                Err(JournalError::io(&self.path, e))
            }
        }
    }

    /// fsyncs the journal (callers do it at status changes).
    pub fn sync(&mut self) -> Result<(), JournalError> {
        self.file
            .sync_data()
            .map_err(|e| JournalError::io(&self.path, e))
    }

    /// The journal's descriptor, to lock the run through it
    /// ([`crate::metadata::RunLock::on_new_journal`]).
    pub fn file_handle(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Path of the journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `seq` the next appended event will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

/// Makes every write through `file` an append (`O_APPEND` on its open file description).
fn set_append(file: &File) -> std::io::Result<()> {
    // SAFETY: fcntl F_GETFL/F_SETFL only read and set flags of a descriptor `file` keeps open.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0
        || unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags | libc::O_APPEND) } < 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::journal::read_journal;

    fn user(content: &str) -> Event {
        Event::UserMessage {
            content: content.into(),
        }
    }

    #[test]
    fn create_append_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let mut journal = Journal::create(tmp.path(), JournalOptions::default()).unwrap();
        assert_eq!(journal.next_seq(), 1);
        assert_eq!(journal.path(), tmp.path().join("journal.jsonl"));
        let first = journal.append(user("a")).unwrap();
        let second = journal.append(user("b")).unwrap();
        assert_eq!((first.seq, second.seq, journal.next_seq()), (1, 2, 3));
        journal.sync().unwrap();
        let text = std::fs::read_to_string(journal.path()).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with('\n'));
        assert!(text.starts_with(r#"{"seq":1,"timestamp":""#), "{text}");
        assert_eq!(read_journal(journal.path()).unwrap(), vec![first, second]);
    }

    #[test]
    fn create_refuses_an_existing_journal() {
        let tmp = tempfile::tempdir().unwrap();
        Journal::create(tmp.path(), JournalOptions::default()).unwrap();
        let err = Journal::create(tmp.path(), JournalOptions::default()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("already exists") && message.contains("journal.jsonl"));
    }

    #[test]
    fn open_with_only_a_renamed_journal_is_fatal_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("journal.json"), "{}\n").unwrap();
        let message = Journal::open(tmp.path(), JournalOptions::default())
            .unwrap_err()
            .to_string();
        assert!(message.starts_with("FATAL"), "{message}");
        assert!(
            message.contains(&tmp.path().join("journal.json").display().to_string()),
            "{message}"
        );
    }

    #[test]
    fn open_missing_journal_names_it() {
        let tmp = tempfile::tempdir().unwrap();
        let message = Journal::open(tmp.path(), JournalOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("journal.jsonl") && message.contains("not found"),
            "{message}"
        );
    }

    #[test]
    fn seq_strictly_increases_across_reopens() {
        let tmp = tempfile::tempdir().unwrap();
        let mut journal = Journal::create(tmp.path(), JournalOptions::default()).unwrap();
        journal.append(user("0")).unwrap();
        drop(journal);
        for round in 1..=3 {
            let (mut journal, events) =
                Journal::open(tmp.path(), JournalOptions::default()).unwrap();
            assert_eq!(events.len(), round);
            assert_eq!(journal.next_seq(), round as u64 + 1);
            journal.append(user(&round.to_string())).unwrap();
        }
        let seqs: Vec<u64> = read_journal(&tmp.path().join(JOURNAL_FILE))
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
    }

    #[test]
    fn torn_tail_is_truncated_and_a_warning_appended() {
        let tmp = tempfile::tempdir().unwrap();
        let mut journal = Journal::create(tmp.path(), JournalOptions::default()).unwrap();
        journal.append(user("kept")).unwrap();
        drop(journal);
        let path = tmp.path().join(JOURNAL_FILE);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"seq":2,"timestamp":"2026-"#).unwrap();
        drop(file);

        let (mut journal, events) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
        assert_eq!(events.len(), 2);
        let Event::Warning { message } = &events[1].event else {
            panic!("expected a warning, got {:?}", events[1]);
        };
        assert!(message.contains("27 bytes"), "{message}");
        assert_eq!(events[1].seq, 2);
        journal.append(user("after")).unwrap();
        let back = read_journal(&path).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[..2], events[..]);
        assert_eq!(back[2].seq, 3);
    }

    #[test]
    fn unterminated_last_line_is_kept_and_terminated() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(JOURNAL_FILE);
        std::fs::write(
            &path,
            r#"{"seq":7,"timestamp":"t","type":"USER_MESSAGE","content":"x"}"#,
        )
        .unwrap();
        let (mut journal, events) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(journal.next_seq(), 8);
        journal.append(user("y")).unwrap();
        let seqs: Vec<u64> = read_journal(&path).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [7, 8]);
    }

    #[test]
    fn fsync_every_event_still_appends() {
        let tmp = tempfile::tempdir().unwrap();
        let options = JournalOptions {
            fsync_every_event: true,
        };
        let mut journal = Journal::create(tmp.path(), options).unwrap();
        for i in 0..3 {
            journal.append(user(&i.to_string())).unwrap();
        }
        assert_eq!(read_journal(journal.path()).unwrap().len(), 3);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any text (newlines, quotes, unicode, control characters) stays on one line and
        /// reads back unchanged.
        #[test]
        fn any_text_round_trips_on_one_line(texts in proptest::collection::vec(proptest::prelude::any::<String>(), 1..5)) {
            let tmp = tempfile::tempdir().unwrap();
            let mut journal = Journal::create(tmp.path(), JournalOptions::default()).unwrap();
            let written: Vec<_> = texts
                .iter()
                .map(|t| journal.append(Event::Warning { message: t.clone() }).unwrap())
                .collect();
            let bytes = std::fs::read(journal.path()).unwrap();
            proptest::prop_assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), texts.len());
            proptest::prop_assert_eq!(read_journal(journal.path()).unwrap(), written);
        }
    }

    #[test]
    fn sensitive_answers_are_redacted_in_the_file_and_restored_on_open() {
        let tmp = tempfile::tempdir().unwrap();
        let secrets = Redactor::default();
        let mut journal = Journal::create(tmp.path(), JournalOptions::default()).unwrap();
        journal.set_secrets(secrets.clone());
        journal.append(user("before canary-42x")).unwrap();
        secrets.add("call_1", "canary-42x");
        let thought = Event::Thought {
            iteration: 1,
            content: Some("I know canary-42x".into()),
            tool_calls: vec![crate::journal::ToolCallRecord {
                id: "c1".into(),
                name: "echo".into(),
                arguments: r#"{"text":"canary-42x"}"#.into(),
            }],
            llm_invocation_ref: None,
            finish_reason: None,
            usage: None,
            prompt: None,
        };
        let returned = journal.append(thought.clone()).unwrap();
        assert_eq!(returned.event, thought, "the caller keeps the real value");
        let text = std::fs::read_to_string(journal.path()).unwrap();
        let marker = crate::redact::marker("call_1");
        assert!(
            text.contains("before canary-42x"),
            "written before it was known"
        );
        assert_eq!(text.matches("canary-42x").count(), 1, "{text}");
        assert_eq!(text.matches(&marker).count(), 2, "{text}");
        drop(journal);

        let (_, events) =
            Journal::open_with_secrets(tmp.path(), JournalOptions::default(), secrets, None)
                .unwrap();
        assert_eq!(events[1].event, thought);
        let (_, plain) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
        assert_ne!(plain[1].event, thought);
    }

    #[test]
    fn refused_journal_is_left_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(JOURNAL_FILE);
        let array = "[{\"seq\":1}]";
        std::fs::write(&path, array).unwrap();
        let err = Journal::open(tmp.path(), JournalOptions::default()).unwrap_err();
        assert!(matches!(err, JournalError::Fatal { .. }));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), array);
    }
}
