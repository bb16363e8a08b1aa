//! The scripted model as an OpenAI-compatible HTTP endpoint (hyper 1): HTTP/1.1 keep-alive,
//! and HTTP/2 without TLS for clients that start with its preface (h2c prior knowledge,
//! `llm.http2: true`), so thousands of calls in flight can share one connection.
//! POST `/v1/chat/completions`, GET `/v1/models`, GET `/v1/stats`; anything else is a JSON 404.
//!
//! Owns the listener, per-connection tasks and OpenAI-shaped error bodies (429 always carries
//! Retry-After); counts into [`ServerStats`]. Binds only the address it is given (callers
//! pass 127.0.0.1). Reply content comes from `respond.rs`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{HeaderMap, Method, Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;

use super::respond::{ScriptedReply, StreamPlan};
use super::script::{Script, ScriptError};
use super::stats::{InFlight, ServerStats};
use super::validate::validate_history;
use crate::llm::endpoint::{decode_header_value, RequestMeta, HEADER_AGENT, HEADER_RUN_ID};
use crate::llm::types::ChatRequest;

/// Largest request body accepted (long histories are big, but not this big).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Listen backlog: benchmarks open thousands of connections at once.
const LISTEN_BACKLOG: u32 = 4096;
/// HTTP/2 streams one connection may carry at once: a benchmark keeps 10,000 calls in
/// flight over one connection (hyper's default of 200 would queue the rest in the client).
const MAX_CONCURRENT_STREAMS: u32 = 100_000;
/// HTTP/2 flow-control windows: thousands of requests share the connection's window.
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
const STREAM_WINDOW: u32 = 1024 * 1024;

/// Why the server could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The script file could not be loaded.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// The address could not be bound.
    #[error(
        "cannot listen on {addr}: {source} (hint: is the port in use? --port 0 picks a free one)"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The tokio runtime of a blocking server could not be built.
    #[error("cannot start the scripted model's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// A running scripted-model server. Dropping it stops accepting connections.
#[derive(Debug)]
pub struct ScriptServer {
    /// The address bound (with the real port when port 0 was asked for).
    pub addr: SocketAddr,
    stats: Arc<ServerStats>,
    shutdown: CancellationToken,
    accept_loop: Option<tokio::task::JoinHandle<()>>,
}

impl ScriptServer {
    /// The server's counters.
    pub fn stats(&self) -> &Arc<ServerStats> {
        &self.stats
    }

