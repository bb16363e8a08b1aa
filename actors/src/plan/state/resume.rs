//! The checks before an orchestration is resumed (`delta orchestrate --resume`): the folder
//! exists and no process drives it ([`check_resumable`]), and which plan it started with
//! ([`recorded_plan`]), read from its scheduling journal.
//!
//! Must not: take the orchestration's lock (the orchestration takes it when it opens its
//! state) or change any of its files.

use std::path::{Path, PathBuf};

use super::{OrchestrationState, SchedulingEvent, SchedulingRecord, StateError};
use crate::bounded_read::{self, Links};
use crate::metadata::{lock_is_held, LOCK_FILE};

/// The folder of orchestration `id` in `workspace`, when it can be resumed now: the id is
/// valid ([`StateError::InvalidId`]), the folder exists ([`StateError::NotFound`]) and no
/// other process holds its lock ([`StateError::Locked`]). A lock that cannot be checked
/// counts as free: opening the orchestration takes it, and refuses then if it is held.
pub fn check_resumable(workspace: &Path, id: &str) -> Result<PathBuf, StateError> {
    let dir = OrchestrationState::dir_for(workspace, id)?;
    if !dir.is_dir() {
        return Err(StateError::NotFound {
            id: id.to_owned(),
            path: dir,
        });
    }
    if lock_is_held(&dir).unwrap_or(false) {
        return Err(StateError::Locked {
            id: id.to_owned(),
            path: dir.join(LOCK_FILE),
        });
    }
    Ok(dir)
}

/// The plan file orchestration `id` of `workspace` started with, as its scheduling journal
/// records it (the first `ORCHESTRATION_STARTED`), for a resume given no plan.
pub fn recorded_plan(workspace: &Path, id: &str) -> Result<PathBuf, StateError> {
    let journal = OrchestrationState::dir_for(workspace, id)?.join("journal.jsonl");
    let text = bounded_read::read_to_string(&journal, bounded_read::JOURNAL, Links::Refuse)
        .map_err(|source| StateError::Unreadable {
            id: id.to_owned(),
            workspace: workspace.to_path_buf(),
            journal: journal.clone(),
            source: source.into(),
        })?;
    text.lines()
        .filter_map(|line| serde_json::from_str::<SchedulingRecord>(line).ok())
        .find_map(|record| match record.event {
            SchedulingEvent::OrchestrationStarted { plan, .. } => Some(PathBuf::from(plan)),
            _ => None,
        })
        .ok_or(StateError::NoRecordedPlan { journal })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::metadata::RunLock;

    /// An orchestration folder started from `plan.yaml` in a fresh workspace.
    fn started(ws: &Path, id: &str) -> OrchestrationState {
        let plan = ws.join("plan.yaml");
        std::fs::write(&plan, "stages: []\n").unwrap();
        let mut state =
            OrchestrationState::open(ws, id, &plan, &serde_json::json!({}), false).unwrap();
        state
            .record(SchedulingEvent::OrchestrationStarted {
                plan: plan.display().to_string(),
                workspace: ws.display().to_string(),
                resumed: false,
                resume_command: None,
            })
            .unwrap();
        state
    }

    #[test]
    fn the_recorded_plan_is_the_one_the_orchestration_started_with() {
        let ws = tempfile::tempdir().unwrap();
        let mut state = started(ws.path(), "o-1");
        state
            .record(SchedulingEvent::OrchestrationStarted {
                plan: "/elsewhere/later.yaml".into(),
                workspace: ws.path().display().to_string(),
                resumed: true,
                resume_command: None,
            })
            .unwrap();
        assert_eq!(
            recorded_plan(ws.path(), "o-1").unwrap(),
            ws.path().join("plan.yaml")
        );
    }

    #[test]
    fn a_missing_or_empty_journal_is_explained() {
        let ws = tempfile::tempdir().unwrap();
        let missing = recorded_plan(ws.path(), "o-9").unwrap_err();
        let journal = OrchestrationState::dir_for(ws.path(), "o-9")
            .unwrap()
            .join("journal.jsonl");
        let text = missing.to_string();
        let expected_start = format!(
            "orchestration 'o-9' not found in {}: cannot read {} (",
            ws.path().display(),
            journal.display()
        );
        let expected_end = format!(
            "); hint: list the orchestrations with `delta list-orchestrations -w {}` and check the workspace given with -w",
            ws.path().display()
        );
        assert!(
            text.starts_with(&expected_start) && text.ends_with(&expected_end),
            "{text}"
        );
        std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
        std::fs::write(&journal, "not json\n").unwrap();
        assert_eq!(
            recorded_plan(ws.path(), "o-9").unwrap_err().to_string(),
            format!(
                "{}: no plan recorded; hint: pass the plan file",
                journal.display()
            )
        );
        assert!(matches!(
            recorded_plan(ws.path(), "../o"),
            Err(StateError::InvalidId { .. })
        ));
    }

    #[test]
    fn only_an_existing_unlocked_orchestration_is_resumable() {
        let ws = tempfile::tempdir().unwrap();
        assert!(matches!(
            check_resumable(ws.path(), "../o"),
            Err(StateError::InvalidId { .. })
        ));
        assert!(matches!(
            check_resumable(ws.path(), "o-1"),
            Err(StateError::NotFound { .. })
        ));
        let mut state = started(ws.path(), "o-1");
        let Err(StateError::Locked { path, .. }) = check_resumable(ws.path(), "o-1") else {
            panic!("a driven orchestration is locked");
        };
        assert_eq!(path, state.dir.join(LOCK_FILE));
        state.release();
        assert_eq!(check_resumable(ws.path(), "o-1").unwrap(), state.dir);
        // Another process's lock (a second lock on the same file from here is just as held).
        let _other = RunLock::try_acquire(&state.dir).unwrap().unwrap();
        assert!(matches!(
            check_resumable(ws.path(), "o-1"),
            Err(StateError::Locked { .. })
        ));
    }
}
