//! `delta relay --tpm`: tokens per minute per endpoint, all callers together, beside the
//! requests per minute of the route's gate. A request waits while the tokens its endpoint
//! billed in the last 60 seconds have reached the limit, until the oldest of them leave
//! the window; the tokens of an answer (its `usage`, prompt + completion) are counted when
//! it ends. A request's own size is not known before its answer, so one request may pass
//! the limit: the next ones then wait the longer.
//!
//! Must not: block (the caller awaits the wait outside the lock), or import actix.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The window a tokens-per-minute limit counts over.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The largest `--tpm`.
pub const MAX_TOKENS_PER_MINUTE: u64 = 1_000_000_000_000;

/// The tokens an endpoint billed in the last minute, against its limit.
#[derive(Debug)]
pub struct TokensPerMinute {
    limit: u64,
    billed: Mutex<VecDeque<(Instant, u64)>>,
}

impl TokensPerMinute {
    /// A limit of `limit` tokens per minute (at least 1).
    pub fn new(limit: u64) -> TokensPerMinute {
        TokensPerMinute {
            limit: limit.max(1),
            billed: Mutex::new(VecDeque::new()),
        }
    }

    /// How long a request arriving at `now` waits: `None` while the last minute's tokens
    /// are under the limit, else until enough of them leave the window.
    pub fn wait_at(&self, now: Instant) -> Option<Duration> {
        let mut billed = self.billed.lock().unwrap_or_else(PoisonError::into_inner);
        while billed
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= WINDOW)
        {
            billed.pop_front();
        }
        let mut total: u64 = billed.iter().map(|(_, tokens)| *tokens).sum();
        if total < self.limit {
            return None;
        }
        // The first moment enough entries have left for the total to drop under the limit.
        for (at, tokens) in billed.iter() {
            total = total.saturating_sub(*tokens);
            if total < self.limit {
                return Some((*at + WINDOW).saturating_duration_since(now));
            }
        }
        Some(WINDOW)
    }

    /// Counts an answer's tokens, billed at `now`.
    pub fn record(&self, now: Instant, tokens: u64) {
        if tokens > 0 {
            self.billed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back((now, tokens));
        }
    }

    /// Waits (asynchronously) until a request may go.
    pub async fn wait_for_room(&self) -> Duration {
        let started = Instant::now();
        while let Some(wait) = self.wait_at(Instant::now()) {
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
        started.elapsed()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn requests_wait_until_the_minutes_tokens_are_under_the_limit() {
        let limit = TokensPerMinute::new(1000);
        let t0 = Instant::now();
        assert_eq!(limit.wait_at(t0), None);
        limit.record(t0, 600);
        assert_eq!(limit.wait_at(t0), None);
        limit.record(t0 + Duration::from_secs(10), 500);
        // 1100 in the window: wait until the first 600 leave it, 60 s after they were billed.
        assert_eq!(
            limit.wait_at(t0 + Duration::from_secs(20)),
            Some(Duration::from_secs(40))
        );
        assert_eq!(limit.wait_at(t0 + Duration::from_secs(60)), None);
        // One answer larger than the whole limit holds everyone back for its minute.
        limit.record(t0 + Duration::from_secs(61), 5000);
        assert_eq!(
            limit.wait_at(t0 + Duration::from_secs(61)),
            Some(Duration::from_secs(60))
        );
    }
}
