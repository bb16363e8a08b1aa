//! plan::schedule — an orchestration's decisions as a pure state machine. The [`Scheduler`]
//! takes [`Event`]s and returns [`Effect`]s; the orchestration actor carries the effects out
//! (expanding stages, submitting runs, appending to the scheduling journal, emitting events,
//! writing the summary) and feeds back what happened.
//!
//! Stages form a DAG; a stage starts when its needs have finished (independent stages at
//! once), expands into runs, and its runs are submitted with at most `max_parallel` of the
//! plan's runs in flight. Failed runs are continued with a retry message per the stage's
//! `retries`; `output: json` results that do not parse are retried the same way, then count
//! as failed. A failed stage stops its dependants (`on_failure: stop`) or lets them start
//! (`continue`).
//!
//! Resume: a planned run whose files exist is not started again. COMPLETED runs are reused
//! (their recorded result feeds later stages), INTERRUPTED and orphaned RUNNING runs are
//! continued, FAILED runs get their remaining retries. With deterministic run ids
//! (`<orchestration>-<stage>-<index>`) and each run's lock, no item runs twice to completion.
//!
//! # Layout
//! - [`events`]: the events in and the effects out.
//! - `mod.rs`: the scheduler's state, starting ready stages, submitting runs, cancelling.
//! - `stage` (private): a stage's runs once expanded (what to do with runs found on disk),
//!   a stage's end, progress and the conclusion.
//! - `run` (private): a run's end: its summary row, `output: json`, retries.
//!
//! Must not: read or write files, look at the clock, log, or import actix: everything it
//! needs comes in an event, everything it decides goes out as an effect.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod events;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod resume_tests;
mod run;
mod stage;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

pub use events::{
    Conclusion, Effect, Event, FoundRun, Launch, OnDisk, Prior, RecordedRun, RunEnd, RunOutcome,
};
pub use run::retry_message;

use super::expand::{PlannedRun, StageContext};
use super::graph::ready_stages;
use super::resolved::ResolvedPlan;
use super::state::{RunRow, SchedulingEvent, StageStatus};
use crate::protocol::OrchestrationEvent;

/// Where a planned run works: the shared workspace, or `<workspace>/<stage>/<index>` for
/// `isolate: true`.
pub fn run_work_dir(workspace: &Path, run: &PlannedRun) -> PathBuf {
    match &run.work_dir_suffix {
        Some(suffix) => workspace.join(suffix),
        None => workspace.to_path_buf(),
    }
}

/// One planned run and where it stands in this invocation.
struct StageRun {
    planned: PlannedRun,
    work_dir: PathBuf,
    attempts: u32,
    /// FAILED outcomes so far (retries are granted per failure, not per attempt).
    failures: u32,
    /// Why the first failed attempt of this invocation failed: kept for the summary row when
    /// a retry fails differently.
    first_error: Option<String>,
    done: Option<RunRow>,
    pending_launch: Option<Launch>,
}

struct StageState {
    runs: Vec<StageRun>,
    outstanding: usize,
    status: StageStatus,
}

/// A run handed out by [`Effect::SubmitRun`] and not finished yet.
struct InFlight {
    stage: String,
    slot: usize,
    continues: bool,
}

/// The orchestration's scheduling state. Feed it [`Event`]s with [`Scheduler::handle`] and
/// carry out the [`Effect`]s it returns, in order.
pub struct Scheduler {
    /// The plan being run.
    plan: Arc<ResolvedPlan>,
    /// Where run work folders go.
    workspace: PathBuf,
    /// Most runs in flight at once (at least 1).
    max_parallel: usize,
    /// What earlier invocations recorded (retry budgets carry across resumes).
    prior: Prior,
    /// Finished stages' outputs and the orchestration id, for expanding later stages.
    context: StageContext,
    /// Every started stage's runs and their states, by stage id.
    stages: BTreeMap<String, StageState>,
    /// Stages asked to expand already (a stage starts once).
    started_stages: HashSet<String>,
    /// Stages whose [`Effect::ExpandStage`] is not answered yet.
    expanding: HashSet<String>,
    /// Stages whose dependants may start.
    passable: HashSet<String>,
    /// Runs handed out and not finished, by run id.
    in_flight: BTreeMap<String, InFlight>,
    /// Why the orchestration is stopping (a cancel), once asked: nothing new starts.
    stop_reason: Option<String>,
    /// A stage failed (its `on_failure` stops the plan), or the setup did.
    failed: bool,
    /// The first setup failure (the orchestration could not start, or a stage could not
    /// expand), for the summary.
    setup_error: Option<String>,
    /// [`Effect::Finish`] was returned: every later event is ignored.
    finished: bool,
}

impl Scheduler {
    /// A scheduler for `plan` run as `orchestration_id` in `workspace`, with at most
    /// `max_parallel` runs in flight (at least 1).
    pub fn new(
        plan: Arc<ResolvedPlan>,
        orchestration_id: &str,
        workspace: &Path,
        max_parallel: usize,
    ) -> Self {
        Scheduler {
            plan,
            workspace: workspace.to_path_buf(),
            max_parallel: max_parallel.max(1),
            prior: Prior::default(),
            context: StageContext::new(orchestration_id),
            stages: BTreeMap::new(),
            started_stages: HashSet::new(),
            expanding: HashSet::new(),
            passable: HashSet::new(),
            in_flight: BTreeMap::new(),
            stop_reason: None,
            failed: false,
            setup_error: None,
            finished: false,
        }
    }

