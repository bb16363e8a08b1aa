//! # Trace and metric export, at the runtime's edge
//!
//! [`Telemetry`] is an [`EngineObserver`]: given to the engine
//! ([`SupervisorConfig::observer`](crate::SupervisorConfig::observer)), it is told every
//! event as it is emitted and turns them into
//! - Prometheus metrics ([`metrics::EngineMetrics`], written as OpenMetrics by
//!   [`crate::openmetrics`]) — no feature needed;
//! - OpenTelemetry spans following the GenAI semantic conventions (`spans`), exported over
//!   OTLP/HTTP from a bounded queue on a thread of their own (`export`), configured by the
//!   standard `OTEL_*` variables (`config`) — with the `otel` feature.
//!
//! Nothing is counted or measured twice: every figure comes from an event the engine emits
//! for its other readers too (`delta run --format json` streams the same events). The ids
//! of spans are the engine's (see [`TraceSpan`]), so the `TRACEPARENT` a tool saw names the
//! span exported for its call.
//!
//! Files: `metrics.rs` (counters from events), `crate::openmetrics` (the text format),
//! `endpoint.rs` (`/metrics` on an address of its own), `serve_metrics.rs` (`delta serve`'s),
//! `config.rs` (the `OTEL_*` variables), `spans.rs` (events to spans), `export.rs` (the
//! queue and the OTLP exporter).
//!
//! Must not: import actix, block the thread that emits an event, print, or read the
//! process environment (the binary hands the variables over).

pub mod endpoint;
pub mod metrics;
#[cfg(feature = "serve")]
pub mod serve_metrics;

#[cfg(feature = "otel")]
pub mod config;
#[cfg(feature = "otel")]
pub mod export;
#[cfg(feature = "otel")]
pub mod spans;

use std::sync::Arc;

use crate::protocol::{OrchestrationEvent, RunEvent, TraceSpan};
use crate::request::{EngineObserver, ObservedOrchestration};

use self::metrics::EngineMetrics;
use crate::openmetrics::{Kind, MetricsText};

/// What is exported of one engine: metrics, traces, both or neither.
#[derive(Default)]
pub struct Telemetry {
    metrics: Option<Arc<EngineMetrics>>,
    #[cfg(feature = "otel")]
    traces: Option<traces::Traces>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("metrics", &self.metrics.is_some())
            .field("traces", &self.traces_on())
            .finish()
    }
}

impl Telemetry {
    /// Exports nothing (yet).
    pub fn new() -> Telemetry {
        Telemetry::default()
    }

    /// Also counts Prometheus metrics.
    pub fn with_metrics(mut self) -> Telemetry {
        self.metrics = Some(Arc::new(EngineMetrics::new()));
        self
    }

    /// The metrics counted, when they are.
    pub fn metrics(&self) -> Option<&Arc<EngineMetrics>> {
        self.metrics.as_ref()
    }

    /// Whether spans are exported.
    pub fn traces_on(&self) -> bool {
        #[cfg(feature = "otel")]
        {
            self.traces.is_some()
        }
        #[cfg(not(feature = "otel"))]
        {
            false
        }
    }

    /// Whether anything is exported at all (else the engine need not be told events).
    pub fn is_active(&self) -> bool {
        self.metrics.is_some() || self.traces_on()
    }

    /// The metrics as an OpenMetrics exposition (`/metrics`), with the exporter's own
    /// counts when spans are exported.
    pub fn render_metrics(&self) -> String {
        let mut text = MetricsText::new();
        if let Some(metrics) = &self.metrics {
            metrics.write(&mut text);
        }
        #[cfg(feature = "otel")]
        if let Some(traces) = &self.traces {
            let report = traces.report();
            text.family(
                "delta_trace_spans_exported",
                Kind::Counter,
                "Spans the trace collector accepted.",
            );
            text.sample(
                "delta_trace_spans_exported_total",
                &[],
                report.exported as f64,
            );
            text.family("delta_trace_spans_lost", Kind::Counter, "Spans that did not reach the collector: dropped from a full queue, or in failed exports.");
            text.sample(
                "delta_trace_spans_lost_total",
                &[("reason", "queue_full")],
                report.dropped as f64,
            );
            text.sample(
                "delta_trace_spans_lost_total",
                &[("reason", "export_failed")],
                report.failed as f64,
            );
        }
        let _ = Kind::Gauge;
        text.finish()
    }
}

impl EngineObserver for Telemetry {
    fn run_event(&self, event: &RunEvent) {
        if let Some(metrics) = &self.metrics {
            metrics.run_event(event);
        }
        #[cfg(feature = "otel")]
        if let Some(traces) = &self.traces {
            traces.run_event(event);
        }
    }

    fn orchestration_event(
        &self,
        orchestration: ObservedOrchestration<'_>,
        event: &OrchestrationEvent,
    ) {
        if let Some(metrics) = &self.metrics {
            metrics.orchestration_event(orchestration.budgets, event);
        }
        #[cfg(feature = "otel")]
        if let Some(traces) = &self.traces {
            traces.orchestration_event(orchestration, event);
        }
        #[cfg(not(feature = "otel"))]
        let _ = orchestration;
    }
}

