//! An orchestration's own files, at `<workspace>/.delta/orchestrations/<orchestration_id>/`:
//! a copy of the plan and its vars (so a resume expands the same plan), an append-only
//! `journal.jsonl` of scheduling events, a `lock` held while a process drives it, and
//! `summary.json` at the end.
//!
//! # Layout
//! - `mod.rs`: the folder, its id rule, the scheduling journal.
//! - `summary.rs`: the summary types the CLI prints and the one tally of run outcomes.
//! - [`listing`]: reading every orchestration of a workspace (`delta list-orchestrations`).
//! - `resume` (private): the checks before `--resume` ([`check_resumable`], [`recorded_plan`]).
//!
//! The runs' own metadata stays the truth about each run; this journal records scheduling
//! decisions (attempts, stage outcomes) so a resume can count retries and explain itself.
//!
//! Must not: decide scheduling (`plan::schedule` does).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bounded_read::{self, Links};
use crate::clock::now_rfc3339;
use crate::metadata::RunLock;
use crate::protocol::{RunStatus, TokenUsage};
use crate::workspace::{
    control_dir, ensure_control_dir, validate_run_id, write_private_file, WorkspaceError,
};

pub mod listing;
mod resume;
mod spent;

pub use crate::protocol::{
    OrchestrationStatus, OrchestrationSummary, RunCounts, RunRow, StageStatus, StageSummary, Totals,
};
pub use listing::{list_orchestrations, ListedStatus, OrchestrationListing};
pub use resume::{check_resumable, recorded_plan};

/// The folder, under a workspace's `.delta`, that holds every orchestration.
pub const ORCHESTRATIONS_DIR: &str = "orchestrations";

/// One scheduling event, one JSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SchedulingEvent {
    /// An invocation took the orchestration (the first, or a resume).
    OrchestrationStarted {
        /// The plan file.
        plan: String,
        /// The shared workspace.
        workspace: String,
        /// `true` for a resume.
        resumed: bool,
        /// The command (argv) that resumes the orchestration as it was started this time:
        /// the program, plan, `--resume`, `-w` and the flags the plan cannot supply
        /// (`--llm-script`, ...), so a listing can print it exactly. Absent in journals of
        /// older versions and for embedders that do not give one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume_command: Option<Vec<String>>,
    },
    /// A stage was expanded.
    StageStarted {
        /// The stage's id.
        stage: String,
        /// How many runs it planned.
        runs: usize,
    },
    /// A run was handed to the engine.
    RunSubmitted {
        /// The stage's id.
        stage: String,
        /// The run's position in the fan-out, 0-based.
        index: usize,
        /// The run's id.
        run_id: String,
        /// 1-based, counted over every invocation.
        attempt: u32,
        /// Continued rather than started afresh.
        resume: bool,
    },
    /// A run ended.
    RunFinished {
        /// The stage's id.
        stage: String,
        /// The run's position in the fan-out.
        index: usize,
        /// The run's id.
        run_id: String,
        /// Its final status.
        status: RunStatus,
        /// The attempt that ended.
        attempt: u32,
        /// Its error, `"<kind>: <message>"`.
        error: Option<String>,
        /// The run's tokens so far, every attempt included (absent in older journals).
        #[serde(default, skip_serializing_if = "TokenUsage::is_zero")]
        usage: TokenUsage,
        /// The dollars of `usage` (absent in older journals: unknown).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<crate::protocol::CostTally>,
    },
    /// Every run of a stage has its outcome.
    StageFinished {
        /// The stage's id.
        stage: String,
        /// Its outcome.
        status: StageStatus,
        /// Older journals carry only `completed` and `failed`; the rest reads as 0.
        #[serde(flatten)]
        counts: RunCounts,
    },
    /// The invocation ended.
    OrchestrationFinished {
        /// The orchestration's status at the end of this invocation.
        status: OrchestrationStatus,
    },
}

/// One line of the scheduling journal: the time and the event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulingRecord {
    /// When it was appended (UTC, RFC 3339 with milliseconds).
    pub timestamp: String,
    /// The event, flattened into the same JSON object.
    #[serde(flatten)]
    pub event: SchedulingEvent,
}

