//! [`HttpBackend`]: one chat-completion attempt against an OpenAI-compatible endpoint over
//! HTTP (reqwest): HTTP/1.1, or HTTP/2 where the endpoint's [`HttpTransport`] asks for it, an
//! `https://` endpoint offers it, or an `http://` endpoint with the transport unset answers
//! it (`h2c.rs` asks once per endpoint), with the optional cap on connections
//! (`llm.max_connections`).
//!
//! An `http://` endpoint whose transport is unset has both: HTTP/1.1 clients and per-thread
//! HTTP/2 ones, and each attempt takes the one `h2c.rs` decided for the endpoint; a call
//! refused over an HTTP/2 only remembered is sent again over HTTP/1.1 within its attempt.
//!
//! Connections: HTTP/1.1 and ALPN endpoints share one pool, so the cap and idle reuse span
//! the process. With HTTP/2 prior knowledge each calling thread (a run arbiter) has its own
//! client, hence its own connection: a call and that connection's task then run on the same
//! thread, instead of every call crossing to the thread that happened to open the
//! connection. Calls are made from the run arbiters (a fixed pool), so that is a handful of
//! connections; an embedder calling from many threads gets at most 64 clients, and the
//! threads past them share the first.
//!
//! Owns the mapping from HTTP outcomes to [`LlmError`] (status, provider message,
//! Retry-After) and the per-attempt limits carried by [`RequestMeta::timeouts`]: the whole
//! request, and the silence allowed before the response headers and between body chunks.
//! Does not retry, rate-limit or log the API key.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;

use super::dialect::{Adjustment, WireOptions};
use super::h2c::{AutoH2c, Speak};
use super::learned::{Adaptation, Learned, Trigger};
use super::memory::EndpointMemory;
use super::refusal::{adjustment_for, is_validation_error, Refusal, SentShape};
use super::stream::{SseDecoder, StreamAssembler};
use super::types::Role;
use super::wire::request_body;

use super::endpoint::{
    encode_header_value, ChatBackend, CompletionFuture, Endpoint, HttpTransport, LlmError,
    RequestMeta, HEADER_AGENT, HEADER_RUN_ID,
};
use super::retry::parse_retry_after;
use super::timeouts::{TimeoutPhase, MAX_LLM_TIMEOUT};
use super::types::{parse_completion, preview, provider_error_message, ChatRequest};

/// The client-wide cap on one request, a backstop only: each request carries its own,
/// shorter limits in [`RequestMeta::timeouts`].
pub const DEFAULT_TIMEOUT: Duration = MAX_LLM_TIMEOUT;

/// Longest provider error text kept in an [`LlmError::Http`] message.
const MAX_ERROR_CHARS: usize = 2_000;
/// HTTP/2 flow-control windows: many calls share one connection's window.
const HTTP2_CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
const HTTP2_STREAM_WINDOW: u32 = 1024 * 1024;

/// Talks to one endpoint. Cheap to clone (the client and its pool are shared).
#[derive(Clone)]
pub struct HttpBackend {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    /// Parsed once: parsing it per request was a visible share of a model call's cost.
    url: reqwest::Url,
    clients: Clients,
    /// An `http://` endpoint whose transport is unset: HTTP/2 without negotiation when it
    /// answers it (these clients), else HTTP/1.1 (`clients`).
    auto: Option<Auto>,
    timeout: Duration,
    /// `llm.max_connections`: one permit per request open on the wire.
    connections: Option<tokio::sync::Semaphore>,
    /// What the endpoint taught, per model (this process's lessons, and what the endpoint
    /// memory kept of earlier ones).
    learned: Learned,
}

impl std::fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBackend")
            .field("endpoint", &self.inner.endpoint)
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

impl HttpBackend {
    /// Builds the client. The API key, when present, is sent as `Authorization: Bearer`.
    /// What the endpoint teaches is kept for this process only.
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Result<Self, LlmError> {
        HttpBackend::with_memory(endpoint, timeout, None)
    }

