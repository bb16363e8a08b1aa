//! A worker's output as the server keeps it for one epoch: the bounded tail of its log with
//! absolute byte offsets, a `vt100` screen fed the same bytes, and the cut of raw PTY bytes
//! into UTF-8 text chunks (an incomplete character waits for its end). A snapshot is the log
//! tail (when the program draws on the normal screen) or the rendered screen (full-screen
//! programs), always with the offset the next chunk starts at. No I/O.
//!
//! The screen is fed lazily, when a snapshot or the bottom rows are asked for: parsing is half
//! the server's CPU under heavy output and nobody looks at the screen meanwhile. When more
//! than the tail went by unparsed, the screen is rebuilt from the tail alone.

use std::collections::VecDeque;

use serde::Serialize;

/// Log bytes kept in memory per worker (the full log stays in the holder's `output.log`).
pub const TAIL_CAPACITY: usize = 256 * 1024;
/// Largest log tail a snapshot carries.
pub const SNAPSHOT_LOG_BYTES: usize = 128 * 1024;
/// Rows of the screen searched for asking patterns.
pub const BOTTOM_ROWS: usize = 6;

/// Text cut from the raw output: the bytes `[offset, end)` of the epoch's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub offset: u64,
    pub end: u64,
    pub data: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotKind {
    /// Raw log bytes, to be written to a cleared terminal.
    Log,
    /// Escape codes that draw the current screen on a cleared terminal.
    Screen,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub kind: SnapshotKind,
    pub data: String,
    /// The next chunk starts here.
    pub offset: u64,
}

pub struct WorkerScreen {
    parser: vt100::Parser,
    /// The log offset up to which `parser` has been fed.
    parsed_to: u64,
    tail: VecDeque<u8>,
    /// Offset of `tail[0]`.
    tail_start: u64,
    /// Bytes received but not yet cut (an unfinished UTF-8 sequence).
    pending: Vec<u8>,
    /// Shown before the log in snapshots: an earlier epoch's end and the seam.
    prelude: String,
}

impl WorkerScreen {
    /// A screen for bytes starting at `offset` of the epoch's log.
    pub fn new(rows: u16, cols: u16, offset: u64) -> Self {
        WorkerScreen {
            parser: vt100::Parser::new(rows.max(2), cols.max(2), 0),
            parsed_to: offset,
            tail: VecDeque::new(),
            tail_start: offset,
            pending: Vec::new(),
            prelude: String::new(),
        }
    }

    /// Sets the text shown before this epoch's output (kept to its last
    /// [`SNAPSHOT_LOG_BYTES`], cut at a line) and draws it on the screen.
    pub fn set_prelude(&mut self, text: &str) {
        let mut start = text.len().saturating_sub(SNAPSHOT_LOG_BYTES);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        let mut kept = &text[start..];
        if start > 0 {
            if let Some(newline) = kept.find('\n') {
                kept = &kept[newline + 1..];
            }
        }
        self.prelude = kept.to_string();
        self.parser.process(kept.as_bytes());
    }

    pub fn prelude(&self) -> &str {
        &self.prelude
    }

    /// Where the next chunk starts.
    pub fn end(&self) -> u64 {
        self.tail_start + self.tail.len() as u64
    }

    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.parse();
        self.parser.set_size(rows.max(2), cols.max(2));
    }

    /// Forgets bytes of an unfinished character (they will be read again from the log).
    pub fn drop_pending(&mut self) {
        self.pending.clear();
    }

    /// Takes raw bytes; returns the text that is complete so far.
    pub fn push(&mut self, bytes: &[u8]) -> Option<OutputChunk> {
        self.pending.extend_from_slice(bytes);
        let complete = complete_prefix_len(&self.pending);
        if complete == 0 {
            return None;
        }
        let rest = self.pending.split_off(complete);
        let cut = std::mem::replace(&mut self.pending, rest);
        let offset = self.end();
        self.tail.extend(&cut);
        let excess = self.tail.len().saturating_sub(TAIL_CAPACITY);
        if excess > 0 {
            self.tail.drain(..excess);
            self.tail_start += excess as u64;
        }
        let end = offset + cut.len() as u64;
        let data = match String::from_utf8(cut) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        Some(OutputChunk { offset, end, data })
    }

    /// Feeds the screen what it has not seen yet.
    fn parse(&mut self) {
        let end = self.end();
        if self.parsed_to < self.tail_start {
            let (rows, cols) = self.parser.screen().size();
            self.parser = vt100::Parser::new(rows, cols, 0);
            self.parsed_to = self.tail_start;
        }
        let skip = (self.parsed_to - self.tail_start) as usize;
        let (front, back) = self.tail.as_slices();
        if skip < front.len() {
            self.parser.process(&front[skip..]);
            self.parser.process(back);
        } else {
            self.parser.process(&back[skip - front.len()..]);
        }
        self.parsed_to = end;
    }

    pub fn snapshot(&mut self) -> Snapshot {
        self.parse();
        let offset = self.end();
        if self.parser.screen().alternate_screen() {
            let data =
                String::from_utf8_lossy(&self.parser.screen().state_formatted()).into_owned();
            return Snapshot {
                kind: SnapshotKind::Screen,
                data,
                offset,
            };
        }
        let skip = self.tail.len().saturating_sub(SNAPSHOT_LOG_BYTES);
        let mut bytes: Vec<u8> = self.tail.iter().skip(skip).copied().collect();
        if skip > 0 || self.tail_start > 0 {
            // Start at a line so no escape sequence is cut in half.
            if let Some(newline) = bytes.iter().position(|b| *b == b'\n') {
                bytes.drain(..=newline);
            }
        }
        let mut data = String::new();
        if self.tail_start == 0 && skip == 0 {
            data.push_str(&self.prelude);
        }
        data.push_str(&String::from_utf8_lossy(&bytes));
        Snapshot {
            kind: SnapshotKind::Log,
            data,
            offset,
        }
    }

    /// What to carry into the next epoch as its prelude.
    pub fn snapshot_text(&mut self) -> String {
        let snapshot = self.snapshot();
        match snapshot.kind {
            SnapshotKind::Log => snapshot.data,
            SnapshotKind::Screen => self.contents().replace('\n', "\r\n"),
        }
    }

    /// The last non-empty rows of the rendered screen, for asking patterns.
    pub fn bottom_rows(&mut self) -> String {
        self.parse();
        let screen = self.parser.screen();
        let (_, cols) = screen.size();
        let rows: Vec<String> = screen
            .rows(0, cols)
            .map(|row| row.trim_end().to_string())
            .collect();
        let used = rows
            .iter()
            .rposition(|row| !row.is_empty())
            .map_or(0, |last| last + 1);
        rows[used.saturating_sub(BOTTOM_ROWS)..used].join("\n")
    }

    /// The whole rendered screen as text (tests, the page's previews).
    pub fn contents(&mut self) -> String {
        self.parse();
        self.parser.screen().contents()
    }
}

