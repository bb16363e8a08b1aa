//! What goes into the [`Scheduler`](super::Scheduler) and what comes out: [`Event`]s carry
//! everything it needs to know (what earlier invocations recorded, what a stage's runs have
//! on disk, how a run ended), [`Effect`]s everything it decided.
//!
//! Must not: hold behaviour beyond small conversions; the decisions live beside the
//! scheduler.

use crate::protocol::CostTally;
use std::collections::HashMap;
use std::path::PathBuf;

use crate::plan::expand::PlannedRun;
use crate::plan::state::{OrchestrationStatus, SchedulingEvent, StageSummary, Totals};
use crate::protocol::OrchestrationEvent;
use crate::protocol::{RunResult, RunStatus, TokenUsage};
use crate::workspace::RunPaths;

/// What earlier invocations of this orchestration recorded in its scheduling journal, per
/// run id: retry budgets carry across resumes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prior {
    /// The highest attempt number submitted.
    pub attempts: HashMap<String, u32>,
    /// FAILED outcomes (an attempt an interruption cut short is not one).
    pub failures: HashMap<String, u32>,
}

/// What a planned run's files say when its stage starts.
#[derive(Debug, Clone, PartialEq)]
pub enum OnDisk {
    /// No run folder, or a folder a kill left without metadata: nothing ran.
    Nothing,
    /// `metadata.json` exists but does not read: the run is continued (its setup repairs or
    /// refuses it).
    Unreadable,
    /// What the metadata records, once a run finished in its journal has been settled.
    Recorded(RecordedRun),
}

/// A run's metadata, as far as scheduling cares.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRun {
    /// The recorded status (a COMPLETED run is reused, not run again).
    pub status: RunStatus,
    /// The final answer, when COMPLETED.
    pub result: Option<String>,
    /// The recorded error, `"<kind>: <message>"`.
    pub error: Option<String>,
    /// Iterations recorded.
    pub iterations: u32,
    /// Wall time of the run's last driving, as recorded.
    pub duration_ms: u64,
    /// Token usage recorded over the run's life (every attempt).
    pub usage: TokenUsage,
    /// Dollars of `usage`, as recorded (unknown when a model had no price).
    pub cost: CostTally,
}

/// A planned run of an expanded stage and what its files say.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundRun {
    /// The run as the stage's expansion planned it.
    pub planned: PlannedRun,
    /// What its folder holds.
    pub on_disk: OnDisk,
}

/// How a submitted run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The run answered with its outcome.
    Finished(RunOutcome),
    /// No outcome: the run could not be handed over, or the engine stopped before it
    /// answered. Never retried.
    Lost(String),
}

impl RunEnd {
    /// What the scheduler needs of a run's result (and of its files: whether it got as far
    /// as writing its metadata). `Err` is why no result came back.
    pub fn from_result(
        result: Result<RunResult, String>,
        work_dir: &std::path::Path,
        run_id: &str,
    ) -> RunEnd {
        match result {
            Ok(r) => {
                let paths = RunPaths::new(work_dir, run_id);
                let metadata_written = paths.metadata.exists();
                let mut usage = lifetime_usage(&r);
                if usage.is_zero() && metadata_written {
                    // A continuation cancelled before it started answers with no figures,
                    // yet its earlier attempts were billed: the record has them.
                    if let Ok(meta) = crate::metadata::read_metadata(&paths.run_dir) {
                        usage = meta.usage_so_far();
                    }
                }
                RunEnd::Finished(RunOutcome {
                    tokens_saved: r.metrics.tokens_saved,
                    status: r.status,
                    result: r.result,
                    error: r.error.map(|e| format!("{}: {}", e.kind, e.message)),
                    duration_ms: r.metrics.duration_ms,
                    iterations: r.metrics.iterations,
                    usage,
                    cost: CostTally::from_reported(
                        r.metrics.cumulative_cost_usd,
                        r.metrics.usage.cost_note.as_deref(),
                    ),
                    empty_answer: r.empty_answer,
                    metadata_written,
                    run_id: r.run_id,
                })
            }
            Err(message) => RunEnd::Lost(message),
        }
    }
}

/// A run's tokens over its whole life, as its RunResult reports them; a result from an
/// older engine (a Slurm node not yet upgraded) has only this driving's figure.
fn lifetime_usage(result: &RunResult) -> TokenUsage {
    if !result.metrics.cumulative_usage.is_zero() {
        return result.metrics.cumulative_usage;
    }
    let driving = &result.metrics.usage;
    TokenUsage {
        input_tokens: driving.input_tokens,
        output_tokens: driving.output_tokens,
        total_tokens: driving.input_tokens.saturating_add(driving.output_tokens),
        estimated: driving.estimated,
    }
}

/// A finished run's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// The run's id.
    pub run_id: String,
    /// Its final status.
    pub status: RunStatus,
    /// The final answer, when COMPLETED.
    pub result: Option<String>,
    /// `"<kind>: <message>"`, as the summary shows it.
    pub error: Option<String>,
    /// Wall time of the attempt, in milliseconds.
    pub duration_ms: u64,
    /// The run's iteration count.
    pub iterations: u32,
    /// Token usage over the run's life: this attempt and every earlier one (a retry
    /// continues the run, whose cumulative figure carries them).
    pub usage: TokenUsage,
    /// Dollars of `usage` (unknown when a model had no price).
    pub cost: CostTally,
    /// COMPLETED with an empty final answer.
    pub empty_answer: bool,
    /// Prompt tokens the attempt did not send because its context was compacted.
    pub tokens_saved: u64,
    /// The run wrote its metadata, so a retry can continue it; a run whose setup failed
    /// before that (too many open files, a full disk) is retried afresh.
    pub metadata_written: bool,
}

