//! Lenient, bounded reads of a journal for the views that show a run while it goes on
//! (`delta serve`'s inspector, its calls and its timeline): [`read_journal_tail`] reads the
//! last bytes of a journal, [`JournalLines`] reads it line by line from a line number. Both
//! return typed [`JournalEvent`]s (original-engine lines converted, as [`super::read_journal`]
//! does), so a view matches on [`super::Event`] and a renamed event or field breaks its
//! compile, never silently its page.
//!
//! Unlike [`super::read_journal`], which refuses a journal with a bad line (a run must not be
//! replayed from a journal it cannot read whole), these readers show what they can: a line
//! that is not an event delta knows (an unknown type, a hand-edited line, a newer delta's
//! event) is skipped and counted, and an incomplete last line (a live run mid-write) is left
//! for the next read. Files are opened through [`crate::bounded_read`] (no FIFO waited on, no
//! link followed) and read within a byte bound.
//!
//! Must not: write or repair anything (that is [`super::Journal::open`]'s), restore secrets
//! (a view shows the journal as stored), or refuse a journal for one bad line.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Take};
use std::path::Path;

use serde::de::IgnoredAny;

use super::event::JournalEvent;
use super::format::{check_file_name, parse_line, Line};
use super::legacy::LegacyConverter;
use super::JournalError;
use crate::bounded_read::{self, Links};

/// What [`read_journal_tail`] read.
#[derive(Debug, Default)]
pub struct JournalTail {
    /// The events of the lines read, in file order.
    pub events: Vec<JournalEvent>,
    /// Complete lines that are not events delta reads (unknown types, bad fields, not
    /// JSON); blank lines are not counted.
    pub skipped: usize,
    /// The last line is incomplete (a write in progress, or cut by a crash): not read.
    pub torn: bool,
    /// The file's size when it was opened.
    pub size: u64,
    /// The file is longer than the bound: only its last bytes were read (from the first
    /// whole line in them).
    pub cut: bool,
}

/// One line as the lenient readers see it. (An event is large since CONTEXT_COMPACTED; it
/// is moved straight to the caller, so boxing it would only add an allocation per line.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum JournalLine {
    /// An event, ours or converted from the original engine's.
    Event(JournalEvent),
    /// A blank line, or a JSON line that is not an event delta reads.
    Skipped,
    /// Not JSON: the incomplete last line of a journal being written (or garbage).
    Unfinished,
}

/// Reads one line leniently.
fn classify(line: &[u8], converter: &mut LegacyConverter) -> JournalLine {
    if line.trim_ascii().is_empty() {
        return JournalLine::Skipped;
    }
    match parse_line(line, converter) {
        Ok(Line::Event(event)) => JournalLine::Event(event),
        Ok(Line::Unknown { .. }) => JournalLine::Skipped,
        Err(_) if serde_json::from_slice::<IgnoredAny>(line).is_ok() => JournalLine::Skipped,
        Err(_) => JournalLine::Unfinished,
    }
}

fn open(path: &Path) -> Result<File, JournalError> {
    check_file_name(path)?;
    bounded_read::open(path, Links::Refuse).map_err(|e| JournalError::read(path, e))
}

/// The events of the last `max_bytes` bytes of the journal at `path` (all of it when it is
/// not longer). See the module header for what is skipped.
pub fn read_journal_tail(path: &Path, max_bytes: u64) -> Result<JournalTail, JournalError> {
    let mut file = open(path)?;
    let size = file
        .metadata()
        .map_err(|e| JournalError::io(path, e))?
        .len();
    let from = size.saturating_sub(max_bytes);
    file.seek(SeekFrom::Start(from))
        .map_err(|e| JournalError::io(path, e))?;
    let mut bytes = Vec::with_capacity(usize::try_from(size - from).unwrap_or(0));
    file.take(max_bytes)
        .read_to_end(&mut bytes)
        .map_err(|e| JournalError::io(path, e))?;
    let mut text: &[u8] = &bytes;
    if from > 0 {
        // Started mid-line: the first whole line is after the first newline.
        let skip = text
            .iter()
            .position(|b| *b == b'\n')
            .map_or(text.len(), |i| i + 1);
        text = &text[skip..];
    }
    let mut tail = JournalTail {
        size,
        cut: from > 0,
        ..JournalTail::default()
    };
    let mut converter = LegacyConverter::new(path);
    let (complete, last) = match text.iter().rposition(|b| *b == b'\n') {
        Some(newline) => text.split_at(newline + 1),
        None => text.split_at(0),
    };
    for line in complete.split(|b| *b == b'\n') {
        if line.trim_ascii().is_empty() {
            continue;
        }
        match classify(line, &mut converter) {
            JournalLine::Event(event) => tail.events.push(event),
            JournalLine::Skipped | JournalLine::Unfinished => tail.skipped += 1,
        }
    }
    if !last.trim_ascii().is_empty() {
        match classify(last, &mut converter) {
            // Complete, only not terminated yet.
            JournalLine::Event(event) => tail.events.push(event),
            JournalLine::Skipped => tail.skipped += 1,
            JournalLine::Unfinished => tail.torn = true,
        }
    }
    Ok(tail)
}

/// A journal read line by line from a line number on (for a view that tails it: the caller
/// keeps the number of the next line to read), within [`bounded_read::JOURNAL`]'s bytes.
pub struct JournalLines {
    reader: BufReader<Take<File>>,
    converter: LegacyConverter,
    line: Vec<u8>,
    /// The number (0-based) of the line the next call reads.
    next: usize,
}

