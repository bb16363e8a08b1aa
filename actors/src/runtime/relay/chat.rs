//! `POST .../chat/completions` on the relay: token, route, body (`body.rs`), then either the
//! pass-through to an HTTP endpoint (a place at the route's gate, the request's bytes sent as
//! they came, the answer handed back as the endpoint gave it, streamed event by event when it
//! streams) or an in-process model's answer (JSON, or SSE when the request asked for
//! `stream: true`).
//!
//! Every request ends in one log line (`info`, or `warn` when the endpoint failed) with its
//! route, caller, status, duration and tokens; a caller that leaves before its answer is
//! complete is logged and counted as abandoned. Log texts are redacted.
//!
//! Must not: log a request body, or answer a text that has not been through the upstream's
//! redaction.

use std::sync::Arc;
use std::time::Instant;

use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, HttpResponseBuilder};

use super::{authorized, body, error, refuse, RelayState, Upstream, UpstreamKind};
use crate::llm::endpoint::{decode_header_value, HEADER_AGENT, HEADER_RUN_ID};
use crate::llm::{ChatRequest, LlmError, RequestMeta, Usage};
use crate::relay::forward::{
    AnswerBody, ForwardError, ForwardRequest, Forwarded, Forwarder, StreamEnding,
};
use crate::relay::sse::completion_events;
use crate::relay::usage::UsageCounters;

/// What the relay reads of a request body itself; the rest passes through untouched.
#[derive(serde::Deserialize)]
struct StreamFlags {
    #[serde(default)]
    stream: Option<bool>,
    /// The output limit, for the relay budget's estimate (either spelling).
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(serde::Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// One request as logged.
struct Exchange {
    route: String,
    agent: String,
    run_id: String,
    started: Instant,
    usage: Arc<UsageCounters>,
    /// Set once an answer is on its way; a drop before that means the caller left.
    answered: bool,
    /// The endpoint's tokens-per-minute window, charged with the answer's tokens.
    tokens: Option<Arc<crate::relay::tpm::TokensPerMinute>>,
    /// The relay's spending cap, charged with the answer's tokens.
    budget: Option<Arc<crate::relay::budget::RelayBudget>>,
}

impl Exchange {
    fn done(&mut self, status: u16, streamed: bool, usage: Option<Usage>) {
        self.answered = true;
        self.usage.record(streamed, usage);
        self.usage
            .record_route(&self.route, status, streamed, usage);
        let (prompt, completion) = usage.map_or((0, 0), |u| (u.prompt_tokens, u.completion_tokens));
        if let Some(tokens) = &self.tokens {
            tokens.record(Instant::now(), prompt.saturating_add(completion));
        }
        if let (Some(budget), Some(usage)) = (&self.budget, usage) {
            budget.charge(&self.route, &usage);
        }
        tracing::info!(
            route = %self.route,
            agent = %self.agent,
            run_id = %self.run_id,
            "relay: {status}{} in {} ms ({prompt} tokens in, {completion} out)",
            if streamed { " streamed" } else { "" },
            self.started.elapsed().as_millis()
        );
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if !self.answered {
            self.usage.record_abandoned();
            self.usage.record_route_abandoned(&self.route);
            tracing::info!(
                route = %self.route,
                agent = %self.agent,
                run_id = %self.run_id,
                "relay: the caller left after {} ms, before its answer; its call was dropped",
                self.started.elapsed().as_millis()
            );
        }
    }
}

/// The caller's W3C trace context (`traceparent`, `tracestate`), passed on to the endpoint
/// when well-formed (anything else is dropped, as the W3C rules say).
fn trace_context(request: &HttpRequest) -> Option<crate::protocol::TraceSpan> {
    let value = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    crate::protocol::TraceSpan::from_traceparent(value("traceparent")?, value("tracestate"))
}

fn header_text(request: &HttpRequest, name: &str) -> String {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(decode_header_value)
        .unwrap_or_default()
}

pub(super) async fn chat(
    request: HttpRequest,
    route: &str,
    payload: web::Payload,
    state: web::Data<RelayState>,
) -> HttpResponse {
    if !authorized(&request, &state) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "missing or wrong relay token: send Authorization: Bearer <the relay's token>",
        );
    }
    let Some(upstream) = state.routes.get(route).cloned() else {
        return refuse(StatusCode::NOT_FOUND, &format!("no relay route {route:?}"));
    };
    let mut exchange = Exchange {
        route: route.to_owned(),
        agent: header_text(&request, HEADER_AGENT),
        run_id: header_text(&request, HEADER_RUN_ID),
        started: Instant::now(),
        usage: Arc::clone(&state.usage),
        answered: false,
        tokens: upstream.tokens.clone(),
        budget: state.budget.clone(),
    };
    // `--tpm`: wait while the endpoint's last minute of tokens is at the limit (counted as
    // a rate-limit wait, like the requests-per-minute gate's).
    if let Some(tokens) = &upstream.tokens {
        let waited = tokens.wait_for_room().await;
        if !waited.is_zero() {
            exchange.usage.record_wait(&exchange.route, waited);
        }
    }
    let (body, share) = match body::read(&request, payload, &state.bodies).await {
        Ok(read) => read,
        Err(response) => {
            exchange.answered = true;
            return response;
        }
    };
    let flags: StreamFlags = match serde_json::from_slice(&body) {
        Ok(flags) => flags,
        Err(e) => {
            exchange.answered = true;
            return error(
                StatusCode::BAD_REQUEST,
                &format!("invalid chat request: the body is not a JSON object: {e}"),
            );
        }
    };
    if let Some(budget) = &state.budget {
        let max_tokens = flags.max_tokens.or(flags.max_completion_tokens);
        if let Some(message) = budget.refusal(route, body.len(), max_tokens) {
            exchange.answered = true;
            tracing::warn!(route = %exchange.route, run_id = %exchange.run_id, "relay: {message}");
            let status = StatusCode::from_u16(crate::relay::budget::REFUSAL_STATUS)
                .unwrap_or(StatusCode::PAYMENT_REQUIRED);
            return HttpResponse::build(status).json(crate::relay::budget::refusal_body(&message));
        }
    }
    match &upstream.kind {
        UpstreamKind::Http(forwarder) => {
            let request = ForwardRequest {
                agent: exchange.agent.clone(),
                run_id: exchange.run_id.clone(),
                stream: flags.stream == Some(true),
                limit: state.request_timeout,
                trace: trace_context(&request),
            };
            pass_through(&upstream, forwarder, body, share, request, exchange).await
        }
        UpstreamKind::InProcess => {
            drop(share);
            in_process(&upstream, &body, &flags, &state, exchange).await
        }
    }
}

