//! The summary of an orchestration (what `delta orchestrate` prints and writes to
//! `summary.json`) and [`RunCounts`], the one tally of run outcomes every view uses: the
//! header, the stage lines, the JSON summary, `summary.json` and `list-orchestrations`.
//!
//! Plain values: `plan::state` writes them to and reads them from an orchestration's folder,
//! [`crate::api::OrchestrationHandle::wait`] returns the summary, and the orchestration events
//! carry the statuses and counts.
//!
//! Must not: read or write files (that is `plan::state`'s business).

use super::cost::CostTally;
use serde::{Deserialize, Serialize};

use super::status::{RunStatus, TokenUsage};

/// Final status of an orchestration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrchestrationStatus {
    /// Being driven (or its process died before it finished).
    Running,
    /// Every stage completed (with or without failures under `on_failure: continue`).
    Completed,
    /// A stage failed, or the orchestration could not run.
    Failed,
    /// Stopped by Ctrl-C, SIGTERM or a cancel; resume it with `--resume`.
    Interrupted,
}

impl OrchestrationStatus {
    /// The on-disk spelling, e.g. `COMPLETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            OrchestrationStatus::Running => "RUNNING",
            OrchestrationStatus::Completed => "COMPLETED",
            OrchestrationStatus::Failed => "FAILED",
            OrchestrationStatus::Interrupted => "INTERRUPTED",
        }
    }
}

impl std::fmt::Display for OrchestrationStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Status of one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StageStatus {
    /// Waiting for the stages it needs.
    Pending,
    /// Its runs are being driven.
    Running,
    /// Every run completed.
    Completed,
    /// Finished with failed items under `on_failure: continue`.
    CompletedWithFailures,
    /// A run failed under `on_failure: stop`.
    Failed,
    /// Never started because a stage it needs failed (or the orchestration was interrupted).
    Skipped,
    /// Stopped while its runs were being driven.
    Interrupted,
    /// The orchestration stopped (Ctrl-C, SIGTERM, a cancel) before any run of the stage
    /// started; `--resume` starts it.
    NotStarted,
}

impl StageStatus {
    /// How summaries show it, e.g. `Completed with failures`, `Not started`.
    pub fn label(self) -> &'static str {
        match self {
            StageStatus::Pending => "Pending",
            StageStatus::Running => "Running",
            StageStatus::Completed => "Completed",
            StageStatus::CompletedWithFailures => "Completed with failures",
            StageStatus::Failed => "Failed",
            StageStatus::Skipped => "Skipped",
            StageStatus::Interrupted => "Interrupted",
            StageStatus::NotStarted => "Not started",
        }
    }
}

/// One run's line in the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The run's id.
    pub run_id: String,
    /// Its position in the stage's fan-out, 0-based.
    pub index: usize,
    /// Its final status (an `output: json` answer that does not parse counts as FAILED).
    pub status: RunStatus,
    /// The final answer, when COMPLETED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why it did not complete, `"<kind>: <message>"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the last attempt, in milliseconds.
    pub duration_ms: u64,
    /// The run's iteration count.
    pub iterations: u32,
    /// Attempts made, over every invocation.
    pub attempts: u32,
    /// Token usage over every attempt of the run (retries continue the run, so its
    /// cumulative figure holds them), as the provider reported it.
    pub usage: TokenUsage,
    /// COMPLETED with an empty final answer (the model replied with no text and no tool
    /// call). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub empty_answer: bool,
    /// True when the run was already COMPLETED before this invocation (resume).
    #[serde(default)]
    pub reused: bool,
    /// Prompt tokens the run did not send because its context was compacted (its last
    /// attempt). Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens_saved: u64,
    /// Dollars of `usage` (`total_cost_usd`, null when a model had no price: then
    /// `unpriced_model` names it).
    #[serde(flatten)]
    pub cost: CostTally,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How the planned runs ended. Every planned run is in exactly one bucket, so the buckets
/// add up to `total` — whichever view prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunCounts {
    /// Runs planned (stages never expanded plan none).
    pub total: usize,
    /// COMPLETED.
    pub completed: usize,
    /// FAILED, including `output: json` answers that did not parse.
    pub failed: usize,
    /// Started, then interrupted (Ctrl-C, SIGTERM, a kill).
    pub interrupted: usize,
    /// Paused on a question for a human (WAITING_FOR_INPUT).
    pub waiting: usize,
    /// Planned but never started: the orchestration stopped first.
    pub not_started: usize,
}

