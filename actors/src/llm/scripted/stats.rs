//! Counters of a scripted model, in-process or over HTTP: requests, requests in flight and
//! their maximum, rejected histories, completions, failures, and arrival times so tests can
//! check requests-per-minute limits over any window.
//!
//! Plain atomics and one mutex-guarded list; no I/O. Arrival times grow by 8 bytes per
//! request for the life of the model, which is fine for tests and benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Counters of the chat endpoint, shared with whoever started the server.
#[derive(Debug)]
pub struct ServerStats {
    started: Instant,
    requests_total: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    rejected_invalid: AtomicU64,
    completions: AtomicU64,
    failures: AtomicU64,
    /// Connections accepted, and chat requests that arrived over HTTP/2.
    connections: AtomicU64,
    http2_requests: AtomicU64,
    /// Replies streamed, and streams the client closed before their end.
    streams: AtomicU64,
    streams_cancelled: AtomicU64,
    /// Arrival time of every chat request, in ms since `started`, in arrival order.
    arrivals_ms: Mutex<Vec<u64>>,
}

/// A point-in-time copy of [`ServerStats`], served as JSON by GET `/v1/stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// Chat requests received (valid or not).
    pub requests_total: u64,
    /// Chat requests being handled at the time of the snapshot.
    pub in_flight: u64,
    /// The most chat requests handled at the same time.
    pub max_in_flight: u64,
    /// Requests refused with 400 because their history was invalid (strict mode).
    pub rejected_invalid: u64,
    /// Successful completions served.
    pub completions: u64,
    /// Error responses served (scripted failures, invalid requests, unmatched rules).
    pub failures: u64,
    /// Most chat requests that arrived within any 60 s window.
    pub max_requests_per_minute: u64,
    /// The shortest time between two consecutive chat requests (0 with fewer than two):
    /// what a requests-per-minute limit upstream of this model spaces them by.
    #[serde(default)]
    pub min_interval_ms: u64,
    /// Milliseconds since the model started.
    pub uptime_ms: u64,
    /// Connections accepted (over HTTP/2 many requests share one).
    #[serde(default)]
    pub connections: u64,
    /// Chat requests that arrived over HTTP/2 (the rest came over HTTP/1.1).
    #[serde(default)]
    pub http2_requests: u64,
    /// Replies sent as a stream (`stream: true`).
    #[serde(default)]
    pub streams: u64,
    /// Streams the client closed before their last event (the generation was cancelled).
    #[serde(default)]
    pub streams_cancelled: u64,
}

impl ServerStats {
    pub(super) fn new() -> Self {
        ServerStats {
            started: Instant::now(),
            requests_total: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            rejected_invalid: AtomicU64::new(0),
            completions: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            http2_requests: AtomicU64::new(0),
            streams: AtomicU64::new(0),
            streams_cancelled: AtomicU64::new(0),
            arrivals_ms: Mutex::new(Vec::new()),
        }
    }

    /// Chat requests received (valid or not).
    pub fn requests_total(&self) -> u64 {
        self.requests_total.load(Ordering::SeqCst)
    }
    /// Chat requests being handled right now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }
    /// The most chat requests ever handled at the same time.
    pub fn max_in_flight(&self) -> u64 {
        self.max_in_flight.load(Ordering::SeqCst)
    }
    /// Requests refused with 400 because their history was invalid (strict mode).
    pub fn rejected_invalid(&self) -> u64 {
        self.rejected_invalid.load(Ordering::SeqCst)
    }
    /// Successful completions served.
    pub fn completions(&self) -> u64 {
        self.completions.load(Ordering::SeqCst)
    }
    /// Error responses served (scripted failures, invalid requests, unmatched rules).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// The most chat requests that arrived within any window of length `window`.
    pub fn max_requests_in_window(&self, window: Duration) -> u64 {
        let arrivals = self
            .arrivals_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let window_ms = window.as_millis() as u64;
        let mut best = 0;
        let mut start = 0;
        for end in 0..arrivals.len() {
            while arrivals[end] - arrivals[start] >= window_ms.max(1) {
                start += 1;
            }
            best = best.max(end - start + 1);
        }
        best as u64
    }

    /// The shortest gap between consecutive arrivals, in ms (0 with fewer than two).
    pub fn min_interval_ms(&self) -> u64 {
        let arrivals = self
            .arrivals_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        arrivals
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .min()
            .unwrap_or(0)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
    /// Chat requests that arrived over HTTP/2.
    pub fn http2_requests(&self) -> u64 {
        self.http2_requests.load(Ordering::SeqCst)
    }

    pub(super) fn record_connection(&self) {
        self.connections.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn record_http2(&self) {
        self.http2_requests.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn record_rejected(&self) {
        self.rejected_invalid.fetch_add(1, Ordering::SeqCst);
        self.record_failure();
    }

    pub(super) fn record_failure(&self) {
        self.failures.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn record_completion(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn record_stream(&self) {
        self.streams.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn record_stream_cancelled(&self) {
        self.streams_cancelled.fetch_add(1, Ordering::SeqCst);
    }

    /// Replies sent as a stream.
    pub fn streams(&self) -> u64 {
        self.streams.load(Ordering::SeqCst)
    }

    /// Streams the client closed before their last event.
    pub fn streams_cancelled(&self) -> u64 {
        self.streams_cancelled.load(Ordering::SeqCst)
    }

    /// Every counter at once (each read on its own: not an atomic view).
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            requests_total: self.requests_total(),
            in_flight: self.in_flight(),
            max_in_flight: self.max_in_flight(),
            rejected_invalid: self.rejected_invalid(),
            completions: self.completions(),
            failures: self.failures(),
            max_requests_per_minute: self.max_requests_in_window(Duration::from_secs(60)),
            min_interval_ms: self.min_interval_ms(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            connections: self.connections(),
            http2_requests: self.http2_requests(),
            streams: self.streams(),
            streams_cancelled: self.streams_cancelled(),
        }
    }

    /// Counts a request and marks it in flight until the guard drops.
    pub(super) fn arrive(self: &Arc<Self>) -> InFlight {
        self.requests_total.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let at = self.started.elapsed().as_millis() as u64;
        let mut arrivals = self
            .arrivals_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Keep the list sorted even if two threads race between `elapsed` and `lock`.
        let pos = arrivals.partition_point(|t| *t <= at);
        arrivals.insert(pos, at);
        InFlight(Arc::clone(self))
    }
}

/// Decrements `in_flight` when a request ends, even if the client hung up mid-latency.
pub(super) struct InFlight(Arc<ServerStats>);

impl InFlight {
    /// The counters this request is counted in.
    pub(super) fn stats(&self) -> &ServerStats {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