    /// The base URL clients use, e.g. `http://127.0.0.1:4321/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Stops accepting, asks open connections to finish their current request, and waits
    /// for the accept loop to end.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.accept_loop.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

struct Shared {
    script: Arc<Script>,
    stats: Arc<ServerStats>,
}

/// Starts serving `script` on `addr` (pass `127.0.0.1:0` for a free port). Must be called
/// inside a tokio runtime.
pub async fn serve(script: Arc<Script>, addr: SocketAddr) -> Result<ScriptServer, ServeError> {
    let listener = bind(addr).map_err(|source| ServeError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let stats = Arc::new(ServerStats::new());
    let shared = Arc::new(Shared {
        script,
        stats: Arc::clone(&stats),
    });
    let shutdown = CancellationToken::new();
    let accept_loop = tokio::spawn(accept_connections(listener, shared, shutdown.clone()));
    Ok(ScriptServer {
        addr: local,
        stats,
        shutdown,
        accept_loop: Some(accept_loop),
    })
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

async fn accept_connections(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Usually EMFILE under load: give connections a moment to close.
                tracing::warn!(error = %e, "scripted model: accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        shared.stats.record_connection();
        let shared = Arc::clone(&shared);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(route(&shared, req).await) }
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().keep_alive(true);
            builder
                .http2()
                .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .initial_stream_window_size(STREAM_WINDOW);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "scripted model: connection ended with an error");
                    }
                }
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

type Reply = Response<BoxBody<Bytes, Infallible>>;

async fn route(shared: &Shared, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    match (req.method(), path.as_str()) {
        (&Method::POST, "/v1/chat/completions" | "/chat/completions") => chat(shared, req).await,
        (&Method::GET, "/v1/models" | "/models") => json_reply(
            StatusCode::OK,
            &json!({"object": "list", "data": [{
                "id": shared.script.model(), "object": "model", "created": 0, "owned_by": "delta"
            }]}),
        ),
        (&Method::GET, "/v1/stats") => json_reply(StatusCode::OK, &json!(shared.stats.snapshot())),
        (method, _) => error_reply(
            StatusCode::NOT_FOUND,
            &format!(
                "no route for {method} {path} (the scripted model serves POST /v1/chat/completions, \
                 GET /v1/models and GET /v1/stats)"
            ),
            "not_found",
            None,
        ),
    }
}

async fn chat(shared: &Shared, req: Request<Incoming>) -> Reply {
    let stats = &shared.stats;
    let in_flight = stats.arrive();
    if req.version() == Version::HTTP_2 {
        stats.record_http2();
    }
    let meta = meta_from_headers(req.headers());
    if let Some(expected) = shared.script.required_api_key() {
        let sent = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if sent != Some(expected) {
            stats.record_failure();
            let message = match sent {
                None => "no API key sent (expected `Authorization: Bearer <key>`)",
                Some(_) => "incorrect API key provided",
            };
            return error_reply(StatusCode::UNAUTHORIZED, message, "invalid_api_key", None);
        }
    }
    let quirks = shared.script.quirks();
    let (streamed, reply) = match read_request(req).await {
        Ok(chat_req) => {
            if let Some(reply) = imitated_refusal(quirks, &chat_req) {
                stats.record_rejected();
                return reply;
            }
            if shared.script.strict() {
                if let Err(problem) = validate_history(&chat_req.messages) {
                    stats.record_rejected();
                    return error_reply(
                        StatusCode::BAD_REQUEST,
                        &format!("invalid chat history: {problem}"),
                        "invalid_history",
                        None,
                    );
                }
            }
            let streamed = wants_stream(&chat_req)
                .map(|include_usage| include_usage && !quirks.no_stream_usage);
            if streamed.is_some() && quirks.no_streamed_tools && offers_tools_auto(&chat_req) {
                // llama-cpp-python: "Automatic streaming tool choice is not supported", told
                // by closing the stream before its first chunk.
                stats.record_stream();
                return stream_reply(Vec::new(), Duration::ZERO, StreamPlan::default(), in_flight);
            }
            (streamed, shared.script.respond_unchecked(&chat_req, &meta))
        }
        Err(reply) => {
            stats.record_failure();
            return reply;
        }
    };
    if let (
        Some(include_usage),
        ScriptedReply::Completion {
            completion,
            latency,
            stream,
        },
    ) = (streamed, &reply)
    {
        stats.record_completion();
        stats.record_stream();
        return stream_reply(
            super::sse::events(completion, include_usage, stream.chunks),
            *latency,
            *stream,
            in_flight,
        );
    }
    let _in_flight = in_flight;
    let latency = reply.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match reply {
        ScriptedReply::Completion { completion, .. } => {
            stats.record_completion();
            json_reply(StatusCode::OK, &completion.raw)
        }
        ScriptedReply::Failure {
            status,
            message,
            retry_after,
            ..
        } => {
            stats.record_failure();
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error_reply(status, &message, "scripted_failure", retry_after)
        }
    }
}

/// Reads and parses the body; the error is the ready-made 4xx reply.
async fn read_request(req: Request<Incoming>) -> Result<ChatRequest, Reply> {
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| {
            error_reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("cannot read the request body (limit {MAX_BODY_BYTES} bytes): {e}"),
                "invalid_body",
                None,
            )
        })?
        .to_bytes();
    let bad =
        |message: String| error_reply(StatusCode::BAD_REQUEST, &message, "invalid_request", None);
    // One pass into the typed request (`stream` lands in its `extra` fields): parsing into a
    // `Value` first and converting was a quarter of this server's CPU under load.
    let request: ChatRequest = serde_json::from_slice(&body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            bad(format!("the request body is not JSON: {e}"))
        } else {
            bad(format!("not a chat completions request: {e}"))
        }
    })?;
    if let Some(stream) = request.extra.get("stream") {
        if !stream.is_boolean() {
            return Err(bad(format!("`stream` must be true or false, not {stream}")));
        }
    }
    Ok(request)
}

/// `refuse_null_tool_content`: llama-cpp-python's answer to an assistant turn with tool calls
/// and no text content (HTTP 500, pydantic's validation errors, one per message type it
/// tried).
fn imitated_refusal(quirks: super::script::Quirks, request: &ChatRequest) -> Option<Reply> {
    if !quirks.refuse_null_tool_content {
        return None;
    }
    let index = request
        .messages
        .iter()
        .position(|m| m.content.is_none() && !m.tool_calls().is_empty())?;
    let message = format!(
        "4 validation errors:\n  {{'type': 'string_type', 'loc': ('body', 'messages', {index}, 'ChatCompletionRequestSystemMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}}\n  {{'type': 'literal_error', 'loc': ('body', 'messages', {index}, 'ChatCompletionRequestUserMessage', 'role'), 'msg': \"Input should be 'user'\", 'input': 'assistant', 'ctx': {{'expected': \"'user'\"}}}}\n  {{'type': 'string_type', 'loc': ('body', 'messages', {index}, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}}\n  {{'type': 'literal_error', 'loc': ('body', 'messages', {index}, 'ChatCompletionRequestToolMessage', 'role'), 'msg': \"Input should be 'tool'\", 'input': 'assistant', 'ctx': {{'expected': \"'tool'\"}}}}"
    );
    Some(error_reply(
        StatusCode::INTERNAL_SERVER_ERROR,
        &message,
        "internal_server_error",
        None,
    ))
}

