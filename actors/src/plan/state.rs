//! An orchestration's own files, at `<workspace>/.delta/orchestrations/<orchestration_id>/`:
//! a copy of the plan and its vars (so a resume expands the same plan), an append-only
//! `journal.jsonl` of scheduling events, and `summary.json` at the end. Also the summary
//! types the CLI prints.
//!
//! The runs' own metadata stays the truth about each run; this journal records scheduling
//! decisions (attempts, stage outcomes) so a resume can count retries and explain itself.
//!
//! Must not: decide scheduling (the orchestrator actor does).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::protocol::{RunStatus, TokenUsage};
use crate::workspace::now_rfc3339;

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageSummary {
    pub id: String,
    pub status: StageStatus,
    pub total: usize,
    pub completed: usize,
    pub failed: usize,
    pub interrupted: usize,
    pub runs: Vec<RunRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub runs: usize,
    pub completed: usize,
    pub failed: usize,
    pub interrupted: usize,
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

/// One scheduling event, one JSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SchedulingEvent {
    OrchestrationStarted {
        plan: String,
        workspace: String,
        resumed: bool,
    },
    StageStarted {
        stage: String,
        runs: usize,
    },
    RunSubmitted {
        stage: String,
        index: usize,
        run_id: String,
        attempt: u32,
        resume: bool,
    },
    RunFinished {
        stage: String,
        index: usize,
        run_id: String,
        status: RunStatus,
        attempt: u32,
        error: Option<String>,
    },
    StageFinished {
        stage: String,
        status: StageStatus,
        completed: usize,
        failed: usize,
    },
    OrchestrationFinished {
        status: OrchestrationStatus,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulingRecord {
    pub timestamp: String,
    #[serde(flatten)]
    pub event: SchedulingEvent,
}

/// Errors of the orchestration's own files.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("orchestration '{id}' not found: no {path} (check the id with `ls <workspace>/.delta/orchestrations` and the workspace with -w)")]
    NotFound { id: String, path: PathBuf },
}

/// The orchestration folder and its append-only scheduling journal.
pub struct OrchestrationState {
    pub dir: PathBuf,
    journal: File,
}

impl OrchestrationState {
    /// `<workspace>/.delta/orchestrations/<id>`.
    pub fn dir_for(workspace: &Path, id: &str) -> PathBuf {
        workspace.join(".delta").join("orchestrations").join(id)
    }

    /// Creates the folder (or reopens it on resume) and keeps copies of the plan and vars.
    pub fn open(
        workspace: &Path,
        id: &str,
        plan_file: &Path,
        vars: &serde_json::Value,
        resume: bool,
    ) -> Result<OrchestrationState, StateError> {
        let dir = Self::dir_for(workspace, id);
        if resume && !dir.is_dir() {
            return Err(StateError::NotFound {
                id: id.to_string(),
                path: dir,
            });
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|source| StateError::Io {
                action: "create",
                path: dir.clone(),
                source,
            })?;
        if !resume {
            let copy = dir.join("plan.yaml");
            std::fs::copy(plan_file, &copy).map_err(|source| StateError::Io {
                action: "copy the plan to",
                path: copy,
                source,
            })?;
            let vars_path = dir.join("vars.json");
            let text = serde_json::to_string_pretty(vars).unwrap_or_else(|_| "{}".into());
            std::fs::write(&vars_path, text).map_err(|source| StateError::Io {
                action: "write",
                path: vars_path,
                source,
            })?;
        }
        let path = dir.join("journal.jsonl");
        let journal = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| StateError::Io {
                action: "open",
                path,
                source,
            })?;
        Ok(OrchestrationState { dir, journal })
    }

    /// Appends one event with one write. Scheduling records are advisory: a failed write is
    /// reported to the caller, which logs it and carries on (the runs' files are the truth).
    pub fn record(&mut self, event: SchedulingEvent) -> Result<(), StateError> {
        let record = SchedulingRecord {
            timestamp: now_rfc3339(),
            event,
        };
        let mut line = serde_json::to_string(&record).unwrap_or_default();
        line.push('\n');
        self.journal
            .write_all(line.as_bytes())
            .map_err(|source| StateError::Io {
                action: "append to",
                path: self.dir.join("journal.jsonl"),
                source,
            })
    }

    /// The vars saved when the orchestration started (used on resume).
    pub fn saved_vars(dir: &Path) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(dir.join("vars.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Attempts recorded so far per run id (for retry budgets across resumes).
    pub fn attempts_so_far(dir: &Path) -> std::collections::HashMap<String, u32> {
        let mut attempts = std::collections::HashMap::new();
        if let Ok(text) = std::fs::read_to_string(dir.join("journal.jsonl")) {
            for line in text.lines() {
                if let Ok(SchedulingRecord {
                    event:
                        SchedulingEvent::RunSubmitted {
                            run_id, attempt, ..
                        },
                    ..
                }) = serde_json::from_str::<SchedulingRecord>(line)
                {
                    let entry = attempts.entry(run_id).or_insert(0);
                    *entry = (*entry).max(attempt);
                }
            }
        }
        attempts
    }

    /// FAILED outcomes recorded so far per run id: retries are granted for failures, not
    /// for attempts an interruption (Ctrl-C, kill) cut short.
    pub fn failures_so_far(dir: &Path) -> std::collections::HashMap<String, u32> {
        let mut failures = std::collections::HashMap::new();
        if let Ok(text) = std::fs::read_to_string(dir.join("journal.jsonl")) {
            for line in text.lines() {
                if let Ok(SchedulingRecord {
                    event:
                        SchedulingEvent::RunFinished {
                            run_id,
                            status: RunStatus::Failed,
                            ..
                        },
                    ..
                }) = serde_json::from_str::<SchedulingRecord>(line)
                {
                    *failures.entry(run_id).or_insert(0) += 1;
                }
            }
        }
        failures
    }

    /// Writes `summary.json` atomically.
    pub fn write_summary(&self, summary: &OrchestrationSummary) -> Result<(), StateError> {
        let path = self.dir.join("summary.json");
        let tmp = self.dir.join(".summary.json.tmp");
        let text = serde_json::to_string_pretty(summary).unwrap_or_default();
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|source| StateError::Io {
                action: "write",
                path,
                source,
            })
    }

    pub fn sync(&self) {
        let _ = self.journal.sync_data();
    }
}

/// Finds the workspace holding orchestration `id` among `<plan dir>/workspaces/*`.
pub fn find_workspace(plan_dir: &Path, id: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(plan_dir.join("workspaces")).ok()?;
    entries
        .flatten()
        .map(|e| e.path())
        .find(|ws| OrchestrationState::dir_for(ws, id).is_dir())
}

/// The next free `<plan dir>/workspaces/W00N` (created).
pub fn next_plan_workspace(plan_dir: &Path) -> Result<PathBuf, StateError> {
    let root = plan_dir.join("workspaces");
    let mut n = 1;
    loop {
        let candidate = root.join(format!("W{n:03}"));
        if !candidate.exists() {
            std::fs::create_dir_all(&candidate).map_err(|source| StateError::Io {
                action: "create",
                path: candidate.clone(),
                source,
            })?;
            return Ok(candidate);
        }
        n += 1;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn records_attempts_and_finds_the_workspace() {
        let plan_dir = tempfile::tempdir().unwrap();
        std::fs::write(plan_dir.path().join("plan.yaml"), "stages: []\n").unwrap();
        let ws = next_plan_workspace(plan_dir.path()).unwrap();
        assert!(ws.ends_with("workspaces/W001"));
        let mut state = OrchestrationState::open(
            &ws,
            "o-1",
            &plan_dir.path().join("plan.yaml"),
            &serde_json::json!({"a": 1}),
            false,
        )
        .unwrap();
        for attempt in [1, 2] {
            state
                .record(SchedulingEvent::RunSubmitted {
                    stage: "s".into(),
                    index: 0,
                    run_id: "o-1-s-0".into(),
                    attempt,
                    resume: false,
                })
                .unwrap();
        }
        assert_eq!(
            OrchestrationState::attempts_so_far(&state.dir)["o-1-s-0"],
            2
        );
        for status in [RunStatus::Interrupted, RunStatus::Failed, RunStatus::Failed] {
            state
                .record(SchedulingEvent::RunFinished {
                    stage: "s".into(),
                    index: 0,
                    run_id: "o-1-s-0".into(),
                    status,
                    attempt: 2,
                    error: None,
                })
                .unwrap();
        }
        assert_eq!(
            OrchestrationState::failures_so_far(&state.dir)["o-1-s-0"],
            2
        );
        assert_eq!(find_workspace(plan_dir.path(), "o-1").unwrap(), ws);
        assert_eq!(OrchestrationState::saved_vars(&state.dir).unwrap()["a"], 1);
        assert!(OrchestrationState::open(
            &ws,
            "missing",
            Path::new("x"),
            &serde_json::json!({}),
            true
        )
        .is_err());
        assert_eq!(
            next_plan_workspace(plan_dir.path())
                .unwrap()
                .file_name()
                .unwrap(),
            "W002"
        );
    }
}
