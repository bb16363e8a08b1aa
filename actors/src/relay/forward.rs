//! The relay's pass-through to one HTTP endpoint: [`Forwarder`] sends a caller's request
//! bytes as they came, with the real key, and hands back the endpoint's answer as it was —
//! status, the headers a client may act on (content type, Retry-After, request id, rate-limit
//! headers), and the body: whole for a JSON answer (a JSON error object is kept as is, so
//! `error.code`, `type` and `param` reach the caller), or as an [`EventStream`] for a streamed
//! (SSE) answer, which yields each event as soon as it is complete. Secrets of the upstream
//! are redacted from everything handed back ([`super::secrets`]).
//!
//! Limits: a plain request is bounded as a whole by the relay's request limit; a streamed one
//! waits that long for its headers and for each next chunk (a stream may last as long as the
//! model keeps talking, up to [`MAX_LLM_TIMEOUT`]). Dropping a future or a stream closes the
//! connection to the endpoint, which cancels the generation on servers that notice.
//!
//! Must not: retry (the caller's engine does), follow redirects (the key would travel), import
//! actix, or log (the routes log, with redacted text).

use std::error::Error as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};

use super::secrets::{shown_url, UpstreamSecrets};
use super::sse::EventFramer;
use crate::llm::endpoint::{encode_header_value, HEADER_AGENT, HEADER_RUN_ID};
use crate::llm::timeouts::MAX_LLM_TIMEOUT;
use crate::llm::{parse_retry_after, Endpoint, Usage};

/// The largest non-streamed answer taken from an endpoint (a chat completion is kilobytes).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// Longest upstream error text kept when the endpoint's error body is not JSON.
const MAX_ERROR_CHARS: usize = 2_000;

/// Why a request got no answer from the endpoint. Texts are redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// Connection refused or reset, DNS, TLS, a broken body.
    #[error("cannot reach the endpoint {endpoint}: {message}")]
    Transport {
        /// The endpoint's URL as it may be shown.
        endpoint: String,
        /// Why, redacted.
        message: String,
    },
    /// No headers (or, streamed, no next chunk) within the relay's request limit.
    #[error("the endpoint {endpoint} did not answer within {} s", limit.as_secs_f64())]
    Timeout {
        /// The endpoint's URL as it may be shown.
        endpoint: String,
        /// The limit that ran out.
        limit: Duration,
    },
    /// A non-streamed answer larger than [`MAX_ANSWER_BYTES`].
    #[error("the endpoint {endpoint} sent an answer larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge {
        /// The endpoint's URL as it may be shown.
        endpoint: String,
    },
}

/// Who asks (passed on as the `x-delta-agent` / `x-delta-run-id` headers) and how.
#[derive(Debug, Clone, Default)]
pub struct ForwardRequest {
    /// The caller's agent name, if it said.
    pub agent: String,
    /// The caller's run id, if it said.
    pub run_id: String,
    /// The request asked for a streamed answer (`"stream": true`).
    pub stream: bool,
    /// The relay's limit (see the module docs).
    pub limit: Duration,
    /// The caller's trace context, passed on as `traceparent`/`tracestate` so the
    /// endpoint's spans join the run's trace.
    pub trace: Option<crate::protocol::TraceSpan>,
}

/// The endpoint's answer.
pub struct Forwarded {
    /// Its HTTP status.
    pub status: u16,
    /// The headers passed on, as (lowercase name, value).
    pub headers: Vec<(String, HeaderValue)>,
    /// Its Retry-After (or `retry-after-ms`), parsed.
    pub retry_after: Option<Duration>,
    /// Its body.
    pub body: AnswerBody,
}

/// An answer's body.
pub enum AnswerBody {
    /// Read whole and redacted; `usage` is its `usage` object, if any.
    Whole {
        /// The bytes to send back.
        bytes: Bytes,
        /// Tokens reported in the body.
        usage: Option<Usage>,
        /// The endpoint's error was not JSON, and `bytes` is the relay's JSON error
        /// wrapping its text.
        wrapped: bool,
    },
    /// A streamed answer, event by event.
    Events(EventStream),
}

