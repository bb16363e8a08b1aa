//! Resume: what the orchestration does with a planned run whose files already exist (after
//! a kill, or a rerun of the same orchestration id). The journal is the truth: a run that
//! finished in its journal is settled first, COMPLETED runs are reused (their `output: json`
//! checked again), INTERRUPTED and orphaned RUNNING runs are continued, FAILED runs get their
//! remaining retries, runs waiting for a human stay as they are.

use crate::janitor::settle_from_journal;
use crate::metadata::read_metadata;
use crate::plan::state::RunRow;
use crate::plan::{parse_json_output, OutputKind, PlannedRun};
use crate::protocol::RunStatus;
use crate::workspace::RunPaths;

use super::{retry_message, Launch, OrchestrationActor};

impl OrchestrationActor {
    /// What to do with a planned run given what is on disk (resume, or reruns of an id).
    pub(super) fn existing_state(
        &self,
        planned: &PlannedRun,
        work_dir: &std::path::Path,
        attempts: u32,
        failures: u32,
        retries: u32,
        output: OutputKind,
    ) -> (Option<RunRow>, Option<Launch>) {
        let paths = RunPaths::new(work_dir, &planned.run_id);
        if !paths.run_dir.exists() {
            return (None, Some(Launch::New));
        }
        // A kill between the journal's ENGINE_END and the metadata write leaves a finished
        // run recorded as RUNNING (then INTERRUPTED by a janitor): the journal is the truth,
        // and continuing would complete the item twice.
        settle_from_journal(work_dir, &planned.run_id);
        let Ok(meta) = read_metadata(&paths.run_dir) else {
            // Killed before the run's metadata was written: nothing ran, start it afresh
            // (the run setup reclaims the empty directory).
            if !paths.metadata.exists() {
                return (None, Some(Launch::New));
            }
            return (None, Some(Launch::Resume(None)));
        };
        let row = |status: RunStatus, error: Option<String>| RunRow {
            run_id: planned.run_id.clone(),
            index: planned.index,
            status,
            result: meta.result.clone(),
            error,
            duration_ms: 0,
            iterations: meta.iterations,
            attempts: attempts.max(1),
            usage: meta.usage,
            reused: true,
        };
        match meta.status {
            RunStatus::Completed => {
                reuse_completed(row(RunStatus::Completed, None), output, failures, retries)
            }
            RunStatus::Interrupted | RunStatus::Running => (None, Some(Launch::Resume(None))),
            RunStatus::WaitingForInput => (
                Some(row(
                    RunStatus::WaitingForInput,
                    Some(format!(
                        "waiting for human input: answer with `delta continue --run-id {} -w {} -m ...`, then resume the orchestration",
                        planned.run_id,
                        work_dir.display()
                    )),
                )),
                None,
            ),
            // The failure on disk counts even if the kill came before its RUN_FINISHED.
            RunStatus::Failed if failures.max(1) <= retries => (
                None,
                Some(Launch::Resume(Some(retry_message(meta.error.as_deref())))),
            ),
            RunStatus::Failed => (Some(row(RunStatus::Failed, meta.error.clone())), None),
        }
    }
}

/// A run found COMPLETED on disk. `output: json` is checked again (the kill may have come
/// before the check): an answer that does not parse is a failure, retried while the stage
/// has retries left (the failure on disk counts even if it was never recorded).
fn reuse_completed(
    mut done: RunRow,
    output: OutputKind,
    failures: u32,
    retries: u32,
) -> (Option<RunRow>, Option<Launch>) {
    if output == OutputKind::Json {
        if let Err(e) = parse_json_output(done.result.as_deref().unwrap_or("")) {
            let error = format!("the result is not valid JSON ({e})");
            if failures.max(1) <= retries {
                return (
                    None,
                    Some(Launch::Resume(Some(retry_message(Some(&error))))),
                );
            }
            done.status = RunStatus::Failed;
            done.error = Some(error);
        }
    }
    (Some(done), None)
}
