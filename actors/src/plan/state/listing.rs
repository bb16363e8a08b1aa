//! Every orchestration of a workspace, as `delta list-orchestrations` shows it: id, plan,
//! status, run counts and times, read from `<workspace>/.delta/orchestrations/*`. A folder
//! that cannot be read is listed with the reason instead of being hidden.
//!
//! Status: the scheduling journal and the folder's lock say whether the orchestration is
//! being driven now (lock held: RUNNING), finished (its last start has a finish: the status
//! of `summary.json`), or was stopped without finishing (a kill: INTERRUPTED).
//!
//! Must not: write anything, or take the lock (probing it is enough).

use crate::protocol::CostTally;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    validate_orchestration_id, OrchestrationState, OrchestrationStatus, OrchestrationSummary,
    RunCounts, SchedulingEvent, SchedulingRecord, StateError,
};
use crate::bounded_read::{self, Links};
use crate::metadata::lock_is_held;
use crate::protocol::{RunStatus, TokenUsage};

/// What a listing says about an orchestration's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ListedStatus {
    /// Its lock is held: a process drives it now.
    Running,
    /// It finished COMPLETED.
    Completed,
    /// It finished FAILED.
    Failed,
    /// It was interrupted, or its process died (the lock is free but no summary says it
    /// finished).
    Interrupted,
    /// The folder could not be read; `error` says why.
    Unreadable,
}

impl ListedStatus {
    /// The spelling listings show, e.g. `UNREADABLE`.
    pub fn as_str(self) -> &'static str {
        match self {
            ListedStatus::Running => "RUNNING",
            ListedStatus::Completed => "COMPLETED",
            ListedStatus::Failed => "FAILED",
            ListedStatus::Interrupted => "INTERRUPTED",
            ListedStatus::Unreadable => "UNREADABLE",
        }
    }
}

impl From<OrchestrationStatus> for ListedStatus {
    fn from(status: OrchestrationStatus) -> Self {
        match status {
            OrchestrationStatus::Running => ListedStatus::Running,
            OrchestrationStatus::Completed => ListedStatus::Completed,
            OrchestrationStatus::Failed => ListedStatus::Failed,
            OrchestrationStatus::Interrupted => ListedStatus::Interrupted,
        }
    }
}

/// One orchestration folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrchestrationListing {
    /// The orchestration's id (its folder's name).
    pub orchestration_id: String,
    /// Where it stands.
    pub status: ListedStatus,
    /// The plan file it was started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// RFC 3339, when it was first started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// RFC 3339, when it last finished (absent while running or after a kill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Its runs' outcomes, from the summary (or from the scheduling journal while it runs
    /// or after a kill).
    pub counts: RunCounts,
    /// Tokens of its runs, every attempt included (from the summary, or from the
    /// scheduling journal while it runs or after a kill; older journals carry none).
    #[serde(default)]
    pub usage: TokenUsage,
    /// Dollars of `usage`; `null` when a run's model had no price (or an older journal
    /// recorded no cost).
    #[serde(default)]
    pub total_cost_usd: Option<f64>,
    /// Why the folder is UNREADABLE, or a note (how a RUNNING-looking one ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For an INTERRUPTED orchestration, the exact command that resumes it (as recorded
    /// by its last start, quoted for a POSIX shell; from older journals, the plan and
    /// workspace they recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<String>,
    /// The orchestration's folder.
    pub dir: PathBuf,
}

/// Every orchestration of `workspace`, newest first (unreadable ones last, by id). A
/// workspace without orchestrations gives an empty list; a missing workspace is an error.
pub fn list_orchestrations(workspace: &Path) -> Result<Vec<OrchestrationListing>, StateError> {
    if !workspace.is_dir() {
        return Err(StateError::Io {
            action: "list the orchestrations of",
            path: workspace.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such folder"),
        });
    }
    let root = OrchestrationState::root_for(workspace);
    let entries = match std::fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StateError::Io {
                action: "list",
                path: root,
                source,
            })
        }
    };
    let mut listings = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| StateError::Io {
            action: "list",
            path: root.clone(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        listings.push(read_one(&entry.path(), name));
    }
    listings.sort_by(|a, b| {
        let readable = |l: &OrchestrationListing| l.status == ListedStatus::Unreadable;
        readable(a)
            .cmp(&readable(b))
            .then_with(|| b.started_at.cmp(&a.started_at))
            .then_with(|| a.orchestration_id.cmp(&b.orchestration_id))
    });
    Ok(listings)
}

