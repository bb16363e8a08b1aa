//! Who we talk to and what can go wrong: [`Endpoint`] (base URL and API key), the per-request
//! [`RequestMeta`] headers, the typed [`LlmError`], and the one-attempt [`ChatBackend`] trait.
//!
//! Must never expose the API key: `Debug` redacts it and [`Endpoint::key`] only carries a
//! hash. No retries here: a backend makes exactly one attempt.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::dialect::{Dialect, WireOptions};
use super::learned::Adaptation;
use super::timeouts::{LlmTimeouts, TimeoutPhase};
use super::types::{ChatCompletion, ChatRequest};

/// Header carrying [`RequestMeta::agent_name`]; the scripted model matches rules on it.
pub const HEADER_AGENT: &str = "x-delta-agent";
/// Header carrying [`RequestMeta::run_id`]; the scripted model counts `times:` per run.
pub const HEADER_RUN_ID: &str = "x-delta-run-id";

/// An OpenAI-compatible endpoint. `base_url` includes the version prefix, e.g.
/// `https://llm.example.com/v1`; requests go to `{base_url}/chat/completions`.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The base URL, version prefix included; a trailing slash is tolerated.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>`; `None` sends no header (local servers).
    pub api_key: Option<String>,
    /// How requests travel: HTTP version and connection cap.
    pub transport: HttpTransport,
    /// How requests are written (streaming and the details providers disagree on).
    pub dialect: Dialect,
}

/// `llm.http2` and `llm.max_connections` (agent.yaml), or `DELTA_LLM_HTTP2`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpTransport {
    /// `Some(true)`: HTTP/2 to `http://` endpoints without asking first (h2c prior
    /// knowledge; the endpoint must speak it). `Some(false)`: HTTP/1.1 only. `None` (auto):
    /// HTTP/2 when an `https://` endpoint offers it during the TLS handshake (ALPN); an
    /// `http://` endpoint is asked once whether it speaks h2c, HTTP/1.1 if it does not
    /// (`h2c.rs`).
    pub http2: Option<bool>,
    /// At most this many requests open at once to the endpoint (over HTTP/1.1: this many
    /// connections); idle connections beyond it are closed. `None`: no cap besides the
    /// gateway's in-flight limit.
    pub max_connections: Option<u32>,
}

/// Largest `llm.max_connections` accepted.
pub const MAX_CONNECTIONS_LIMIT: u32 = 65_536;

impl Endpoint {
    /// An endpoint at `base_url`, authenticated with `api_key` when given.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Self {
        Endpoint {
            base_url: base_url.into(),
            api_key,
            transport: HttpTransport::default(),
            dialect: Dialect::default(),
        }
    }

    /// The same endpoint with requests written as `dialect` says.
    pub fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// The same endpoint reached with `transport`.
    pub fn with_transport(mut self, transport: HttpTransport) -> Self {
        self.transport = transport;
        self
    }

    /// A stable identity for sharing one gateway per endpoint: the normalised base URL plus
    /// a hash of the key (two keys on one URL are two rate-limit buckets), plus the
    /// transport when it is not the default (it needs its own client).
    pub fn key(&self) -> String {
        let url = self.base_url.trim_end_matches('/');
        let mut key = match &self.api_key {
            Some(key) => format!("{url}#{:016x}", fnv1a64(key.as_bytes())),
            None => format!("{url}#nokey"),
        };
        if self.transport != HttpTransport::default() {
            let HttpTransport {
                http2,
                max_connections,
            } = self.transport;
            key.push_str(&format!("#h2={http2:?},max={max_connections:?}"));
        }
        if !self.dialect.is_auto() {
            // Agents that write requests differently learn about the endpoint separately.
            key.push_str(&format!("#{:?}", self.dialect));
        }
        key
    }

    /// `{base_url}/chat/completions`, tolerating a trailing slash on the base URL.
    pub fn chat_completions_url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("transport", &self.transport)
            .field("dialect", &self.dialect)
            .finish()
    }
}