    /// [`HttpBackend::new`], starting from what `memory` kept of earlier processes' lessons
    /// about the endpoint and keeping this one's there.
    pub fn with_memory(
        endpoint: Endpoint,
        timeout: Duration,
        memory: Option<EndpointMemory>,
    ) -> Result<Self, LlmError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = endpoint.api_key.as_deref() {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                LlmError::Transport(
                    "the API key contains characters not allowed in an HTTP header \
                     (hint: check DELTA_API_KEY for stray quotes or newlines)"
                        .into(),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let recipe = ClientRecipe {
            headers,
            timeout,
            transport: endpoint.transport,
        };
        let clients = if endpoint.transport.http2 == Some(true) {
            Clients::per_thread(recipe)?
        } else {
            Clients::Shared {
                client: recipe.build()?,
                recipe,
            }
        };
        let connections = endpoint
            .transport
            .max_connections
            .map(|n| tokio::sync::Semaphore::new(n.max(1) as usize));
        let url = reqwest::Url::parse(&endpoint.chat_completions_url()).map_err(|e| {
            LlmError::Transport(format!(
                "base URL {:?} is not a valid URL: {e} (hint: DELTA_BASE_URL looks like https://host/v1)",
                endpoint.base_url
            ))
        })?;
        let auto = match endpoint.transport.http2 {
            None => AutoH2c::for_endpoint(
                &endpoint.base_url,
                &url,
                memory.clone(),
                recipe_connect_timeout(timeout),
            )
            .map(|choice| -> Result<Auto, LlmError> {
                let recipe = ClientRecipe {
                    transport: HttpTransport {
                        http2: Some(true),
                        ..endpoint.transport
                    },
                    ..recipe_of(&clients)
                };
                Ok(Auto {
                    choice,
                    h2c: Clients::per_thread(recipe)?,
                })
            })
            .transpose()?,
            Some(_) => None,
        };
        let learned = Learned::new(&endpoint.base_url, memory);
        Ok(HttpBackend {
            inner: Arc::new(Inner {
                endpoint,
                url,
                clients,
                auto,
                timeout,
                connections,
                learned,
            }),
        })
    }

    /// The endpoint this backend calls.
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// One attempt: POST the request written with `meta.wire`, map the outcome. Streamed
    /// (`meta.wire.stream`), the wait for the response headers and each silence between
    /// chunks are bounded by `meta.timeouts.idle`; not streamed, the server sends nothing
    /// until the whole reply is generated, so only `meta.timeouts.request` bounds the wait.
    /// The whole attempt is bounded by `meta.timeouts.request` either way.
    ///
    /// A refusal that names a detail delta can write another way (see [`super::dialect`])
    /// is learned for the endpoint and returned as [`LlmError::Adjusted`], which the gate
    /// retries at once.
    pub async fn send(
        &self,
        req: &ChatRequest,
        meta: &RequestMeta,
    ) -> Result<super::ChatCompletion, LlmError> {
        let _connection = match &self.inner.connections {
            Some(cap) => Some(cap.acquire().await.map_err(|_| {
                LlmError::Transport("the HTTP client's connection cap was closed".into())
            })?),
            None => None,
        };
        let route = self.route(&meta.timeouts).await;
        let mut result = self.send_on_live_connection(req, meta, route).await;
        if let (Err(Attempt::H2cRefused(_)), Some(auto)) = (&result, &self.inner.auto) {
            if auto.choice.recheck(&meta.timeouts).await {
                // The endpoint refused HTTP/2 it was remembered to speak, before it answered
                // the request: the same request goes out over HTTP/1.1 at once, as part of
                // this attempt.
                result = self
                    .send_on_live_connection(req, meta, Route::AutoHttp1)
                    .await;
            }
        }
        match result {
            Ok(completion) => Ok(completion),
            Err(Attempt::Failed(error) | Attempt::Stale(error) | Attempt::H2cRefused(error)) => {
                Err(error)
            }
            Err(Attempt::EmptyStream) => Err(self.empty_stream(req, &meta.wire)),
        }
    }

    /// Which client the next attempt uses: the endpoint's, or for an `http://` endpoint
    /// whose transport is unset, HTTP/2 or HTTP/1.1 as [`AutoH2c`] decided (asking the
    /// endpoint once, within `limits`).
    async fn route(&self, limits: &super::LlmTimeouts) -> Route {
        match &self.inner.auto {
            None => Route::Configured,
            Some(auto) => match auto.choice.speak(limits).await {
                Speak::Http2 => Route::AutoH2c,
                Speak::Http1 => Route::AutoHttp1,
            },
        }
    }

    /// The client of `route` for the calling thread.
    fn client(&self, route: Route) -> Result<reqwest::Client, LlmError> {
        match (route, &self.inner.auto) {
            (Route::AutoH2c, Some(auto)) => auto.h2c.for_this_thread(),
            _ => self.inner.clients.for_this_thread(),
        }
    }

    /// A stream that closed before its first chunk. llama-cpp-python does so when the
    /// request fails once streaming began: a tool call chosen with `tool_choice: auto`
    /// ("Automatic streaming tool choice is not supported"), or a prompt longer than the
    /// context. The endpoint is then not streamed to, and the call is sent again at once
    /// without streaming, which either works or says what is wrong.
    fn empty_stream(&self, req: &ChatRequest, sent: &WireOptions) -> LlmError {
        let learned_now = self.learn(Adjustment::NoStream, &req.model, Trigger::EmptyStream);
        if self.wire_options(&req.model) != *sent {
            // Learned now, or by another run's call since this one was written.
            return LlmError::Adjusted {
                status: 200,
                message: "ended its response stream before the first chunk".to_owned(),
                change: Adjustment::NoStream.describe(),
                learned_now,
            };
        }
        LlmError::Transport(
            "the response stream ended before its first chunk (the server may fail streamed requests it would answer unstreamed: try `llm.stream: false` or DELTA_LLM_STREAM=0)".to_owned()
        )
    }

    /// Learns `adjustment` for `model` (see [`Learned::learn`]); `true` when it is new.
    fn learn(&self, adjustment: Adjustment, model: &str, trigger: Trigger) -> bool {
        let learned =
            self.inner
                .learned
                .learn(&self.inner.endpoint.dialect, adjustment, model, trigger);
        if learned {
            tracing::info!(
                endpoint = %self.inner.url,
                "learned about the endpoint ({trigger:?}): later calls are sent {}",
                adjustment.describe()
            );
        }
        learned
    }

    /// One POST over `route`, sent once more at once when the server closed a kept-alive
    /// connection as the request went out on it: the request never reached the server, and
    /// a new connection is taken for it.
    async fn send_on_live_connection(
        &self,
        req: &ChatRequest,
        meta: &RequestMeta,
        route: Route,
    ) -> Result<super::ChatCompletion, Attempt> {
        match self.send_as(req, meta, meta.wire, route).await {
            Err(Attempt::Stale(_)) => self.send_as(req, meta, meta.wire, route).await,
            result => result,
        }
    }

    /// One POST written with `wire`, over `route`'s client.
    async fn send_as(
        &self,
        req: &ChatRequest,
        meta: &RequestMeta,
        wire: WireOptions,
        route: Route,
    ) -> Result<super::ChatCompletion, Attempt> {
        let inner = &self.inner;
        let limits = meta.timeouts;
        let started = std::time::Instant::now();
        if let Some(clock) = &meta.first_token {
            clock.reset();
        }
        let body = match &meta.wire_body {
            Some(body) if meta.wire == wire => body.clone(),
            _ => bytes::Bytes::from(request_body(req, &wire).map_err(|e| {
                LlmError::InvalidResponse(format!("cannot serialize the request: {e}"))
            })?),
        };
        let mut builder = self
            .client(route)?
            .post(inner.url.clone())
            .timeout(limits.request)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if wire.stream {
            builder = builder.header(ACCEPT, "text/event-stream");
        }
        if !meta.agent_name.is_empty() {
            builder = builder.header(HEADER_AGENT, encode_header_value(&meta.agent_name));
        }
        if !meta.run_id.is_empty() {
            builder = builder.header(HEADER_RUN_ID, encode_header_value(&meta.run_id));
        }
        if let Some(traceparent) = &meta.traceparent {
            builder = builder.header("traceparent", traceparent.as_str());
        }
        let sent = builder.send();
        let response = if wire.stream {
            tokio::time::timeout(limits.idle, sent)
                .await
                .map_err(|_| self.timeout(TimeoutPhase::FirstByte, limits.idle))?
        } else {
            sent.await
        }
        .map_err(|e| {
            let error = self.transport_error(&e, limits.request);
            if route == Route::AutoH2c
                && !e.is_timeout()
                && !e.is_connect()
                && self
                    .inner
                    .auto
                    .as_ref()
                    .is_some_and(|a| a.choice.may_fall_back())
            {
                Attempt::H2cRefused(error)
            } else if is_stale_connection(&e) {
                Attempt::Stale(error)
            } else {
                Attempt::Failed(error)
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = parse_retry_after(response.headers());
            let body = self.read_body(response, meta).await?;
            return Err(Attempt::Failed(self.refusal(
                req,
                &wire,
                status,
                &body,
                retry_after,
            )));
        }
        let event_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if wire.stream && event_stream {
            return self.read_stream(req, response, meta, started).await;
        }
        if wire.stream {
            // Asked to stream, the server answered in one body: it does not stream, and
            // its silence while it generates must not be cut by the idle limit next time.
            self.learn(Adjustment::NoStream, &req.model, Trigger::OneBody);
        }
        let body = self.read_body(response, meta).await?;
        Ok(parse_completion(&body)?)
    }

    /// A non-2xx answer as an error: a refusal delta can answer by writing the request
    /// another way (learned, then [`LlmError::Adjusted`]), a validation error behind a 5xx
    /// (final), or the status as it is.
    fn refusal(
        &self,
        req: &ChatRequest,
        wire: &WireOptions,
        status: reqwest::StatusCode,
        body: &[u8],
        retry_after: Option<Duration>,
    ) -> LlmError {
        let code = status.as_u16();
        let message = error_message(status, body);
        let (param, error_code) = error_param_and_code(body);
        let refusal = Refusal {
            status: code,
            message: &message,
            param: param.as_deref(),
            code: error_code.as_deref(),
        };
        if let Some(adjustment) = adjustment_for(&refusal, wire, &sent_shape(req)) {
            let learned_now = self.learn(adjustment, &req.model, Trigger::Refusal(code));
            // Learned now, or by another run's call since this one was written: the next
            // attempt is written the other way. Refused in both forms, the error stands.
            if self.wire_options(&req.model) != *wire {
                return LlmError::Adjusted {
                    status: code,
                    message: format!("refused the request (HTTP {code}: {message})"),
                    change: adjustment.describe(),
                    learned_now,
                };
            }
        }
        if is_validation_error(code, &message) {
            return LlmError::InvalidRequest {
                status: code,
                message,
            };
        }
        LlmError::Http {
            status: code,
            message,
            retry_after,
        }
    }

    /// A streamed reply: its events assembled into one completion, each chunk within the
    /// idle limit, each piece of text handed to `meta.on_text` as it comes.
    async fn read_stream(
        &self,
        req: &ChatRequest,
        mut response: reqwest::Response,
        meta: &RequestMeta,
        started: std::time::Instant,
    ) -> Result<super::ChatCompletion, Attempt> {
        let limits = meta.timeouts;
        let mut decoder = SseDecoder::new();
        let mut assembler = StreamAssembler::new();
        let mut received = 0usize;
        let mut on_data = |data: &str| -> Result<(), LlmError> {
            if let Some(clock) = &meta.first_token {
                clock.note(started.elapsed());
            }
            let text = assembler.push(data)?;
            if let Some(sink) = &meta.on_text {
                if !text.content.is_empty() || !text.reasoning.is_empty() {
                    (sink.0)(text);
                }
            }
            Ok(())
        };
        loop {
            let chunk = tokio::time::timeout(limits.idle, response.chunk())
                .await
                .map_err(|_| self.timeout(TimeoutPhase::Body, limits.idle))?;
            let chunk = match chunk {
                Ok(chunk) => chunk,
                // Cut by the whole-request limit (reqwest's timeout) while it streamed: a
                // timeout that names its limit, not a broken connection.
                Err(e) if e.is_timeout() => {
                    return Err(Attempt::Failed(
                        self.timeout(TimeoutPhase::Request, limits.request),
                    ))
                }
                // Broken before any of the reply came (llama-cpp-python sends a first chunk,
                // then fails a tool call it cannot stream): as good as an empty stream.
                Err(_) if !assembler.has_reply() => return Err(Attempt::EmptyStream),
                // A connection dropped mid-reply: the reply is incomplete, and retried.
                Err(e) => {
                    return Err(Attempt::Failed(LlmError::Transport(format!(
                        "the response stream broke after {received} bytes: {}",
                        cause_chain(&e)
                    ))))
                }
            };
            match chunk {
                Some(bytes) => {
                    received += bytes.len();
                    if received > MAX_RESPONSE_BYTES {
                        return Err(Attempt::Failed(too_big()));
                    }
                    decoder.feed(&bytes, &mut on_data)?;
                }
                None => break,
            }
        }
        decoder.finish(&mut on_data)?;
        if !assembler.has_reply() && !assembler.is_done() && assembler.finish_reason().is_none() {
            return Err(Attempt::EmptyStream);
        }
        let completion = assembler.finish()?;
        if completion.usage.is_none() {
            // Token counts are what the provider bills: an endpoint that sends no usage in
            // its streams (llama-cpp-python ignores `stream_options`) is called unstreamed,
            // where it does (this call's tokens are estimated by the run).
            self.learn(Adjustment::NoStream, &req.model, Trigger::NoUsageInStream);
        }
        Ok(completion)
    }

    /// The body, chunk by chunk, each within the idle limit, at most [`MAX_RESPONSE_BYTES`].
    async fn read_body(
        &self,
        mut response: reqwest::Response,
        meta: &RequestMeta,
    ) -> Result<Vec<u8>, LlmError> {
        let limits = meta.timeouts;
        let mut body = Vec::new();
        loop {
            let chunk = tokio::time::timeout(limits.idle, response.chunk())
                .await
                .map_err(|_| self.timeout(TimeoutPhase::Body, limits.idle))?
                .map_err(|e| self.transport_error(&e, limits.request))?;
            match chunk {
                Some(bytes) => {
                    if body.len() + bytes.len() > MAX_RESPONSE_BYTES {
                        return Err(too_big());
                    }
                    body.extend_from_slice(&bytes)
                }
                None => return Ok(body),
            }
        }
    }

    fn timeout(&self, phase: TimeoutPhase, limit: Duration) -> LlmError {
        LlmError::Timeout {
            target: self.target(),
            phase,
            limit,
        }
    }

    /// `request_limit` is the whole-request limit the attempt ran under (reqwest reports it
    /// as a timeout).
    fn transport_error(&self, err: &reqwest::Error, request_limit: Duration) -> LlmError {
        if err.is_timeout() {
            return self.timeout(TimeoutPhase::Request, request_limit);
        }
        let text = cause_chain(err);
        if self.inner.endpoint.transport.http2 == Some(true) && is_h2c_refusal(&text) {
            return LlmError::Http2Refused(text);
        }
        LlmError::Transport(text)
    }
}

impl ChatBackend for HttpBackend {
    fn complete(&self, req: ChatRequest, meta: RequestMeta) -> CompletionFuture {
        let this = self.clone();
        Box::pin(async move { this.send(&req, &meta).await })
    }

    fn complete_shared(&self, req: Arc<ChatRequest>, meta: RequestMeta) -> CompletionFuture {
        let this = self.clone();
        Box::pin(async move { this.send(&req, &meta).await })
    }

    fn target(&self) -> String {
        format!("POST {}", self.inner.url)
    }

    fn wire_options(&self, model: &str) -> WireOptions {
        self.inner
            .learned
            .options(&self.inner.endpoint.dialect, model)
    }

    fn take_adaptations(&self) -> Vec<Adaptation> {
        self.inner.learned.take_news()
    }

    fn context_window(&self, model: &str) -> super::endpoint::WindowFuture {
        let (this, model) = (self.clone(), model.to_owned());
        Box::pin(async move {
            let route = this.route(&super::LlmTimeouts::default()).await;
            let client = this.client(route).ok()?;
            super::window::probe(&client, &this.inner.endpoint.base_url, &model).await
        })
    }
}

/// reqwest's own text is terse ("error sending request"); the cause chain says why.
fn cause_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Why one POST gave no completion.
enum Attempt {
    /// A stream that closed before its first event (see [`HttpBackend::empty_stream`]).
    EmptyStream,
    /// A kept-alive connection found closed as the request was sent on it.
    Stale(LlmError),
    /// HTTP/2 refused by an endpoint that may have become HTTP/1.1-only (see
    /// [`AutoH2c::refused`]).
    H2cRefused(LlmError),
    /// Anything else.
    Failed(LlmError),
}

/// The request went out on a pooled connection the server had just closed: hyper reports
/// the connection closed (or reset) before any response. Not a timeout, not a refusal.
fn is_stale_connection(err: &reqwest::Error) -> bool {
    if err.is_timeout() || err.is_connect() {
        return false;
    }
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if text.contains("connection closed before message completed")
            || text.contains("Connection reset by peer")
        {
            return true;
        }
        source = cause.source();
    }
    false
}

impl From<LlmError> for Attempt {
    fn from(error: LlmError) -> Attempt {
        Attempt::Failed(error)
    }
}

/// The largest response body read: far above any real reply, low enough that a broken or
/// hostile endpoint streaming without end cannot exhaust memory.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

fn too_big() -> LlmError {
    LlmError::InvalidResponse(format!(
        "the response is larger than {} MiB",
        MAX_RESPONSE_BYTES / (1024 * 1024)
    ))
}

/// What in a request a refusal may be about.
fn sent_shape(req: &ChatRequest) -> SentShape {
    SentShape {
        tool_call_turn: req
            .messages
            .iter()
            .any(|m| m.content.is_none() && !m.tool_calls().is_empty()),
        system_message: req.messages.iter().any(|m| m.role == Role::System),
        max_tokens: req.max_tokens.is_some(),
        sampling: req.temperature.is_some()
            || req.top_p.is_some()
            || req.frequency_penalty.is_some()
            || req.presence_penalty.is_some(),
    }
}

/// The failure of HTTP/2 spoken without negotiation to an HTTP/1.1 server: hyper reports a
/// protocol error on the connection (the server's HTTP/1.1 answer to the preface is not an
/// HTTP/2 frame), or the server closes it.
fn is_h2c_refusal(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("http2")
        || text.contains("h2 protocol")
        || text.contains("frame")
        || text.contains("connection closed before message completed")
}

/// The most calling threads that get a client of their own; calls from any thread after
/// them share the first client. Run arbiters are a fixed pool, far below this; the bound
/// is for an embedder that calls one backend from many short-lived threads, whose clients
/// (and connections) would otherwise be kept as long as the backend.
const MAX_THREAD_CLIENTS: usize = 64;

/// Which of the backend's clients an attempt goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// The endpoint's transport as set (or an `https://` endpoint's, negotiated).
    Configured,
    /// Transport unset, the endpoint speaks h2c: the per-thread HTTP/2 clients.
    AutoH2c,
    /// Transport unset, the endpoint speaks HTTP/1.1 only (or was not reached yet).
    AutoHttp1,
}

/// The HTTP/2 side of an `http://` endpoint whose transport is unset.
struct Auto {
    choice: AutoH2c,
    h2c: Clients,
}

/// The connect limit of the clients built for a backend whose whole-request cap is `timeout`.
fn recipe_connect_timeout(timeout: Duration) -> Duration {
    timeout.min(Duration::from_secs(30))
}

/// The recipe `clients` were built from, for a sibling with another transport.
fn recipe_of(clients: &Clients) -> ClientRecipe {
    match clients {
        Clients::Shared { recipe, .. } | Clients::PerThread { recipe, .. } => recipe.clone(),
    }
}

/// The client a call uses: one for the process, or one per calling thread (HTTP/2 prior
/// knowledge, see the module header).
enum Clients {
    Shared {
        client: reqwest::Client,
        recipe: ClientRecipe,
    },
    PerThread {
        recipe: ClientRecipe,
        /// The constructing thread's client: also the one shared past the bound.
        first: reqwest::Client,
        per_thread: dashmap::DashMap<std::thread::ThreadId, reqwest::Client>,
    },
}

impl Clients {
    /// One client per calling thread, the constructing thread's built now.
    fn per_thread(recipe: ClientRecipe) -> Result<Clients, LlmError> {
        let first = recipe.build()?;
        let per_thread = dashmap::DashMap::new();
        per_thread.insert(std::thread::current().id(), first.clone());
        Ok(Clients::PerThread {
            recipe,
            first,
            per_thread,
        })
    }

