//! The relay's actix-web routes (see `crate::relay` for what it is for): the token check
//! (before any body is read), one [`LlmGate`] per distinct upstream (routes of one endpoint
//! and key share it), one attempt per request, answers passed through from HTTP endpoints
//! (`chat.rs`), bodies read within the relay's limits (`body.rs`).
//!
//! A caller that disconnects is noticed at once (HTTP/1 half-closed connections are not
//! allowed: the end of a caller's input ends its request), and its handler is dropped: a call
//! queued at the gate never goes out, a call in progress closes its connection to the
//! endpoint, a stream stops being read.
//!
//! Must not: retry (the caller's engine does), log or store a request body or the key.

mod body;
mod chat;
mod handle;

pub use handle::Relay;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};

use crate::llm::LlmTarget;
use crate::llm::{ChatBackend, GateConfig, HttpBackend, LlmGate, RetryPolicy, ScriptedBackend};
use crate::relay::forward::{AnswerBody, Forwarder};
use crate::relay::usage::UsageCounters;
use crate::relay::{token_digest, RelayConfig, RelayError};
use crate::token::same_token;

/// Where a route's requests go.
enum UpstreamKind {
    /// An HTTP endpoint: requests and answers pass through.
    Http(Box<Forwarder>),
    /// An in-process model (the scripted one, or an embedder's backend), answered through
    /// its gate.
    InProcess,
}

struct Upstream {
    gate: Arc<LlmGate>,
    kind: UpstreamKind,
    /// `--tpm`: the tokens this endpoint billed in the last minute, against the limit.
    tokens: Option<Arc<crate::relay::tpm::TokensPerMinute>>,
}

struct RelayState {
    token: String,
    accepted_digests: Vec<String>,
    routes: HashMap<String, Arc<Upstream>>,
    default_route: String,
    request_timeout: Duration,
    bodies: body::BodyMemory,
    usage: Arc<UsageCounters>,
    /// One spending cap across every caller (`RelayConfig::budget`).
    budget: Option<Arc<crate::relay::budget::RelayBudget>>,
}

/// Runs the relay's System on this thread until `stop` says so (or its sender drops).
pub(crate) fn serve(
    config: RelayConfig,
    usage: Arc<UsageCounters>,
    ready: std::sync::mpsc::Sender<Result<SocketAddr, RelayError>>,
    stop: std::sync::mpsc::Receiver<()>,
) {
    let system = actix::System::new();
    system.block_on(async move {
        let state = match build_state(&config, usage) {
            Ok(state) => web::Data::new(state),
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .route("/v1/chat/completions", web::post().to(chat_default))
                .route("/v1/models", web::get().to(models_default))
                .route("/r/{route}/v1/chat/completions", web::post().to(chat_routed))
                .route("/r/{route}/v1/models", web::get().to(models_routed))
                .route("/metrics", web::get().to(metrics))
                .default_service(web::to(|| async {
                    refuse(StatusCode::NOT_FOUND, "no such relay route: use /v1/chat/completions or /r/<route>/v1/chat/completions")
                }))
        })
        .workers(2)
        .disable_signals()
        .shutdown_timeout(1)
        // A caller's end of input ends its request, so a caller that left is noticed.
        .h1_allow_half_closed(false)
        .bind(config.listen);
        let server = match server {
            Ok(server) => server,
            Err(e) => {
                let _ = ready.send(Err(RelayError::Bind {
                    addr: config.listen,
                    message: e.to_string(),
                }));
                return;
            }
        };
        let addr = server.addrs().first().copied().unwrap_or(config.listen);
        let server = server.run();
        let handle = server.handle();
        let _ = ready.send(Ok(addr));
        // The stop signal arrives on a std channel: wait for it off the runtime.
        actix_web::rt::spawn(async move {
            let _ = tokio::task::spawn_blocking(move || stop.recv()).await;
            handle.stop(false).await;
        });
        let _ = server.await;
    });
}

