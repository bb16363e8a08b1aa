//! The streamed reply of the model call in progress, kept in the run's `io/reply.partial`
//! for a separate process to watch (see [`crate::workspace::live_reply`] for the file), when
//! the supervisor asks for it (`SupervisorConfig::partial_reply_file`).
//!
//! Cheap on the hot path by construction: nothing is written for a reply without text (tool
//! calls only, or a reply that did not stream) nor for one whose text all came within
//! [`MIN_REWRITE_INTERVAL`] (nobody could watch it grow; its THOUGHT follows at once), the
//! file is rewritten at most every [`MIN_REWRITE_INTERVAL`], and one file per run is reused
//! for every call (no inode freed, at most one created per run). A retried attempt starts
//! the text again.
//!
//! Must not: redact (its caller hands it redacted text) or fail the run (a write that fails
//! stops the live copy for this call, nothing else).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::clock::now_rfc3339;
use crate::workspace::live_reply::{write_partial_reply, PartialReply, MIN_REWRITE_INTERVAL};

/// The live copy of one model call's reply.
pub(super) struct LiveReply {
    path: PathBuf,
    iteration: u32,
    state: Mutex<LiveState>,
}

#[derive(Default)]
struct LiveState {
    content: String,
    reasoning: String,
    /// When this call's first text came.
    first_text: Option<Instant>,
    last_write: Option<Instant>,
    written: bool,
    failed: bool,
}

impl LiveReply {
    /// The live copy of iteration `iteration`'s reply, kept at `path`.
    pub(super) fn new(path: PathBuf, iteration: u32) -> Arc<LiveReply> {
        Arc::new(LiveReply {
            path,
            iteration,
            state: Mutex::new(LiveState::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// More text of the reply (already redacted).
    pub(super) fn push(&self, content: &str, reasoning: &str) {
        self.push_at(content, reasoning, Instant::now());
    }

    fn push_at(&self, content: &str, reasoning: &str, now: Instant) {
        if content.is_empty() && reasoning.is_empty() {
            return;
        }
        let mut state = self.state();
        state.content.push_str(content);
        state.reasoning.push_str(reasoning);
        let first = *state.first_text.get_or_insert(now);
        let waited = state.last_write.unwrap_or(first);
        if now.saturating_duration_since(waited) >= MIN_REWRITE_INTERVAL && !state.failed {
            self.write(&mut state, false, now);
        }
    }

    /// A failed attempt is retried: its text is not the reply.
    pub(super) fn restart(&self) {
        let mut state = self.state();
        state.content.clear();
        state.reasoning.clear();
    }

    /// The call ended (with a reply or without): the file says so, if it was written.
    pub(super) fn finish(&self) {
        let mut state = self.state();
        if state.written && !state.failed {
            self.write(&mut state, true, Instant::now());
        }
    }

    fn write(&self, state: &mut LiveState, complete: bool, now: Instant) {
        let reply = PartialReply {
            iteration: self.iteration,
            complete,
            content: state.content.clone(),
            reasoning: state.reasoning.clone(),
            updated_at: now_rfc3339(),
        };
        match write_partial_reply(&self.path, &reply) {
            Ok(()) => {
                state.written = true;
                state.last_write = Some(now);
            }
            Err(e) => {
                state.failed = true;
                // A refused file (a link or a special file planted in its place) is
                // something to see; any other failure only stops the live copy.
                if e.kind() == std::io::ErrorKind::InvalidData {
                    tracing::warn!("not writing {}: {e}", self.path.display());
                } else {
                    tracing::debug!("cannot write {}: {e}", self.path.display());
                }
            }
        }
    }
}

/// Finishes the live copy when the model step ends, whichever way it ends.
pub(super) struct FinishOnDrop(pub Arc<LiveReply>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finish();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::workspace::live_reply::PARTIAL_REPLY_FILE;

    fn read(path: &std::path::Path) -> PartialReply {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn text_is_written_once_it_has_streamed_for_an_interval_then_at_most_every_interval() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(PARTIAL_REPLY_FILE);
        let live = LiveReply::new(path.clone(), 3);
        let start = Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        live.push_at("", "", at(0));
        live.push_at("Hel", "", at(0));
        live.push_at("lo", "", at(100));
        assert!(
            !path.exists(),
            "a reply whole within the interval writes nothing"
        );
        live.push_at(" wor", "", at(260));
        assert_eq!(read(&path).content, "Hello wor");
        live.push_at("ld", "", at(400));
        assert_eq!(
            read(&path).content,
            "Hello wor",
            "held back within the interval"
        );
        live.push_at("!", "", at(520));
        assert_eq!(read(&path).content, "Hello world!");
        live.finish();
        let done = read(&path);
        assert_eq!(
            (done.content.as_str(), done.complete, done.iteration),
            ("Hello world!", true, 3)
        );
    }

    #[test]
    fn a_retried_attempt_starts_the_text_again_and_a_call_without_text_writes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(PARTIAL_REPLY_FILE);
        let silent = LiveReply::new(path.clone(), 1);
        drop(FinishOnDrop(silent));
        assert!(!path.exists());
        let live = LiveReply::new(path.clone(), 2);
        let start = Instant::now();
        live.push_at("first attempt", "", start);
        live.restart();
        live.push_at("", "thinking", start + MIN_REWRITE_INTERVAL);
        live.finish();
        let done = read(&path);
        assert_eq!(
            (done.content.as_str(), done.reasoning.as_str()),
            ("", "thinking")
        );
    }
}
