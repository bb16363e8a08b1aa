//! The OpenMetrics text format, written by hand (no metrics crate): metric families with
//! their `# TYPE`/`# HELP`, labelled samples, histograms with cumulative buckets, the
//! closing `# EOF`. Every `/metrics` of delta (`delta serve`, `delta relay`,
//! `delta orchestrate --metrics-listen`) is written with it.
//!
//! Must not: import another module of the engine, hold state (the metric owners do) or
//! choose metric names (their owners do, all prefixed `delta_`).

use std::fmt::Write as _;

/// What a `/metrics` answer's `Content-Type` says.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bucket bounds, in seconds, of delta's latency histograms (model calls, time to first
/// token): 5 ms to 10 min.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (samples are `<name>_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations counted in buckets (`<name>_bucket`, `_count`, `_sum`).
    Histogram,
}

/// Counts of observations in fixed buckets, plus their sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last one is `+Inf`'s.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    /// Counts one observation.
    pub fn observe(&mut self, value: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// An OpenMetrics exposition being written.
#[derive(Debug, Default)]
pub struct MetricsText {
    out: String,
}

impl MetricsText {
    /// An empty exposition.
    pub fn new() -> MetricsText {
        MetricsText::default()
    }

    /// Starts the family `name` (without `_total`): its type and help text.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        let _ = writeln!(self.out, "# HELP {name} {}", escape(help, false));
    }

    /// One sample: `name` as written (a counter's with its `_total`).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", number(value));
    }

    /// A histogram's samples: cumulative `_bucket`s (`le`), `_count` and `_sum`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], histogram: &Histogram) {
        let mut cumulative = 0;
        for (i, count) in histogram.counts.iter().enumerate() {
            cumulative += count;
            let le = histogram
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |b| number(*b));
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {cumulative}");
        }
        let _ = write!(self.out, "{name}_count");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {cumulative}");
        let _ = write!(self.out, "{name}_sum");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", number(histogram.sum));
    }

    /// The exposition, closed with `# EOF`.
    pub fn finish(mut self) -> String {
        self.out.push_str("# EOF\n");
        self.out
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let mut first = true;
        for (name, value) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
            if !first {
                self.out.push(',');
            }
            first = false;
            let _ = write!(self.out, "{name}=\"{}\"", escape(value, true));
        }
        self.out.push('}');
    }
}

/// A number as OpenMetrics writes it: integers without a fraction, `+Inf`/`-Inf`/`NaN`.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// Escapes a label value (`\`, `"`, newline) or a help text (`\`, newline).
fn escape(text: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_histograms_are_written_as_openmetrics() {
        let mut text = MetricsText::new();
        text.family("delta_runs", Kind::Counter, "Runs that ended, by status.");
        text.sample("delta_runs_total", &[("status", "COMPLETED")], 3.0);
        text.sample("delta_runs_total", &[("status", "we\"ird\\\n")], 0.5);
        let mut h = Histogram::new(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(7.0);
        text.family("delta_latency_seconds", Kind::Histogram, "Latency.");
        text.histogram("delta_latency_seconds", &[("model", "m")], &h);
        assert_eq!(
            text.finish(),
            "# TYPE delta_runs counter\n# HELP delta_runs Runs that ended, by status.\n\
             delta_runs_total{status=\"COMPLETED\"} 3\n\
             delta_runs_total{status=\"we\\\"ird\\\\\\n\"} 0.5\n\
             # TYPE delta_latency_seconds histogram\n# HELP delta_latency_seconds Latency.\n\
             delta_latency_seconds_bucket{model=\"m\",le=\"0.1\"} 1\n\
             delta_latency_seconds_bucket{model=\"m\",le=\"1\"} 2\n\
             delta_latency_seconds_bucket{model=\"m\",le=\"+Inf\"} 3\n\
             delta_latency_seconds_count{model=\"m\"} 3\n\
             delta_latency_seconds_sum{model=\"m\"} 7.55\n# EOF\n"
        );
        assert_eq!(h.count(), 3);
    }
}
