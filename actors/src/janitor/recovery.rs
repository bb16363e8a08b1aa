//! The janitor's check before a run is listed or continued, for embedders (the `delta` CLI
//! is one): [`recover_orphaned_runs`] marks a workspace's orphaned runs, and
//! [`prepare_continue`] says whether one run can be continued ([`ContinueReadiness`]) or why
//! not ([`ContinueError`], worded for the person who asked).
//!
//! Must not: drive a run, or change a run's files other than through the janitor's rule.

use std::path::{Path, PathBuf};

use super::{check_run, sweep_workspace};
use crate::metadata::{lock_is_held, read_metadata, MetadataError, RunMetadata};
use crate::protocol::{RunResult, RunStatus};
use crate::workspace::{open_run_dir, RunPaths, WorkspaceError};

use super::JanitorAction;

/// Applies the janitor's rule to every run of `work_dir`: a RUNNING run whose process is
/// gone becomes INTERRUPTED (or takes the final status its journal records). Returns what
/// was done, one entry per run touched or skipped; runs recorded on another host are left
/// alone. Call it before listing runs, so none shows a stale RUNNING.
pub fn recover_orphaned_runs(work_dir: &Path) -> Vec<JanitorAction> {
    sweep_workspace(work_dir, false)
}

/// Whether a run can be continued, after the janitor has checked it (see [`prepare_continue`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ContinueReadiness {
    /// Submit the continuation: `metadata` is the run's record as it stands now.
    Ready {
        /// What the janitor did first, if anything: [`JanitorAction::Interrupted`] (its
        /// process was gone) or [`JanitorAction::Settled`] (it had finished before its
        /// process died; the message given continues it).
        janitor: Option<JanitorAction>,
        /// The run's record (agent home, workspace and orchestration ids...).
        metadata: Box<RunMetadata>,
    },
    /// The run had finished before its process died (the janitor recorded its end from the
    /// journal) and no message was given: there is nothing to continue, only this outcome
    /// to report, as the dead process would have.
    Finished {
        /// The final status the journal records.
        status: RunStatus,
        /// The run's result, rebuilt from its record.
        result: Box<RunResult>,
    },
}

/// Why a run cannot be continued. Each message names the run and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ContinueError {
    /// The run id is invalid, or no such run exists in the workspace.
    #[error(transparent)]
    Run(#[from] WorkspaceError),
    /// The run's `metadata.json` cannot be read.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// RUNNING on another host: its process cannot be checked from here.
    #[error(
        "run '{run_id}' was started on host '{hostname}'. Cannot verify its process from host '{this_host}'.\nIf you are sure the original process is dead, use --force."
    )]
    OtherHost {
        /// The run.
        run_id: String,
        /// The host its metadata names.
        hostname: String,
        /// This host, which cannot see that host's processes.
        this_host: String,
    },
    /// Nobody drives the run, but its new status cannot be recorded (a full disk, an
    /// unwritable file). Nothing was changed. Unlike the other refusals this is a failure
    /// of the machine, not of the request.
    #[error(
        "run '{run_id}' is not driven by any process ({reason}), but its record cannot be updated: {error}\nNothing was changed; fix the cause, then run this command again."
    )]
    CannotRecord {
        /// The run.
        run_id: String,
        /// Why it is not driven.
        reason: String,
        /// The first failure, naming the file.
        error: String,
    },
    /// WAITING_FOR_INPUT, and neither a message nor a response file gives the answer.
    #[error(
        "run '{run_id}' is WAITING_FOR_INPUT: give the answer with -m \"...\" (or write it to {})",
        response_file.display()
    )]
    NeedsAnswer {
        /// The run.
        run_id: String,
        /// `interaction/response.txt`, where an answer may be written instead.
        response_file: PathBuf,
    },
    /// COMPLETED: continuing needs the next instruction (a FAILED run without one is
    /// retried with the same conversation).
    #[error(
        "run '{run_id}' is {status}: to continue it, give a message with -m \"...\"\nExample: delta continue --run-id {run_id} -w {} -m \"Now do something else\"",
        work_dir.display()
    )]
    NeedsMessage {
        /// The run.
        run_id: String,
        /// Its status.
        status: RunStatus,
        /// The workspace holding it, as the example command names it.
        work_dir: PathBuf,
    },
    /// RUNNING and its lock is held: a live process drives it.
    #[error(
        "run '{run_id}' is still active: its lock {} is held (pid {pid} on host '{hostname}').\nCannot continue while that process drives it: wait for it to finish or interrupt it first",
        lock.display()
    )]
    StillActive {
        /// The run.
        run_id: String,
        /// Its lock file.
        lock: PathBuf,
        /// The owner's pid, as recorded.
        pid: u32,
        /// The owner's host, as recorded.
        hostname: String,
    },
    /// RUNNING without a lock file (written by the original engine) and its process is alive.
    #[error(
        "run '{run_id}' is still active: it has no lock file (written by the original engine) and its process (pid {pid} on host '{hostname}') is alive.\nCannot continue while the original process is running: wait for it to finish or stop it first"
    )]
    AliveWithoutLock {
        /// The run.
        run_id: String,
        /// Its process, as recorded.
        pid: u32,
        /// Its host, as recorded.
        hostname: String,
    },
    /// RUNNING with a free lock: the janitor could not record the interruption.
    #[error(
        "run '{run_id}' is RUNNING on disk but nobody holds its lock {}, and it could not be marked INTERRUPTED; check that {} is writable (and the disk not full), then continue again",
        lock.display(),
        metadata.display()
    )]
    NotMarked {
        /// The run.
        run_id: String,
        /// Its (free) lock file.
        lock: PathBuf,
        /// Its `metadata.json`.
        metadata: PathBuf,
    },
}

