//! Redacting a stream written piece by piece (a tool's full `.stdout`/`.stderr` file) without
//! ever writing a secret, even one split across two reads.
//!
//! The redactor holds back the last `window - 1` bytes of what it was given (`window` = the
//! longest pattern): a match starting before that point is complete and final, since every
//! pattern that could start there fits in the bytes already seen. Matches are therefore the
//! same as when redacting the whole stream at once, whatever the chunking.
//!
//! Must not: buffer more than one chunk plus the window.

use aho_corasick::Input;

use super::{Action, SecretSet};

/// Feeds chunks in, gets redacted bytes out; [`StreamRedactor::finish`] returns the rest.
pub struct StreamRedactor {
    secrets: SecretSet,
    pending: Vec<u8>,
}

impl StreamRedactor {
    pub(super) fn new(secrets: SecretSet) -> StreamRedactor {
        StreamRedactor {
            secrets,
            pending: Vec::new(),
        }
    }

    /// Redacts what can be decided now and returns it; keeps the undecided tail.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some((_, compiled)) = self.secrets.searcher() else {
            return chunk.to_vec();
        };
        self.pending.extend_from_slice(chunk);
        let decided = self
            .pending
            .len()
            .saturating_sub(compiled.window.saturating_sub(1));
        self.drain(decided)
    }

    /// Everything still held back, redacted.
    pub fn finish(mut self) -> Vec<u8> {
        let all = self.pending.len();
        self.drain(all)
    }

    /// Emits the pending bytes before `decided` (and any match starting before it),
    /// redacted; keeps the rest pending.
    fn drain(&mut self, decided: usize) -> Vec<u8> {
        let Some((matcher, compiled)) = self.secrets.searcher() else {
            return std::mem::take(&mut self.pending);
        };
        let bytes = &self.pending;
        let mut out = Vec::with_capacity(decided);
        let mut copied = 0;
        let mut at = 0;
        while at < decided {
            let Some(found) = matcher.find(Input::new(bytes).span(at..bytes.len())) else {
                break;
            };
            if found.start() >= decided {
                break;
            }
            match &compiled.actions[found.pattern().as_usize()] {
                // A tool's output is raw text: a marker in it is searched like any text.
                Action::Marker => at = found.start() + 1,
                Action::Replace(marker) => {
                    out.extend_from_slice(&bytes[copied..found.start()]);
                    out.extend_from_slice(marker.as_bytes());
                    copied = found.end();
                    at = found.end();
                }
            }
        }
        let keep_from = copied.max(decided);
        out.extend_from_slice(&bytes[copied..keep_from]);
        self.pending.drain(..keep_from);
        out
    }
}
