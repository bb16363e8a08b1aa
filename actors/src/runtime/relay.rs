//! The relay's actix-web routes (see `crate::relay` for what it is for): token check, one
//! [`LlmGate`] per distinct upstream (routes of one endpoint and key share it), one attempt
//! per request, OpenAI-shaped errors with the upstream's status and Retry-After.
//!
//! Must not: retry (the caller's engine does), log or store a request body or the key.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};

use crate::llm::endpoint::{decode_header_value, HEADER_AGENT, HEADER_RUN_ID};
use crate::llm::{
    ChatBackend, ChatRequest, GateConfig, HttpBackend, LlmError, LlmGate, RequestMeta, RetryPolicy,
    ScriptedBackend,
};
use crate::protocol::LlmTarget;
use crate::relay::{token_digest, RelayConfig, RelayError};
use crate::runtime::web::auth::same_token;

/// Largest request body forwarded.
const MAX_BODY: usize = 64 * 1024 * 1024;

struct Upstream {
    gate: Arc<LlmGate>,
    /// For `/models` of an HTTP upstream.
    endpoint: Option<crate::llm::Endpoint>,
}

struct RelayState {
    token: String,
    accepted_digests: Vec<String>,
    routes: HashMap<String, Arc<Upstream>>,
    default_route: String,
    request_timeout: std::time::Duration,
}

/// Runs the relay's System on this thread until `stop` says so (or its sender drops).
pub(crate) fn serve(
    config: RelayConfig,
    ready: std::sync::mpsc::Sender<Result<SocketAddr, RelayError>>,
    stop: std::sync::mpsc::Receiver<()>,
) {
    let system = actix::System::new();
    system.block_on(async move {
        let state = match build_state(&config) {
            Ok(state) => web::Data::new(state),
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .app_data(web::PayloadConfig::new(MAX_BODY))
                .route("/v1/chat/completions", web::post().to(chat_default))
                .route("/v1/models", web::get().to(models_default))
                .route("/r/{route}/v1/chat/completions", web::post().to(chat_routed))
                .route("/r/{route}/v1/models", web::get().to(models_routed))
                .default_service(web::to(|| async {
                    error(StatusCode::NOT_FOUND, "no such relay route: use /v1/chat/completions or /r/<route>/v1/chat/completions")
                }))
        })
        .workers(2)
        .disable_signals()
        .shutdown_timeout(1)
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

fn build_state(config: &RelayConfig) -> Result<RelayState, RelayError> {
    let mut by_key: HashMap<String, Arc<Upstream>> = HashMap::new();
    let mut routes = HashMap::new();
    for route in &config.routes {
        let key = route.target.gateway_key();
        let upstream = match by_key.get(&key) {
            Some(upstream) => upstream.clone(),
            None => {
                let (backend, endpoint): (Arc<dyn ChatBackend>, _) = match &route.target {
                    LlmTarget::Http(endpoint) => (
                        Arc::new(
                            HttpBackend::new(endpoint.clone(), config.request_timeout)
                                .map_err(|e| RelayError::Start(e.to_string()))?,
                        ),
                        Some(endpoint.clone()),
                    ),
                    LlmTarget::Scripted(script) => {
                        (Arc::new(ScriptedBackend::new(script.clone())), None)
                    }
                    LlmTarget::Custom { backend, .. } => (backend.clone(), None),
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
                    endpoint,
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
    })
}

fn error(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(serde_json::json!({
        "error": { "message": message, "type": "relay_error", "code": status.as_u16() }
    }))
}

fn authorized(request: &HttpRequest, state: &RelayState) -> bool {
    request
        .headers()
        .get(header::AUTHORIZATION)
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

fn header_text(request: &HttpRequest, name: &str) -> String {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(decode_header_value)
        .unwrap_or_default()
}

async fn chat_default(
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<RelayState>,
) -> HttpResponse {
    let route = state.default_route.clone();
    chat(request, &route, body, state).await
}

async fn chat_routed(
    request: HttpRequest,
    route: web::Path<String>,
    body: web::Bytes,
    state: web::Data<RelayState>,
) -> HttpResponse {
    chat(request, &route.into_inner(), body, state).await
}

async fn chat(
    request: HttpRequest,
    route: &str,
    body: web::Bytes,
    state: web::Data<RelayState>,
) -> HttpResponse {
    if !authorized(&request, &state) {
        return error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong relay token: send Authorization: Bearer <the relay's token>",
        );
    }
    let Some(upstream) = state.routes.get(route).cloned() else {
        return error(StatusCode::NOT_FOUND, &format!("no relay route {route:?}"));
    };
    let chat: ChatRequest = match serde_json::from_slice(&body) {
        Ok(chat) => chat,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("invalid chat request: {e}"),
            )
        }
    };
    let mut meta = RequestMeta::new(
        header_text(&request, HEADER_AGENT),
        header_text(&request, HEADER_RUN_ID),
    );
    meta.timeouts.request = state.request_timeout;
    match upstream.gate.complete(chat, meta, |_| {}).await {
        Ok(outcome) => {
            let completion = outcome.completion;
            let body = if completion.raw.is_null() {
                completion.to_openai_json(chrono::Utc::now().timestamp())
            } else {
                completion.raw
            };
            HttpResponse::Ok().json(body)
        }
        Err(LlmError::Http {
            status,
            message,
            retry_after,
        }) => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut response = error(code, &message);
            if let Some(wait) = retry_after {
                let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
                if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                    response.headers_mut().insert(header::RETRY_AFTER, value);
                }
            }
            response
        }
        Err(other) => error(StatusCode::BAD_GATEWAY, &other.to_string()),
    }
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

/// An HTTP upstream's own list (fetched with the key), else the scripted model's name.
async fn models(request: HttpRequest, route: &str, state: web::Data<RelayState>) -> HttpResponse {
    if !authorized(&request, &state) {
        return error(StatusCode::UNAUTHORIZED, "missing or wrong relay token");
    }
    let Some(upstream) = state.routes.get(route).cloned() else {
        return error(StatusCode::NOT_FOUND, &format!("no relay route {route:?}"));
    };
    let Some(endpoint) = &upstream.endpoint else {
        return HttpResponse::Ok().json(serde_json::json!({
            "object": "list",
            "data": [{ "id": crate::llm::scripted::DEFAULT_MODEL, "object": "model", "owned_by": "delta" }]
        }));
    };
    let url = format!("{}/models", endpoint.base_url.trim_end_matches('/'));
    let client = reqwest::Client::new();
    let mut call = client.get(url).timeout(state.request_timeout);
    if let Some(key) = &endpoint.api_key {
        call = call.bearer_auth(key);
    }
    match call.send().await {
        Ok(response) => {
            let status =
                StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            match response.bytes().await {
                Ok(bytes) => HttpResponse::build(status)
                    .content_type("application/json")
                    .body(bytes),
                Err(e) => error(StatusCode::BAD_GATEWAY, &e.to_string()),
            }
        }
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            &format!("cannot reach the endpoint's /models: {}", e.without_url()),
        ),
    }
}
