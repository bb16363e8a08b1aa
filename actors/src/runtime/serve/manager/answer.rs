//! [`AnswerRun`]: the page's answer to a run that waits for input, carried to the run by a
//! `delta continue` process the manager starts, as a person would run it. The answer goes to
//! the child on its standard input (`--message-file -`), never in its argv: every local user
//! can read a process's arguments (`/proc/<pid>/cmdline`), and an answer beginning with `-`
//! was parsed as an option and lost. The reply waits until the child has taken the run (its
//! status leaves WAITING_FOR_INPUT) or has exited, so a `continue` that fails (a broken agent,
//! no model configured, the run locked elsewhere) is reported with what it said instead of a
//! blind 202. What each outcome means is decided in [`crate::serve::answer`].
//!
//! Why a process and not the engine's continue path in the server's own process:
//! - the run outlives the server: a continued run goes on when `delta serve` stops or is
//!   restarted, as a run started from a terminal does;
//! - the run's tools are kept apart from the server: they start from a process of their own
//!   (its process group, descriptors, limits and signals), never from the server that holds
//!   every page's connections and workers;
//! - what a run needs (the agent's endpoint, key, dialect and transport, the `.env` cascade,
//!   retry and model overrides) is resolved by the `delta` binary; a second resolution
//!   inside the server could answer differently from `delta continue` in a terminal.
//!
//! Must not: block the manager (the reply is a future of its own; metadata reads go through
//! `spawn_blocking`); give the child the server's token; leave the child's stderr undrained
//! (it would stall on a full pipe); kill the child when the request ends.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::process::WITHHELD_FROM_WORKERS;
use super::ServeManager;
use crate::metadata::{read_metadata, MetadataError};
use crate::protocol::RunStatus;
use crate::serve::answer::{after_exit, check_waiting, taken, AnswerError, Answered, StderrTail};
use crate::workspace::control_dir;

/// How long the reply waits for `delta continue` to take the run (it loads the agent and
/// takes the lock, normally within a second).
const TAKE_DEADLINE: Duration = Duration::from_secs(20);
/// How often the run's status is looked at meanwhile.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// Continue `run_id` of `workspace` (a watched one, an id checked by
/// [`crate::serve::answer::check_request`]) with `message` as the person's answer.
#[derive(Message)]
#[rtype(result = "Result<Answered, AnswerError>")]
pub struct AnswerRun {
    pub workspace: PathBuf,
    pub run_id: String,
    pub message: String,
}

impl Handler<AnswerRun> for ServeManager {
    type Result = ResponseFuture<Result<Answered, AnswerError>>;

    fn handle(&mut self, request: AnswerRun, _: &mut Self::Context) -> Self::Result {
        let delta_exe = self.config.delta_exe.clone();
        Box::pin(continue_with_answer(delta_exe, request))
    }
}

/// The run's recorded status, off the arbiter.
async fn read_status(run_dir: &Path) -> Result<Result<RunStatus, MetadataError>, AnswerError> {
    let run_dir = run_dir.to_path_buf();
    tokio::task::spawn_blocking(move || read_metadata(&run_dir).map(|m| m.status))
        .await
        .map_err(|e| AnswerError::Io(e.to_string()))
}

/// The run's status now; `None` when it cannot be read (a record caught mid-exchange).
async fn status_now(run_dir: &Path) -> Option<RunStatus> {
    read_status(run_dir).await.ok()?.ok()
}

/// The end of `stream`, kept in `tail` as it is read to its end.
async fn keep_tail(mut stream: tokio::process::ChildStderr, tail: Arc<Mutex<StderrTail>>) {
    let mut chunk = [0u8; 4096];
    while let Ok(read) = stream.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        tail.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keep(&chunk[..read]);
    }
}

async fn continue_with_answer(
    delta_exe: PathBuf,
    request: AnswerRun,
) -> Result<Answered, AnswerError> {
    let AnswerRun {
        workspace,
        run_id,
        message,
    } = request;
    let run_dir = control_dir(&workspace).join(&run_id);
    check_waiting(&run_id, read_status(&run_dir).await?)?;
    let mut command = tokio::process::Command::new(&delta_exe);
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
    let mut child = command.spawn().map_err(|e| AnswerError::SpawnFailed {
        exe: delta_exe.clone(),
        reason: e.to_string(),
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A child that fails before reading closes the pipe: its exit says why.
        actix::spawn(async move {
            let _ = stdin.write_all(message.as_bytes()).await;
        });
    }
    let tail = Arc::new(Mutex::new(StderrTail::default()));
    if let Some(stderr) = child.stderr.take() {
        actix::spawn(keep_tail(stderr, tail.clone()));
    }
    let (exited_tx, mut exited) = tokio::sync::oneshot::channel();
    actix::spawn(async move {
        let _ = exited_tx.send(child.wait().await.ok());
    });
    let deadline = tokio::time::Instant::now() + TAKE_DEADLINE;
    loop {
        tokio::select! {
            exit = &mut exited => {
                let code = exit.ok().flatten().and_then(|status| status.code());
                let status = status_now(&run_dir).await;
                let said = tail.lock().unwrap_or_else(PoisonError::into_inner).said();
                return after_exit(&run_id, code, status, &said);
            }
            () = tokio::time::sleep(POLL_EVERY) => {
                if let Some(answered) = taken(status_now(&run_dir).await) {
                    return Ok(answered);
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(AnswerError::Slow {
                        run_id,
                        seconds: TAKE_DEADLINE.as_secs(),
                    });
                }
            }
        }
    }
}