/// FNV-1a: stable across Rust versions, unlike `DefaultHasher`, so endpoint keys can be
/// compared between processes.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Who is asking (sent as the `x-delta-agent` / `x-delta-run-id` headers), how long each
/// attempt may take, and how the request is written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestMeta {
    /// The asking agent's name.
    pub agent_name: String,
    /// The asking run's id.
    pub run_id: String,
    /// Applied to every attempt (the asking run's resolved `llm.request_timeout` and
    /// `llm.idle_timeout`).
    pub timeouts: LlmTimeouts,
    /// The request already serialized for the wire (`ChatRequest::for_wire` as compact
    /// JSON), when the caller did it: a run serializes its conversation once, for the HTTP
    /// body and for its io/invocations record. `None`: the backend serializes the request.
    /// Written with [`RequestMeta::wire`]; a backend whose options changed since (it learned
    /// from a refusal) serializes the request itself.
    pub wire_body: Option<bytes::Bytes>,
    /// The options `wire_body` was written with, and the attempt is to be sent with (the
    /// gate sets them before each attempt from [`ChatBackend::wire_options`]).
    pub wire: WireOptions,
    /// Told each piece of reply text as a streamed reply arrives (live output); `None` when
    /// nobody watches.
    pub on_text: Option<TextSink>,
    /// Told when the call starts waiting in the gate's queue (for an in-flight place and a
    /// rate slot) and when it is let through: a run's time limit does not count that wait.
    /// `None` when nobody keeps the time.
    pub on_queue: Option<QueueSink>,
    /// Sent as the `traceparent` header (W3C trace context: the call's span), so a relay or
    /// a traced provider joins the run's trace; `None` sends none.
    pub traceparent: Option<String>,
    /// Set by an HTTP backend to the time from an attempt's start to the first event of its
    /// streamed reply (each attempt starts it afresh); `None` when nobody asks.
    pub first_token: Option<FirstTokenClock>,
}

/// Where a backend notes how long a streamed reply took to start (see
/// [`RequestMeta::first_token`]). Shared: the caller reads what the last attempt noted.
#[derive(Clone, Default)]
pub struct FirstTokenClock(Arc<std::sync::atomic::AtomicU64>);

impl FirstTokenClock {
    /// A clock with nothing noted.
    pub fn new() -> FirstTokenClock {
        FirstTokenClock::default()
    }

    /// An attempt starts: forget what an earlier one noted.
    pub fn reset(&self) {
        self.0.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// The attempt's first event arrived `after` its start (only the first note counts).
    pub fn note(&self, after: Duration) {
        let micros = u64::try_from(after.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self.0.compare_exchange(
            0,
            micros,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// What the last attempt noted, if its reply was streamed.
    pub fn read(&self) -> Option<Duration> {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }
}

impl fmt::Debug for FirstTokenClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FirstTokenClock")
            .field(&self.read())
            .finish()
    }
}

impl PartialEq for FirstTokenClock {
    fn eq(&self, other: &FirstTokenClock) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for FirstTokenClock {}

/// What one chunk added to the reply, for live output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkText<'a> {
    /// New reply text.
    pub content: &'a str,
    /// New reasoning text (models that think aloud in a separate field).
    pub reasoning: &'a str,
}

/// Receives a streamed reply's text as it arrives: the new content and reasoning of each
/// chunk. Called on the thread that reads the response; it must return quickly.
#[derive(Clone)]
pub struct TextSink(pub Arc<dyn Fn(ChunkText<'_>) + Send + Sync>);

impl TextSink {
    /// A sink that calls `f`.
    pub fn new(f: impl Fn(ChunkText<'_>) + Send + Sync + 'static) -> TextSink {
        TextSink(Arc::new(f))
    }
}

impl fmt::Debug for TextSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TextSink")
    }
}

impl PartialEq for TextSink {
    fn eq(&self, other: &TextSink) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TextSink {}

/// A call's place in its gate's queue, as told to a [`QueueSink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueEvent {
    /// The call waits for an in-flight place or a rate slot (the endpoint is busy with
    /// other calls, or held back by `requests_per_minute` or a Retry-After).
    Waiting,
    /// The call was let through (or gave up waiting): from here the time is its own.
    Admitted,
}

/// Receives a call's [`QueueEvent`]s: every `Waiting` is followed by one `Admitted`, also
/// when the call is dropped while it waits. Called on the caller's thread; it must return
/// quickly.
#[derive(Clone)]
pub struct QueueSink(pub Arc<dyn Fn(QueueEvent) + Send + Sync>);

impl QueueSink {
    /// A sink that calls `f`.
    pub fn new(f: impl Fn(QueueEvent) + Send + Sync + 'static) -> QueueSink {
        QueueSink(Arc::new(f))
    }

    /// Says `Waiting` now and `Admitted` when the returned guard is dropped.
    pub fn waiting(&self) -> QueueWait<'_> {
        (self.0)(QueueEvent::Waiting);
        QueueWait(self)
    }
}

/// A call waiting in the queue: says [`QueueEvent::Admitted`] when dropped.
pub struct QueueWait<'a>(&'a QueueSink);

impl Drop for QueueWait<'_> {
    fn drop(&mut self) {
        (self.0 .0)(QueueEvent::Admitted);
    }
}

