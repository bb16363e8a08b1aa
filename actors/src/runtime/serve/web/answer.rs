//! `POST /api/runs/{runId}/answer`: what `delta continue` does for a WAITING_FOR_INPUT run.
//! The request is checked ([`crate::serve::answer::check_request`]), its workspace must be
//! watched, and the manager carries the answer to the run
//! ([`crate::runtime::serve::manager::answer`], which says why in a process of its own);
//! this handler only translates its outcome: 202 once the run is taken, 200 when the
//! continuation already ended, the error's class and code otherwise.
//!
//! Must not: start processes or read the run's files (the manager does).

use std::path::PathBuf;

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::rest::{error_response, status_of, unavailable};
use super::runs::watched;
use super::WebState;
use crate::runtime::serve::manager::answer::AnswerRun;
use crate::serve::answer::{check_request, AnswerError, Answered};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    workspace: PathBuf,
    message: String,
}

fn answer_error(error: &AnswerError) -> HttpResponse {
    error_response(status_of(error.class()), &error.to_string(), error.code())
}

pub async fn answer_run(
    state: web::Data<WebState>,
    path: web::Path<String>,
    body: web::Json<AnswerBody>,
) -> HttpResponse {
    let AnswerBody { workspace, message } = body.into_inner();
    let run_id = path.into_inner();
    if let Err(refused) = check_request(&run_id, &message) {
        return answer_error(&refused);
    }
    if let Err(response) = watched(&state, &workspace).await {
        return response;
    }
    let request = AnswerRun {
        workspace,
        run_id: run_id.clone(),
        message,
    };
    match state.manager.send(request).await {
        Ok(Ok(Answered::Taken { status })) => HttpResponse::Accepted().json(serde_json::json!({
            "runId": run_id, "continued": true, "status": status
        })),
        Ok(Ok(Answered::Finished { status, exit_code })) => {
            HttpResponse::Ok().json(serde_json::json!({
                "runId": run_id, "continued": true, "status": status, "exitCode": exit_code
            }))
        }
        Ok(Err(e)) => answer_error(&e),
        Err(e) => unavailable(&e),
    }
}
