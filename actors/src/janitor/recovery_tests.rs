//! Unit tests of `prepare_continue` and `recover_orphaned_runs`: each row of the continue
//! status table, each refusal's exact wording, and the janitor's part.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use super::*;
use crate::journal::{Event, Journal, JournalOptions};
use crate::metadata::{write_metadata, RunLock, METADATA_SPARE};
use crate::workspace::create_run_dir;

/// A run of `work` with the given status, owned by this process, with an empty journal.
fn run_with_status(work: &Path, run_id: &str, status: RunStatus) -> (RunPaths, RunMetadata) {
    let paths = create_run_dir(work, run_id).unwrap();
    Journal::create(&paths.run_dir, JournalOptions::default()).unwrap();
    let mut meta = RunMetadata::new_running(run_id, "a", "task", work, work, 30);
    meta.status = status;
    write_metadata(&paths.run_dir, &meta).unwrap();
    (paths, meta)
}

/// The pid of a process that has exited.
fn gone_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// A RUNNING run whose owner is gone (a never-locked run with a dead pid).
fn orphaned_run(work: &Path, run_id: &str) -> RunPaths {
    let (paths, mut meta) = run_with_status(work, run_id, RunStatus::Running);
    meta.pid = gone_pid();
    write_metadata(&paths.run_dir, &meta).unwrap();
    paths
}

#[test]
fn invalid_or_missing_runs_are_refused_by_the_workspace_rules() {
    let work = tempfile::tempdir().unwrap();
    let invalid = prepare_continue(work.path(), "../x", None, false).unwrap_err();
    assert!(
        matches!(
            invalid,
            ContinueError::Run(WorkspaceError::InvalidRunId { .. })
        ),
        "{invalid}"
    );
    let missing = prepare_continue(work.path(), "nope", None, false).unwrap_err();
    assert!(
        matches!(missing, ContinueError::Run(WorkspaceError::NotFound { .. })),
        "{missing}"
    );
}

/// Issue 31 item 16: a FAILED run (a connection error) is retried without inventing a
/// message; a COMPLETED one still needs the next instruction.
#[test]
fn a_failed_run_is_ready_without_a_message() {
    let work = tempfile::tempdir().unwrap();
    run_with_status(work.path(), "bad", RunStatus::Failed);
    let ready = prepare_continue(work.path(), "bad", None, false).unwrap();
    let ContinueReadiness::Ready { janitor, metadata } = ready else {
        panic!("expected Ready");
    };
    assert_eq!((janitor, metadata.status), (None, RunStatus::Failed));
}

#[test]
fn a_completed_run_needs_a_message() {
    let work = tempfile::tempdir().unwrap();
    run_with_status(work.path(), "done", RunStatus::Completed);
    let refused = prepare_continue(work.path(), "done", None, false).unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "run 'done' is COMPLETED: to continue it, give a message with -m \"...\"\n\
             Example: delta continue --run-id done -w {} -m \"Now do something else\"",
            work.path().display()
        )
    );
    for (run_id, status) in [("done", RunStatus::Completed), ("bad", RunStatus::Failed)] {
        if status == RunStatus::Failed {
            run_with_status(work.path(), run_id, status);
        }
        let ready = prepare_continue(work.path(), run_id, Some("again"), false).unwrap();
        let ContinueReadiness::Ready { janitor, metadata } = ready else {
            panic!("expected Ready");
        };
        assert_eq!((janitor, metadata.status), (None, status));
    }
}

#[test]
fn a_waiting_run_needs_an_answer_or_a_response_file() {
    let work = tempfile::tempdir().unwrap();
    let (paths, _) = run_with_status(work.path(), "ask", RunStatus::WaitingForInput);
    let response = paths.interaction_dir.join("response.txt");
    let refused = prepare_continue(work.path(), "ask", None, false).unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "run 'ask' is WAITING_FOR_INPUT: give the answer with -m \"...\" (or write it to {})",
            response.display()
        )
    );
    assert!(prepare_continue(work.path(), "ask", Some("yes"), false).is_ok());
    std::fs::create_dir_all(&paths.interaction_dir).unwrap();
    std::fs::write(&response, "yes\n").unwrap();
    assert!(prepare_continue(work.path(), "ask", None, false).is_ok());
}

#[test]
fn an_interrupted_run_is_ready_without_a_message() {
    let work = tempfile::tempdir().unwrap();
    run_with_status(work.path(), "int", RunStatus::Interrupted);
    let ready = prepare_continue(work.path(), "int", None, false).unwrap();
    assert!(matches!(
        ready,
        ContinueReadiness::Ready { janitor: None, .. }
    ));
}

#[test]
fn an_orphaned_run_is_interrupted_by_the_janitor_then_ready() {
    let work = tempfile::tempdir().unwrap();
    orphaned_run(work.path(), "dead");
    let ready = prepare_continue(work.path(), "dead", None, false).unwrap();
    let ContinueReadiness::Ready {
        janitor: Some(JanitorAction::Interrupted { run_id, reason }),
        metadata,
    } = ready
    else {
        panic!("expected Ready after an interruption: {ready:?}");
    };
    assert_eq!(run_id, "dead");
    assert!(reason.contains("no longer exists"), "{reason}");
    assert_eq!(metadata.status, RunStatus::Interrupted);
}

