//! Retry policy: how many attempts, how long to wait between them (jittered exponential
//! backoff that never undercuts the provider's Retry-After), and how to read Retry-After.
//!
//! Pure functions; the loop that applies them is [`super::LlmGate::complete`], which also
//! shares the endpoint's rate limiter and Retry-After barrier. Never retries non-retryable
//! errors (see [`LlmError::is_retryable`]).

use std::time::Duration;

use reqwest::header::HeaderMap;

use super::endpoint::LlmError;

/// Attempts and delays. Defaults: 5 attempts, 1 s doubling up to 60 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first (1 = never retry).
    pub max_attempts: u32,
    /// The backoff after the first failure; it doubles after each further one.
    pub base_delay: Duration,
    /// Cap on any single wait, Retry-After included, so a misbehaving provider cannot park
    /// a run for hours.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn never() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// After failure number `failures` (1-based) with `err`: `Some(wait)` when another attempt
    /// is allowed and worthwhile, `None` when the caller must give up.
    /// A request the endpoint refused for a detail delta has now changed
    /// ([`LlmError::Adjusted`]) is sent again without waiting.
    pub fn next_delay(&self, failures: u32, err: &LlmError) -> Option<Duration> {
        if !err.is_retryable() || failures >= self.max_attempts {
            return None;
        }
        Some(match err {
            LlmError::Adjusted { .. } => Duration::ZERO,
            _ => backoff_delay(self, failures, err.retry_after()),
        })
    }
}

/// Delay before attempt `attempt + 1` after failure number `attempt` (1-based):
/// `max(retry_after, jittered exponential backoff)`, capped at `max_delay`.
/// The backoff for failure `n` is drawn uniformly from `[d/2, d]` with
/// `d = base_delay * 2^(n-1)` (capped), so concurrent runs do not retry in lockstep.
pub fn backoff_delay(
    policy: &RetryPolicy,
    attempt: u32,
    retry_after: Option<Duration>,
) -> Duration {
    backoff_delay_with_jitter(policy, attempt, retry_after, fastrand::f64())
}

/// [`backoff_delay`] with the jitter draw `unit` in `[0, 1)` supplied by the caller.
pub fn backoff_delay_with_jitter(
    policy: &RetryPolicy,
    attempt: u32,
    retry_after: Option<Duration>,
    unit: f64,
) -> Duration {
    let exponent = attempt.saturating_sub(1).min(32);
    let full = policy
        .base_delay
        .saturating_mul(1_u32 << exponent.min(31))
        .min(policy.max_delay);
    let jittered = full.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0));
    jittered
        .max(retry_after.unwrap_or(Duration::ZERO))
        .min(policy.max_delay)
}

/// Reads `retry-after-ms` (milliseconds, preferred because it is precise) or `Retry-After`
/// (delta-seconds, possibly fractional, or an HTTP date; a date in the past means now).
pub fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if let Ok(wait) = Duration::try_from_secs_f64(ms / 1000.0) {
            // Negative, NaN or beyond any clock (a hostile header used to panic here).
            return Some(wait);
        }
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// One retry about to happen, for logging or journaling by the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// The attempt that failed (1-based).
    pub failed_attempt: u32,
    /// Why it failed.
    pub error: LlmError,
    /// How long the gate waits before the next attempt.
    pub wait: Duration,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn backoff_doubles_within_jitter_bounds() {
        let p = RetryPolicy::default();
        for attempt in 1..=5 {
            let full = S(1 << (attempt - 1));
            for _ in 0..200 {
                let d = backoff_delay(&p, attempt, None);
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
            }
        }
        assert_eq!(backoff_delay_with_jitter(&p, 3, None, 0.0), S(2));
        assert_eq!(backoff_delay_with_jitter(&p, 3, None, 1.0), S(4));
    }

    #[test]
    fn jitter_actually_varies() {
        let p = RetryPolicy::default();
        let draws: std::collections::HashSet<_> =
            (0..50).map(|_| backoff_delay(&p, 4, None)).collect();
        assert!(draws.len() > 10, "{draws:?}");
    }

    #[test]
    fn backoff_is_capped_even_for_huge_attempts() {
        let p = RetryPolicy::default();
        for attempt in [7, 20, 64, u32::MAX] {
            assert!(backoff_delay(&p, attempt, None) <= S(60));
            assert!(backoff_delay_with_jitter(&p, attempt, None, 1.0) == S(60));
        }
    }

    #[test]
    fn retry_after_is_a_floor_but_still_capped() {
        let p = RetryPolicy::default();
        assert_eq!(backoff_delay_with_jitter(&p, 1, Some(S(10)), 1.0), S(10));
        assert_eq!(backoff_delay_with_jitter(&p, 1, Some(S(600)), 0.0), S(60));
        // A short Retry-After does not shorten the backoff.
        assert_eq!(backoff_delay_with_jitter(&p, 4, Some(S(1)), 1.0), S(8));
    }

    #[test]
    fn next_delay_respects_attempts_and_retryability() {
        let p = RetryPolicy::default();
        let e429 = LlmError::Http {
            status: 429,
            message: "slow down".into(),
            retry_after: Some(S(3)),
        };
        assert!(p.next_delay(1, &e429).unwrap() >= S(3));
        assert!(p.next_delay(4, &e429).is_some());
        assert!(p.next_delay(5, &e429).is_none());
        let e400 = LlmError::Http {
            status: 400,
            message: "bad".into(),
            retry_after: None,
        };
        assert!(p.next_delay(1, &e400).is_none());
        assert!(RetryPolicy::never().next_delay(1, &e429).is_none());
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn parses_retry_after_forms() {
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "7")])),
            Some(S(7))
        );
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "1.5")])),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "2"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "soon")])),
            None
        );
        assert_eq!(parse_retry_after(&headers(&[("retry-after", "-3")])), None);
        assert_eq!(parse_retry_after(&HeaderMap::new()), None);
        // Regression (issue 11 item 4b): finite but huge values panicked in from_secs_f64.
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "1e300")])),
            None
        );
        assert_eq!(
            parse_retry_after(&headers(&[
                ("retry-after-ms", "1e300"),
                ("retry-after", "2")
            ])),
            Some(S(2))
        );
        assert_eq!(
            parse_retry_after(&headers(&[(
                "retry-after",
                "Sun, 06 Nov 1994 08:49:37 GMT"
            )])),
            Some(Duration::ZERO)
        );
        let future = (chrono::Utc::now() + chrono::Duration::seconds(30))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let d = parse_retry_after(&headers(&[("retry-after", &future)])).unwrap();
        assert!(d > S(25) && d <= S(30), "{d:?}");
    }

    proptest::proptest! {
        #[test]
        fn backoff_stays_within_bounds(
            attempt in 0u32..100,
            retry_after_ms in proptest::option::of(0u64..200_000),
            base_ms in 1u64..5_000,
            max_ms in 1u64..120_000,
        ) {
            let p = RetryPolicy {
                max_attempts: 5,
                base_delay: Duration::from_millis(base_ms),
                max_delay: Duration::from_millis(max_ms),
            };
            let retry_after = retry_after_ms.map(Duration::from_millis);
            let d = backoff_delay(&p, attempt, retry_after);
            proptest::prop_assert!(d <= p.max_delay);
            if let Some(ra) = retry_after {
                proptest::prop_assert!(d >= ra.min(p.max_delay));
            }
            let full = p.base_delay.saturating_mul(1 << attempt.saturating_sub(1).min(31)).min(p.max_delay);
            proptest::prop_assert!(d >= full / 2);
        }
    }
}