/// Errors of the orchestration's own files.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// An orchestration id that cannot be a folder name.
    #[error(
        "invalid orchestration id '{id}': {reason}; hint: an orchestration id is what `delta \
         orchestrate` printed (e.g. nightly-20261122-101500-ab12): 1-128 characters from \
         [A-Za-z0-9._-], starting with a letter or digit; list them with `delta \
         list-orchestrations -w <workspace>`"
    )]
    InvalidId {
        /// The id as given.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Another process holds the orchestration's lock.
    #[error(
        "orchestration '{id}' is being driven by another process (its lock {} is held); hint: \
         wait for it to finish or stop it, then resume",
        path.display()
    )]
    Locked {
        /// The orchestration's id.
        id: String,
        /// Its lock file.
        path: PathBuf,
    },
    /// A file of the orchestration could not be created, read or written.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done (`create`, `read`, `write`...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// No orchestration with this id in the workspace.
    #[error("orchestration '{id}' not found: no {path} (hint: list them with `delta list-orchestrations -w <workspace>`, and check the workspace given with -w)")]
    NotFound {
        /// The id asked for.
        id: String,
        /// The folder looked for.
        path: PathBuf,
    },
    /// The scheduling journal cannot be read (a wrong workspace or id): the resume cannot
    /// find the plan it recorded.
    #[error(
        "orchestration '{id}' not found in {}: cannot read {} ({source}); hint: list the \
         orchestrations with `delta list-orchestrations -w {}` and check the workspace given \
         with -w",
        workspace.display(), journal.display(), workspace.display()
    )]
    Unreadable {
        /// The orchestration id.
        id: String,
        /// The workspace searched.
        workspace: PathBuf,
        /// Its scheduling journal.
        journal: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The scheduling journal records no start, so no plan: the resume needs the plan file.
    #[error("{}: no plan recorded; hint: pass the plan file", journal.display())]
    NoRecordedPlan {
        /// The scheduling journal.
        journal: PathBuf,
    },
}

/// Checks that `id` is safe as one folder name under `.delta/orchestrations/`, with the
/// same rule as run ids (the run ids of a plan start with it).
pub fn validate_orchestration_id(id: &str) -> Result<(), StateError> {
    validate_run_id(id).map_err(|error| match error {
        WorkspaceError::InvalidRunId { reason, .. } => StateError::InvalidId {
            id: id.to_owned(),
            reason,
        },
        other => StateError::InvalidId {
            id: id.to_owned(),
            reason: other.to_string(),
        },
    })
}

/// The orchestration folder, its lock and its append-only scheduling journal.
pub struct OrchestrationState {
    /// `<workspace>/.delta/orchestrations/<orchestration_id>`.
    pub dir: PathBuf,
    journal: File,
    /// Held while this process drives the orchestration (released by [`Self::release`]).
    lock: Option<RunLock>,
}

impl OrchestrationState {
    /// `<workspace>/.delta/orchestrations`.
    pub fn root_for(workspace: &Path) -> PathBuf {
        control_dir(workspace).join(ORCHESTRATIONS_DIR)
    }

    /// `<workspace>/.delta/orchestrations/<id>`, for a valid id only: an id never names a
    /// folder outside that one.
    pub fn dir_for(workspace: &Path, id: &str) -> Result<PathBuf, StateError> {
        validate_orchestration_id(id)?;
        Ok(Self::root_for(workspace).join(id))
    }