/// The request's bytes to the endpoint, its answer back.
async fn pass_through(
    upstream: &Upstream,
    forwarder: &Forwarder,
    body: bytes::Bytes,
    share: body::BodyShare,
    request: ForwardRequest,
    mut exchange: Exchange,
) -> HttpResponse {
    tracing::debug!(
        route = %exchange.route,
        agent = %exchange.agent,
        run_id = %exchange.run_id,
        "relay: queued for a place at the endpoint"
    );
    let pass = match upstream.gate.admit().await {
        Ok(pass) => {
            exchange.usage.record_wait(&exchange.route, pass.waited);
            pass
        }
        Err(e) => {
            exchange.answered = true;
            return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
        }
    };
    let forwarded = forwarder.chat(body, &request).await;
    // The body is sent (or will never be): its memory is free for the next caller.
    drop(share);
    let answer = match forwarded {
        Ok(answer) => answer,
        Err(e) => {
            exchange.answered = true;
            tracing::warn!(
                route = %exchange.route,
                agent = %exchange.agent,
                run_id = %exchange.run_id,
                "relay: {e}"
            );
            let status = match e {
                ForwardError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
                _ => StatusCode::BAD_GATEWAY,
            };
            return error(status, &e.to_string());
        }
    };
    if let Some(wait) = answer.retry_after {
        // The endpoint spoke for every caller: hold them all back.
        upstream.gate.hold_back(wait);
    }
    let mut response = answer_head(&answer);
    if answer.status >= 400 {
        tracing::warn!(
            route = %exchange.route,
            agent = %exchange.agent,
            run_id = %exchange.run_id,
            "relay: the endpoint answered {}{}",
            answer.status,
            match &answer.body {
                AnswerBody::Whole { bytes, .. } => format!(": {}", String::from_utf8_lossy(&bytes[..bytes.len().min(500)])),
                AnswerBody::Events(_) => String::new(),
            }
        );
    }
    match answer.body {
        AnswerBody::Whole { bytes, usage, .. } => {
            exchange.done(answer.status, false, usage);
            drop(pass);
            response.body(bytes)
        }
        AnswerBody::Events(events) => {
            let status = answer.status;
            let events = events.on_end(move |end| {
                // The endpoint's place is held until the stream is over.
                drop(pass);
                match end.ending {
                    StreamEnding::Finished => exchange.done(status, true, end.usage),
                    StreamEnding::BrokeOff(why) => {
                        exchange.answered = true;
                        exchange.usage.record(true, end.usage);
                        tracing::warn!(
                            route = %exchange.route,
                            agent = %exchange.agent,
                            run_id = %exchange.run_id,
                            "relay: the streamed answer broke off: {why}"
                        );
                    }
                    // The Exchange's drop logs and counts the caller that left.
                    StreamEnding::CallerLeft => {}
                }
            });
            response
                .insert_header((header::CACHE_CONTROL, "no-cache"))
                .streaming(events)
        }
    }
}

/// The endpoint's status and kept headers.
pub(super) fn answer_head(answer: &Forwarded) -> HttpResponseBuilder {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = HttpResponse::build(status);
    for (name, value) in &answer.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            response.insert_header((name, value));
        }
    }
    response
}

/// The scripted model (or an embedder's backend) answers in-process.
async fn in_process(
    upstream: &Upstream,
    body: &[u8],
    flags: &StreamFlags,
    state: &RelayState,
    mut exchange: Exchange,
) -> HttpResponse {
    let chat: ChatRequest = match serde_json::from_slice(body) {
        Ok(chat) => chat,
        Err(e) => {
            exchange.answered = true;
            return error(
                StatusCode::BAD_REQUEST,
                &format!("invalid chat request: {e}"),
            );
        }
    };
    let mut meta = RequestMeta::new(exchange.agent.clone(), exchange.run_id.clone());
    meta.timeouts.request = state.request_timeout;
    match upstream.gate.complete(chat, meta, |_| {}).await {
        Ok(outcome) => {
            exchange.usage.record_wait(&exchange.route, outcome.waited);
            let completion = outcome.completion;
            let created = chrono::Utc::now().timestamp();
            let streamed = flags.stream == Some(true);
            exchange.done(200, streamed, completion.usage);
            if streamed {
                let include_usage =
                    flags.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true);
                return HttpResponse::Ok()
                    .content_type("text/event-stream")
                    .insert_header((header::CACHE_CONTROL, "no-cache"))
                    .body(completion_events(&completion, include_usage, created));
            }
            let body = if completion.raw.is_null() {
                completion.to_openai_json(created)
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
            exchange.done(status, false, None);
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
        Err(other) => {
            exchange.answered = true;
            error(StatusCode::BAD_GATEWAY, &other.to_string())
        }
    }
}