    /// A handle on the calling thread's client (a cheap clone), built on first use.
    fn for_this_thread(&self) -> Result<reqwest::Client, LlmError> {
        match self {
            Clients::Shared { client, .. } => Ok(client.clone()),
            Clients::PerThread {
                recipe,
                first,
                per_thread,
            } => {
                let thread = std::thread::current().id();
                if let Some(client) = per_thread.get(&thread) {
                    return Ok(client.clone());
                }
                // Racing threads may each pass this check: the bound is exceeded by at most
                // the number of threads racing, once.
                if per_thread.len() >= MAX_THREAD_CLIENTS {
                    return Ok(first.clone());
                }
                let client = recipe.build()?;
                per_thread.insert(thread, client.clone());
                Ok(client)
            }
        }
    }
}

/// What every client of one endpoint is built from.
#[derive(Clone)]
struct ClientRecipe {
    headers: HeaderMap,
    timeout: Duration,
    transport: HttpTransport,
}

impl ClientRecipe {
    fn build(&self) -> Result<reqwest::Client, LlmError> {
        let builder = reqwest::Client::builder()
            .default_headers(self.headers.clone())
            .user_agent(concat!("delta/", env!("CARGO_PKG_VERSION")))
            .timeout(self.timeout)
            .connect_timeout(recipe_connect_timeout(self.timeout))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90));
        with_transport(builder, self.transport)
            .build()
            .map_err(|e| LlmError::Transport(format!("cannot build the HTTP client: {e}")))
    }
}