impl fmt::Debug for QueueSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QueueSink")
    }
}

impl PartialEq for QueueSink {
    fn eq(&self, other: &QueueSink) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for QueueSink {}

impl RequestMeta {
    /// Meta for `agent_name`'s run `run_id`, with the default timeouts.
    pub fn new(agent_name: impl Into<String>, run_id: impl Into<String>) -> Self {
        RequestMeta {
            agent_name: agent_name.into(),
            run_id: run_id.into(),
            timeouts: LlmTimeouts::default(),
            wire_body: None,
            wire: WireOptions::default(),
            on_text: None,
            on_queue: None,
            traceparent: None,
            first_token: None,
        }
    }
}

/// Percent-encodes bytes that are not printable ASCII (and `%`) so any agent name or run id
/// fits in an HTTP header.
pub fn encode_header_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reverses [`encode_header_value`]; malformed escapes are kept literally.
pub fn decode_header_value(value: &str) -> String {
    percent_decode(value, false)
}

/// `%XX` escapes decoded (and `+` as a space when `plus_is_space`, as in a URL's query);
/// malformed escapes are kept literally.
pub(crate) fn percent_decode(value: &str, plus_is_space: bool) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| value.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(if plus_is_space && bytes[i] == b'+' {
                    b' '
                } else {
                    bytes[i]
                });
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What one attempt can fail with. Messages carry the status and the provider's own words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The endpoint answered with a non-2xx status.
    #[error("the LLM endpoint answered HTTP {status}: {message}{}", status_hint(*status))]
    Http {
        /// The HTTP status.
        status: u16,
        /// The provider's error message (its `error.message`, else the body's start).
        message: String,
        /// The provider's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// The endpoint refused how a detail of the request was written (`content: null` on a
    /// tool-call turn, `max_tokens` for a reasoning model...; see
    /// [`adjustment_for`](super::refusal::adjustment_for)), or closed its stream before the
    /// first chunk. The endpoint's backend has learned the other form, and the call is sent
    /// again at once, written that way.
    #[error("the LLM endpoint {message}; it is sent again {change}")]
    Adjusted {
        /// The refusal's HTTP status (200 for a stream that ended before its first chunk).
        status: u16,
        /// What the endpoint did: `refused the request (HTTP <status>: <its message>)`, or
        /// `ended its response stream before the first chunk`.
        message: String,
        /// What the next attempt sends differently.
        change: String,
        /// This attempt taught the lesson (announced once, see
        /// [`ChatBackend::take_adaptations`]); `false` when another call had already.
        learned_now: bool,
    },
    /// A server error whose message is a request-validation error (see
    /// [`is_validation_error`](super::refusal::is_validation_error)): the same request would
    /// be refused again, so it is not retried.
    #[error("the LLM endpoint refused the request as invalid (HTTP {status} with a request-validation error, so it is not retried): {message} (hint: see docs/providers.md for the endpoint's quirks; the request is in the run's io/invocations)")]
    InvalidRequest {
        /// The HTTP status (a 5xx).
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// HTTP/2 without negotiation (`llm.http2: true` on an `http://` endpoint) against a
    /// server that speaks only HTTP/1.1. Not retried: every attempt would fail the same way.
    #[error("the LLM endpoint does not speak HTTP/2 without negotiation (h2c): {0} (hint: set `llm.http2: false` in agent.yaml or DELTA_LLM_HTTP2=0, or leave both unset: delta then asks an http:// endpoint and uses HTTP/1.1 if it refuses)")]
    Http2Refused(String),
    /// No answer at all: connection refused or reset, DNS, TLS.
    #[error("could not reach the LLM endpoint: {0} (hint: check DELTA_BASE_URL and that the server is up)")]
    Transport(String),
    /// A 2xx answer that is not a usable chat completion (see
    /// [`parse_completion`](super::parse_completion)).
    #[error("the LLM endpoint sent an invalid chat completion: {0}")]
    InvalidResponse(String),
    /// The in-process scripted model could not answer (no rule matched, a template failed).
    #[error("scripted model: {0}")]
    Scripted(String),
    /// The attempt ran into one of its limits; retried like a 5xx.
    #[error("the LLM endpoint timed out: {target}: {} (hint: check that the endpoint is healthy; raise `llm.request_timeout` / `llm.idle_timeout` in agent.yaml or the plan's `llm:`, or pass --llm-timeout)", phase.describe(*limit))]
    Timeout {
        /// What was called, e.g. `POST https://host/v1/chat/completions`.
        target: String,
        /// Which limit was hit.
        phase: TimeoutPhase,
        /// The limit's value.
        limit: Duration,
    },
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => " (hint: check DELTA_API_KEY)",
        404 => " (hint: check that DELTA_BASE_URL ends with the API version, e.g. /v1, and the model name)",
        _ => "",
    }
}

impl LlmError {
    /// A short, fixed name for the failure (OpenTelemetry's `error.type`, a metric label):
    /// `http_<status>`, `timeout`, `transport`, `invalid_request`, `invalid_response`,
    /// `http2_refused`, `adjusted`, `scripted`.
    pub fn error_type(&self) -> String {
        match self {
            LlmError::Http { status, .. } => format!("http_{status}"),
            LlmError::Adjusted { .. } => "adjusted".into(),
            LlmError::InvalidRequest { .. } => "invalid_request".into(),
            LlmError::Http2Refused(_) => "http2_refused".into(),
            LlmError::Transport(_) => "transport".into(),
            LlmError::InvalidResponse(_) => "invalid_response".into(),
            LlmError::Scripted(_) => "scripted".into(),
            LlmError::Timeout { .. } => "timeout".into(),
        }
    }