impl RunCounts {
    /// The tally of `planned` runs of which `finished` have a final row; the others count
    /// as not started.
    pub fn tally<'a>(planned: usize, finished: impl IntoIterator<Item = &'a RunRow>) -> Self {
        Self::of_statuses(planned, finished.into_iter().map(|row| row.status))
    }

    /// [`RunCounts::tally`] over the final statuses alone.
    pub fn of_statuses(planned: usize, finished: impl IntoIterator<Item = RunStatus>) -> Self {
        let mut counts = RunCounts {
            total: planned,
            ..RunCounts::default()
        };
        let mut rows = 0;
        for status in finished {
            rows += 1;
            match status {
                RunStatus::Completed => counts.completed += 1,
                RunStatus::Failed => counts.failed += 1,
                RunStatus::Interrupted | RunStatus::Running => counts.interrupted += 1,
                RunStatus::WaitingForInput => counts.waiting += 1,
            }
        }
        counts.not_started = planned.saturating_sub(rows);
        counts.total = counts.total.max(rows);
        counts
    }

    /// Adds another tally (a stage's into the orchestration's).
    pub fn add(&mut self, other: &RunCounts) {
        self.total += other.total;
        self.completed += other.completed;
        self.failed += other.failed;
        self.interrupted += other.interrupted;
        self.waiting += other.waiting;
        self.not_started += other.not_started;
    }

    /// Runs that have an outcome (everything but `not_started`).
    pub fn finished(&self) -> usize {
        self.total - self.not_started
    }

    /// Finished runs that did not complete (failed, interrupted or waiting).
    pub fn unsuccessful(&self) -> usize {
        self.finished() - self.completed
    }

    /// `"2 completed, 0 failed, 2 interrupted, 1 not started of 5"`: zero buckets other than
    /// completed and failed are left out, so the words always add up to the total.
    pub fn describe(&self) -> String {
        let mut parts = vec![
            format!("{} completed", self.completed),
            format!("{} failed", self.failed),
        ];
        for (count, word) in [
            (self.interrupted, "interrupted"),
            (self.waiting, "waiting for input"),
            (self.not_started, "not started"),
        ] {
            if count > 0 {
                parts.push(format!("{count} {word}"));
            }
        }
        format!("{} of {}", parts.join(", "), self.total)
    }
}

/// One stage's line in the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageSummary {
    /// The stage's id.
    pub id: String,
    /// Its outcome.
    pub status: StageStatus,
    /// Its runs' outcomes (flattened into the stage's JSON object).
    #[serde(flatten)]
    pub counts: RunCounts,
    /// Every run with a final row, in item order.
    pub runs: Vec<RunRow>,
    /// Tokens of the stage's runs, every attempt included.
    #[serde(default)]
    pub usage: TokenUsage,
    /// Dollars of the stage's runs (`total_cost_usd`, null when one run's is unknown).
    #[serde(flatten)]
    pub cost: CostTally,
}

/// Counts and tokens over the whole plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Every planned run's outcome (flattened into the JSON object).
    #[serde(flatten)]
    pub counts: RunCounts,
    /// Prompt tokens of every run, every attempt included.
    pub input_tokens: u64,
    /// Completion tokens of every run, every attempt included.
    pub output_tokens: u64,
    /// Prompt tokens the runs did not send because their context was compacted. Absent
    /// when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens_saved: u64,
    /// Dollars of every run (`total_cost_usd`, null when one run's is unknown).
    #[serde(flatten)]
    pub cost: CostTally,
}

/// What `delta orchestrate` prints and writes to `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrchestrationSummary {
    /// The orchestration's id.
    pub orchestration_id: String,
    /// Its final status.
    pub status: OrchestrationStatus,
    /// The plan file.
    pub plan: String,
    /// The shared workspace.
    pub workspace: String,
    /// When this invocation started (UTC, RFC 3339).
    pub started_at: String,
    /// When it ended.
    pub ended_at: String,
    /// Wall time of this invocation, in milliseconds.
    pub duration_ms: u64,
    /// Every stage of the plan, in plan order.
    pub stages: Vec<StageSummary>,
    /// Counts and tokens over the whole plan.
    pub totals: Totals,
    /// Why the orchestration could not run (setup, expansion) or was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl OrchestrationSummary {
    /// Tokens of every stage's runs, every attempt included.
    pub fn usage(&self) -> TokenUsage {
        let mut total = TokenUsage::default();
        for stage in &self.stages {
            total.add(stage.usage);
        }
        if total.is_zero() {
            // A summary written before stages carried their usage.
            total.input_tokens = self.totals.input_tokens;
            total.output_tokens = self.totals.output_tokens;
        }
        total
    }

    /// 0 when every stage succeeded, 1 when any failed, 130 when interrupted.
    pub fn exit_code(&self) -> i32 {
        match self.status {
            OrchestrationStatus::Completed => 0,
            OrchestrationStatus::Interrupted => 130,
            OrchestrationStatus::Failed | OrchestrationStatus::Running => 1,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn row(status: RunStatus) -> RunRow {
        RunRow {
            tokens_saved: 0,
            run_id: "r".into(),
            index: 0,
            status,
            result: None,
            error: None,
            duration_ms: 0,
            iterations: 0,
            attempts: 1,
            usage: TokenUsage::default(),
            cost: Default::default(),
            empty_answer: false,
            reused: false,
        }
    }

    #[test]
    fn interrupted_counts_add_up_to_the_total() {
        // Five planned: two completed, two interrupted mid-run, one never started.
        let rows = [
            row(RunStatus::Completed),
            row(RunStatus::Completed),
            row(RunStatus::Interrupted),
            row(RunStatus::Interrupted),
        ];
        let counts = RunCounts::tally(5, &rows);
        assert_eq!(
            counts,
            RunCounts {
                total: 5,
                completed: 2,
                failed: 0,
                interrupted: 2,
                waiting: 0,
                not_started: 1,
            }
        );
        assert_eq!(counts.finished(), 4);
        assert_eq!(
            counts.describe(),
            "2 completed, 0 failed, 2 interrupted, 1 not started of 5"
        );
        let mut totals = RunCounts::default();
        totals.add(&counts);
        totals.add(&RunCounts::tally(1, &[row(RunStatus::WaitingForInput)]));
        assert_eq!(
            totals.describe(),
            "2 completed, 0 failed, 2 interrupted, 1 waiting for input, 1 not started of 6"
        );
    }
}