/// HTTP version and pool settings for `transport`.
fn with_transport(
    builder: reqwest::ClientBuilder,
    transport: HttpTransport,
) -> reqwest::ClientBuilder {
    let builder = match transport.http2 {
        Some(true) => builder.http2_prior_knowledge(),
        Some(false) => builder.http1_only(),
        None => builder,
    };
    let builder = builder
        .http2_initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
        .http2_initial_stream_window_size(HTTP2_STREAM_WINDOW);
    match transport.max_connections {
        Some(n) => builder.pool_max_idle_per_host(n as usize),
        None => builder,
    }
}

/// The provider's message from an error body (`{"error":{"message"}}`, `{"error":"..."}`,
/// `{"message"}`, `{"detail"}`), else the body text, else the status reason.
fn error_message(status: reqwest::StatusCode, body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        v.get("error")
            .filter(|e| !e.is_null())
            .map(provider_error_message)
            .or_else(|| {
                ["message", "detail"]
                    .iter()
                    .find_map(|k| v.get(*k).map(provider_error_message))
            })
    });
    let text = from_json.unwrap_or_else(|| preview(body).trim().to_owned());
    if text.is_empty() {
        return status
            .canonical_reason()
            .unwrap_or("no error message")
            .to_owned();
    }
    text.chars().take(MAX_ERROR_CHARS).collect()
}

