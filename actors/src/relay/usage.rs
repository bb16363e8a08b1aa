//! What the relay has served: requests answered and the tokens the endpoints reported for
//! them (a JSON answer's `usage`, or a streamed answer's last `usage` chunk), shared by the
//! routes and read through the handle ([`Relay::usage`](crate::api::Relay::usage)).
//!
//! Must not: block (plain atomics), or keep anything about a request but its counts.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use crate::llm::Usage;

/// Totals since the relay started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayUsage {
    /// Chat requests answered by an endpoint (whatever its status).
    pub requests: u64,
    /// Of those, answers streamed (SSE).
    pub streamed: u64,
    /// Callers that went away before their answer was complete.
    pub abandoned: u64,
    /// Prompt tokens reported.
    pub prompt_tokens: u64,
    /// Completion tokens reported.
    pub completion_tokens: u64,
}

/// The live counters behind [`RelayUsage`].
#[derive(Debug, Default)]
pub struct UsageCounters {
    requests: AtomicU64,
    streamed: AtomicU64,
    abandoned: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

impl UsageCounters {
    /// Counts one answered request and its usage, if reported.
    pub fn record(&self, streamed: bool, usage: Option<Usage>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if streamed {
            self.streamed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(usage) = usage {
            saturating_add(&self.prompt_tokens, usage.prompt_tokens);
            saturating_add(&self.completion_tokens, usage.completion_tokens);
        }
    }

    /// Counts a caller that left before its answer was complete.
    pub fn record_abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot.
    pub fn snapshot(&self) -> RelayUsage {
        RelayUsage {
            requests: self.requests.load(Ordering::Relaxed),
            streamed: self.streamed.load(Ordering::Relaxed),
            abandoned: self.abandoned.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
        }
    }
}

/// Adds `amount` to `counter`, stopping at `u64::MAX`: an upstream's absurd usage must not
/// wrap the relay's totals.
fn saturating_add(counter: &AtomicU64, amount: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
        Some(now.saturating_add(amount))
    });
}

/// The `usage` object of a completion or chunk body, when it has a non-null one.
pub fn usage_of(body: &[u8]) -> Option<Usage> {
    #[derive(serde::Deserialize)]
    struct WithUsage {
        usage: Option<Value>,
    }
    let usage = serde_json::from_slice::<WithUsage>(body).ok()?.usage?;
    serde_json::from_value(usage).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_a_body_and_counted() {
        let counters = UsageCounters::default();
        let usage = usage_of(br#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#);
        counters.record(true, usage);
        counters.record(false, usage_of(br#"{"usage":null}"#));
        counters.record_abandoned();
        assert_eq!(
            counters.snapshot(),
            RelayUsage {
                requests: 2,
                streamed: 1,
                abandoned: 1,
                prompt_tokens: 7,
                completion_tokens: 3
            }
        );
        assert_eq!(usage_of(b"not json"), None);
    }
}