/// A span's parent as the process inherited it (`TRACEPARENT`, `TRACESTATE` from the
/// environment map), if it is well-formed.
pub fn inherited_parent(env: &std::collections::BTreeMap<String, String>) -> Option<TraceSpan> {
    let parent = env.get("TRACEPARENT")?;
    TraceSpan::from_traceparent(parent, env.get("TRACESTATE").map(String::as_str))
}

#[cfg(feature = "otel")]
mod traces {
    //! The trace half of [`Telemetry`](super::Telemetry): the assembler behind a lock, the
    //! queue, the configuration they came from.

    use std::sync::{Mutex, PoisonError};
    use std::time::{Duration, SystemTime};

    use super::config::TraceConfig;
    use super::export::{ExportReport, SpanQueue, SpanSink};
    use super::spans::SpanAssembler;
    use crate::protocol::{OrchestrationEvent, RunEvent, TraceSpan};
    use crate::request::ObservedOrchestration;

    pub(super) struct Traces {
        pub(super) config: TraceConfig,
        assembler: Mutex<SpanAssembler>,
        /// `None` once shut down.
        queue: Mutex<Option<SpanQueue>>,
        /// The report of the shutdown, once it happened.
        last_report: Mutex<Option<ExportReport>>,
    }

    impl Traces {
        pub(super) fn new(config: TraceConfig, queue: SpanQueue) -> Traces {
            Traces {
                assembler: Mutex::new(SpanAssembler::new(config.capture_content)),
                config,
                queue: Mutex::new(Some(queue)),
                last_report: Mutex::new(None),
            }
        }

        pub(super) fn start(
            config: TraceConfig,
            sink: Option<Box<dyn SpanSink>>,
        ) -> Result<Traces, String> {
            let queue = match sink {
                Some(sink) => SpanQueue::with_sink(&config, sink),
                None => SpanQueue::start(&config)?,
            };
            Ok(Traces::new(config, queue))
        }

        fn push(&self, spans: Vec<opentelemetry_sdk::trace::SpanData>) {
            if spans.is_empty() {
                return;
            }
            let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(queue) = queue.as_ref() {
                for span in spans {
                    queue.push(span);
                }
            }
        }

        fn assembler(&self) -> std::sync::MutexGuard<'_, SpanAssembler> {
            self.assembler
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        }

        pub(super) fn run_event(&self, event: &RunEvent) {
            let spans = self.assembler().run_event(event, SystemTime::now());
            self.push(spans);
        }

        pub(super) fn orchestration_event(
            &self,
            o: ObservedOrchestration<'_>,
            event: &OrchestrationEvent,
        ) {
            let spans = self
                .assembler()
                .orchestration_event(o, event, SystemTime::now());
            self.push(spans);
        }

        pub(super) fn plan_started(&self, span: &TraceSpan) {
            self.assembler().plan_started(span, SystemTime::now());
        }

        pub(super) fn report(&self) -> ExportReport {
            let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            match queue.as_ref() {
                Some(queue) => queue.report(),
                None => self
                    .last_report
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
                    .unwrap_or_default(),
            }
        }

        pub(super) fn shutdown(&self, deadline: Duration) -> ExportReport {
            let queue = self
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let report = match queue {
                Some(queue) => queue.shutdown(deadline),
                None => return self.report(),
            };
            *self
                .last_report
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(report.clone());
            report
        }
    }
}

#[cfg(feature = "otel")]
impl Telemetry {
    /// Also exports spans to `config`'s collector (starts the exporter thread).
    pub fn with_traces(mut self, config: config::TraceConfig) -> Result<Telemetry, String> {
        self.traces = Some(traces::Traces::start(config, None)?);
        Ok(self)
    }

    /// Also exports spans, through `sink` instead of OTLP (tests).
    pub fn with_trace_sink(
        mut self,
        config: config::TraceConfig,
        sink: Box<dyn export::SpanSink>,
    ) -> Telemetry {
        self.traces = traces::Traces::start(config, Some(sink)).ok();
        self
    }

    /// Whether message content goes with the spans (the engine must then capture it:
    /// `SupervisorConfig::capture_message_content`).
    pub fn captures_content(&self) -> bool {
        self.traces
            .as_ref()
            .is_some_and(|t| t.config.capture_content)
    }

    /// A new root span (a plan's, or a lone run's) under `parent` (the inherited
    /// `TRACEPARENT`) or in a new trace; `None` when spans are not exported. A plan's root
    /// starts now.
    pub fn new_root(&self, parent: Option<&TraceSpan>) -> Option<TraceSpan> {
        let traces = self.traces.as_ref()?;
        let mut random = [0u8; 24];
        fastrand::fill(&mut random);
        let span = traces.config.new_root(parent, random);
        traces.plan_started(&span);
        Some(span)
    }

    /// Sends the spans still queued, waiting at most `deadline`, and stops exporting; the
    /// exporter's counts (`None` when spans were not exported). Later calls return the same.
    pub fn shutdown(&self, deadline: std::time::Duration) -> Option<export::ExportReport> {
        self.traces.as_ref().map(|t| t.shutdown(deadline))
    }

    /// The collector spans go to.
    pub fn trace_endpoint(&self) -> Option<&str> {
        self.traces.as_ref().map(|t| t.config.endpoint.as_str())
    }
}
