//! The REST API under `/api`: sessions, workers, input, agents. Every failure is a JSON body
//! `{error, code}` with a 4xx status for the client's mistakes (bad JSON, unknown ids, a
//! folder that does not exist, a body too large) and 5xx only for the server's own failures.

use actix::dev::ToEnvelope;
use actix::{Actor, Handler, MailboxError, Message};
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};

use super::WebState;
use crate::runtime::serve::messages::*;
use crate::runtime::serve::worker::Input;
use crate::runtime::serve::ServeManager;
use crate::serve::model::{CreateSessionRequest, CreateWorkerRequest};
use crate::serve::{ErrorClass, ServeError};

/// Largest text `POST .../input` accepts.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    code: &'a str,
}

pub fn error_response(status: StatusCode, error: &str, code: &str) -> HttpResponse {
    HttpResponse::build(status).json(ErrorBody { error, code })
}

pub fn serve_error(e: &ServeError) -> HttpResponse {
    error_response(status_of(e.class()), &e.to_string(), e.code())
}

/// The HTTP status of an error class.
pub fn status_of(class: ErrorClass) -> StatusCode {
    match class {
        ErrorClass::BadRequest => StatusCode::BAD_REQUEST,
        ErrorClass::NotFound => StatusCode::NOT_FOUND,
        ErrorClass::Conflict => StatusCode::CONFLICT,
        ErrorClass::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorClass::Unreadable => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorClass::Timeout => StatusCode::GATEWAY_TIMEOUT,
    }
}

/// Sends `message` to the manager and answers with its JSON (status `ok`) or its error.
pub async fn ask<M, T>(state: &WebState, message: M, ok: StatusCode) -> HttpResponse
where
    M: Message<Result = Result<T, ServeError>> + Send + 'static,
    T: Serialize + Send + 'static,
    ServeManager: Handler<M>,
    <ServeManager as Actor>::Context: ToEnvelope<ServeManager, M>,
{
    match call(state, message).await {
        Ok(value) => HttpResponse::build(ok).json(value),
        Err(response) => response,
    }
}

/// Sends `message` to the manager: its answer, or the response a handler returns instead
/// (the manager's refusal, or 503 while the server is stopping).
async fn call<M, T>(state: &WebState, message: M) -> Result<T, HttpResponse>
where
    M: Message<Result = Result<T, ServeError>> + Send + 'static,
    T: Send + 'static,
    ServeManager: Handler<M>,
    <ServeManager as Actor>::Context: ToEnvelope<ServeManager, M>,
{
    match state.manager.send(message).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(serve_error(&e)),
        Err(e) => Err(unavailable(&e)),
    }
}

/// 503: the manager's mailbox is closed because the server is stopping.
pub(super) fn unavailable(e: &MailboxError) -> HttpResponse {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("the server is stopping: {e}"),
        "unavailable",
    )
}

#[derive(Serialize)]
struct SessionBody<T> {
    session: T,
}

#[derive(Serialize)]
struct WorkerBody<T> {
    worker: T,
}

pub async fn list_sessions(state: web::Data<WebState>) -> HttpResponse {
    match state.manager.send(ListSessions).await {
        Ok(sessions) => HttpResponse::Ok().json(sessions),
        Err(e) => unavailable(&e),
    }
}

pub async fn create_session(
    state: web::Data<WebState>,
    body: web::Json<CreateSessionRequest>,
) -> HttpResponse {
    let message = CreateSession(body.into_inner());
    match call(&state, message).await {
        Ok(session) => HttpResponse::Created().json(SessionBody { session }),
        Err(response) => response,
    }
}

pub async fn get_session(state: web::Data<WebState>, path: web::Path<String>) -> HttpResponse {
    ask(&state, GetSession(path.into_inner()), StatusCode::OK).await
}

