//! Scripted latencies and waits: `200`, `200ms`, `1.5s`, `200±50`, `200+-50`, `100..300`,
//! each at most [`MAX_SCRIPTED_WAIT`].
//!
//! Must not: sleep (the backend and the server do).

use std::time::Duration;

use super::script::Latency;

/// Longest scripted latency or `retry_after`: a script is for tests and demos, and a
/// larger value (`1e300s`) overflowed into a panic.
pub(super) const MAX_SCRIPTED_WAIT: Duration = Duration::from_secs(3600);

/// `200`, `200ms`, `1.5s`, `200±50`, `200+-50`, `100..300` (plain numbers are milliseconds).
pub fn parse_latency(text: &str) -> Option<Latency> {
    let text = text.trim();
    if let Some((lo, hi)) = text.split_once("..") {
        let (min, max) = (parse_duration(lo)?, parse_duration(hi)?);
        return (min <= max).then_some(Latency { min, max });
    }
    let jitter = text.split_once('±').or_else(|| text.split_once("+-"));
    if let Some((mid, spread)) = jitter {
        let (mid, spread) = (parse_duration(mid)?, parse_duration(spread)?);
        return Some(Latency {
            min: mid.saturating_sub(spread),
            max: mid + spread,
        });
    }
    let fixed = parse_duration(text)?;
    Some(Latency {
        min: fixed,
        max: fixed,
    })
}

fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, scale_ms) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number.trim().parse().ok()?;
    if !(value.is_finite() && value >= 0.0) {
        return None;
    }
    Duration::try_from_secs_f64(value * scale_ms / 1000.0)
        .ok()
        .filter(|duration| *duration <= MAX_SCRIPTED_WAIT)
}
