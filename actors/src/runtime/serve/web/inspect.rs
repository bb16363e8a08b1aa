//! The batch view's and the run inspector's endpoints (all `GET`, JSON, for watched
//! workspaces only; every read off the arbiters through `web::block`):
//!
//! | path | answer |
//! |---|---|
//! | `/api/orchestrations/{id}?workspace=` | [`OrchestrationDetail`](crate::serve::batch_rows::OrchestrationDetail): status, stage graph, counts, tokens, durations |
//! | `/api/orchestrations/{id}/runs?workspace=&stage=&status=&q=&sort=&order=&offset=&limit=` | [`RowPage`](crate::serve::batch_rows::RowPage) |
//! | `/api/orchestrations/{id}/timeline?workspace=&stage=` | [`TimelineView`](crate::serve::batch_rows::TimelineView): every run as a bar |
//! | `/api/orchestrations/{id}/phases?workspace=&runs=a,b` | each run's model, tool and human spans (≤ 500 runs) |
//! | `/api/runs/{run}/trace?workspace=&known=` | [`TracePoll`]: the run's trace, or `{unchanged: true, ...}` when the journal is still `known` bytes |
//! | `/api/runs/{run}/calls/{iteration}?workspace=` | one model call |
//! | `/api/runs/{run}/tools/{actionId}?workspace=` | one tool call |
//!
//! Must not: read anything or decide anything the domain views do not
//! ([`crate::serve::inspector`], [`crate::serve::calls`], [`crate::serve::batch_view`]).

use std::path::PathBuf;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};

use super::rest::error_response;
use super::runs::watched;
use super::WebState;
use crate::serve::batch_cache::BatchCache;
use crate::serve::batch_rows::RowQuery;
use crate::serve::calls;
use crate::serve::inspector::{poll_trace, run_phases, TracePoll};
use crate::serve::run_files::InspectError;

/// Most runs whose phases one request asks for.
pub const MAX_PHASE_RUNS: usize = 500;

#[derive(Debug, Deserialize)]
pub struct WorkspaceQuery {
    workspace: PathBuf,
}

#[derive(Debug, Deserialize)]
pub struct TraceQuery {
    workspace: PathBuf,
    /// The journal size the page already has.
    #[serde(default)]
    known: Option<u64>,
}

/// The query of a page of rows (spelled out: a flattened struct reads numbers in a query
/// string as text and refuses them).
#[derive(Debug, Deserialize)]
pub struct RowsQuery {
    workspace: PathBuf,
    #[serde(default)]
    stage: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    sort: Option<String>,
    #[serde(default)]
    order: Option<String>,
    #[serde(default)]
    offset: usize,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
pub struct TimelineQuery {
    workspace: PathBuf,
    #[serde(default)]
    stage: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct PhasesQuery {
    workspace: PathBuf,
    /// Run ids, comma-separated.
    runs: String,
}

fn inspect_error(error: &InspectError) -> HttpResponse {
    let (status, code) = match error {
        InspectError::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid_id"),
        InspectError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
        InspectError::Unreadable { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "unreadable"),
    };
    error_response(status, &error.to_string(), code)
}

/// Runs `read` off the arbiter and answers with its JSON.
async fn answer<T: Serialize + Send + 'static>(
    read: impl FnOnce() -> Result<T, InspectError> + Send + 'static,
) -> HttpResponse {
    match web::block(read).await {
        Ok(Ok(value)) => HttpResponse::Ok().json(value),
        Ok(Err(e)) => inspect_error(&e),
        Err(e) => error_response(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), "io"),
    }
}

/// Answers from `read` (off the arbiter) when `workspace` is one the server watches, and
/// refuses it otherwise: the one gate every inspector route goes through.
async fn answer_in<T: Serialize + Send + 'static>(
    state: &WebState,
    workspace: PathBuf,
    read: impl FnOnce(PathBuf) -> Result<T, InspectError> + Send + 'static,
) -> HttpResponse {
    if let Err(refused) = watched(state, &workspace).await {
        return refused;
    }
    answer(move || read(workspace)).await
}

