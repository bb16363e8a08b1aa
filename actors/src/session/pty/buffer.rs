//! The holder's output ring buffer: keeps the newest 1 MiB and hands out text cut at UTF-8
//! boundaries.
//! No locking or I/O here; the holder wraps it in a mutex.

use std::collections::VecDeque;

pub const RING_CAPACITY: usize = 1024 * 1024;

#[derive(Debug)]
pub struct OutputRing {
    bytes: VecDeque<u8>,
    capacity: usize,
}

impl OutputRing {
    pub fn new(capacity: usize) -> Self {
        OutputRing {
            bytes: VecDeque::new(),
            capacity,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        let excess = self.bytes.len().saturating_sub(self.capacity);
        self.bytes.drain(..excess);
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Takes the buffered text. An incomplete UTF-8 sequence at the end stays for the next
    /// take unless `flush_partial` (the program is gone and nothing more will come).
    pub fn take(&mut self, flush_partial: bool) -> String {
        let all: Vec<u8> = self.bytes.drain(..).collect();
        let keep_from = if flush_partial {
            all.len()
        } else {
            complete_prefix_len(&all)
        };
        self.bytes.extend(&all[keep_from..]);
        String::from_utf8_lossy(&all[..keep_from]).into_owned()
    }
}

/// Length of `bytes` without a trailing incomplete UTF-8 sequence.
fn complete_prefix_len(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => {
            // Invalid bytes somewhere: only hold back an unfinished sequence at the very end.
            let tail_start = bytes.len().saturating_sub(3);
            (tail_start..bytes.len())
                .find(|&i| {
                    let lead = bytes[i];
                    let needed = match lead {
                        0xc0..=0xdf => 2,
                        0xe0..=0xef => 3,
                        0xf0..=0xf7 => 4,
                        _ => return false,
                    };
                    bytes.len() - i < needed
                })
                .unwrap_or(bytes.len())
        }
    }
}

/// The last `n` lines of `text` (a trailing newline does not count as an extra line).
pub fn last_lines(text: &str, n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    let start = body
        .rmatch_indices('\n')
        .nth(n - 1)
        .map(|(i, _)| i + 1)
        .unwrap_or(0);
    text[start..].to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_bytes() {
        let mut ring = OutputRing::new(4);
        ring.push(b"abc");
        ring.push(b"def");
        assert_eq!(ring.take(false), "cdef");
        assert!(ring.is_empty());
    }

    #[test]
    fn a_split_character_waits_for_its_end() {
        let mut ring = OutputRing::new(100);
        let e = "é".as_bytes();
        ring.push(&[b'a', e[0]]);
        assert_eq!(ring.take(false), "a");
        ring.push(&[e[1], b'b']);
        assert_eq!(ring.take(false), "éb");
        ring.push(&[e[0]]);
        assert_eq!(ring.take(true), "\u{fffd}");
    }

    #[test]
    fn last_lines_trims_from_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines("a\nb", 5), "a\nb");
        assert_eq!(last_lines("a\nb", 0), "");
    }
}
