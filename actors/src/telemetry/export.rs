//! [`SpanQueue`]: finished spans handed off the engine's threads into a bounded queue, and
//! one exporter thread that sends them in batches over OTLP/HTTP (protobuf, through
//! `opentelemetry-otlp`'s exporter and the project's own reqwest client).
//!
//! A dead or slow collector never slows the engine: a span that finds the queue full is
//! dropped and counted; an export that fails or times out is counted with its reason; at
//! exit the queue is given a bounded time to drain ([`SpanQueue::shutdown`]), and what is
//! left is counted too. The counts come back once, in the [`ExportReport`].
//!
//! Must not: block a caller of [`SpanQueue::push`], or be waited for past its deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

use super::config::TraceConfig;

/// What an exporter did over its life, reported once at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans dropped because the queue was full (the collector could not keep up).
    pub dropped: u64,
    /// Spans in exports that failed (collector down, refused, timed out) or still queued
    /// when the deadline at exit passed.
    pub failed: u64,
    /// The last export failure, as text (no header values: they are not in it).
    pub last_error: Option<String>,
}

impl ExportReport {
    /// Spans that did not reach the collector.
    pub fn lost(&self) -> u64 {
        self.dropped + self.failed
    }
}

/// Shared counters of the exporter thread and the queue's users.
#[derive(Debug, Default)]
struct Counters {
    /// Spans that entered the queue.
    queued: AtomicU64,
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    fn report(&self) -> ExportReport {
        ExportReport {
            exported: self.exported.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

enum Message {
    Span(Box<SpanData>),
    /// Send what is queued now, then stop.
    Stop,
}

/// The queue and its exporter thread.
pub struct SpanQueue {
    /// `None` once shut down.
    sender: Option<SyncSender<Message>>,
    counters: Arc<Counters>,
    thread: Option<std::thread::JoinHandle<()>>,
    endpoint: String,
}

impl std::fmt::Debug for SpanQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanQueue")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Sends batches of spans somewhere (the OTLP exporter; a test's recorder).
pub trait SpanSink: Send + 'static {
    /// Sends one batch; an error says why it did not arrive.
    fn send(&mut self, batch: Vec<SpanData>) -> Result<(), String>;
}

impl SpanQueue {
    /// Starts the exporter thread for `config`'s collector.
    pub fn start(config: &TraceConfig) -> Result<SpanQueue, String> {
        let sink = OtlpSink::new(config)?;
        Ok(SpanQueue::with_sink(config, Box::new(sink)))
    }

    /// Starts the exporter thread with `sink` (tests give their own).
    pub fn with_sink(config: &TraceConfig, sink: Box<dyn SpanSink>) -> SpanQueue {
        // The queue holds spans; one place more for the stop message.
        let (sender, receiver) = mpsc::sync_channel(config.max_queue + 1);
        let counters = Arc::new(Counters::default());
        let worker = Worker {
            receiver,
            sink,
            counters: Arc::clone(&counters),
            max_batch: config.max_batch,
            delay: config.schedule_delay,
        };
        let thread = std::thread::Builder::new()
            .name("delta-otlp".into())
            .spawn(move || worker.run())
            .ok();
        if thread.is_none() {
            *counters
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                Some("the exporter thread could not start".into());
        }
        SpanQueue {
            sender: Some(sender),
            counters,
            thread,
            endpoint: config.endpoint.clone(),
        }
    }

    /// Queues a finished span; never waits (a full queue drops it and counts it).
    pub fn push(&self, span: SpanData) {
        let Some(sender) = &self.sender else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match sender.try_send(Message::Span(Box::new(span))) {
            Ok(()) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Spans dropped so far (a full queue).
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// The counts so far.
    pub fn report(&self) -> ExportReport {
        self.counters.report()
    }

    /// Where spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends what is queued and stops, waiting at most `deadline`; spans not sent by then
    /// count as failed (the thread is left behind: a process about to exit does not wait
    /// for a collector that does not answer).
    pub fn shutdown(mut self, deadline: Duration) -> ExportReport {
        // A full queue has no room for the stop message: the thread then stops once it has
        // drained the queue and finds the sender gone.
        if let Some(sender) = self.sender.take() {
            let _ = sender.try_send(Message::Stop);
        }
        let Some(thread) = self.thread.take() else {
            return self.counters.report();
        };
        let until = Instant::now() + deadline;
        while !thread.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            let mut report = self.counters.report();
            let queued = self.counters.queued.load(Ordering::Relaxed);
            report.failed += queued.saturating_sub(report.exported + report.failed);
            report.last_error.get_or_insert_with(|| {
                format!(
                    "the collector did not take the last spans within {} ms",
                    deadline.as_millis()
                )
            });
            return report;
        }
        self.counters.report()
    }
}

/// The exporter thread's loop: batches of at most `max_batch`, sent when full or `delay`
/// after the first span of a batch, and at the stop message.
struct Worker {
    receiver: Receiver<Message>,
    sink: Box<dyn SpanSink>,
    counters: Arc<Counters>,
    max_batch: usize,
    delay: Duration,
}

impl Worker {
    fn run(mut self) {
        let mut batch: Vec<SpanData> = Vec::new();
        let mut first_at: Option<Instant> = None;
        loop {
            let wait = first_at.map_or(Duration::from_secs(3600), |at| {
                self.delay.saturating_sub(at.elapsed())
            });
            match self.receiver.recv_timeout(wait) {
                Ok(Message::Span(span)) => {
                    batch.push(*span);
                    first_at.get_or_insert_with(Instant::now);
                    if batch.len() >= self.max_batch {
                        self.send(&mut batch);
                        first_at = None;
                    }
                }
                Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    // Whatever arrived before the stop goes too.
                    while let Ok(Message::Span(span)) = self.receiver.try_recv() {
                        batch.push(*span);
                        if batch.len() >= self.max_batch {
                            self.send(&mut batch);
                        }
                    }
                    self.send(&mut batch);
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.send(&mut batch);
                    first_at = None;
                }
            }
        }
    }

    fn send(&mut self, batch: &mut Vec<SpanData>) {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let n = spans.len() as u64;
        match self.sink.send(spans) {
            Ok(()) => {
                self.counters.exported.fetch_add(n, Ordering::Relaxed);
            }
            Err(error) => {
                self.counters.failed.fetch_add(n, Ordering::Relaxed);
                *self
                    .counters
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(error);
            }
        }
    }
}

/// `opentelemetry-otlp`'s HTTP/protobuf exporter, driven on the exporter thread by a small
/// runtime of its own.
struct OtlpSink {
    exporter: opentelemetry_otlp::SpanExporter,
    runtime: tokio::runtime::Runtime,
    timeout: Duration,
    endpoint: String,
}

impl OtlpSink {
    fn new(config: &TraceConfig) -> Result<OtlpSink, String> {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| format!("cannot build the OTLP HTTP client: {e}"))?;
        let headers = config.headers.iter().cloned().collect();
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(ReqwestClient(client))
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.endpoint.clone())
            .with_timeout(config.timeout)
            .with_headers(headers)
            .build()
            .map_err(|e| {
                format!(
                    "cannot set up the OTLP exporter for {}: {e}",
                    config.endpoint
                )
            })?;
        let mut attributes = vec![KeyValue::new("service.name", config.service_name.clone())];
        attributes.extend(
            config
                .resource_attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        );
        exporter.set_resource(
            &Resource::builder_empty()
                .with_attributes(attributes)
                .build(),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the exporter's runtime: {e}"))?;
        Ok(OtlpSink {
            exporter,
            runtime,
            timeout: config.timeout,
            endpoint: config.endpoint.clone(),
        })
    }
}

impl SpanSink for OtlpSink {
    fn send(&mut self, batch: Vec<SpanData>) -> Result<(), String> {
        let export = self.exporter.export(batch);
        let limit = self.timeout + Duration::from_secs(1);
        match self
            .runtime
            .block_on(async { tokio::time::timeout(limit, export).await })
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("{}: {e}", self.endpoint)),
            Err(_) => Err(format!(
                "{}: no answer within {} ms",
                self.endpoint,
                limit.as_millis()
            )),
        }
    }
}

/// The project's reqwest client as `opentelemetry-http`'s client (its own would bring a
/// second reqwest).
#[derive(Debug)]
struct ReqwestClient(reqwest::Client);

/// Largest collector answer read (OTLP answers are a few bytes).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

type Answer = Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError>;

impl opentelemetry_http::HttpClient for ReqwestClient {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: http::Request<bytes::Bytes>,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let request = reqwest::Request::try_from(request)?;
            let mut response = self.0.execute(request).await?;
            let status = response.status();
            let mut body = bytes::BytesMut::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err("the collector's answer is too large".into());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(http::Response::builder()
                .status(status)
                .body(body.freeze())?)
        })
    }
}
