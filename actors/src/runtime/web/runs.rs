//! The runs view's endpoints: `GET /api/workspaces` (runs and orchestrations of every watched
//! workspace), `GET /api/runs/{runId}/timeline?workspace=&from=` (a run's journal as a
//! timeline, from a line offset for tailing), `POST /api/runs/{runId}/answer` (what
//! `delta continue -m` does, for a WAITING_FOR_INPUT run). Only watched workspaces are read.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::rest::{error_response, serve_error};
use super::WebState;
use crate::metadata::read_metadata;
use crate::protocol::RunStatus;
use crate::runtime::serve::watcher::{IsWatched, Views};
use crate::serve::runs_view::timeline;
use crate::serve::ServeError;
use crate::workspace::{control_dir, validate_run_id};

/// Longest answer accepted.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

pub async fn workspaces(state: web::Data<WebState>) -> HttpResponse {
    HttpResponse::Ok().json(state.watcher.send(Views).await.unwrap_or_default())
}

async fn watched(state: &WebState, workspace: &Path) -> Result<(), HttpResponse> {
    if state
        .watcher
        .send(IsWatched(workspace.to_path_buf()))
        .await
        .unwrap_or(false)
    {
        Ok(())
    } else {
        Err(error_response(
            StatusCode::NOT_FOUND,
            &format!(
                "{} is not a workspace this server shows; start it with `delta serve -w DIR`",
                workspace.display()
            ),
            "unknown_workspace",
        ))
    }
}

#[derive(Debug, Deserialize)]
pub struct TimelineQuery {
    workspace: PathBuf,
    #[serde(default)]
    from: usize,
}

pub async fn run_timeline(
    state: web::Data<WebState>,
    path: web::Path<String>,
    query: web::Query<TimelineQuery>,
) -> HttpResponse {
    let query = query.into_inner();
    if let Err(response) = watched(&state, &query.workspace).await {
        return response;
    }
    let run_id = path.into_inner();
    let read = web::block(move || timeline(&query.workspace, &run_id, query.from)).await;
    match read {
        Ok(Ok(timeline)) => HttpResponse::Ok().json(timeline),
        Ok(Err(ServeError::BadRequest(message))) => {
            error_response(StatusCode::NOT_FOUND, &message, "run_not_found")
        }
        Ok(Err(e)) => serve_error(&e),
        Err(e) => error_response(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), "io"),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    workspace: PathBuf,
    message: String,
}

pub async fn answer_run(
    state: web::Data<WebState>,
    path: web::Path<String>,
    body: web::Json<AnswerBody>,
) -> HttpResponse {
    let AnswerBody { workspace, message } = body.into_inner();
    let run_id = path.into_inner();
    if validate_run_id(&run_id).is_err() {
        return error_response(
            StatusCode::BAD_REQUEST,
            &format!(
                "invalid run id `{}`",
                run_id.chars().take(80).collect::<String>()
            ),
            "invalid_id",
        );
    }
    if message.len() > MAX_ANSWER_BYTES {
        return serve_error(&ServeError::TooLarge {
            what: "answer",
            size: message.len(),
            limit: MAX_ANSWER_BYTES,
        });
    }
    if let Err(response) = watched(&state, &workspace).await {
        return response;
    }
    let status = read_metadata(&control_dir(&workspace).join(&run_id)).map(|m| m.status);
    match status {
        Ok(RunStatus::WaitingForInput) => {}
        Ok(other) => {
            return error_response(
                StatusCode::CONFLICT,
                &format!("run {run_id} is {other:?}, not WAITING_FOR_INPUT"),
                "not_waiting",
            )
        }
        Err(e) => return error_response(StatusCode::NOT_FOUND, &e.to_string(), "run_not_found"),
    }
    // Exactly what `delta continue -m` does, in its own process that owns the run's lock.
    let spawned = tokio::process::Command::new(&state.delta_exe)
        .arg("continue")
        .arg("--run-id")
        .arg(&run_id)
        .arg("-w")
        .arg(&workspace)
        .arg("-m")
        .arg(&message)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(false)
        .spawn();
    match spawned {
        Ok(mut child) => {
            actix_web::rt::spawn(async move {
                let _ = child.wait().await;
            });
            HttpResponse::Accepted().json(serde_json::json!({ "runId": run_id, "continued": true }))
        }
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot run {}: {e}", state.delta_exe.display()),
            "spawn_failed",
        ),
    }
}