fn build_state(config: &RelayConfig, usage: Arc<UsageCounters>) -> Result<RelayState, RelayError> {
    let mut by_key: HashMap<String, Arc<Upstream>> = HashMap::new();
    let mut routes = HashMap::new();
    for route in &config.routes {
        let key = route.target.gateway_key();
        let upstream = match by_key.get(&key) {
            Some(upstream) => upstream.clone(),
            None => {
                let (backend, kind): (Arc<dyn ChatBackend>, _) = match &route.target {
                    // The gate's backend is never called for an HTTP route (its requests pass
                    // through the forwarder); the gate only admits them.
                    LlmTarget::Http(endpoint) => {
                        let forwarder = Forwarder::new(endpoint).map_err(RelayError::Start)?;
                        let backend = HttpBackend::new(endpoint.clone(), config.request_timeout)
                            .map_err(|e| RelayError::Start(forwarder.redact(&e.to_string())))?;
                        (Arc::new(backend), UpstreamKind::Http(Box::new(forwarder)))
                    }
                    LlmTarget::Scripted(script) => (
                        Arc::new(ScriptedBackend::new(script.clone())),
                        UpstreamKind::InProcess,
                    ),
                    LlmTarget::Custom { backend, .. } => (backend.clone(), UpstreamKind::InProcess),
                };
                let gate = LlmGate::new(
                    backend,
                    GateConfig {
                        max_in_flight: config.max_in_flight,
                        requests_per_minute: config.requests_per_minute,
                        retry: RetryPolicy::never(),
                    },
                );
                let upstream = Arc::new(Upstream {
                    gate: Arc::new(gate),
                    kind,
                    tokens: config
                        .tokens_per_minute
                        .map(|limit| Arc::new(crate::relay::tpm::TokensPerMinute::new(limit))),
                });
                by_key.insert(key, upstream.clone());
                upstream
            }
        };
        routes.insert(route.name.clone(), upstream);
    }
    let default_route = config
        .routes
        .first()
        .map(|r| r.name.clone())
        .ok_or(RelayError::NoRoute)?;
    Ok(RelayState {
        token: config.token.clone(),
        accepted_digests: config.accepted_token_digests.clone(),
        routes,
        default_route,
        request_timeout: config.request_timeout,
        bodies: body::BodyMemory::new(config.limits),
        usage,
        budget: config.budget.clone(),
    })
}

fn error_body(status: StatusCode, message: &str) -> serde_json::Value {
    serde_json::json!({
        "error": { "message": message, "type": "relay_error", "code": status.as_u16() }
    })
}

/// The relay's own error answer, OpenAI-shaped.
fn error(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(error_body(status, message))
}

/// [`error`], closing the connection: the request's body (if any) is not read.
fn refuse(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status)
        .force_close()
        .json(error_body(status, message))
}

fn authorized(request: &HttpRequest, state: &RelayState) -> bool {
    request
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| {
            same_token(given, &state.token)
                || (!state.accepted_digests.is_empty() && {
                    let digest = token_digest(given);
                    state
                        .accepted_digests
                        .iter()
                        .any(|accepted| same_token(&digest, accepted))
                })
        })
}

async fn chat_default(
    request: HttpRequest,
    body: web::Payload,
    state: web::Data<RelayState>,
) -> HttpResponse {
    let route = state.default_route.clone();
    chat::chat(request, &route, body, state).await
}

async fn chat_routed(
    request: HttpRequest,
    route: web::Path<String>,
    body: web::Payload,
    state: web::Data<RelayState>,
) -> HttpResponse {
    chat::chat(request, &route.into_inner(), body, state).await
}

/// The relay's Prometheus metrics (OpenMetrics), for a holder of its token.
async fn metrics(request: HttpRequest, state: web::Data<RelayState>) -> HttpResponse {
    if !authorized(&request, &state) {
        return refuse(StatusCode::UNAUTHORIZED, "missing or wrong relay token");
    }
    let mut text = crate::openmetrics::MetricsText::new();
    state.usage.write_metrics(&mut text);
    if let Some(budget) = &state.budget {
        crate::budget::write_remaining(&mut text, budget.ledgers().map(|cap| cap.as_ref()));
    }
    HttpResponse::Ok()
        .content_type(crate::openmetrics::CONTENT_TYPE)
        .body(text.finish())
}

async fn models_default(request: HttpRequest, state: web::Data<RelayState>) -> HttpResponse {
    let route = state.default_route.clone();
    models(request, &route, state).await
}

async fn models_routed(
    request: HttpRequest,
    route: web::Path<String>,
    state: web::Data<RelayState>,
) -> HttpResponse {
    models(request, &route.into_inner(), state).await
}

/// An HTTP upstream's own list (fetched with the key, passed through), else the scripted
/// model's name.
async fn models(request: HttpRequest, route: &str, state: web::Data<RelayState>) -> HttpResponse {
    if !authorized(&request, &state) {
        return refuse(StatusCode::UNAUTHORIZED, "missing or wrong relay token");
    }
    let Some(upstream) = state.routes.get(route).cloned() else {
        return refuse(StatusCode::NOT_FOUND, &format!("no relay route {route:?}"));
    };
    let UpstreamKind::Http(forwarder) = &upstream.kind else {
        return HttpResponse::Ok().json(serde_json::json!({
            "object": "list",
            "data": [{ "id": crate::llm::scripted::DEFAULT_MODEL, "object": "model", "owned_by": "delta" }]
        }));
    };
    match forwarder.models(state.request_timeout).await {
        Ok(answer) => {
            let mut response = chat::answer_head(&answer);
            match answer.body {
                AnswerBody::Whole { bytes, .. } => response.body(bytes),
                AnswerBody::Events(events) => response.streaming(events),
            }
        }
        Err(e) => {
            tracing::warn!(route, "relay: GET /models: {e}");
            error(StatusCode::BAD_GATEWAY, &e.to_string())
        }
    }
}