/// The request offers tools and lets the model choose whether to call one.
fn offers_tools_auto(request: &ChatRequest) -> bool {
    !request.tools.is_empty() && matches!(request.tool_choice.as_deref(), None | Some("auto"))
}

/// `Some(include_usage)` when the request asks for a streamed reply.
fn wants_stream(request: &ChatRequest) -> Option<bool> {
    (request.extra.get("stream").and_then(Value::as_bool) == Some(true)).then(|| {
        request
            .extra
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    })
}

/// A streamed reply: the headers at once, then `events` spread evenly over `latency` (the
/// first at once, the last at `latency`), with the plan's stall after the first. A client
/// that goes away ends the stream early (counted as cancelled).
fn stream_reply(
    events: Vec<Bytes>,
    latency: Duration,
    plan: StreamPlan,
    in_flight: InFlight,
) -> Reply {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        let stats = in_flight.stats();
        // The last two events (usage, [DONE]) or one ([DONE]) follow the finish at once.
        let timed = events.len().saturating_sub(2).max(1);
        let started = tokio::time::Instant::now();
        for (i, event) in events.into_iter().enumerate() {
            let due =
                started + plan.stall * u32::from(i > 0) + spread(latency, i.min(timed - 1), timed);
            tokio::time::sleep_until(due).await;
            if tx.send(event).await.is_err() {
                stats.record_stream_cancelled();
                return;
            }
        }
    });
    let mut response = Response::new(ChannelBody(rx).boxed());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

/// When event `i` of `n` is due: `latency * i / (n - 1)` (all at once for one event).
fn spread(latency: Duration, i: usize, n: usize) -> Duration {
    if n <= 1 {
        return latency;
    }
    latency.mul_f64(i as f64 / (n - 1) as f64)
}

/// A response body fed by a channel, one frame per message.
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|event| event.map(|bytes| Ok(hyper::body::Frame::data(bytes))))
    }
}

fn meta_from_headers(headers: &HeaderMap) -> RequestMeta {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(decode_header_value)
            .unwrap_or_default()
    };
    RequestMeta::new(get(HEADER_AGENT), get(HEADER_RUN_ID))
}

fn json_reply(status: StatusCode, body: &Value) -> Reply {
    // `to_vec` writes straight into the buffer; `to_string` goes through `fmt::Display`.
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An OpenAI-shaped error: `{"error":{"message","type","code"}}`. 429 always carries
/// `Retry-After` (whole seconds, rounded up) and the precise `retry-after-ms`.
fn error_reply(
    status: StatusCode,
    message: &str,
    code: &str,
    retry_after: Option<Duration>,
) -> Reply {
    let kind = match status.as_u16() {
        429 => "rate_limit_error",
        401 | 403 => "authentication_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    };
    let mut response = json_reply(
        status,
        &json!({"error": {"message": message, "type": kind, "code": code}}),
    );
    let retry_after =
        retry_after.or((status == StatusCode::TOO_MANY_REQUESTS).then_some(Duration::ZERO));
    if let Some(wait) = retry_after {
        let headers = response.headers_mut();
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        headers.insert("retry-after-ms", HeaderValue::from(wait.as_millis() as u64));
    }
    response
}

/// For `delta mock-llm`: loads the script, serves it on 127.0.0.1:`port` (0 = any free
/// port) on its own runtime, calls `ready` with the bound address, and runs until SIGINT or
/// SIGTERM.
pub fn run_server_blocking(
    script_path: &Path,
    port: u16,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    run_on_own_runtime(script_path, port, ready, || {
        use tokio::signal::unix::{signal, SignalKind};
        // Installed before `ready` so a supervisor that signals right after the address is
        // announced cannot kill the process with the default action.
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
    })
}

/// Like [`run_server_blocking`] but runs until `stop` completes instead of waiting for a
/// signal (for embedders and tests).
pub fn run_server_until(
    script_path: &Path,
    port: u16,
    ready: impl FnOnce(SocketAddr),
    stop: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    run_on_own_runtime(script_path, port, ready, || Ok(stop))
}

fn run_on_own_runtime<F: Future<Output = ()>>(
    script_path: &Path,
    port: u16,
    ready: impl FnOnce(SocketAddr),
    stop: impl FnOnce() -> std::io::Result<F>,
) -> Result<(), ServeError> {
    let script = Arc::new(Script::load(script_path)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.block_on(async move {
        let stopped = stop().map_err(ServeError::Runtime)?;
        let server = serve(script, SocketAddr::from(([127, 0, 0, 1], port))).await?;
        ready(server.addr);
        stopped.await;
        server.shutdown().await;
        Ok(())
    })
}