pub async fn orchestration(
    state: web::Data<WebState>,
    path: web::Path<String>,
    query: web::Query<WorkspaceQuery>,
) -> HttpResponse {
    let WorkspaceQuery { workspace } = query.into_inner();
    let batches = state.batches.clone();
    let id = path.into_inner();
    answer_in(&state, workspace, move |ws| {
        batches.with(&ws, &id, |index| Ok(index.detail()))
    })
    .await
}

pub async fn orchestration_runs(
    state: web::Data<WebState>,
    path: web::Path<String>,
    query: web::Query<RowsQuery>,
) -> HttpResponse {
    let RowsQuery {
        workspace,
        stage,
        status,
        q,
        sort,
        order,
        offset,
        limit,
    } = query.into_inner();
    let rows = RowQuery {
        stage,
        status,
        q,
        sort,
        order,
        offset,
        limit,
    };
    let batches = state.batches.clone();
    let id = path.into_inner();
    answer_in(&state, workspace, move |ws| {
        batches.with(&ws, &id, |index| index.rows(&rows))
    })
    .await
}

pub async fn orchestration_timeline(
    state: web::Data<WebState>,
    path: web::Path<String>,
    query: web::Query<TimelineQuery>,
) -> HttpResponse {
    let TimelineQuery { workspace, stage } = query.into_inner();
    let batches = state.batches.clone();
    let id = path.into_inner();
    answer_in(&state, workspace, move |ws| {
        batches.with(&ws, &id, |index| {
            Ok(index.timeline(stage.as_deref().filter(|s| !s.is_empty())))
        })
    })
    .await
}

pub async fn orchestration_phases(
    state: web::Data<WebState>,
    query: web::Query<PhasesQuery>,
) -> HttpResponse {
    let PhasesQuery { workspace, runs } = query.into_inner();
    if let Err(refused) = watched(&state, &workspace).await {
        return refused;
    }
    let ids: Vec<String> = runs
        .split(',')
        .filter(|id| !id.is_empty())
        .map(str::to_string)
        .collect();
    if ids.len() > MAX_PHASE_RUNS {
        return error_response(
            StatusCode::BAD_REQUEST,
            &format!(
                "{} runs asked for; at most {MAX_PHASE_RUNS} per request (zoom to a stage or a range)",
                ids.len()
            ),
            "too_many",
        );
    }
    answer(move || {
        // A run that cannot be read has no phases; the others still do.
        Ok(ids
            .into_iter()
            .map(|id| {
                let phases = run_phases(&workspace, &id).unwrap_or_default();
                (id, phases)
            })
            .collect::<std::collections::BTreeMap<_, _>>())
    })
    .await
}

pub async fn trace(
    state: web::Data<WebState>,
    path: web::Path<String>,
    query: web::Query<TraceQuery>,
) -> HttpResponse {
    let TraceQuery { workspace, known } = query.into_inner();
    let run_id = path.into_inner();
    answer_in(&state, workspace, move |workspace| {
        // As a JSON value, as it always went out (the page reads it either way).
        poll_trace(&workspace, &run_id, known)
            .map(|poll: TracePoll| serde_json::to_value(poll).unwrap_or_default())
    })
    .await
}

pub async fn model_call(
    state: web::Data<WebState>,
    path: web::Path<(String, u32)>,
    query: web::Query<WorkspaceQuery>,
) -> HttpResponse {
    let WorkspaceQuery { workspace } = query.into_inner();
    let (run_id, iteration) = path.into_inner();
    answer_in(&state, workspace, move |ws| {
        calls::model_call(&ws, &run_id, iteration)
    })
    .await
}

pub async fn tool_call(
    state: web::Data<WebState>,
    path: web::Path<(String, String)>,
    query: web::Query<WorkspaceQuery>,
) -> HttpResponse {
    let WorkspaceQuery { workspace } = query.into_inner();
    let (run_id, action_id) = path.into_inner();
    answer_in(&state, workspace, move |ws| {
        calls::tool_call(&ws, &run_id, &action_id)
    })
    .await
}

/// The cache the orchestration endpoints share (one per server).
pub fn batch_cache() -> std::sync::Arc<BatchCache> {
    std::sync::Arc::new(BatchCache::default())
}
