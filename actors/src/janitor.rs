//! The janitor's rule (spec §2.1.5, §2.8.6), as plain functions: a RUNNING run whose lock is
//! free has lost its process and becomes INTERRUPTED (reason journaled and recorded); a
//! RUNNING run whose lock is held is alive and left alone; a run recorded on another host is
//! not touched unless forced. The lock is the primary signal; pid and host only word the
//! reason and guard the cross-host case.
//!
//! Must not: touch a run it could not lock.

use std::path::Path;

use crate::journal::{read_journal, Event, Journal, JournalEvent, JournalOptions};
use crate::metadata::{
    assess_liveness, current_process_identity, read_metadata, write_metadata, Liveness, RunLock,
};
use crate::protocol::RunStatus;
use crate::workspace::{now_rfc3339, RunPaths};

/// What the janitor did to one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JanitorAction {
    /// RUNNING → INTERRUPTED, with the reason.
    Interrupted { run_id: String, reason: String },
    /// Left alone: recorded on another host (use `--force`).
    SkippedOtherHost { run_id: String, hostname: String },
}

/// Checks every run of a workspace. Runs that are not RUNNING, or are alive, are untouched.
pub fn sweep_workspace(work_dir: &Path, force: bool) -> Vec<JanitorAction> {
    let control = work_dir.join(".delta");
    let Ok(entries) = std::fs::read_dir(&control) else {
        return Vec::new();
    };
    let mut actions = Vec::new();
    for entry in entries.flatten() {
        let Some(run_id) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !entry.path().is_dir() || run_id.starts_with('.') || run_id == "orchestrations" {
            continue;
        }
        if let Some(action) = check_run(work_dir, &run_id, force) {
            actions.push(action);
        }
    }
    actions
}

/// Checks one run; returns what was done, if anything.
pub fn check_run(work_dir: &Path, run_id: &str, force: bool) -> Option<JanitorAction> {
    let paths = RunPaths::new(work_dir, run_id);
    let meta = read_metadata(&paths.run_dir).ok()?;
    if meta.status != RunStatus::Running {
        return None;
    }
    let host = current_process_identity().hostname;
    match assess_liveness(&paths.run_dir, &meta, &host, force).ok()? {
        Liveness::Alive { .. } => None,
        Liveness::OtherHost { hostname } => Some(JanitorAction::SkippedOtherHost {
            run_id: run_id.to_string(),
            hostname,
        }),
        Liveness::Orphaned { reason } => {
            // Take the lock so no process starts driving the run while we mark it.
            let _lock = RunLock::try_acquire(&paths.run_dir).ok()??;
            let mut meta = read_metadata(&paths.run_dir).ok()?;
            if meta.status != RunStatus::Running {
                return None;
            }
            // Finished, only the metadata write was lost: not an interruption.
            if restore_final_status(&paths, &mut meta) {
                return None;
            }
            if let Ok((mut journal, _)) = Journal::open(&paths.run_dir, JournalOptions::default()) {
                let _ = journal.append(Event::Interrupted {
                    reason: format!("janitor: {reason}"),
                });
                let _ = journal.sync();
            }
            meta.status = RunStatus::Interrupted;
            meta.updated_at = now_rfc3339();
            meta.error = Some(format!("interrupted: {reason}"));
            write_metadata(&paths.run_dir, &meta).ok()?;
            Some(JanitorAction::Interrupted {
                run_id: run_id.to_string(),
                reason,
            })
        }
    }
}

/// A run whose journal ends with ENGINE_END has finished, whatever its metadata says: a
/// kill between the journal's last write and the metadata's leaves it RUNNING (and a
/// janitor may since have made that INTERRUPTED). Under the run's lock, records the final
/// status, result and error from the journal. Returns the status when it changed.
pub fn settle_from_journal(work_dir: &Path, run_id: &str) -> Option<RunStatus> {
    let paths = RunPaths::new(work_dir, run_id);
    let _lock = RunLock::try_acquire(&paths.run_dir).ok()??;
    let mut meta = read_metadata(&paths.run_dir).ok()?;
    if !matches!(meta.status, RunStatus::Running | RunStatus::Interrupted) {
        return None;
    }
    restore_final_status(&paths, &mut meta).then_some(meta.status)
}

/// Caller holds the lock. Only janitor notes (INTERRUPTED, WARNING) may follow the end.
fn restore_final_status(paths: &RunPaths, meta: &mut crate::metadata::RunMetadata) -> bool {
    let Ok(events) = read_journal(&paths.journal) else {
        return false;
    };
    let last = events
        .iter()
        .rev()
        .find(|e| !matches!(e.event, Event::Interrupted { .. } | Event::Warning { .. }));
    let Some(JournalEvent {
        timestamp,
        event:
            Event::EngineEnd {
                status,
                final_iteration,
                result,
                error,
                ..
            },
        ..
    }) = last
    else {
        return false;
    };
    if *status == meta.status {
        return false;
    }
    meta.status = *status;
    meta.iterations = *final_iteration;
    meta.result = result.clone();
    meta.error = error.clone();
    meta.end_time = Some(timestamp.clone());
    meta.updated_at = now_rfc3339();
    write_metadata(&paths.run_dir, meta).is_ok()
}