/// Checks run `run_id` of `work_dir` before it is continued, as `delta continue` does: the
/// janitor first (a RUNNING run whose process is gone becomes INTERRUPTED; `force` takes
/// over one recorded on another host), then the status table of spec §2.6.2 — `message` is
/// required for COMPLETED, and for WAITING_FOR_INPUT unless the answer was written to
/// `interaction/response.txt` (a FAILED run without one is retried as it stands: the
/// engine sends the same conversation again); a RUNNING run with a live owner is refused.
pub fn prepare_continue(
    work_dir: &Path,
    run_id: &str,
    message: Option<&str>,
    force: bool,
) -> Result<ContinueReadiness, ContinueError> {
    let paths = open_run_dir(work_dir, run_id)?;
    let janitor = check_run(work_dir, run_id, force);
    match janitor {
        Some(JanitorAction::SkippedOtherHost { hostname, .. }) => {
            return Err(ContinueError::OtherHost {
                run_id: run_id.to_owned(),
                hostname,
                this_host: crate::metadata::current_process_identity().hostname,
            })
        }
        Some(JanitorAction::CannotRecord { reason, error, .. }) => {
            return Err(ContinueError::CannotRecord {
                run_id: run_id.to_owned(),
                reason,
                error,
            })
        }
        Some(JanitorAction::Settled { status, .. }) if message.is_none() => {
            let metadata = read_metadata(&paths.run_dir)?;
            let result = Box::new(metadata.recorded_result(&paths.run_dir));
            return Ok(ContinueReadiness::Finished { status, result });
        }
        _ => {}
    }
    let metadata = read_metadata(&paths.run_dir)?;
    let response_file = paths.interaction_dir.join("response.txt");
    match metadata.status {
        RunStatus::WaitingForInput if message.is_none() && !response_file.exists() => {
            Err(ContinueError::NeedsAnswer {
                run_id: run_id.to_owned(),
                response_file,
            })
        }
        RunStatus::Completed if message.is_none() => Err(ContinueError::NeedsMessage {
            run_id: run_id.to_owned(),
            status: metadata.status,
            work_dir: work_dir.to_path_buf(),
        }),
        RunStatus::Running => Err(still_running(run_id, &paths, &metadata)),
        _ => Ok(ContinueReadiness::Ready {
            janitor,
            metadata: Box::new(metadata),
        }),
    }
}

/// Why a run the janitor left RUNNING cannot be continued, from what its lock says: held
/// (a live owner), absent (a run of the original engine whose process is alive), or free
/// (the janitor could not record the interruption).
fn still_running(run_id: &str, paths: &RunPaths, metadata: &RunMetadata) -> ContinueError {
    match lock_is_held(&paths.run_dir) {
        Ok(true) => ContinueError::StillActive {
            run_id: run_id.to_owned(),
            lock: paths.lock.clone(),
            pid: metadata.pid,
            hostname: metadata.hostname.clone(),
        },
        _ if !paths.lock.exists() => ContinueError::AliveWithoutLock {
            run_id: run_id.to_owned(),
            pid: metadata.pid,
            hostname: metadata.hostname.clone(),
        },
        _ => ContinueError::NotMarked {
            run_id: run_id.to_owned(),
            lock: paths.lock.clone(),
            metadata: paths.metadata.clone(),
        },
    }
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
