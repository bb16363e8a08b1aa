//! A stage's life in the scheduler: its runs once expanded (what to do with a run whose files
//! already exist, after a kill or a rerun of the same orchestration id), its end (status,
//! outputs for later stages), progress, and the orchestration's conclusion.
//!
//! Resume rules: the journal is the truth (the executor settles a run finished in its
//! journal before describing it), COMPLETED runs are reused (their `output: json` checked
//! again), INTERRUPTED and orphaned RUNNING runs are continued, FAILED runs get their
//! remaining retries, runs waiting for a human stay as they are.
//!
//! Must not: do I/O; the executor describes the disk in [`OnDisk`].

use super::run::{not_json, retry_message};
use super::{
    run_work_dir, Conclusion, Effect, FoundRun, Launch, OnDisk, Scheduler, StageRun, StageState,
};
use crate::plan::expand::{PlannedRun, RunRecord};
use crate::plan::model::{OnFailure, OutputKind};
use crate::plan::state::{
    OrchestrationStatus, RunCounts, RunRow, SchedulingEvent, StageStatus, StageSummary, Totals,
};
use crate::protocol::OrchestrationEvent;
use crate::protocol::{RunStatus, TokenUsage};

impl Scheduler {
    pub(super) fn stage_expanded(
        &mut self,
        id: &str,
        runs: Result<Vec<FoundRun>, String>,
        out: &mut Vec<Effect>,
    ) {
        if !self.expanding.remove(id) {
            return;
        }
        match runs {
            Ok(found) => self.start_stage(id, found, out),
            Err(message) => {
                self.setup_error.get_or_insert(message);
                self.stages.insert(
                    id.to_string(),
                    StageState {
                        runs: Vec::new(),
                        outstanding: 0,
                        status: StageStatus::Failed,
                    },
                );
                self.failed = true;
                out.push(Effect::Record(SchedulingEvent::StageFinished {
                    stage: id.to_string(),
                    status: StageStatus::Failed,
                    counts: RunCounts::default(),
                }));
            }
        }
        self.stages_expanded(out);
    }

    fn start_stage(&mut self, id: &str, found: Vec<FoundRun>, out: &mut Vec<Effect>) {
        let Some((retries, output)) = self.plan.stage(id).map(|s| (s.retries, s.output)) else {
            return;
        };
        out.push(Effect::Record(SchedulingEvent::StageStarted {
            stage: id.to_string(),
            runs: found.len(),
        }));
        let total = found.len();
        let mut runs = Vec::with_capacity(total);
        for FoundRun { planned, on_disk } in found {
            let work_dir = run_work_dir(&self.workspace, &planned);
            let attempts = self
                .prior
                .attempts
                .get(&planned.run_id)
                .copied()
                .unwrap_or(0);
            let failures = self
                .prior
                .failures
                .get(&planned.run_id)
                .copied()
                .unwrap_or(0);
            let (done, pending_launch) = existing_state(
                &planned,
                &work_dir,
                on_disk,
                Budget {
                    attempts,
                    failures,
                    retries,
                },
                output,
            );
            runs.push(StageRun {
                planned,
                work_dir,
                attempts,
                failures,
                first_error: None,
                done,
                pending_launch,
            });
        }
        let outstanding = runs.iter().filter(|r| r.done.is_none()).count();
        // After the runs found on disk are known, so a resume's progress starts where the
        // last invocation stopped rather than at 0.
        out.push(Effect::Emit(OrchestrationEvent::StageStarted {
            stage: id.to_string(),
            runs: total,
            already_done: RunCounts::tally(
                runs.len() - outstanding,
                runs.iter().filter_map(|r| r.done.as_ref()),
            ),
        }));
        self.stages.insert(
            id.to_string(),
            StageState {
                runs,
                outstanding,
                status: StageStatus::Running,
            },
        );
        if outstanding == 0 {
            self.finish_stage(id, out);
        }
    }