fn unreadable(dir: &Path, id: String, reason: String) -> OrchestrationListing {
    OrchestrationListing {
        orchestration_id: id,
        status: ListedStatus::Unreadable,
        plan: None,
        started_at: None,
        ended_at: None,
        counts: RunCounts::default(),
        usage: TokenUsage::default(),
        total_cost_usd: None,
        error: Some(reason),
        resume_command: None,
        dir: dir.to_path_buf(),
    }
}

fn read_one(dir: &Path, id: String) -> OrchestrationListing {
    if let Err(error) = validate_orchestration_id(&id) {
        return unreadable(dir, id, error.to_string());
    }
    if !dir.is_dir() {
        return unreadable(dir, id, "not a folder".to_owned());
    }
    let journal_path = dir.join("journal.jsonl");
    let text =
        match bounded_read::read_to_string(&journal_path, bounded_read::JOURNAL, Links::Refuse) {
            Ok(text) => text,
            Err(error) => {
                return unreadable(
                    dir,
                    id,
                    format!("cannot read {}: {error}", journal_path.display()),
                )
            }
        };
    let journal = match JournalView::read(&text) {
        Ok(view) => view,
        Err(reason) => return unreadable(dir, id, format!("{}: {reason}", journal_path.display())),
    };
    let held = match lock_is_held(dir) {
        Ok(held) => held,
        Err(error) => return unreadable(dir, id, error.to_string()),
    };
    let mut listing = OrchestrationListing {
        orchestration_id: id,
        status: ListedStatus::Running,
        plan: Some(journal.plan.clone()),
        started_at: Some(journal.started_at.clone()),
        ended_at: None,
        counts: journal.counts(false),
        usage: journal.usage(),
        total_cost_usd: journal.cost().total_usd(),
        error: None,
        resume_command: None,
        dir: dir.to_path_buf(),
    };
    if held {
        return listing;
    }
    // Nobody drives it: a run submitted without an outcome was cut short.
    listing.counts = journal.counts(true);
    match (journal.finished, read_summary(dir)) {
        (Some(_), Ok(Some(summary))) => {
            listing.status = summary.status.into();
            listing.counts = summary.totals.counts;
            listing.usage = summary.usage();
            listing.total_cost_usd = summary.totals.cost.total_usd();
            listing.ended_at = Some(summary.ended_at);
            // A spending cap that ran out is why it stopped: said before the resume command.
            if let Some(reason) = summary
                .error
                .filter(|e| e.contains(crate::budget::EXHAUSTED_WORDS))
            {
                let command = journal.resume_command(&listing.orchestration_id);
                listing.error = Some(format!(
                    "{reason}; resume it with a bigger budget: `{command} --budget-usd N`"
                ));
            }
        }
        (Some(status), Ok(None)) => listing.status = status.into(),
        (_, Err(reason)) => {
            listing.status = ListedStatus::Unreadable;
            listing.error = Some(reason);
        }
        (None, Ok(_)) => {
            let command = journal.resume_command(&listing.orchestration_id);
            listing.status = ListedStatus::Interrupted;
            listing.error = Some(format!(
                "the process driving it stopped without finishing (killed?); resume it with \
                 `{command}`"
            ));
        }
    }
    if listing.status == ListedStatus::Interrupted {
        let command = journal.resume_command(&listing.orchestration_id);
        // Stopped by Ctrl-C (the killed case above says more): the note is the command.
        listing
            .error
            .get_or_insert_with(|| format!("resume it with `{command}`"));
        listing.resume_command = Some(command);
    }
    listing
}

fn read_summary(dir: &Path) -> Result<Option<OrchestrationSummary>, String> {
    let path = dir.join("summary.json");
    match bounded_read::read_to_string(&path, bounded_read::RECORD, Links::Refuse) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|error| format!("{} is not a summary: {error}", path.display())),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// What the scheduling journal says.
struct JournalView {
    plan: String,
    started_at: String,
    /// The last start's plan and workspace, and the resume command it recorded.
    last_start: LastStart,
    /// The status of the last finish, when no start came after it.
    finished: Option<OrchestrationStatus>,
    /// Planned runs per stage (the latest expansion).
    planned: BTreeMap<String, usize>,
    /// The latest outcome per run id; `None` while its latest submission has none.
    outcomes: BTreeMap<String, Option<RunStatus>>,
    /// The latest token figure per run id (each is the run's total so far).
    usage: BTreeMap<String, TokenUsage>,
    /// The latest cost per run id (each is the run's total so far).
    cost: BTreeMap<String, CostTally>,
}