pub async fn delete_session(state: web::Data<WebState>, path: web::Path<String>) -> HttpResponse {
    match call(&state, DeleteSession(path.into_inner())).await {
        Ok(()) => HttpResponse::NoContent().finish(),
        Err(response) => response,
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartBody {
    #[serde(default)]
    continue_conversation: Option<bool>,
}

fn restart_body(body: &web::Bytes) -> Result<RestartBody, Box<HttpResponse>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(RestartBody::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error_response(
            StatusCode::BAD_REQUEST,
            &format!("invalid JSON body: {e}; expected {{\"continueConversation\": true|false}}"),
            "bad_json",
        ))
    })
}

pub async fn restart_session(
    state: web::Data<WebState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let body = match restart_body(&body) {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let message = RestartSession {
        session_id: path.into_inner(),
        // The design's session restart recreates the agents with their continue args.
        continue_conversation: body.continue_conversation.unwrap_or(true),
    };
    match call(&state, message).await {
        Ok(session) => HttpResponse::Ok().json(SessionBody { session }),
        Err(response) => response,
    }
}

pub async fn list_workers(state: web::Data<WebState>, path: web::Path<String>) -> HttpResponse {
    ask(&state, ListWorkers(path.into_inner()), StatusCode::OK).await
}

pub async fn create_worker(
    state: web::Data<WebState>,
    path: web::Path<String>,
    body: web::Json<CreateWorkerRequest>,
) -> HttpResponse {
    let message = CreateWorker {
        session_id: path.into_inner(),
        request: body.into_inner(),
    };
    match call(&state, message).await {
        Ok(worker) => HttpResponse::Created().json(WorkerBody { worker }),
        Err(response) => response,
    }
}

pub async fn delete_worker(
    state: web::Data<WebState>,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (session_id, worker_id) = path.into_inner();
    let message = DeleteWorker {
        session_id,
        worker_id,
    };
    match call(&state, message).await {
        Ok(()) => HttpResponse::NoContent().finish(),
        Err(response) => response,
    }
}

pub async fn restart_worker(
    state: web::Data<WebState>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> HttpResponse {
    let body = match restart_body(&body) {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let (session_id, worker_id) = path.into_inner();
    let message = RestartWorker {
        session_id,
        worker_id,
        continue_conversation: body.continue_conversation.unwrap_or(false),
    };
    match call(&state, message).await {
        Ok(worker) => HttpResponse::Ok().json(WorkerBody { worker }),
        Err(response) => response,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputBody {
    data: String,
}

pub async fn worker_input(
    state: web::Data<WebState>,
    path: web::Path<(String, String)>,
    body: web::Json<InputBody>,
) -> HttpResponse {
    let (session_id, worker_id) = path.into_inner();
    let data = body.into_inner().data;
    if data.len() > MAX_INPUT_BYTES {
        return serve_error(&ServeError::TooLarge {
            what: "input data",
            size: data.len(),
            limit: MAX_INPUT_BYTES,
        });
    }
    let message = FindWorker {
        session_id,
        worker_id,
    };
    let worker = match call(&state, message).await {
        Ok(worker) => worker,
        Err(response) => return response,
    };
    let bytes = data.len();
    match worker.send(Input(data)).await {
        Ok(Ok(())) => HttpResponse::Ok().json(serde_json::json!({ "sent": bytes })),
        Ok(Err(e)) => serve_error(&e),
        Err(_) => serve_error(&ServeError::Conflict("the worker stopped".into())),
    }
}

pub async fn list_agents(state: web::Data<WebState>) -> HttpResponse {
    let agents: Vec<_> = state.agents.definitions().cloned().collect();
    HttpResponse::Ok().json(agents)
}

pub async fn not_found(request: actix_web::HttpRequest) -> HttpResponse {
    error_response(
        StatusCode::NOT_FOUND,
        &format!(
            "no route {} {}; the API is under /api (see the README)",
            request.method(),
            request.path()
        ),
        "not_found",
    )
}
