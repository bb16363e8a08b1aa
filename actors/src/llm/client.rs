//! [`HttpBackend`]: one chat-completion attempt against an OpenAI-compatible endpoint over
//! HTTP (reqwest): HTTP/1.1, or HTTP/2 where the endpoint's [`HttpTransport`] asks for it or
//! an `https://` endpoint offers it, with the optional cap on connections
//! (`llm.max_connections`).
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

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;

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
    timeout: Duration,
    /// `llm.max_connections`: one permit per request open on the wire.
    connections: Option<tokio::sync::Semaphore>,
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
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Result<Self, LlmError> {
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
        let first = recipe.build()?;
        let clients = if endpoint.transport.http2 == Some(true) {
            let per_thread = dashmap::DashMap::new();
            per_thread.insert(std::thread::current().id(), first.clone());
            Clients::PerThread {
                recipe,
                first,
                per_thread,
            }
        } else {
            Clients::Shared(first)
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
        Ok(HttpBackend {
            inner: Arc::new(Inner {
                endpoint,
                url,
                clients,
                timeout,
                connections,
            }),
        })
    }

    /// The endpoint this backend calls.
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// One attempt: POST the request, map the outcome. The whole attempt is bounded by
    /// `meta.timeouts.request`, the wait for the response headers and for each body chunk by
    /// `meta.timeouts.idle`.
    pub async fn send(
        &self,
        req: &ChatRequest,
        meta: &RequestMeta,
    ) -> Result<super::ChatCompletion, LlmError> {
        let inner = &self.inner;
        let limits = meta.timeouts;
        let _connection = match &inner.connections {
            Some(cap) => Some(cap.acquire().await.map_err(|_| {
                LlmError::Transport("the HTTP client's connection cap was closed".into())
            })?),
            None => None,
        };
        let builder = inner
            .clients
            .for_this_thread()?
            .post(inner.url.clone())
            .timeout(limits.request)
            .header(CONTENT_TYPE, "application/json");
        let mut builder = match &meta.wire_body {
            Some(body) => builder.body(body.clone()),
            None => builder.json(&*req.for_wire()),
        };
        if !meta.agent_name.is_empty() {
            builder = builder.header(HEADER_AGENT, encode_header_value(&meta.agent_name));
        }
        if !meta.run_id.is_empty() {
            builder = builder.header(HEADER_RUN_ID, encode_header_value(&meta.run_id));
        }
        let response = tokio::time::timeout(limits.idle, builder.send())
            .await
            .map_err(|_| self.timeout(TimeoutPhase::FirstByte, limits.idle))?
            .map_err(|e| self.transport_error(&e, limits.request))?;
        let status = response.status();
        let retry_after = parse_retry_after(response.headers());
        let body = self.read_body(response, meta).await?;
        if status.is_success() {
            return parse_completion(&body);
        }
        Err(LlmError::Http {
            status: status.as_u16(),
            message: error_message(status, &body),
            retry_after,
        })
    }

    /// The body, chunk by chunk, each within the idle limit.
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
                Some(bytes) => body.extend_from_slice(&bytes),
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
        // reqwest's own text is terse ("error sending request"); the cause chain says why.
        let mut text = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
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
}

/// The most calling threads that get a client of their own; calls from any thread after
/// them share the first client. Run arbiters are a fixed pool, far below this; the bound
/// is for an embedder that calls one backend from many short-lived threads, whose clients
/// (and connections) would otherwise be kept as long as the backend.
const MAX_THREAD_CLIENTS: usize = 64;

/// The client a call uses: one for the process, or one per calling thread (HTTP/2 prior
/// knowledge, see the module header).
enum Clients {
    Shared(reqwest::Client),
    PerThread {
        recipe: ClientRecipe,
        /// The constructing thread's client: also the one shared past the bound.
        first: reqwest::Client,
        per_thread: dashmap::DashMap<std::thread::ThreadId, reqwest::Client>,
    },
}

impl Clients {
    /// A handle on the calling thread's client (a cheap clone), built on first use.
    fn for_this_thread(&self) -> Result<reqwest::Client, LlmError> {
        match self {
            Clients::Shared(client) => Ok(client.clone()),
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
            .connect_timeout(self.timeout.min(Duration::from_secs(30)))
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
            messages: vec![super::super::ChatMessage::user("hi")],
            ..Default::default()
        };
        let err = b.send(&req, &RequestMeta::default()).await.unwrap_err();
        assert!(matches!(err, LlmError::Transport(_)), "{err:?}");
        assert!(err.is_retryable());
    }

    fn hello() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![super::super::ChatMessage::user("hi")],
            ..Default::default()
        }
    }

    fn limits(request_ms: u64, idle_ms: u64) -> RequestMeta {
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

    /// Regression: an endpoint that accepts and never answers held each attempt for 600 s.
    #[tokio::test]
    async fn llm_endpoint_that_never_answers_times_out_at_the_idle_limit() {
        let backend = stalling_endpoint(b"", 0).await;
        let err = backend
            .send(&hello(), &limits(30_000, 200))
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
}