/// Length of `bytes` without a trailing incomplete UTF-8 sequence (invalid bytes elsewhere
/// are passed on and shown as U+FFFD).
fn complete_prefix_len(bytes: &[u8]) -> usize {
    let tail_start = bytes.len().saturating_sub(3);
    for i in (tail_start..bytes.len()).rev() {
        let needed = match bytes[i] {
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            0x80..=0xbf => continue,
            _ => return bytes.len(),
        };
        return if bytes.len() - i < needed {
            i
        } else {
            bytes.len()
        };
    }
    bytes.len()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_contiguous_and_a_split_character_waits_for_its_end() {
        let mut screen = WorkerScreen::new(24, 80, 0);
        let e = "é".as_bytes();
        let first = screen.push(&[b'a', e[0]]).unwrap();
        assert_eq!((first.offset, first.end, first.data.as_str()), (0, 1, "a"));
        assert_eq!(screen.end(), 1);
        let second = screen.push(&[e[1], b'b']).unwrap();
        assert_eq!(
            (second.offset, second.end, second.data.as_str()),
            (1, 4, "éb")
        );
        assert!(screen.push(&[0xe2, 0x82]).is_none());
        assert_eq!(screen.snapshot().offset, 4);
    }

    #[test]
    fn a_reread_unfinished_character_is_not_doubled() {
        let mut screen = WorkerScreen::new(24, 80, 0);
        let e = "é".as_bytes();
        screen.push(&[b'a', e[0]]);
        screen.drop_pending();
        let chunk = screen.push(e).unwrap();
        assert_eq!((chunk.offset, chunk.data.as_str()), (1, "é"));
    }

    #[test]
    fn snapshots_are_the_log_tail_or_the_rendered_screen() {
        let mut screen = WorkerScreen::new(5, 20, 0);
        screen.push(b"$ echo hi\r\nhi\r\n$ ").unwrap();
        let snapshot = screen.snapshot();
        assert_eq!(snapshot.kind, SnapshotKind::Log);
        assert_eq!(snapshot.data, "$ echo hi\r\nhi\r\n$ ");
        assert_eq!(snapshot.offset, 17);
        screen.push(b"\x1b[?1049h\x1b[HMENU").unwrap();
        let snapshot = screen.snapshot();
        assert_eq!(snapshot.kind, SnapshotKind::Screen);
        assert!(snapshot.data.contains("MENU"));
    }

    #[test]
    fn the_tail_is_bounded_and_a_long_log_snapshot_starts_at_a_line() {
        let mut screen = WorkerScreen::new(5, 20, 0);
        let line = "0123456789\r\n".repeat(50_000);
        screen.push(line.as_bytes()).unwrap();
        assert_eq!(screen.end(), line.len() as u64);
        let snapshot = screen.snapshot();
        assert!(snapshot.data.len() <= SNAPSHOT_LOG_BYTES);
        assert!(snapshot.data.starts_with("0123456789\r\n"));
        assert!(screen.tail.len() <= TAIL_CAPACITY);
    }

    #[test]
    fn a_prelude_comes_before_the_log_in_snapshots_and_on_the_screen() {
        let mut screen = WorkerScreen::new(5, 40, 0);
        screen.set_prelude("old output\r\n-- restarted --\r\n");
        screen.push(b"new").unwrap();
        let snapshot = screen.snapshot();
        assert_eq!(snapshot.data, "old output\r\n-- restarted --\r\nnew");
        assert_eq!(snapshot.offset, 3);
        assert!(screen.contents().contains("-- restarted --"));
    }

    #[test]
    fn a_screen_that_fell_behind_the_tail_is_rebuilt_from_it() {
        let mut screen = WorkerScreen::new(5, 20, 0);
        screen.push(b"\x1b[?1049hFULL SCREEN").unwrap();
        let filler = "line\r\n".repeat(TAIL_CAPACITY / 6 + 10);
        screen.push(b"\x1b[?1049l").unwrap();
        screen.push(filler.as_bytes()).unwrap();
        screen.push(b"the end").unwrap();
        assert_eq!(screen.bottom_rows().lines().last(), Some("the end"));
        assert_eq!(screen.snapshot().kind, SnapshotKind::Log);
    }

    #[test]
    fn bottom_rows_are_the_last_non_empty_rendered_rows() {
        let mut screen = WorkerScreen::new(10, 30, 0);
        screen.push(b"working\r\nstill\r\nProceed? [y/n] ").unwrap();
        assert_eq!(screen.bottom_rows(), "working\nstill\nProceed? [y/n]");
    }
}