    /// The outputs of the stages finished so far, for expanding the next ones.
    pub fn context(&self) -> &StageContext {
        &self.context
    }

    /// Takes one event and returns what to do about it, in order. After
    /// [`Effect::Finish`], events are ignored.
    pub fn handle(&mut self, event: Event) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        match event {
            Event::Started { prior } => {
                self.prior = prior;
                self.advance(&mut out);
            }
            Event::SetupFailed { error } => {
                self.setup_error = Some(error);
                self.failed = true;
                self.finish(&mut out);
            }
            Event::StageExpanded { stage, runs } => self.stage_expanded(&stage, runs, &mut out),
            Event::RunSubmitted { run_id } => self.run_submitted(&run_id, &mut out),
            Event::RunFinished { run_id, end } => self.run_finished(&run_id, end, &mut out),
            Event::CancelRequested { reason } => self.cancel(reason, &mut out),
            Event::BudgetExhausted { reason } => self.budget_exhausted(reason, &mut out),
        }
        out
    }

    /// Starts ready stages, submits runs up to the limit, and finishes when nothing is left.
    fn advance(&mut self, out: &mut Vec<Effect>) {
        if !self.expanding.is_empty() {
            return;
        }
        if self.stop_reason.is_none() && !self.failed && self.start_ready_stages(out) {
            return;
        }
        self.submit_and_maybe_finish(out);
    }

    /// Asks for every ready stage to be expanded; false when none is ready.
    fn start_ready_stages(&mut self, out: &mut Vec<Effect>) -> bool {
        let ready = ready_stages(&self.plan, &self.passable, &self.started_stages);
        for stage in &ready {
            self.started_stages.insert(stage.clone());
            self.expanding.insert(stage.clone());
            out.push(Effect::ExpandStage {
                stage: stage.clone(),
            });
        }
        !ready.is_empty()
    }

    /// Once a round of stages is expanded: the stages they let start (a stage whose runs
    /// were all done already finishes at once), else the runs.
    fn stages_expanded(&mut self, out: &mut Vec<Effect>) {
        if self.expanding.is_empty() && !self.start_ready_stages(out) {
            self.submit_and_maybe_finish(out);
        }
    }

    fn submit_and_maybe_finish(&mut self, out: &mut Vec<Effect>) {
        self.submit_more(out);
        let running = self
            .stages
            .values()
            .any(|s| s.status == StageStatus::Running);
        if self.in_flight.is_empty() && (!running || self.stop_reason.is_some()) {
            self.finish(out);
        }
    }

    /// Hands out pending runs, stage by stage, while fewer than `max_parallel` are in flight.
    fn submit_more(&mut self, out: &mut Vec<Effect>) {
        if self.stop_reason.is_some() {
            return;
        }
        for (id, stage) in &mut self.stages {
            loop {
                if self.in_flight.len() >= self.max_parallel {
                    return;
                }
                let Some(slot) = stage.runs.iter().position(|r| r.pending_launch.is_some()) else {
                    break;
                };
                let run = &mut stage.runs[slot];
                let Some(launch) = run.pending_launch.take() else {
                    break;
                };
                run.attempts += 1;
                self.in_flight.insert(
                    run.planned.run_id.clone(),
                    InFlight {
                        stage: id.clone(),
                        slot,
                        continues: launch.continues(),
                    },
                );
                out.push(Effect::SubmitRun {
                    run: run.planned.clone(),
                    work_dir: run.work_dir.clone(),
                    launch,
                });
            }
        }
    }

    fn run_submitted(&mut self, run_id: &str, out: &mut Vec<Effect>) {
        let Some(flight) = self.in_flight.get(run_id) else {
            return;
        };
        let Some(run) = self
            .stages
            .get(&flight.stage)
            .and_then(|s| s.runs.get(flight.slot))
        else {
            return;
        };
        out.push(Effect::Record(SchedulingEvent::RunSubmitted {
            stage: flight.stage.clone(),
            index: run.planned.index,
            run_id: run.planned.run_id.clone(),
            attempt: run.attempts,
            resume: flight.continues,
        }));
        out.push(Effect::Emit(OrchestrationEvent::RunStarted {
            stage: flight.stage.clone(),
            index: run.planned.index,
            run_id: run.planned.run_id.clone(),
            attempt: run.attempts,
        }));
    }

    /// Stops submitting (a cap ran out); the runs in flight are left to stop at their next
    /// model call. Finishes once none is left.
    fn budget_exhausted(&mut self, reason: String, out: &mut Vec<Effect>) {
        if self.stop_reason.is_some() {
            return;
        }
        self.stop_reason = Some(reason);
        for stage in self.stages.values_mut() {
            for run in &mut stage.runs {
                run.pending_launch = None;
            }
        }
        if self.in_flight.is_empty() {
            self.finish(out);
        }
    }

    /// Stops submitting and cancels the runs in flight; finishes once none is left.
    fn cancel(&mut self, reason: String, out: &mut Vec<Effect>) {
        if self.stop_reason.is_some() {
            return;
        }
        for run_id in self.in_flight.keys() {
            out.push(Effect::CancelRun {
                run_id: run_id.clone(),
                reason: reason.clone(),
            });
        }
        self.stop_reason = Some(reason);
        for stage in self.stages.values_mut() {
            for run in &mut stage.runs {
                run.pending_launch = None;
            }
        }
        if self.in_flight.is_empty() {
            self.finish(out);
        }
    }
}