impl JournalLines {
    /// Opens the journal at `path` and passes over its first `from` lines unparsed.
    pub fn open_at(path: &Path, from: usize) -> Result<JournalLines, JournalError> {
        let file = open(path)?;
        let mut lines = JournalLines {
            reader: BufReader::new(file.take(bounded_read::JOURNAL.max_bytes)),
            converter: LegacyConverter::new(path),
            line: Vec::new(),
            next: 0,
        };
        while lines.next < from && lines.read_raw() {}
        Ok(lines)
    }

    /// The number (0-based) of the line the next [`Iterator::next`] reads.
    pub fn position(&self) -> usize {
        self.next
    }

    /// Reads the next line into `self.line` (without its newline); false at the end or on a
    /// read error.
    fn read_raw(&mut self) -> bool {
        self.line.clear();
        match self.reader.read_until(b'\n', &mut self.line) {
            Ok(0) | Err(_) => false,
            Ok(_) => {
                if self.line.last() == Some(&b'\n') {
                    self.line.pop();
                }
                self.next += 1;
                true
            }
        }
    }
}

impl Iterator for JournalLines {
    type Item = JournalLine;

    /// The next line; `None` at the end of the file (or of the bound).
    fn next(&mut self) -> Option<JournalLine> {
        if !self.read_raw() {
            return None;
        }
        Some(classify(&self.line, &mut self.converter))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::journal::Event;

    const START: &str = r#"{"seq":1,"timestamp":"t","type":"USER_MESSAGE","content":"hi"}"#;
    const WARN: &str = r#"{"seq":2,"timestamp":"t","type":"WARNING","message":"w"}"#;
    const UNKNOWN: &str = r#"{"seq":3,"timestamp":"t","type":"CONTEXT_SOMETHING_NEW","x":1}"#;
    const BAD_FIELD: &str = r#"{"seq":4,"timestamp":"t","type":"THOUGHT","iteration":"x"}"#;

    fn journal(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("journal.jsonl");
        std::fs::write(&path, text).unwrap();
        (tmp, path)
    }

    fn seqs(events: &[JournalEvent]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn unknown_and_bad_lines_are_skipped_and_counted_and_a_torn_tail_is_left() {
        let text = format!("{START}\n{UNKNOWN}\nnot json\n\n{BAD_FIELD}\n{WARN}\n{{\"seq\":5,\"ti");
        let (_tmp, path) = journal(&text);
        let tail = read_journal_tail(&path, 1 << 20).unwrap();
        assert_eq!(seqs(&tail.events), [1, 2]);
        assert_eq!(
            tail.skipped, 3,
            "unknown type, not JSON, bad field (not the blank line)"
        );
        assert!(tail.torn && !tail.cut);
        assert_eq!(tail.size, text.len() as u64);
        // A complete last line without its newline yet is read.
        let (_tmp, path) = journal(&format!("{START}\n{WARN}"));
        let tail = read_journal_tail(&path, 1 << 20).unwrap();
        assert_eq!((seqs(&tail.events), tail.torn), (vec![1, 2], false));
    }

    #[test]
    fn a_long_journal_is_read_from_its_first_whole_line_within_the_bound() {
        let text = format!("{START}\n{WARN}\n{WARN}\n");
        let (_tmp, path) = journal(&text);
        // The bound falls inside the first line: it is not read, nor counted as skipped.
        let bound = (text.len() - 3) as u64;
        let tail = read_journal_tail(&path, bound).unwrap();
        assert_eq!(
            (seqs(&tail.events), tail.skipped, tail.cut),
            (vec![2, 2], 0, true)
        );
        let whole = read_journal_tail(&path, text.len() as u64).unwrap();
        assert_eq!((whole.events.len(), whole.cut), (3, false));
    }

    #[test]
    fn original_engine_lines_are_converted() {
        let original =
            r#"{"seq":1,"timestamp":"t","type":"USER_MESSAGE","payload":{"content":"old"}}"#;
        let (_tmp, path) = journal(&format!("{original}\n"));
        let tail = read_journal_tail(&path, 1 << 20).unwrap();
        assert_eq!(
            tail.events[0].event,
            Event::UserMessage {
                content: "old".into()
            }
        );
    }

    #[test]
    fn lines_are_read_from_a_line_number_and_say_where_the_next_read_starts() {
        let text = format!("{START}\n{UNKNOWN}\n{WARN}\n{{\"seq\":");
        let (_tmp, path) = journal(&text);
        let mut lines = JournalLines::open_at(&path, 1).unwrap();
        assert_eq!(lines.position(), 1);
        assert!(matches!(lines.next(), Some(JournalLine::Skipped)));
        assert!(matches!(lines.next(), Some(JournalLine::Event(e)) if e.seq == 2));
        assert_eq!(lines.position(), 3);
        assert!(matches!(lines.next(), Some(JournalLine::Unfinished)));
        assert!(lines.next().is_none());
        // Past the end: nothing, and no error.
        assert!(JournalLines::open_at(&path, 99).unwrap().next().is_none());
    }

    /// A FIFO or a link planted as the journal is refused at once, never waited on or
    /// followed; a journal of another name is refused as ever.
    #[test]
    fn a_fifo_a_link_and_a_wrong_name_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("journal.jsonl");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let error = read_journal_tail(&path, 1 << 20).unwrap_err();
        assert!(matches!(error, JournalError::Unreadable { .. }), "{error}");
        assert!(error.to_string().contains("FIFO"), "{error}");
        assert!(JournalLines::open_at(&path, 0).is_err());
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        let error = read_journal_tail(&path, 1 << 20).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        let renamed = tmp.path().join("journal.json");
        std::fs::write(&renamed, format!("{START}\n")).unwrap();
        assert!(matches!(
            read_journal_tail(&renamed, 1 << 20),
            Err(JournalError::Fatal { .. })
        ));
    }
}