    /// Every run of the stage has its row: the stage's status, its outputs for later stages,
    /// and whether its dependants may start.
    pub(super) fn finish_stage(&mut self, stage_id: &str, out: &mut Vec<Effect>) {
        let Some(spec) = self.plan.stage(stage_id) else {
            return;
        };
        let Some(stage) = self.stages.get_mut(stage_id) else {
            return;
        };
        let counts = RunCounts::tally(
            stage.runs.len(),
            stage.runs.iter().filter_map(|r| r.done.as_ref()),
        );
        let status = if self.stop_reason.is_some() && counts.interrupted > 0 {
            StageStatus::Interrupted
        } else if counts.unsuccessful() == 0 {
            StageStatus::Completed
        } else if spec.on_failure == OnFailure::Continue && counts.completed > 0 {
            // `on_failure: continue` goes on past failed items; a stage none of whose runs
            // completed has nothing to go on with: it failed (issue 31 item 15).
            StageStatus::CompletedWithFailures
        } else {
            StageStatus::Failed
        };
        stage.status = status;
        let records: Vec<RunRecord> = stage
            .runs
            .iter()
            .filter_map(|r| r.done.as_ref())
            .map(|r| RunRecord {
                run_id: r.run_id.clone(),
                status: r.status,
                result: r.result.clone(),
                error: r.error.clone(),
            })
            .collect();
        self.context.record_stage(spec, &records);
        match status {
            StageStatus::Completed | StageStatus::CompletedWithFailures => {
                self.passable.insert(stage_id.to_string());
            }
            _ => self.failed = true,
        }
        out.push(Effect::Record(SchedulingEvent::StageFinished {
            stage: stage_id.to_string(),
            status,
            counts,
        }));
        out.push(Effect::SyncJournal);
        out.push(Effect::Emit(OrchestrationEvent::StageFinished {
            stage: stage_id.to_string(),
            status,
            counts,
        }));
    }

    pub(super) fn emit_progress(&self, out: &mut Vec<Effect>) {
        let mut counts = RunCounts::default();
        for stage in self.stages.values() {
            counts.add(&RunCounts::tally(
                stage.runs.len(),
                stage.runs.iter().filter_map(|r| r.done.as_ref()),
            ));
        }
        out.push(Effect::Emit(OrchestrationEvent::Progress {
            total: counts.total,
            done: counts.finished(),
            running: self.in_flight.len(),
            failed: counts.unsuccessful(),
        }));
    }

    /// Records the end and hands out the conclusion; once only.
    pub(super) fn finish(&mut self, out: &mut Vec<Effect>) {
        if self.finished {
            return;
        }
        self.finished = true;
        let mut stages = Vec::new();
        let mut totals = Totals::default();
        for spec in &self.plan.stages {
            let (status, runs) = match self.stages.get(&spec.id) {
                Some(s) => {
                    let status = match s.status {
                        // Expanded, but stopped before any of its runs started.
                        StageStatus::Running
                            if s.runs.iter().all(|r| r.done.is_none() && r.attempts == 0) =>
                        {
                            StageStatus::NotStarted
                        }
                        StageStatus::Running => StageStatus::Interrupted,
                        status => status,
                    };
                    (
                        status,
                        s.runs
                            .iter()
                            .filter_map(|r| r.done.clone())
                            .collect::<Vec<_>>(),
                    )
                }
                None if self.stop_reason.is_some() => (StageStatus::NotStarted, Vec::new()),
                None => (StageStatus::Skipped, Vec::new()),
            };
            let planned = self.stages.get(&spec.id).map(|s| s.runs.len()).unwrap_or(0);
            let counts = RunCounts::tally(planned, &runs);
            totals.counts.add(&counts);
            let mut usage = TokenUsage::default();
            let mut cost = crate::protocol::CostTally::default();
            for r in &runs {
                usage.add(r.usage);
                cost.add(&r.cost);
            }
            totals.cost.add(&cost);
            totals.input_tokens = totals.input_tokens.saturating_add(usage.input_tokens);
            totals.output_tokens = totals.output_tokens.saturating_add(usage.output_tokens);
            let saved = runs
                .iter()
                .fold(0u64, |sum, r| sum.saturating_add(r.tokens_saved));
            totals.tokens_saved = totals.tokens_saved.saturating_add(saved);
            stages.push(StageSummary {
                id: spec.id.clone(),
                status,
                counts,
                runs,
                usage,
                cost,
            });
        }
        let status = if self.stop_reason.is_some() {
            OrchestrationStatus::Interrupted
        } else if self.failed || totals.counts.completed < totals.counts.total {
            OrchestrationStatus::Failed
        } else {
            OrchestrationStatus::Completed
        };
        out.push(Effect::Record(SchedulingEvent::OrchestrationFinished {
            status,
        }));
        out.push(Effect::Finish(Conclusion {
            status,
            stages,
            totals,
            error: self
                .setup_error
                .clone()
                .or_else(|| self.stop_reason.clone()),
        }));
    }
}

