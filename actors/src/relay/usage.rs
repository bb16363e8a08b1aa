//! What the relay has served: requests answered and the tokens the endpoints reported for
//! them (a JSON answer's `usage`, or a streamed answer's last `usage` chunk), shared by the
//! routes and read through the handle ([`Relay::usage`](crate::api::Relay::usage)).
//!
//! The same counts per route, with the waits for an in-flight place or a rate-limit slot,
//! are the relay's Prometheus metrics ([`UsageCounters::write_metrics`], its `/metrics`).
//!
//! Must not: block (atomics, and one short lock for the per-route counts), or keep anything
//! about a request but its counts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use crate::llm::Usage;
use crate::openmetrics::{Kind, MetricsText};

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
    routes: Mutex<BTreeMap<String, RouteCounts>>,
}

/// One figure of a route's counts, as a metric's value.
type RouteFigure = fn(&RouteCounts) -> f64;

/// One route's counts, for its metrics.
#[derive(Debug, Default, Clone)]
struct RouteCounts {
    /// Answers by HTTP status.
    answers: BTreeMap<u16, u64>,
    streamed: u64,
    abandoned: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    /// Requests that waited for an in-flight place or a rate-limit slot, and how long.
    waits: u64,
    wait_seconds: f64,
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

    fn route(&self, route: &str, count: impl FnOnce(&mut RouteCounts)) {
        let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        match routes.get_mut(route) {
            Some(counts) => count(counts),
            None => count(routes.entry(route.to_string()).or_default()),
        }
    }

    /// Counts one answer of `route` (its status, whether streamed, its usage).
    pub fn record_route(&self, route: &str, status: u16, streamed: bool, usage: Option<Usage>) {
        self.route(route, |counts| {
            *counts.answers.entry(status).or_default() += 1;
            counts.streamed += u64::from(streamed);
            if let Some(usage) = usage {
                counts.prompt_tokens += usage.prompt_tokens;
                counts.completion_tokens += usage.completion_tokens;
            }
        });
    }

    /// Counts a caller of `route` that left before its answer was complete.
    pub fn record_route_abandoned(&self, route: &str) {
        self.route(route, |counts| counts.abandoned += 1);
    }

    /// A request of `route` waited `waited` for an in-flight place or a rate-limit slot.
    pub fn record_wait(&self, route: &str, waited: Duration) {
        if waited.is_zero() {
            return;
        }
        self.route(route, |counts| {
            counts.waits += 1;
            counts.wait_seconds += waited.as_secs_f64();
        });
    }

    /// The relay's metrics, per route, as OpenMetrics samples.
    pub fn write_metrics(&self, text: &mut MetricsText) {
        let routes = self
            .routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        text.family(
            "delta_relay_requests",
            Kind::Counter,
            "Chat requests answered, by route and HTTP status.",
        );
        for (route, counts) in &routes {
            for (status, n) in &counts.answers {
                text.sample(
                    "delta_relay_requests_total",
                    &[("route", route), ("status", &status.to_string())],
                    *n as f64,
                );
            }
        }
        let per_route: [(&str, &str, RouteFigure); 4] = [
            (
                "delta_relay_streamed",
                "Answers streamed (SSE), by route.",
                |c| c.streamed as f64,
            ),
            (
                "delta_relay_abandoned",
                "Callers that left before their answer was complete, by route.",
                |c| c.abandoned as f64,
            ),
            (
                "delta_relay_waits",
                "Requests that waited for an in-flight place or a rate-limit slot, by route.",
                |c| c.waits as f64,
            ),
            (
                "delta_relay_wait_seconds",
                "Time requests so waited, by route.",
                |c| c.wait_seconds,
            ),
        ];
        for (name, help, value) in per_route {
            text.family(name, Kind::Counter, help);
            let total = format!("{name}_total");
            for (route, counts) in &routes {
                text.sample(&total, &[("route", route)], value(counts));
            }
        }
        text.family(
            "delta_relay_tokens",
            Kind::Counter,
            "Tokens the endpoints reported, by route and type (input, output).",
        );
        for (route, counts) in &routes {
            text.sample(
                "delta_relay_tokens_total",
                &[("route", route), ("type", "input")],
                counts.prompt_tokens as f64,
            );
            text.sample(
                "delta_relay_tokens_total",
                &[("route", route), ("type", "output")],
                counts.completion_tokens as f64,
            );
        }
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

    #[test]
    fn routes_are_counted_apart_and_written_as_metrics() {
        let counters = UsageCounters::default();
        let usage =
            usage_of(br#"{"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#);
        counters.record_route("fast", 200, true, usage);
        counters.record_route("fast", 429, false, None);
        counters.record_route("slow", 200, false, usage);
        counters.record_wait("slow", Duration::from_millis(1500));
        counters.record_wait("slow", Duration::ZERO);
        counters.record_route_abandoned("slow");
        let mut text = MetricsText::new();
        counters.write_metrics(&mut text);
        let text = text.finish();
        for line in [
            "delta_relay_requests_total{route=\"fast\",status=\"200\"} 1",
            "delta_relay_requests_total{route=\"fast\",status=\"429\"} 1",
            "delta_relay_streamed_total{route=\"fast\"} 1",
            "delta_relay_tokens_total{route=\"slow\",type=\"input\"} 7",
            "delta_relay_waits_total{route=\"slow\"} 1",
            "delta_relay_wait_seconds_total{route=\"slow\"} 1.5",
            "delta_relay_abandoned_total{route=\"slow\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }
}