/// One HTTP endpoint behind the relay.
pub struct Forwarder {
    client: reqwest::Client,
    chat_url: reqwest::Url,
    models_url: reqwest::Url,
    secrets: Arc<UpstreamSecrets>,
    shown: String,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("endpoint", &self.shown)
            .finish_non_exhaustive()
    }
}

impl Forwarder {
    /// A client for `endpoint` (its key sent as `Authorization: Bearer`, its HTTP version
    /// and connection cap as set).
    pub fn new(endpoint: &Endpoint) -> Result<Forwarder, String> {
        let secrets = Arc::new(UpstreamSecrets::new(
            &endpoint.base_url,
            endpoint.api_key.as_deref(),
        ));
        let shown = shown_url(&endpoint.base_url);
        let base = reqwest::Url::parse(&endpoint.base_url).map_err(|e| {
            format!("base URL {shown} is not a valid URL: {e} (hint: DELTA_BASE_URL looks like https://host/v1)")
        })?;
        let under = |leaf: &str| {
            let mut url = base.clone();
            let path = format!("{}/{leaf}", base.path().trim_end_matches('/'));
            url.set_path(&path);
            url
        };
        let mut headers = HeaderMap::new();
        if let Some(key) = endpoint.api_key.as_deref() {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                "the API key contains characters not allowed in an HTTP header (hint: check \
                 DELTA_API_KEY for stray quotes or newlines)"
                    .to_owned()
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let builder = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("delta-relay/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(MAX_LLM_TIMEOUT)
            .connect_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90));
        let builder = match endpoint.transport.http2 {
            Some(true) => builder.http2_prior_knowledge(),
            Some(false) => builder.http1_only(),
            None => builder,
        };
        let builder = match endpoint.transport.max_connections {
            Some(n) => builder.pool_max_idle_per_host(n as usize),
            None => builder,
        };
        let client = builder.build().map_err(|e| {
            secrets
                .redact(&format!("cannot build the HTTP client: {e}"))
                .into_owned()
        })?;
        Ok(Forwarder {
            client,
            chat_url: under("chat/completions"),
            models_url: under("models"),
            secrets,
            shown,
        })
    }

    /// The endpoint's base URL as it may be shown (user-info and query values redacted).
    pub fn shown_url(&self) -> &str {
        &self.shown
    }

    /// `text` with the endpoint's secrets redacted.
    pub fn redact(&self, text: &str) -> String {
        self.secrets.redact(text).into_owned()
    }

