//! The janitor's rule (spec §2.1.5, §2.8.6), as plain functions: a RUNNING run whose lock is
//! free has lost its process and becomes INTERRUPTED (reason journaled and recorded); a
//! RUNNING run whose lock is held is alive and left alone; a run recorded on another host is
//! not touched unless forced. The lock is the primary signal; pid and host only word the
//! reason and guard the cross-host case.
//!
//! The new status is recorded in metadata.json *before* the INTERRUPTED note is journaled:
//! when the record cannot be written (disk full, an unwritable spare), the janitor reports
//! that cause ([`JanitorAction::CannotRecord`]) and leaves the journal alone, so checking
//! the run again does not pile up INTERRUPTED events.
//!
//! [`recover_orphaned_runs`] and [`prepare_continue`] (in `recovery.rs`) apply the rule for
//! embedders before a run is listed or continued.
//!
//! Must not: touch a run it could not lock.

mod recovery;

pub use recovery::{prepare_continue, recover_orphaned_runs, ContinueError, ContinueReadiness};

use std::path::Path;

use crate::clock::now_rfc3339;
use crate::journal::{read_journal, Event, Journal, JournalEvent, JournalOptions};
use crate::metadata::{
    current_process_identity, read_metadata, try_take_over, write_metadata, RunLock, Takeover,
};
use crate::protocol::RunStatus;
use crate::protocol::{RecordedError, RunErrorKind};
use crate::workspace::RunPaths;

/// What the janitor did to one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JanitorAction {
    /// RUNNING → INTERRUPTED, with the reason.
    Interrupted {
        /// The run.
        run_id: String,
        /// Why it has no live owner (journaled and recorded).
        reason: String,
    },
    /// Left alone: recorded on another host (use `--force`).
    SkippedOtherHost {
        /// The run.
        run_id: String,
        /// The host its metadata names.
        hostname: String,
    },
    /// RUNNING, but its journal already ends with ENGINE_END (the process died before the
    /// metadata write): the journal's final status is recorded.
    Settled {
        /// The run.
        run_id: String,
        /// The final status now recorded.
        status: RunStatus,
    },
    /// RUNNING and not driven by anyone (`reason`), but its new status could not be recorded:
    /// `error` is the first failure, naming the file (a full disk, an unwritable spare or
    /// lock file). Nothing was changed.
    CannotRecord {
        /// The run.
        run_id: String,
        /// Why it has no live owner.
        reason: String,
        /// The first failure, naming the file.
        error: String,
    },
}

