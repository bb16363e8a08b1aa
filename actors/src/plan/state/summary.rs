//! The summary of an orchestration (what `delta orchestrate` prints and writes to
//! `summary.json`) and [`RunCounts`], the one tally of run outcomes every view uses: the
//! header, the stage lines, the JSON summary, `summary.json` and `list-orchestrations`.
//!
//! Must not: read or write files (the folder is `mod.rs`'s business).

use serde::{Deserialize, Serialize};

use crate::protocol::{RunStatus, TokenUsage};

/// Final status of an orchestration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrchestrationStatus {
    Running,
    Completed,
    Failed,
    Interrupted,
}

impl OrchestrationStatus {
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
    Pending,
    Running,
    Completed,
    /// Finished with failed items under `on_failure: continue`.
    CompletedWithFailures,
    Failed,
    /// Never started because a stage it needs failed (or the orchestration was interrupted).
    Skipped,
    Interrupted,
}

/// One run's line in the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub run_id: String,
    pub index: usize,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
    pub iterations: u32,
    pub attempts: u32,
    pub usage: TokenUsage,
    /// True when the run was already COMPLETED before this invocation (resume).
    #[serde(default)]
    pub reused: bool,
}

/// How the planned runs ended. Every planned run is in exactly one bucket, so the buckets
/// add up to `total` — whichever view prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunCounts {
    /// Runs planned (stages never expanded plan none).
    pub total: usize,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageSummary {
    pub id: String,
    pub status: StageStatus,
    #[serde(flatten)]
    pub counts: RunCounts,
    pub runs: Vec<RunRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    #[serde(flatten)]
    pub counts: RunCounts,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// What `delta orchestrate` prints and writes to `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrchestrationSummary {
    pub orchestration_id: String,
    pub status: OrchestrationStatus,
    pub plan: String,
    pub workspace: String,
    pub started_at: String,
    pub ended_at: String,
    pub duration_ms: u64,
    pub stages: Vec<StageSummary>,
    pub totals: Totals,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl OrchestrationSummary {
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
            run_id: "r".into(),
            index: 0,
            status,
            result: None,
            error: None,
            duration_ms: 0,
            iterations: 0,
            attempts: 1,
            usage: TokenUsage::default(),
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
