//! `POST /api/runs/{runId}/answer`: what `delta continue` does for a WAITING_FOR_INPUT run, in
//! its own process (which takes the run's lock and drives the rest of the run). The answer
//! goes to the child on its standard input (`--message-file -`), never in its argv: every
//! local user can read a process's arguments (`/proc/<pid>/cmdline`), and an answer
//! beginning with `-` was parsed as an option and lost.
//!
//! The request waits until the child has taken the run (its status leaves WAITING_FOR_INPUT)
//! or has exited, so a `continue` that fails (a broken agent, no model configured, the run
//! locked elsewhere) is reported with what it said instead of a blind 202.
//!
//! Must not: block its arbiter (metadata reads go through `web::block`); give the child the
//! server's token; leave the child's stderr undrained (it would stall on a full pipe).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::rest::{error_response, serve_error};
use super::runs::watched;
use super::WebState;
use crate::metadata::read_metadata;
use crate::protocol::RunStatus;
use crate::runtime::serve::manager::process::WITHHELD_FROM_WORKERS;
use crate::serve::ServeError;
use crate::workspace::{control_dir, validate_run_id};

/// Longest answer accepted.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long the request waits for `delta continue` to take the run (it loads the agent and
/// takes the lock, normally within a second).
const TAKE_DEADLINE: Duration = Duration::from_secs(20);
/// How often the run's status is looked at meanwhile.
const POLL_EVERY: Duration = Duration::from_millis(50);
/// How much of the end of the child's stderr a failure report quotes.
const STDERR_TAIL_BYTES: usize = 4096;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    workspace: PathBuf,
    message: String,
}

/// The run's recorded status, off the arbiter; `None` when it cannot be read.
async fn status_of(run_dir: &Path) -> Option<RunStatus> {
    let run_dir = run_dir.to_path_buf();
    web::block(move || read_metadata(&run_dir).map(|m| m.status))
        .await
        .ok()?
        .ok()
}

/// The last [`STDERR_TAIL_BYTES`] of a stream, read to its end.
async fn keep_tail(mut stream: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut chunk = [0u8; 4096];
    while let Ok(read) = stream.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        let mut kept = tail.lock().unwrap_or_else(|p| p.into_inner());
        kept.extend_from_slice(&chunk[..read]);
        let excess = kept.len().saturating_sub(STDERR_TAIL_BYTES);
        kept.drain(..excess);
    }
}

fn said(tail: &Mutex<Vec<u8>>) -> String {
    let kept = tail.lock().unwrap_or_else(|p| p.into_inner());
    String::from_utf8_lossy(&kept).trim().to_string()
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
    let run_dir = control_dir(&workspace).join(&run_id);
    match web::block({
        let run_dir = run_dir.clone();
        move || read_metadata(&run_dir).map(|m| m.status)
    })
    .await
    {
        Ok(Ok(RunStatus::WaitingForInput)) => {}
        Ok(Ok(other)) => {
            return error_response(
                StatusCode::CONFLICT,
                &format!("run {run_id} is {other:?}, not WAITING_FOR_INPUT"),
                "not_waiting",
            )
        }
        Ok(Err(e)) => {
            return error_response(StatusCode::NOT_FOUND, &e.to_string(), "run_not_found")
        }
        Err(e) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), "io"),
    }
    let mut command = tokio::process::Command::new(&state.delta_exe);
    command
        .arg("continue")
        .arg("--run-id")
        .arg(&run_id)
        .arg("-w")
        .arg(&workspace)
        .args(["--message-file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    for name in WITHHELD_FROM_WORKERS {
        command.env_remove(name);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot run {}: {e}", state.delta_exe.display()),
                "spawn_failed",
            )
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A child that fails before reading closes the pipe: its exit says why.
        actix_web::rt::spawn(async move {
            let _ = stdin.write_all(message.as_bytes()).await;
        });
    }
    let tail = Arc::new(Mutex::new(Vec::new()));
    if let Some(stderr) = child.stderr.take() {
        actix_web::rt::spawn(keep_tail(stderr, tail.clone()));
    }
    let (exited_tx, mut exited) = tokio::sync::oneshot::channel();
    actix_web::rt::spawn(async move {
        let _ = exited_tx.send(child.wait().await.ok());
    });
    let deadline = tokio::time::Instant::now() + TAKE_DEADLINE;
    loop {
        tokio::select! {
            status = &mut exited => {
                let status = status.ok().flatten();
                return finished(&run_id, &run_dir, status, &tail).await;
            }
            () = tokio::time::sleep(POLL_EVERY) => {
                match status_of(&run_dir).await {
                    Some(RunStatus::WaitingForInput) | None => {}
                    Some(status) => {
                        return HttpResponse::Accepted().json(serde_json::json!({
                            "runId": run_id, "continued": true, "status": status
                        }))
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    return error_response(
                        StatusCode::GATEWAY_TIMEOUT,
                        &format!(
                            "delta continue has not taken run {run_id} within {}s; it is still trying (watch the run's status)",
                            TAKE_DEADLINE.as_secs()
                        ),
                        "continue_slow",
                    );
                }
            }
        }
    }
}

/// `delta continue` exited before the request saw the run taken: the answer arrived if it
/// finished the way a run does (completed, or waiting for the next answer) or the run left
/// WAITING_FOR_INPUT; otherwise its failure is reported with the end of what it said.
async fn finished(
    run_id: &str,
    run_dir: &Path,
    exit: Option<std::process::ExitStatus>,
    tail: &Mutex<Vec<u8>>,
) -> HttpResponse {
    let code = exit.and_then(|status| status.code());
    let status = status_of(run_dir).await;
    let delivered = matches!(code, Some(0 | 101))
        || status.is_some_and(|status| status != RunStatus::WaitingForInput);
    if delivered {
        return HttpResponse::Ok().json(serde_json::json!({
            "runId": run_id, "continued": true, "status": status, "exitCode": code
        }));
    }
    let how = match code {
        Some(code) => format!("exited with code {code}"),
        None => "was killed".to_string(),
    };
    let said = said(tail);
    let said = if said.is_empty() {
        "(it printed nothing)".to_string()
    } else {
        said
    };
    error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!(
            "the answer was not delivered: delta continue {how} and run {run_id} still waits for input: {said}"
        ),
        "continue_failed",
    )
}
