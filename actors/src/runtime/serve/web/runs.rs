//! The runs view's endpoints: `GET /api/workspaces` (runs and orchestrations of every watched
//! workspace) and `GET /api/runs/{runId}/timeline?workspace=&from=` (a run's journal as a
//! timeline, from a line offset for tailing); answering a run is [`super::answer`]. Only
//! watched workspaces are read.

use std::path::{Path, PathBuf};

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::rest::{error_response, serve_error};
use super::WebState;
use crate::runtime::serve::watcher::{IsWatched, Views};
use crate::serve::runs_view::timeline;
use crate::serve::ServeError;

pub async fn workspaces(state: web::Data<WebState>) -> HttpResponse {
    HttpResponse::Ok().json(state.watcher.send(Views).await.unwrap_or_default())
}

/// `GET /metrics`: the watched batches as Prometheus metrics (OpenMetrics; behind the
/// token like every route but the page).
pub async fn metrics(state: web::Data<WebState>) -> HttpResponse {
    let text = state
        .watcher
        .send(crate::runtime::serve::watcher::MetricsText)
        .await
        .unwrap_or_default();
    HttpResponse::Ok()
        .content_type(crate::openmetrics::CONTENT_TYPE)
        .body(text)
}

pub(super) async fn watched(state: &WebState, workspace: &Path) -> Result<(), HttpResponse> {
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