    /// Creates the folder (or reopens it on resume) and keeps copies of the plan and vars.
    pub fn open(
        workspace: &Path,
        id: &str,
        plan_file: &Path,
        vars: &serde_json::Value,
        resume: bool,
    ) -> Result<OrchestrationState, StateError> {
        let dir = Self::dir_for(workspace, id)?;
        if resume && !dir.is_dir() {
            return Err(StateError::NotFound {
                id: id.to_string(),
                path: dir,
            });
        }
        // Through the workspace's own helper, so a `.delta` made here has its VERSION too:
        // runs made later rely on that and no longer probe it (`create_run_dir`).
        if !resume {
            ensure_control_dir(workspace).map_err(|e| match e {
                WorkspaceError::Io {
                    action,
                    path,
                    source,
                } => StateError::Io {
                    action,
                    path,
                    source,
                },
                other => StateError::Io {
                    action: "create",
                    path: control_dir(workspace),
                    source: std::io::Error::other(other.to_string()),
                },
            })?;
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
            // Copied as private files whatever the plan's own mode: vars may hold secrets.
            let copy = dir.join("plan.yaml");
            bounded_read::read(plan_file, bounded_read::CONFIG, Links::Follow)
                .map_err(std::io::Error::from)
                .and_then(|plan| write_private_file(&copy, &plan))
                .map_err(|source| StateError::Io {
                    action: "copy the plan to",
                    path: copy,
                    source,
                })?;
            let vars_path = dir.join("vars.json");
            let text = serde_json::to_string_pretty(vars).unwrap_or_else(|_| "{}".into());
            write_private_file(&vars_path, text.as_bytes()).map_err(|source| StateError::Io {
                action: "write",
                path: vars_path,
                source,
            })?;
        }
        let lock = RunLock::try_acquire(&dir)
            .map_err(|error| StateError::Io {
                action: "lock",
                path: dir.join(crate::metadata::LOCK_FILE),
                source: std::io::Error::other(error.to_string()),
            })?
            .ok_or_else(|| StateError::Locked {
                id: id.to_owned(),
                path: dir.join(crate::metadata::LOCK_FILE),
            })?;
        let path = dir.join("journal.jsonl");
        let mut append = OpenOptions::new();
        append.create(true).append(true).mode(0o600);
        // Never through a link (symbolic or hard) a tool put there, never a FIFO.
        let journal = crate::private_file::open_own_file(&path, &append).map_err(|source| {
            StateError::Io {
                action: "open",
                path,
                source,
            }
        })?;
        Ok(OrchestrationState {
            dir,
            journal,
            lock: Some(lock),
        })
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

    /// The scheduling journal's text, read within [`bounded_read::JOURNAL`].
    fn read_journal(dir: &Path) -> Result<String, bounded_read::ReadError> {
        bounded_read::read_to_string(
            &dir.join("journal.jsonl"),
            bounded_read::JOURNAL,
            Links::Refuse,
        )
    }

    /// The vars saved when the orchestration started (used on resume).
    pub fn saved_vars(dir: &Path) -> Option<serde_json::Value> {
        let text = bounded_read::read_to_string(
            &dir.join("vars.json"),
            bounded_read::RECORD,
            Links::Refuse,
        )
        .ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Attempts recorded so far per run id (for retry budgets across resumes).
    pub fn attempts_so_far(dir: &Path) -> std::collections::HashMap<String, u32> {
        let mut attempts = std::collections::HashMap::new();
        if let Ok(text) = Self::read_journal(dir) {
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
        if let Ok(text) = Self::read_journal(dir) {
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
        write_private_file(&tmp, text.as_bytes())
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|source| StateError::Io {
                action: "write",
                path,
                source,
            })
    }

    /// fsyncs the scheduling journal (best effort: a failure only loses durability).
    pub fn sync(&self) {
        let _ = self.journal.sync_data();
    }

    /// Lets another process (or a resume in this one) take the orchestration.
    pub fn release(&mut self) {
        self.lock = None;
    }
}

/// Finds the workspace holding orchestration `id` among `<plan dir>/workspaces/*`.
pub fn find_workspace(plan_dir: &Path, id: &str) -> Option<PathBuf> {
    validate_orchestration_id(id).ok()?;
    let entries = std::fs::read_dir(plan_dir.join("workspaces")).ok()?;
    entries
        .flatten()
        .map(|e| e.path())
        .find(|ws| OrchestrationState::root_for(ws).join(id).is_dir())
}

/// The next free `<plan dir>/workspaces/W00N` (created).
pub fn next_plan_workspace(plan_dir: &Path) -> Result<PathBuf, StateError> {
    let candidate = next_plan_workspace_path(plan_dir);
    std::fs::create_dir_all(&candidate).map_err(|source| StateError::Io {
        action: "create",
        path: candidate.clone(),
        source,
    })?;
    Ok(candidate)
}

/// The folder [`next_plan_workspace`] would create (the first `<plan dir>/workspaces/W00N`
/// that does not exist), without creating it.
pub fn next_plan_workspace_path(plan_dir: &Path) -> PathBuf {
    let root = plan_dir.join("workspaces");
    let mut n = 1;
    loop {
        let candidate = root.join(format!("W{n:03}"));
        if !candidate.exists() {
            return candidate;
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
                    usage: TokenUsage::default(),
                    cost: None,
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

    #[test]
    fn an_orchestration_keeps_private_files_and_makes_the_control_folder_with_its_version() {
        use std::os::unix::fs::PermissionsExt;
        let ws = tempfile::tempdir().unwrap();
        let plan = ws.path().join("plan.yaml");
        std::fs::write(&plan, "stages: []\n").unwrap();
        std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o644)).unwrap();
        let state = OrchestrationState::open(
            ws.path(),
            "o-1",
            &plan,
            &serde_json::json!({"token": "t"}),
            false,
        )
        .unwrap();
        state
            .write_summary(&OrchestrationSummary {
                orchestration_id: "o-1".into(),
                status: OrchestrationStatus::Completed,
                plan: plan.display().to_string(),
                workspace: ws.path().display().to_string(),
                started_at: String::new(),
                ended_at: String::new(),
                duration_ms: 0,
                stages: vec![],
                totals: Totals::default(),
                error: None,
            })
            .unwrap();
        // Runs started later find `.delta` there and do not probe it (`create_run_dir`).
        let control = ws.path().join(".delta");
        assert_eq!(
            std::fs::read_to_string(control.join("VERSION")).unwrap(),
            crate::workspace::CONTROL_VERSION
        );
        // The plan's copy and the vars (which may hold secrets) are private whatever the
        // plan's own mode, and so is everything else the orchestration keeps.
        let mut files = vec![control.join("VERSION")];
        for entry in std::fs::read_dir(&state.dir).unwrap() {
            files.push(entry.unwrap().path());
        }
        for name in ["plan.yaml", "vars.json", "journal.jsonl", "summary.json"] {
            assert!(files.contains(&state.dir.join(name)), "{name} in {files:?}");
        }
        for file in files {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", file.display());
        }
    }

    #[test]
    fn resume_id_escaping_the_orchestrations_folder_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let absolute = outside.path().join("abs");
        for id in ["../../x", absolute.to_str().unwrap(), "a/b", "", ".hidden"] {
            let error = OrchestrationState::dir_for(ws.path(), id).unwrap_err();
            assert!(
                matches!(error, StateError::InvalidId { .. }),
                "{id}: {error}"
            );
            assert!(
                error.to_string().contains("invalid orchestration id"),
                "{error}"
            );
            let opened = OrchestrationState::open(
                ws.path(),
                id,
                Path::new("p"),
                &serde_json::json!({}),
                true,
            );
            assert!(opened.is_err(), "{id}");
            assert!(find_workspace(outside.path(), id).is_none());
        }
        assert!(!absolute.exists());
        assert_eq!(
            std::fs::read_dir(ws.path()).unwrap().count(),
            0,
            "nothing created"
        );
    }

    #[test]
    fn a_second_driver_of_one_orchestration_is_refused_until_release() {
        let ws = tempfile::tempdir().unwrap();
        let plan = ws.path().join("plan.yaml");
        std::fs::write(&plan, "stages: []\n").unwrap();
        let vars = serde_json::json!({});
        let mut first = OrchestrationState::open(ws.path(), "o-1", &plan, &vars, false).unwrap();
        let second = OrchestrationState::open(ws.path(), "o-1", &plan, &vars, true);
        assert!(matches!(second, Err(StateError::Locked { .. })));
        first.release();
        assert!(OrchestrationState::open(ws.path(), "o-1", &plan, &vars, true).is_ok());
    }
}