#[test]
fn a_run_with_a_live_owner_is_refused_naming_its_lock_and_process() {
    let work = tempfile::tempdir().unwrap();
    let (paths, meta) = run_with_status(work.path(), "live", RunStatus::Running);
    let _owner = RunLock::try_acquire(&paths.run_dir).unwrap().unwrap();
    let refused = prepare_continue(work.path(), "live", None, false).unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "run 'live' is still active: its lock {} is held (pid {} on host '{}').\nCannot continue while that process drives it: wait for it to finish or interrupt it first",
            paths.lock.display(),
            meta.pid,
            meta.hostname
        )
    );
}

#[test]
fn a_live_run_of_the_original_engine_is_refused_without_blaming_a_lock() {
    let work = tempfile::tempdir().unwrap();
    // This process's own pid and name: alive by the original engine's rule.
    let (paths, meta) = run_with_status(work.path(), "old", RunStatus::Running);
    let refused = prepare_continue(work.path(), "old", None, false).unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "run 'old' is still active: it has no lock file (written by the original engine) and its process (pid {} on host '{}') is alive.\nCannot continue while the original process is running: wait for it to finish or stop it first",
            meta.pid, meta.hostname
        )
    );
    assert!(!paths.lock.exists());
}

#[test]
fn a_running_record_with_a_free_lock_names_the_metadata_to_fix() {
    let work = tempfile::tempdir().unwrap();
    let (paths, meta) = run_with_status(work.path(), "free", RunStatus::Running);
    drop(RunLock::try_acquire(&paths.run_dir).unwrap());
    let refused = still_running("free", &paths, &meta);
    assert_eq!(
        refused.to_string(),
        format!(
            "run 'free' is RUNNING on disk but nobody holds its lock {}, and it could not be marked INTERRUPTED; check that {} is writable (and the disk not full), then continue again",
            paths.lock.display(),
            paths.metadata.display()
        )
    );
}

#[test]
fn a_run_of_another_host_is_refused_unless_forced() {
    let work = tempfile::tempdir().unwrap();
    let (paths, mut meta) = run_with_status(work.path(), "away", RunStatus::Running);
    meta.hostname = "elsewhere.example".into();
    write_metadata(&paths.run_dir, &meta).unwrap();
    let refused = prepare_continue(work.path(), "away", None, false).unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "run 'away' was started on host 'elsewhere.example'. Cannot verify its process from host '{}'.\nIf you are sure the original process is dead, use --force.",
            crate::metadata::current_process_identity().hostname
        )
    );
    let forced = prepare_continue(work.path(), "away", None, true).unwrap();
    assert!(
        matches!(
            forced,
            ContinueReadiness::Ready {
                janitor: Some(JanitorAction::Interrupted { .. }),
                ..
            }
        ),
        "{forced:?}"
    );
}

#[test]
fn an_unwritable_record_is_a_failure_that_changes_nothing() {
    let work = tempfile::tempdir().unwrap();
    let paths = orphaned_run(work.path(), "stuck");
    let spare = paths.run_dir.join(METADATA_SPARE);
    let _ = std::fs::remove_file(&spare);
    std::fs::create_dir(&spare).unwrap();
    let refused = prepare_continue(work.path(), "stuck", None, false).unwrap_err();
    let ContinueError::CannotRecord { ref error, .. } = refused else {
        panic!("expected CannotRecord: {refused}");
    };
    assert!(error.contains(METADATA_SPARE), "{error}");
    let text = refused.to_string();
    assert!(
        text.starts_with("run 'stuck' is not driven by any process (")
            && text.ends_with("\nNothing was changed; fix the cause, then run this command again."),
        "{text}"
    );
    assert_eq!(
        read_metadata(&paths.run_dir).unwrap().status,
        RunStatus::Running
    );
}

/// A RUNNING run whose journal ends with ENGINE_END (killed before the metadata write).
fn finished_in_journal(work: &Path, run_id: &str) {
    let paths = orphaned_run(work, run_id);
    let (mut journal, _) = Journal::open(&paths.run_dir, JournalOptions::default()).unwrap();
    journal
        .append(Event::EngineEnd {
            run_id: run_id.into(),
            status: RunStatus::Completed,
            final_iteration: 1,
            result: Some("done".into()),
            error: None,
        })
        .unwrap();
}

#[test]
fn a_run_finished_in_its_journal_reports_its_result_without_a_message() {
    let work = tempfile::tempdir().unwrap();
    finished_in_journal(work.path(), "end");
    let finished = prepare_continue(work.path(), "end", None, false).unwrap();
    let ContinueReadiness::Finished { status, result } = finished else {
        panic!("expected Finished: {finished:?}");
    };
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(result.result.as_deref(), Some("done"));
}

#[test]
fn a_run_finished_in_its_journal_continues_with_a_message() {
    let work = tempfile::tempdir().unwrap();
    finished_in_journal(work.path(), "end");
    let ready = prepare_continue(work.path(), "end", Some("more"), false).unwrap();
    let ContinueReadiness::Ready { janitor, metadata } = ready else {
        panic!("expected Ready: {ready:?}");
    };
    assert_eq!(
        janitor,
        Some(JanitorAction::Settled {
            run_id: "end".into(),
            status: RunStatus::Completed
        })
    );
    assert_eq!(metadata.status, RunStatus::Completed);
}

#[test]
fn recovering_a_workspace_marks_only_its_orphans() {
    let work = tempfile::tempdir().unwrap();
    orphaned_run(work.path(), "dead");
    run_with_status(work.path(), "done", RunStatus::Completed);
    let actions = recover_orphaned_runs(work.path());
    assert!(
        matches!(&actions[..], [JanitorAction::Interrupted { run_id, .. }] if run_id == "dead"),
        "{actions:?}"
    );
    assert_eq!(recover_orphaned_runs(work.path()), Vec::new());
}
