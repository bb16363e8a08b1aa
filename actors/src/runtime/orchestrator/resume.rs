//! Carrying out [`Effect::ExpandStage`](crate::plan::schedule::Effect::ExpandStage):
//! expanding the stage and describing what each of its runs left on disk (after a kill, or
//! a rerun of the same orchestration id), for the scheduler's resume decisions.

use std::path::Path;

use crate::janitor::settle_from_journal;
use crate::metadata::read_metadata;
use crate::plan::expand_stage;
use crate::plan::schedule::{run_work_dir, Event, FoundRun, OnDisk, RecordedRun};
use crate::workspace::RunPaths;

use super::OrchestrationActor;

impl OrchestrationActor {
    /// Answers [`Event::StageExpanded`] with each run's files described.
    pub(super) fn expand(&self, stage: String) -> Event {
        let runs = match expand_stage(&self.request.plan, &stage, self.scheduler.context()) {
            Ok(planned) => Ok(planned
                .into_iter()
                .map(|planned| {
                    let work_dir = run_work_dir(&self.request.workspace, &planned);
                    FoundRun {
                        on_disk: on_disk(&work_dir, &planned.run_id),
                        planned,
                    }
                })
                .collect()),
            Err(e) => {
                let message = e.to_string();
                tracing::error!(target: "delta::orchestrate", "{message}");
                Err(message)
            }
        };
        Event::StageExpanded { stage, runs }
    }
}

/// What a planned run's files say.
fn on_disk(work_dir: &Path, run_id: &str) -> OnDisk {
    let paths = RunPaths::new(work_dir, run_id);
    if !paths.run_dir.exists() {
        return OnDisk::Nothing;
    }
    // A kill between the journal's ENGINE_END and the metadata write leaves a finished
    // run recorded as RUNNING (then INTERRUPTED by a janitor): the journal is the truth,
    // and continuing would complete the item twice.
    settle_from_journal(work_dir, run_id);
    match read_metadata(&paths.run_dir) {
        Ok(meta) => OnDisk::Recorded(RecordedRun {
            usage: meta.usage_so_far(),
            cost: meta.cost_so_far(),
            duration_ms: meta.last_duration_ms(),
            status: meta.status,
            result: meta.result,
            error: meta.error.map(|e| e.to_string()),
            iterations: meta.iterations,
        }),
        // Killed before the run's metadata was written: nothing ran.
        Err(_) if !paths.metadata.exists() => OnDisk::Nothing,
        Err(_) => OnDisk::Unreadable,
    }
}