/// Checks every run of a workspace. Runs that are not RUNNING, or are alive, are untouched.
pub(crate) fn sweep_workspace(work_dir: &Path, force: bool) -> Vec<JanitorAction> {
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
pub(crate) fn check_run(work_dir: &Path, run_id: &str, force: bool) -> Option<JanitorAction> {
    let paths = RunPaths::new(work_dir, run_id);
    let meta = read_metadata(&paths.run_dir).ok()?;
    if meta.status != RunStatus::Running {
        return None;
    }
    let host = current_process_identity().hostname;
    let cannot_record = |reason: String, error: String| {
        Some(JanitorAction::CannotRecord {
            run_id: run_id.to_string(),
            reason,
            error,
        })
    };
    // Taking the lock ourselves (instead of probing, then acting) means no process can start
    // driving the run while we mark it; never-locked runs of the original engine fall back to
    // its pid + process-name rule inside `try_take_over`.
    let takeover = match try_take_over(&paths.run_dir, &meta, &host, force) {
        Ok(takeover) => takeover,
        Err(e) => {
            return cannot_record("its lock could not be checked".into(), e.to_string());
        }
    };
    match takeover {
        Takeover::Alive { .. } => None,
        Takeover::OtherHost { hostname } => Some(JanitorAction::SkippedOtherHost {
            run_id: run_id.to_string(),
            hostname,
        }),
        Takeover::Acquired {
            lock: _lock,
            reason,
        } => {
            let mut meta = read_metadata(&paths.run_dir).ok()?;
            if meta.status != RunStatus::Running {
                return None;
            }
            // Finished, only the metadata write was lost: not an interruption.
            match restore_final_status(&paths, &mut meta) {
                Restored::Yes => {
                    return Some(JanitorAction::Settled {
                        run_id: run_id.to_string(),
                        status: meta.status,
                    })
                }
                Restored::WriteFailed(error) => {
                    let reason = format!("{reason}; its journal records the run's end");
                    return cannot_record(reason, error);
                }
                Restored::No => {}
            }
            meta.status = RunStatus::Interrupted;
            meta.updated_at = now_rfc3339();
            meta.error = Some(RecordedError {
                kind: RunErrorKind::Interrupted,
                message: reason.clone(),
            });
            if let Err(e) = write_metadata(&paths.run_dir, &meta) {
                return cannot_record(reason, e.to_string());
            }
            if let Ok((mut journal, _)) = Journal::open(&paths.run_dir, JournalOptions::default()) {
                let _ = journal.append(Event::Interrupted {
                    reason: format!("janitor: {reason}"),
                });
                let _ = journal.sync();
            }
            Some(JanitorAction::Interrupted {
                run_id: run_id.to_string(),
                reason,
            })
        }
    }
}

/// What [`restore_final_status`] did.
enum Restored {
    /// The journal does not end the run (or already agrees with the record).
    No,
    Yes,
    /// The journal ends the run, but the record could not be written (the error's text).
    WriteFailed(String),
}

/// A run whose journal ends with ENGINE_END has finished, whatever its metadata says: a
/// kill between the journal's last write and the metadata's leaves it RUNNING (and a
/// janitor may since have made that INTERRUPTED). Under the run's lock, records the final
/// status, result and error from the journal. Returns the status when it changed.
pub(crate) fn settle_from_journal(work_dir: &Path, run_id: &str) -> Option<RunStatus> {
    let paths = RunPaths::new(work_dir, run_id);
    let _lock = RunLock::try_acquire(&paths.run_dir).ok()??;
    let mut meta = read_metadata(&paths.run_dir).ok()?;
    if !matches!(meta.status, RunStatus::Running | RunStatus::Interrupted) {
        return None;
    }
    matches!(restore_final_status(&paths, &mut meta), Restored::Yes).then_some(meta.status)
}

/// Caller holds the lock. Only janitor notes (INTERRUPTED, WARNING) may follow the end.
fn restore_final_status(paths: &RunPaths, meta: &mut crate::metadata::RunMetadata) -> Restored {
    let Ok(events) = read_journal(&paths.journal) else {
        return Restored::No;
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
        return Restored::No;
    };
    if *status == meta.status {
        return Restored::No;
    }
    meta.status = *status;
    meta.iterations = *final_iteration;
    meta.result = result.clone();
    // ENGINE_END holds the message; its kind is on the ERROR event just before it.
    let kind = events.iter().rev().find_map(|e| match &e.event {
        Event::Error { error_type, .. } => Some(RunErrorKind::parse(error_type)),
        _ => None,
    });
    meta.error = error.as_ref().map(|message| RecordedError {
        kind: kind.unwrap_or_else(|| RunErrorKind::Other("error".into())),
        message: message.clone(),
    });
    meta.end_time = Some(timestamp.clone());
    meta.updated_at = now_rfc3339();
    match write_metadata(&paths.run_dir, meta) {
        Ok(()) => Restored::Yes,
        Err(e) => Restored::WriteFailed(e.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::metadata::{RunMetadata, LOCK_FILE};
    use crate::workspace::create_run_dir;

    /// A RUNNING run as the original engine leaves it: metadata and journal, no lock file.
    fn never_locked_run(work: &Path, run_id: &str, pid: u32) -> RunPaths {
        let paths = create_run_dir(work, run_id).unwrap();
        Journal::create(&paths.run_dir, JournalOptions::default()).unwrap();
        let mut meta = RunMetadata::new_running(run_id, "a", "t", work, work, 30);
        meta.pid = pid;
        write_metadata(&paths.run_dir, &meta).unwrap();
        paths
    }

    #[test]
    fn a_live_never_locked_run_is_left_alone_and_stays_unlocked() {
        let work = tempfile::tempdir().unwrap();
        // Our own pid and process name: alive by the original engine's rule.
        let paths = never_locked_run(work.path(), "live", std::process::id());
        assert_eq!(check_run(work.path(), "live", false), None);
        assert!(!paths.run_dir.join(LOCK_FILE).exists());
        assert_eq!(
            read_metadata(&paths.run_dir).unwrap().status,
            RunStatus::Running
        );
        // Twice: a first check must not make the second one judge by a lock it left behind.
        assert_eq!(sweep_workspace(work.path(), false), Vec::new());
    }

    #[test]
    fn a_never_locked_run_whose_process_is_gone_is_interrupted() {
        let work = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let paths = never_locked_run(work.path(), "dead", gone);
        let Some(JanitorAction::Interrupted { run_id, reason }) =
            check_run(work.path(), "dead", false)
        else {
            panic!("expected Interrupted");
        };
        assert_eq!(run_id, "dead");
        assert!(reason.contains("no lock file"), "{reason}");
        let meta = read_metadata(&paths.run_dir).unwrap();
        assert_eq!(meta.status, RunStatus::Interrupted);
        let events = read_journal(&paths.journal).unwrap();
        assert!(matches!(
            &events.last().unwrap().event,
            Event::Interrupted { reason } if reason.starts_with("janitor: ")
        ));
    }

    #[test]
    fn a_run_whose_lock_is_held_is_alive() {
        let work = tempfile::tempdir().unwrap();
        let paths = never_locked_run(work.path(), "held", 0);
        let _lock = crate::metadata::RunLock::try_acquire(&paths.run_dir)
            .unwrap()
            .unwrap();
        assert_eq!(check_run(work.path(), "held", false), None);
    }

    /// Regression: with metadata.json unwritable, every check appended another INTERRUPTED
    /// to the journal and then gave up silently, so `continue` saw a RUNNING run and blamed
    /// a lock nobody held. Now the cause is reported and the journal left alone.
    #[test]
    fn unwritable_record_is_reported_and_the_journal_left_alone() {
        let work = tempfile::tempdir().unwrap();
        let paths = never_locked_run(work.path(), "stuck", 0);
        let spare = paths.run_dir.join(crate::metadata::METADATA_SPARE);
        let _ = std::fs::remove_file(&spare);
        std::fs::create_dir(&spare).unwrap();
        for _ in 0..2 {
            let Some(JanitorAction::CannotRecord { reason, error, .. }) =
                check_run(work.path(), "stuck", false)
            else {
                panic!("expected CannotRecord");
            };
            assert!(reason.contains("no owning process"), "{reason}");
            assert!(error.contains(".metadata.json.next"), "{error}");
        }
        assert!(read_journal(&paths.journal).unwrap().is_empty());
        assert_eq!(
            read_metadata(&paths.run_dir).unwrap().status,
            RunStatus::Running
        );
        std::fs::remove_dir(&spare).unwrap();
        assert!(matches!(
            check_run(work.path(), "stuck", false),
            Some(JanitorAction::Interrupted { .. })
        ));
        assert_eq!(read_journal(&paths.journal).unwrap().len(), 1);
    }

    /// A kill between the journal's end and the metadata write, after a janitor had called
    /// the run INTERRUPTED: the journal's final status is recorded, once.
    #[test]
    fn an_interrupted_record_of_a_finished_run_is_settled_once() {
        let work = tempfile::tempdir().unwrap();
        let paths = never_locked_run(work.path(), "ended", 0);
        let (mut journal, _) = Journal::open(&paths.run_dir, JournalOptions::default()).unwrap();
        journal
            .append(Event::EngineEnd {
                run_id: "ended".into(),
                status: RunStatus::Completed,
                final_iteration: 1,
                result: Some("go".into()),
                error: None,
            })
            .unwrap();
        let mut meta = read_metadata(&paths.run_dir).unwrap();
        meta.status = RunStatus::Interrupted;
        write_metadata(&paths.run_dir, &meta).unwrap();
        assert_eq!(
            settle_from_journal(work.path(), "ended"),
            Some(RunStatus::Completed)
        );
        let meta = read_metadata(&paths.run_dir).unwrap();
        assert_eq!(meta.result.as_deref(), Some("go"));
        assert_eq!(settle_from_journal(work.path(), "ended"), None, "settled");
    }

    /// The lock decides: a free lock means nobody drives the run, even when the recorded
    /// pid is alive (here: this very process) and the metadata says RUNNING.
    #[test]
    fn a_free_lock_is_free_whatever_the_metadata_says() {
        let work = tempfile::tempdir().unwrap();
        let paths = never_locked_run(work.path(), "free", std::process::id());
        drop(RunLock::try_acquire(&paths.run_dir).unwrap());
        let Some(JanitorAction::Interrupted { reason, .. }) = check_run(work.path(), "free", false)
        else {
            panic!("a free lock is a free run");
        };
        assert!(reason.contains("is free"), "{reason}");
    }
}