    /// 408, 409, 429, any 5xx, transport failures and timeouts are worth another attempt;
    /// other 4xx, invalid responses and script errors are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Http { status, .. } => {
                matches!(status, 408 | 409 | 429) || (500..=599).contains(status)
            }
            LlmError::Transport(_) | LlmError::Timeout { .. } | LlmError::Adjusted { .. } => true,
            LlmError::InvalidResponse(_)
            | LlmError::Scripted(_)
            | LlmError::InvalidRequest { .. }
            | LlmError::Http2Refused(_) => false,
        }
    }

    /// The provider's Retry-After, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The HTTP status, when the failure was an HTTP answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::Http { status, .. }
            | LlmError::Adjusted { status, .. }
            | LlmError::InvalidRequest { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The future a backend returns for one attempt.
pub type CompletionFuture = Pin<Box<dyn Future<Output = Result<ChatCompletion, LlmError>> + Send>>;

/// What [`ChatBackend::context_window`] returns.
pub type WindowFuture = Pin<Box<dyn Future<Output = Option<super::ContextWindow>> + Send>>;

/// One attempt, no retry. Implemented by [`super::HttpBackend`] and
/// [`super::ScriptedBackend`]; the endpoint's gate adds admission, rate limiting and retries.
pub trait ChatBackend: Send + Sync + 'static {
    /// Makes one attempt at `req`. It should honour `meta.timeouts` (the gate bounds the
    /// whole attempt by `meta.timeouts.request` in any case) and return a retryable error
    /// kind when another attempt could succeed.
    fn complete(&self, req: ChatRequest, meta: RequestMeta) -> CompletionFuture;

    /// [`ChatBackend::complete`] for a request the caller keeps (the gate's retries, the
    /// run's io/ record). The default clones it; a backend that only reads the request
    /// overrides this to skip copying the whole conversation on every attempt.
    fn complete_shared(&self, req: Arc<ChatRequest>, meta: RequestMeta) -> CompletionFuture {
        self.complete((*req).clone(), meta)
    }

    /// What a call goes to, for messages (a timeout names it).
    fn target(&self) -> String {
        "the model backend".to_string()
    }

    /// How a request to `model` is to be written now (the gate asks before each attempt).
    /// Backends that do not speak HTTP use the default.
    fn wire_options(&self, model: &str) -> WireOptions {
        let _ = model;
        WireOptions::default()
    }

    /// The lessons the backend learned about its endpoint since it was last asked, each
    /// returned once (for one calm line each on the terminal). Backends that learn nothing
    /// return none.
    fn take_adaptations(&self) -> Vec<Adaptation> {
        Vec::new()
    }

    /// `model`'s context window as the endpoint tells it ([`super::window::probe`]), if it
    /// does. Backends that do not speak HTTP know none.
    fn context_window(&self, model: &str) -> WindowFuture {
        let _ = model;
        Box::pin(async { None })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_endpoint_hides_the_key() {
        let e = Endpoint::new("https://x/v1", Some("sk-secret-123".into()));
        let shown = format!("{e:?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(shown.contains("<redacted>"));
        assert!(!e.key().contains("sk-secret-123"));
    }

    #[test]
    fn endpoint_key_is_stable_and_distinguishes_keys() {
        let a = Endpoint::new("http://h/v1/", Some("k1".into()));
        let b = Endpoint::new("http://h/v1", Some("k1".into()));
        let c = Endpoint::new("http://h/v1", Some("k2".into()));
        assert_eq!(a.key(), b.key());
        assert_ne!(a.key(), c.key());
        assert_ne!(Endpoint::new("http://h/v1", None).key(), c.key());
        assert_eq!(a.chat_completions_url(), "http://h/v1/chat/completions");
    }

    #[test]
    fn retryable_classification() {
        let http = |status| LlmError::Http {
            status,
            message: String::new(),
            retry_after: None,
        };
        for s in [408, 409, 429, 500, 502, 503, 599] {
            assert!(http(s).is_retryable(), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!http(s).is_retryable(), "{s}");
        }
        assert!(LlmError::Transport("x".into()).is_retryable());
        assert!(!LlmError::InvalidResponse("x".into()).is_retryable());
        assert!(http(401).to_string().contains("DELTA_API_KEY"));
    }

    #[test]
    fn header_values_round_trip() {
        for s in ["plain-name", "häst %20 x", "tab\there", ""] {
            let enc = encode_header_value(s);
            assert!(enc.bytes().all(|b| (0x20..0x7f).contains(&b)));
            assert_eq!(decode_header_value(&enc), s);
        }
        assert_eq!(decode_header_value("50%"), "50%");
    }
}