/// A planned run's retry budget: attempts and failures recorded by earlier invocations, and
/// the stage's `retries`.
#[derive(Clone, Copy)]
struct Budget {
    attempts: u32,
    failures: u32,
    retries: u32,
}

/// What to do with a planned run given what is on disk: its final row (nothing to run), or
/// how to launch it.
fn existing_state(
    planned: &PlannedRun,
    work_dir: &std::path::Path,
    on_disk: OnDisk,
    budget: Budget,
    output: OutputKind,
) -> (Option<RunRow>, Option<Launch>) {
    let meta = match on_disk {
        // Killed before the run's metadata was written: nothing ran, start it afresh (the
        // run setup reclaims an empty directory).
        OnDisk::Nothing => return (None, Some(Launch::New)),
        OnDisk::Unreadable => return (None, Some(Launch::Continue(None))),
        OnDisk::Recorded(meta) => meta,
    };
    let row = |status: RunStatus, error: Option<String>| RunRow {
        tokens_saved: 0,
        run_id: planned.run_id.clone(),
        index: planned.index,
        status,
        result: meta.result.clone(),
        error,
        duration_ms: meta.duration_ms,
        iterations: meta.iterations,
        attempts: budget.attempts.max(1),
        usage: meta.usage,
        cost: meta.cost.clone(),
        empty_answer: status == RunStatus::Completed
            && meta.result.as_deref().is_some_and(|r| r.trim().is_empty()),
        reused: true,
    };
    // The failure on disk counts even if the kill came before its RUN_FINISHED.
    let retry_left = budget.failures.max(1) <= budget.retries;
    match meta.status {
        RunStatus::Completed => reuse_completed(row(RunStatus::Completed, None), output, retry_left),
        RunStatus::Interrupted | RunStatus::Running => (None, Some(Launch::Continue(None))),
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
        RunStatus::Failed if retry_left => (
            None,
            Some(Launch::Continue(Some(retry_message(meta.error.as_deref())))),
        ),
        RunStatus::Failed => (Some(row(RunStatus::Failed, meta.error.clone())), None),
    }
}

/// A run found COMPLETED on disk. `output: json` is checked again (the kill may have come
/// before the check): an answer that does not parse is a failure, retried while the stage
/// has retries left (the failure on disk counts even if it was never recorded).
fn reuse_completed(
    mut done: RunRow,
    output: OutputKind,
    retry_left: bool,
) -> (Option<RunRow>, Option<Launch>) {
    if output == OutputKind::Json {
        if let Some(error) = not_json(done.result.as_deref()) {
            if retry_left {
                return (
                    None,
                    Some(Launch::Continue(Some(retry_message(Some(&error))))),
                );
            }
            done.status = RunStatus::Failed;
            done.error = Some(error);
        }
    }
    (Some(done), None)
}
