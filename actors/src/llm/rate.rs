//! Requests-per-minute limiting for one endpoint: strict, evenly spaced slots (GCRA with no
//! burst, so no sliding 60 s window ever holds more than the limit) plus a "not before"
//! barrier set when a provider answers with Retry-After.
//!
//! Pure bookkeeping over caller-supplied `Instant`s: it never sleeps and never imports actix.
//! The gateway actor owns one limiter per endpoint and waits the returned duration.

use std::time::{Duration, Instant};

/// Spaces requests `60 s / requests_per_minute` apart and holds everyone back until a
/// Retry-After deadline has passed.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    interval: Option<Duration>,
    /// Earliest instant the next slot may be granted (GCRA's theoretical arrival time).
    next_slot: Option<Instant>,
    not_before: Option<Instant>,
}

impl RateLimiter {
    /// `None` or `Some(0)` means unlimited (only Retry-After barriers apply).
    pub fn new(requests_per_minute: Option<u32>) -> Self {
        let interval = requests_per_minute
            .filter(|rpm| *rpm > 0)
            .map(|rpm| Duration::from_secs(60) / rpm);
        RateLimiter {
            interval,
            next_slot: None,
            not_before: None,
        }
    }

    /// The spacing between two requests, when limited.
    #[cfg(test)]
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// Reserves the next slot and returns how long the caller must wait (from `now`) before
    /// sending. A reserved slot is spent even if the caller then gives up.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let mut send_at = now;
        if let Some(barrier) = self.not_before {
            send_at = send_at.max(barrier);
        }
        if let Some(interval) = self.interval {
            if let Some(slot) = self.next_slot {
                send_at = send_at.max(slot);
            }
            self.next_slot = Some(send_at + interval);
        }
        send_at.saturating_duration_since(now)
    }

    /// A provider said Retry-After: nobody sends before `until`. Earlier deadlines never
    /// shorten a later one.
    pub fn defer_until(&mut self, until: Instant) {
        self.not_before = Some(self.not_before.map_or(until, |b| b.max(until)));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn unlimited_never_waits() {
        let mut r = RateLimiter::new(None);
        let t0 = Instant::now();
        for _ in 0..100 {
            assert_eq!(r.reserve(t0), Duration::ZERO);
        }
        assert_eq!(RateLimiter::new(Some(0)).interval(), None);
    }

    #[test]
    fn requests_are_spaced_evenly() {
        let mut r = RateLimiter::new(Some(60));
        let t0 = Instant::now();
        let waits: Vec<_> = (0..4).map(|_| r.reserve(t0)).collect();
        assert_eq!(waits, vec![MS(0), MS(1000), MS(2000), MS(3000)]);
        // A caller arriving later than its slot does not wait.
        assert_eq!(r.reserve(t0 + MS(10_000)), MS(0));
        assert_eq!(r.reserve(t0 + MS(10_000)), MS(1000));
    }

    #[test]
    fn no_minute_window_exceeds_the_limit() {
        let rpm = 30;
        let mut r = RateLimiter::new(Some(rpm));
        let t0 = Instant::now();
        // 200 callers arriving in bursts; record the send instants.
        let sends: Vec<Instant> = (0..200u64)
            .map(|i| {
                let now = t0 + MS((i / 20) * 3_000);
                now + r.reserve(now)
            })
            .collect();
        for (i, start) in sends.iter().enumerate() {
            let in_window = sends[i..]
                .iter()
                .take_while(|s| s.duration_since(*start) < Duration::from_secs(60))
                .count();
            assert!(in_window <= rpm as usize, "{in_window} sends in one minute");
        }
    }

    #[test]
    fn retry_after_barrier_holds_everyone() {
        let mut r = RateLimiter::new(None);
        let t0 = Instant::now();
        r.defer_until(t0 + MS(500));
        r.defer_until(t0 + MS(100)); // earlier deadline does not shorten
        assert_eq!(r.reserve(t0), MS(500));
        assert_eq!(r.reserve(t0 + MS(200)), MS(300));
        assert_eq!(r.reserve(t0 + MS(900)), MS(0));
    }

    #[test]
    fn barrier_and_spacing_combine() {
        let mut r = RateLimiter::new(Some(120));
        let t0 = Instant::now();
        assert_eq!(r.reserve(t0), MS(0));
        r.defer_until(t0 + MS(2000));
        assert_eq!(r.reserve(t0), MS(2000));
        assert_eq!(r.reserve(t0), MS(2500));
    }
}