    /// POSTs `body` to `/chat/completions` as is.
    pub async fn chat(
        &self,
        body: Bytes,
        request: &ForwardRequest,
    ) -> Result<Forwarded, ForwardError> {
        let mut builder = self
            .client
            .post(self.chat_url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if !request.agent.is_empty() {
            builder = builder.header(HEADER_AGENT, encode_header_value(&request.agent));
        }
        if !request.run_id.is_empty() {
            builder = builder.header(HEADER_RUN_ID, encode_header_value(&request.run_id));
        }
        if let Some(trace) = &request.trace {
            builder = builder.header("traceparent", trace.traceparent());
            if let Some(state) = &trace.trace_state {
                builder = builder.header("tracestate", state.as_str());
            }
        }
        if request.stream {
            let response = tokio::time::timeout(request.limit, builder.send())
                .await
                .map_err(|_| self.timeout(request.limit))?
                .map_err(|e| self.transport(&e))?;
            self.answer(response, request.limit).await
        } else {
            let exchange = async {
                let response = builder.send().await.map_err(|e| self.transport(&e))?;
                self.answer(response, request.limit).await
            };
            tokio::time::timeout(request.limit, exchange)
                .await
                .map_err(|_| self.timeout(request.limit))?
        }
    }

    /// GETs `/models`.
    pub async fn models(&self, limit: Duration) -> Result<Forwarded, ForwardError> {
        let exchange = async {
            let response = self
                .client
                .get(self.models_url.clone())
                .send()
                .await
                .map_err(|e| self.transport(&e))?;
            self.answer(response, limit).await
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| self.timeout(limit))?
    }

    async fn answer(
        &self,
        response: reqwest::Response,
        idle: Duration,
    ) -> Result<Forwarded, ForwardError> {
        let status = response.status();
        let retry_after = parse_retry_after(response.headers());
        let headers: Vec<(String, HeaderValue)> = response
            .headers()
            .iter()
            .filter(|(name, _)| kept_header(name.as_str()))
            .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
            .collect();
        let streamed = status.is_success()
            && response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if streamed {
            return Ok(Forwarded {
                status: status.as_u16(),
                headers,
                retry_after,
                body: AnswerBody::Events(EventStream::new(
                    response,
                    Arc::clone(&self.secrets),
                    idle,
                    self.shown.clone(),
                )),
            });
        }
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(&e))? {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(ForwardError::TooLarge {
                    endpoint: self.shown.clone(),
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        let redacted = self.secrets.redact_bytes(&bytes).into_owned();
        let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(&redacted).is_ok();
        let (bytes, wrapped, headers) = if status.is_success() || is_json {
            (redacted, false, headers)
        } else {
            let text = String::from_utf8_lossy(&redacted);
            let text: String = text.trim().chars().take(MAX_ERROR_CHARS).collect();
            let message = if text.is_empty() {
                status
                    .canonical_reason()
                    .unwrap_or("no error message")
                    .to_owned()
            } else {
                text
            };
            let body = serde_json::json!({
                "error": { "message": message, "type": "upstream_error", "code": status.as_u16() }
            });
            let headers = headers
                .into_iter()
                .filter(|(name, _)| name != CONTENT_TYPE.as_str())
                .chain([(
                    CONTENT_TYPE.as_str().to_owned(),
                    HeaderValue::from_static("application/json"),
                )])
                .collect();
            (body.to_string().into_bytes(), true, headers)
        };
        let usage = if status.is_success() {
            super::usage::usage_of(&bytes)
        } else {
            None
        };
        Ok(Forwarded {
            status: status.as_u16(),
            headers,
            retry_after,
            body: AnswerBody::Whole {
                bytes: Bytes::from(bytes),
                usage,
                wrapped,
            },
        })
    }

    fn timeout(&self, limit: Duration) -> ForwardError {
        ForwardError::Timeout {
            endpoint: self.shown.clone(),
            limit,
        }
    }

    fn transport(&self, err: &reqwest::Error) -> ForwardError {
        if err.is_timeout() {
            return self.timeout(MAX_LLM_TIMEOUT);
        }
        transport_error(err, &self.secrets, &self.shown)
    }
}

/// A reqwest failure in words, its URL left out and the rest redacted.
fn transport_error(err: &reqwest::Error, secrets: &UpstreamSecrets, shown: &str) -> ForwardError {
    let mut text = match err.url() {
        Some(_) => {
            let mut bare = String::new();
            let mut source = err.source();
            bare.push_str(if err.is_connect() {
                "cannot connect"
            } else if err.is_body() || err.is_decode() {
                "the answer broke off"
            } else {
                "the request failed"
            });
            while let Some(cause) = source {
                bare.push_str(": ");
                bare.push_str(&cause.to_string());
                source = cause.source();
            }
            bare
        }
        None => err.to_string(),
    };
    text = secrets.redact(&text).into_owned();
    ForwardError::Transport {
        endpoint: shown.to_owned(),
        message: text,
    }
}

/// Headers of the endpoint's answer that a client may act on.
fn kept_header(name: &str) -> bool {
    matches!(
        name,
        "content-type" | "retry-after" | "retry-after-ms" | "x-request-id" | "openai-processing-ms"
    ) || name.starts_with("x-ratelimit-")
}

/// How a streamed answer ended, told once to [`EventStream::on_end`]'s callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEnd {
    /// The last `usage` the stream carried.
    pub usage: Option<Usage>,
    /// How.
    pub ending: StreamEnding,
}

/// See [`StreamEnd`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnding {
    /// The endpoint finished the stream.
    Finished,
    /// The endpoint broke off or fell silent; why (redacted).
    BrokeOff(String),
    /// The stream was dropped before its end: the caller left.
    CallerLeft,
}

type OnEnd = Box<dyn FnOnce(StreamEnd) + Send>;

/// A streamed answer: each item is one or more whole events (see [`EventFramer`]). An error
/// item ends it (the endpoint broke off or fell silent for the relay's limit); the caller's
/// connection should then be cut so its client sees an incomplete stream.
pub struct EventStream {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>,
    end: Arc<std::sync::Mutex<EndState>>,
}

struct EndState {
    on_end: Option<OnEnd>,
    usage: Option<Usage>,
    broken: Option<String>,
    finished: bool,
}

impl EndState {
    fn fire(&mut self) {
        if let Some(on_end) = self.on_end.take() {
            let ending = match (&self.broken, self.finished) {
                (Some(why), _) => StreamEnding::BrokeOff(why.clone()),
                (None, true) => StreamEnding::Finished,
                (None, false) => StreamEnding::CallerLeft,
            };
            on_end(StreamEnd {
                usage: self.usage,
                ending,
            });
        }
    }
}

impl EventStream {
    fn new(
        response: reqwest::Response,
        secrets: Arc<UpstreamSecrets>,
        idle: Duration,
        shown: String,
    ) -> Self {
        let end = Arc::new(std::sync::Mutex::new(EndState {
            on_end: None,
            usage: None,
            broken: None,
            finished: false,
        }));
        struct Reading {
            response: reqwest::Response,
            framer: EventFramer,
            secrets: Arc<UpstreamSecrets>,
            idle: Duration,
            shown: String,
            end: Arc<std::sync::Mutex<EndState>>,
            done: bool,
        }
        let reading = Reading {
            response,
            framer: EventFramer::default(),
            secrets,
            idle,
            shown,
            end: Arc::clone(&end),
            done: false,
        };
        let inner = futures_util::stream::unfold(reading, |mut r| async move {
            if r.done {
                return None;
            }
            loop {
                let chunk = tokio::time::timeout(r.idle, r.response.chunk()).await;
                let failure = match chunk {
                    Ok(Ok(Some(bytes))) => match r.framer.push(&bytes, &r.secrets) {
                        Some(events) => return Some((Ok(Bytes::from(events)), r)),
                        None => continue,
                    },
                    Ok(Ok(None)) => {
                        r.done = true;
                        let rest = r.framer.finish(&r.secrets);
                        let mut end = lock(&r.end);
                        end.usage = r.framer.usage();
                        end.finished = true;
                        drop(end);
                        return rest.map(|rest| (Ok(Bytes::from(rest)), r));
                    }
                    Ok(Err(e)) => transport_error(&e, &r.secrets, &r.shown).to_string(),
                    Err(_) => ForwardError::Timeout {
                        endpoint: r.shown.clone(),
                        limit: r.idle,
                    }
                    .to_string(),
                };
                r.done = true;
                let mut end = lock(&r.end);
                end.usage = r.framer.usage();
                end.broken = Some(failure.clone());
                drop(end);
                return Some((Err(std::io::Error::other(failure)), r));
            }
        });
        EventStream {
            inner: Box::pin(inner),
            end,
        }
    }

    /// Calls `on_end` once when the stream ends, breaks off, or is dropped before its end
    /// (the caller left).
    pub fn on_end(self, on_end: impl FnOnce(StreamEnd) + Send + 'static) -> Self {
        lock(&self.end).on_end = Some(Box::new(on_end));
        self
    }
}

fn lock(end: &std::sync::Mutex<EndState>) -> std::sync::MutexGuard<'_, EndState> {
    end.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Stream for EventStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.inner.as_mut().poll_next(cx);
        if matches!(next, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            lock(&self.end).fire();
        }
        next
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        lock(&self.end).fire();
    }
}