/// What the latest `ORCHESTRATION_STARTED` recorded.
struct LastStart {
    plan: String,
    workspace: String,
    resume_command: Option<Vec<String>>,
}

impl JournalView {
    fn read(text: &str) -> Result<JournalView, String> {
        let mut view: Option<JournalView> = None;
        let lines: Vec<&str> = text.lines().collect();
        for (number, line) in lines.iter().enumerate() {
            let record = match serde_json::from_str::<SchedulingRecord>(line) {
                Ok(record) => record,
                // A torn last line is what a kill mid-write leaves: not a corruption.
                Err(_) if number + 1 == lines.len() && view.is_some() => break,
                Err(error) => {
                    return Err(format!(
                        "line {} is not a scheduling record: {error}",
                        number + 1
                    ))
                }
            };
            match (record.event, view.as_mut()) {
                (
                    SchedulingEvent::OrchestrationStarted {
                        plan,
                        workspace,
                        resume_command,
                        ..
                    },
                    None,
                ) => {
                    view = Some(JournalView {
                        plan: plan.clone(),
                        started_at: record.timestamp,
                        last_start: LastStart {
                            plan,
                            workspace,
                            resume_command,
                        },
                        finished: None,
                        planned: BTreeMap::new(),
                        outcomes: BTreeMap::new(),
                        usage: BTreeMap::new(),
                        cost: BTreeMap::new(),
                    });
                }
                (_, None) => return Err("it does not begin with ORCHESTRATION_STARTED".to_owned()),
                (
                    SchedulingEvent::OrchestrationStarted {
                        plan,
                        workspace,
                        resume_command,
                        ..
                    },
                    Some(view),
                ) => {
                    view.finished = None;
                    view.last_start = LastStart {
                        plan,
                        workspace,
                        resume_command,
                    };
                }
                (SchedulingEvent::StageStarted { stage, runs }, Some(view)) => {
                    view.planned.insert(stage, runs);
                }
                (SchedulingEvent::RunSubmitted { run_id, .. }, Some(view)) => {
                    view.outcomes.insert(run_id, None);
                }
                (
                    SchedulingEvent::RunFinished {
                        run_id,
                        status,
                        usage,
                        cost,
                        ..
                    },
                    Some(view),
                ) => {
                    // An older journal records no cost: unknown, unless the run used nothing.
                    let cost = cost.unwrap_or_else(|| {
                        if usage.is_zero() {
                            CostTally::default()
                        } else {
                            CostTally::unknown("(recorded unpriced)")
                        }
                    });
                    view.cost.insert(run_id.clone(), cost);
                    view.usage.insert(run_id.clone(), usage);
                    view.outcomes.insert(run_id, Some(status));
                }
                (SchedulingEvent::OrchestrationFinished { status }, Some(view)) => {
                    view.finished = Some(status);
                }
                (SchedulingEvent::StageFinished { .. }, Some(_)) => {}
            }
        }
        view.ok_or_else(|| "it is empty".to_owned())
    }

    /// The tally of every planned run. A run submitted without an outcome yet is running
    /// while the orchestration is driven; once it is `stopped` (no process holds it) the
    /// run was cut short and counts as interrupted, not as never started.
    fn counts(&self, stopped: bool) -> RunCounts {
        let statuses = self.outcomes.values().filter_map(|outcome| match outcome {
            Some(status) => Some(*status),
            None => stopped.then_some(RunStatus::Interrupted),
        });
        RunCounts::of_statuses(self.planned.values().sum(), statuses)
    }

    /// The command that resumes orchestration `id`: the one its last start recorded, else
    /// (older journals) one built from the plan and workspace it recorded.
    fn resume_command(&self, id: &str) -> String {
        let start = &self.last_start;
        let argv = start.resume_command.clone().unwrap_or_else(|| {
            [
                "delta",
                "orchestrate",
                &start.plan,
                "--resume",
                id,
                "-w",
                &start.workspace,
            ]
            .map(str::to_owned)
            .to_vec()
        });
        shell_words::join(argv)
    }

    fn cost(&self) -> CostTally {
        let mut total = CostTally::default();
        for cost in self.cost.values() {
            total.add(cost);
        }
        total
    }

    fn usage(&self) -> TokenUsage {
        let mut total = TokenUsage::default();
        for usage in self.usage.values() {
            total.add(*usage);
        }
        total
    }
}