/// How a planned run is (re)started.
#[derive(Debug, Clone, PartialEq)]
pub enum Launch {
    /// Started afresh with its task.
    New,
    /// Continued from its journal, with this message for the model if any (a retry says
    /// why the previous attempt failed; an interrupted run is continued without one).
    Continue(Option<String>),
}

impl Launch {
    /// True when the run is continued rather than started.
    pub fn continues(&self) -> bool {
        matches!(self, Launch::Continue(_))
    }
}

/// Something that happened, for the scheduler to decide on.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The orchestration's folder is open (and locked) and the plan may start; `prior` is
    /// what earlier invocations recorded (empty for a new orchestration).
    Started {
        /// What earlier invocations recorded.
        prior: Prior,
    },
    /// The orchestration's folder could not be opened or locked: finish FAILED at once.
    SetupFailed {
        /// Why, for the summary.
        error: String,
    },
    /// The answer to [`Effect::ExpandStage`]: the stage's runs in item order, each with
    /// what is on disk, or why the stage could not be expanded.
    StageExpanded {
        /// The stage's id.
        stage: String,
        /// Its runs, or the expansion's error (the orchestration then fails).
        runs: Result<Vec<FoundRun>, String>,
    },
    /// The run of an [`Effect::SubmitRun`] was handed to the engine.
    RunSubmitted {
        /// The run's id.
        run_id: String,
    },
    /// A run of an [`Effect::SubmitRun`] ended (or could not be handed over).
    RunFinished {
        /// The run's id.
        run_id: String,
        /// How it ended.
        end: RunEnd,
    },
    /// Ctrl-C, SIGTERM or an embedder's cancel: submit nothing more, cancel the runs in
    /// flight, finish INTERRUPTED once they have ended.
    CancelRequested {
        /// Why, for the runs' INTERRUPTED record and the summary.
        reason: String,
    },
    /// A spending cap ran out: submit nothing more; the runs in flight stop by themselves
    /// at their next model call; finish INTERRUPTED once they have ended.
    BudgetExhausted {
        /// "budget exhausted (spent $X of $Y)", for the summary.
        reason: String,
    },
}

/// Something the scheduler decided, for the executor to carry out in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Expand the stage with the scheduler's [`StageContext`](crate::plan::StageContext),
    /// look at each run's files, and answer with [`Event::StageExpanded`] before carrying
    /// out the next effect.
    ExpandStage {
        /// The stage's id.
        stage: String,
    },
    /// Start or continue this run in `work_dir`. Answer with [`Event::RunSubmitted`] once it
    /// is handed over (or [`RunEnd::Lost`] if it cannot be), then [`Event::RunFinished`].
    SubmitRun {
        /// The run.
        run: PlannedRun,
        /// Its workspace (the shared one, or its isolated folder).
        work_dir: PathBuf,
        /// New, or continued with an optional message.
        launch: Launch,
    },
    /// Interrupt a run in flight.
    CancelRun {
        /// The run's id.
        run_id: String,
        /// Why.
        reason: String,
    },
    /// Append to the orchestration's scheduling journal.
    Record(SchedulingEvent),
    /// Flush the scheduling journal to disk (a stage ended).
    SyncJournal,
    /// Tell the orchestration's subscribers.
    Emit(OrchestrationEvent),
    /// The orchestration is over: write the summary, release the orchestration, answer the
    /// caller. Nothing follows it.
    Finish(Conclusion),
}

/// How the orchestration ended: the summary without what only the executor knows (ids,
/// paths, clock).
#[derive(Debug, Clone, PartialEq)]
pub struct Conclusion {
    /// The orchestration's final status.
    pub status: OrchestrationStatus,
    /// Every stage of the plan, in plan order.
    pub stages: Vec<StageSummary>,
    /// Run counts and tokens over the whole plan.
    pub totals: Totals,
    /// Why the orchestration could not run (setup, expansion) or was stopped.
    pub error: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::metadata::{write_metadata, RunMetadata};

    /// Issue 25 item 5: a retry cancelled while queued answers with zero usage; the row
    /// must still count what the run's earlier attempts were billed.
    #[test]
    fn a_run_that_answers_without_figures_keeps_the_tokens_its_record_has() {
        let ws = tempfile::tempdir().unwrap();
        let paths = RunPaths::new(ws.path(), "o-s-0");
        std::fs::create_dir_all(&paths.run_dir).unwrap();
        let mut meta = RunMetadata::new_running("o-s-0", "a", "task", ws.path(), ws.path(), 5);
        meta.status = RunStatus::Interrupted;
        meta.cumulative_usage = TokenUsage {
            input_tokens: 40,
            output_tokens: 9,
            total_tokens: 49,
            estimated: false,
        };
        write_metadata(&paths.run_dir, &meta).unwrap();
        let mut result = meta.recorded_result(&paths.run_dir);
        result.metrics.usage = Default::default();
        result.metrics.cumulative_usage = TokenUsage::default();
        let RunEnd::Finished(outcome) = RunEnd::from_result(Ok(result), ws.path(), "o-s-0") else {
            panic!("finished");
        };
        assert_eq!(outcome.usage, meta.cumulative_usage);
    }
}