/// The provider's `error.param` and `error.code` (OpenAI's and Azure's error shape), as
/// text: which field it refuses, and why.
fn error_param_and_code(body: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return (None, None);
    };
    let error = &value["error"];
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.chars().take(200).collect()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    (text(&error["param"]), text(&error["code"]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use reqwest::StatusCode;

    /// An h2c backend called from many short-lived threads keeps a bounded number of
    /// clients: the threads past the bound share the first one.
    #[test]
    fn clients_kept_per_calling_thread_are_bounded() {
        let endpoint = Endpoint::new("http://127.0.0.1:9/v1", None).with_transport(HttpTransport {
            http2: Some(true),
            max_connections: None,
        });
        let backend = HttpBackend::new(endpoint, Duration::from_secs(5)).unwrap();
        for _ in 0..MAX_THREAD_CLIENTS * 2 {
            let backend = backend.clone();
            std::thread::spawn(move || backend.inner.clients.for_this_thread().map(drop))
                .join()
                .unwrap()
                .unwrap();
        }
        let Clients::PerThread { per_thread, .. } = &backend.inner.clients else {
            panic!("h2c prior knowledge keeps a client per thread");
        };
        assert_eq!(per_thread.len(), MAX_THREAD_CLIENTS);
    }

    #[test]
    fn error_messages_are_extracted_from_common_shapes() {
        let s = StatusCode::BAD_REQUEST;
        assert_eq!(
            error_message(s, br#"{"error":{"message":"bad model"}}"#),
            "bad model"
        );
        assert_eq!(error_message(s, br#"{"error":"flat"}"#), "flat");
        assert_eq!(error_message(s, br#"{"detail":"pydantic"}"#), "pydantic");
        assert_eq!(error_message(s, b"plain text"), "plain text");
        assert_eq!(error_message(StatusCode::BAD_GATEWAY, b""), "Bad Gateway");
    }

    #[test]
    fn invalid_base_url_is_rejected_with_a_hint() {
        let err = HttpBackend::new(Endpoint::new("not a url", None), DEFAULT_TIMEOUT).unwrap_err();
        assert!(err.to_string().contains("DELTA_BASE_URL"), "{err}");
    }

    #[test]
    fn debug_does_not_leak_the_key() {
        let b = HttpBackend::new(
            Endpoint::new("http://127.0.0.1:1/v1", Some("sk-zzz".into())),
            DEFAULT_TIMEOUT,
        )
        .unwrap();
        assert!(!format!("{b:?}").contains("sk-zzz"));
    }

    #[tokio::test]
    async fn connection_refused_is_a_retryable_transport_error() {
        // Bind then drop to get a port that (almost certainly) refuses connections.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let b = HttpBackend::new(
            Endpoint::new(format!("http://127.0.0.1:{port}/v1"), None),
            Duration::from_secs(5),
        )
        .unwrap();
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![super::super::ChatMessage::user("hi")].into(),
            ..Default::default()
        };
        let err = b.send(&req, &RequestMeta::default()).await.unwrap_err();
        assert!(matches!(err, LlmError::Transport(_)), "{err:?}");
        assert!(err.is_retryable());
    }

    pub(crate) fn hello() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![super::super::ChatMessage::user("hi")].into(),
            ..Default::default()
        }
    }

    pub(crate) fn limits(request_ms: u64, idle_ms: u64) -> RequestMeta {
        RequestMeta {
            timeouts: crate::llm::LlmTimeouts {
                request: Duration::from_millis(request_ms),
                idle: Duration::from_millis(idle_ms),
            },
            ..RequestMeta::default()
        }
    }

    /// A loopback endpoint that reads each request, sends `head` (maybe nothing), then
    /// `trickle` one byte at a time every 50 ms, then holds the connection open in silence.
    async fn stalling_endpoint(head: &'static [u8], trickle: usize) -> HttpBackend {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut held = Vec::new();
            for _ in 0..8 {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut request = [0u8; 8192];
                let _ = stream.read(&mut request).await;
                let _ = stream.write_all(head).await;
                for _ in 0..trickle {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let _ = stream.write_all(b" ").await;
                }
                held.push(stream);
            }
        });
        HttpBackend::new(
            Endpoint::new(format!("http://127.0.0.1:{port}/v1"), None),
            DEFAULT_TIMEOUT,
        )
        .unwrap()
    }

    pub(crate) fn streamed(mut meta: RequestMeta) -> RequestMeta {
        meta.wire.stream = true;
        meta.wire.stream_usage = true;
        meta
    }

    /// Regression: an endpoint that accepts and never answers held each attempt for 600 s.
    /// A streamed request is answered with headers at once, so silence means trouble.
    #[tokio::test]
    async fn llm_endpoint_that_never_answers_times_out_at_the_idle_limit() {
        let backend = stalling_endpoint(b"", 0).await;
        let err = backend
            .send(&hello(), &streamed(limits(30_000, 200)))
            .await
            .unwrap_err();
        let LlmError::Timeout {
            target,
            phase,
            limit,
        } = &err
        else {
            panic!("expected a timeout, got {err:?}");
        };
        assert_eq!(*phase, TimeoutPhase::FirstByte);
        assert_eq!(*limit, Duration::from_millis(200));
        assert!(target.ends_with("/v1/chat/completions"), "{target}");
        let text = err.to_string();
        assert!(text.contains("200 ms (llm.idle_timeout)"), "{text}");
        assert!(text.contains("127.0.0.1"), "{text}");
        assert!(err.is_retryable());
    }

    #[tokio::test]
    async fn llm_endpoint_that_stalls_after_its_headers_times_out_reading_the_body() {
        let backend = stalling_endpoint(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{",
            0,
        )
        .await;
        let err = backend
            .send(&hello(), &limits(30_000, 200))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                LlmError::Timeout {
                    phase: TimeoutPhase::Body,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("stalled"), "{err}");
    }

    /// A body that trickles in never trips the idle limit, but the whole-request one ends it.
    #[tokio::test]
    async fn a_trickling_body_is_cut_at_the_whole_request_limit() {
        let backend = stalling_endpoint(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{",
            100,
        )
        .await;
        let err = backend.send(&hello(), &limits(400, 300)).await.unwrap_err();
        assert!(
            matches!(
                err,
                LlmError::Timeout {
                    phase: TimeoutPhase::Request,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("llm.request_timeout"), "{err}");
    }

    /// One answer of [`answering_endpoint`]: pieces of the raw HTTP response, each sent after
    /// its delay.
    pub(crate) type Answer = Vec<(Duration, Vec<u8>)>;

    /// A loopback HTTP/1.1 endpoint that reads each request (headers, then `content-length`
    /// bytes of body), hands the body to `answer` and writes what it returns, then closes the
    /// connection. Every body received is kept, in order.
    pub(crate) async fn answering_endpoint(
        answer: impl Fn(&Value) -> Answer + Send + Sync + 'static,
    ) -> (HttpBackend, Arc<std::sync::Mutex<Vec<Value>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&bodies);
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            for _ in 0..16 {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let seen = Arc::clone(&seen);
                let answer = Arc::clone(&answer);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 65536];
                    let body = loop {
                        let n = stream.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&request).to_string();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let length: usize = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break request[end + 4..end + 4 + length].to_vec();
                        }
                    };
                    let body: Value = serde_json::from_slice(&body).unwrap();
                    let pieces = answer(&body);
                    seen.lock().unwrap().push(body);
                    for (delay, piece) in pieces {
                        tokio::time::sleep(delay).await;
                        if stream.write_all(&piece).await.is_err() {
                            return;
                        }
                    }
                    let _ = stream.shutdown().await;
                });
            }
        });
        let backend = HttpBackend::new(
            Endpoint::new(format!("http://127.0.0.1:{port}/v1"), None),
            DEFAULT_TIMEOUT,
        )
        .unwrap();
        (backend, bodies)
    }

    pub(crate) fn json_answer(status: u16, body: &Value) -> Vec<u8> {
        let text = body.to_string();
        format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            text.len()
        )
        .into_bytes()
    }

    pub(crate) const SSE_HEAD: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

    pub(crate) fn event(data: &str) -> Vec<u8> {
        format!("data: {data}\n\n").into_bytes()
    }

    pub(crate) fn completion_json(text: &str) -> Value {
        serde_json::json!({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
    }

    /// Without streaming the server sends nothing until the reply is generated: a reply
    /// slower than the idle limit is not cut (only the whole-request limit bounds it).
    #[tokio::test]
    async fn a_slow_reply_that_is_not_streamed_is_not_cut_by_the_idle_limit() {
        let (backend, _) = answering_endpoint(|_| {
            vec![(
                Duration::from_millis(600),
                json_answer(200, &completion_json("slow")),
            )]
        })
        .await;
        let reply = backend.send(&hello(), &limits(5_000, 200)).await.unwrap();
        assert_eq!(reply.message.content.as_deref(), Some("slow"));
    }

    /// A streamed reply is cut when it goes silent for the idle limit between chunks, and
    /// not while chunks keep coming, however long it takes in all.
    #[tokio::test]
    async fn a_stream_is_cut_only_when_it_goes_silent() {
        let steady = |_: &Value| {
            let mut pieces = vec![(Duration::ZERO, SSE_HEAD.to_vec())];
            for word in ["one ", "two ", "three ", "four ", "five ", "six"] {
                pieces.push((
                    Duration::from_millis(100),
                    event(&format!(
                        r#"{{"choices":[{{"index":0,"delta":{{"content":"{word}"}}}}]}}"#
                    )),
                ));
            }
            pieces.push((
                Duration::ZERO,
                event(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#),
            ));
            pieces.push((Duration::ZERO, event("[DONE]")));
            pieces
        };
        let (backend, bodies) = answering_endpoint(steady).await;
        let text = Arc::new(std::sync::Mutex::new(String::new()));
        let mut meta = streamed(limits(5_000, 250));
        let shown = Arc::clone(&text);
        meta.on_text = Some(super::super::TextSink::new(move |piece| {
            shown.lock().unwrap().push_str(piece.content)
        }));
        let reply = backend.send(&hello(), &meta).await.unwrap();
        assert_eq!(
            reply.message.content.as_deref(),
            Some("one two three four five six")
        );
        assert_eq!(*text.lock().unwrap(), "one two three four five six");
        let sent = bodies.lock().unwrap()[0].clone();
        assert_eq!(sent["stream"], true);
        assert_eq!(sent["stream_options"]["include_usage"], true);
        // That stream carried no usage: the endpoint is called unstreamed from now on, where
        // its replies say what they cost.
        assert!(reply.usage.is_none());
        assert!(!backend.wire_options("m").stream);

        let silent = |_: &Value| {
            vec![
                (Duration::ZERO, SSE_HEAD.to_vec()),
                (
                    Duration::ZERO,
                    event(r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#),
                ),
                (Duration::from_secs(30), event("[DONE]")),
            ]
        };
        let (backend, _) = answering_endpoint(silent).await;
        let err = backend
            .send(&hello(), &streamed(limits(5_000, 250)))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                LlmError::Timeout {
                    phase: TimeoutPhase::Body,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.is_retryable());
    }

    /// A server asked to stream that answers in one JSON body is answered, and is not asked
    /// to stream again.
    #[tokio::test]
    async fn a_server_that_does_not_stream_is_remembered() {
        let (backend, bodies) = answering_endpoint(|_| {
            vec![(Duration::ZERO, json_answer(200, &completion_json("plain")))]
        })
        .await;
        let meta = streamed(limits(5_000, 1_000));
        let reply = backend.send(&hello(), &meta).await.unwrap();
        assert_eq!(reply.message.content.as_deref(), Some("plain"));
        let next = backend.wire_options("m");
        assert!(!next.stream, "{next:?}");
        assert_eq!(bodies.lock().unwrap()[0]["stream"], true);
    }

    pub(crate) fn with_tool_turn() -> ChatRequest {
        use super::super::{ChatMessage, ToolCall};
        ChatRequest {
            model: "m".into(),
            messages: vec![
                ChatMessage::user("hi"),
                ChatMessage::assistant(None, vec![ToolCall::function("c1", "ls", "{}")]),
                ChatMessage::tool("c1", "a b"),
            ]
            .into(),
            ..Default::default()
        }
    }

    /// llama-cpp-python's answer to `"content": null` on a tool-call turn (HTTP 500 with
    /// pydantic's text): the request is refused as `Adjusted`, and the next attempt writes
    /// `""`; a second refusal of the other form is final.
    #[tokio::test]
    async fn a_refused_null_content_is_written_as_an_empty_string_next_time() {
        let (backend, bodies) = answering_endpoint(|body| {
            let content = &body["messages"][1]["content"];
            if content.is_string() {
                vec![(Duration::ZERO, json_answer(200, &completion_json("ok")))]
            } else {
                let refusal = serde_json::json!({"error": {"message": "1 validation error:\n  {'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}", "type": "internal_server_error"}});
                vec![(Duration::ZERO, json_answer(500, &refusal))]
            }
        })
        .await;
        let request = with_tool_turn();
        let meta = limits(5_000, 1_000);
        let err = backend.send(&request, &meta).await.unwrap_err();
        let LlmError::Adjusted { status, change, .. } = &err else {
            panic!("expected an adjusted refusal, got {err:?}");
        };
        assert_eq!(*status, 500);
        assert!(change.contains("empty_string"), "{change}");
        assert!(err.is_retryable());
        let mut next = meta.clone();
        next.wire = backend.wire_options("m");
        assert_eq!(
            next.wire.tool_call_content,
            super::super::ToolCallContent::EmptyString
        );
        let reply = backend.send(&request, &next).await.unwrap();
        assert_eq!(reply.message.content.as_deref(), Some("ok"));
        let sent = bodies.lock().unwrap();
        assert_eq!(sent[0]["messages"][1]["content"], Value::Null);
        assert_eq!(sent[1]["messages"][1]["content"], "");
    }

    /// A 5xx whose body is a validation error is final: retrying sends the same request.
    #[tokio::test]
    async fn a_server_error_that_is_a_validation_error_is_not_retried() {
        let (backend, _) = answering_endpoint(|_| {
            let refusal = serde_json::json!({"error": {"message": "1 validation error:\n  {'type': 'int_parsing', 'loc': ('body', 'max_tokens'), 'msg': 'Input should be a valid integer'}"}});
            vec![(Duration::ZERO, json_answer(500, &refusal))]
        })
        .await;
        let err = backend
            .send(&hello(), &limits(5_000, 1_000))
            .await
            .unwrap_err();
        assert!(
            matches!(err, LlmError::InvalidRequest { status: 500, .. }),
            "{err:?}"
        );
        assert!(!err.is_retryable());
    }

    /// A stream that closes before its first chunk (llama-cpp-python when the streamed
    /// request fails) turns streaming off for the endpoint and is sent again at once.
    #[tokio::test]
    async fn an_empty_stream_turns_streaming_off_for_the_endpoint() {
        let (backend, _) = answering_endpoint(|_| vec![(Duration::ZERO, SSE_HEAD.to_vec())]).await;
        let err = backend
            .send(&hello(), &streamed(limits(5_000, 1_000)))
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Adjusted { .. }), "{err:?}");
        assert!(err.to_string().contains("without streaming"), "{err}");
        assert!(!backend.wire_options("m").stream);
    }

    /// Calls written before the endpoint learned (batches send many at once) are sent again
    /// at once too, not backed off as transport errors.
    #[tokio::test]
    async fn calls_written_before_the_endpoint_learned_are_sent_again_at_once() {
        let (backend, _) = answering_endpoint(|_| vec![(Duration::ZERO, SSE_HEAD.to_vec())]).await;
        let meta = streamed(limits(5_000, 1_000));
        for _ in 0..3 {
            let err = backend.send(&hello(), &meta).await.unwrap_err();
            assert!(matches!(err, LlmError::Adjusted { .. }), "{err:?}");
        }
        // Not streamed (as the endpoint is written to now), the same refusal stands.
        let mut plain = meta.clone();
        plain.wire = backend.wire_options("m");
        let err = backend.send(&hello(), &plain).await.unwrap_err();
        assert!(!matches!(err, LlmError::Adjusted { .. }), "{err:?}");
    }

    /// `llm.http2: true` against a server that speaks only HTTP/1.1 names the setting and is
    /// not retried.
    #[tokio::test]
    async fn http2_without_negotiation_to_an_http1_server_names_the_setting() {
        // What an HTTP/1.1-only server (uvicorn) answers to the HTTP/2 preface.
        let plain = stalling_endpoint(
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 28\r\n\r\nInvalid HTTP request received",
            0,
        )
        .await;
        let endpoint = plain.endpoint().clone().with_transport(HttpTransport {
            http2: Some(true),
            max_connections: None,
        });
        let backend = HttpBackend::new(endpoint, DEFAULT_TIMEOUT).unwrap();
        let err = backend
            .send(&hello(), &limits(5_000, 1_000))
            .await
            .unwrap_err();
        assert!(matches!(err, LlmError::Http2Refused(_)), "{err:?}");
        assert!(!err.is_retryable());
        let text = err.to_string();
        assert!(
            text.contains("llm.http2: false") && text.contains("DELTA_LLM_HTTP2=0"),
            "{text}"
        );
    }
}
