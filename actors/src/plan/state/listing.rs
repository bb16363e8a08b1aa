//! Every orchestration of a workspace, as `delta list-orchestrations` shows it: id, plan,
//! status, run counts and times, read from `<workspace>/.delta/orchestrations/*`. A folder
//! that cannot be read is listed with the reason instead of being hidden.
//!
//! Status: the scheduling journal and the folder's lock say whether the orchestration is
//! being driven now (lock held: RUNNING), finished (its last start has a finish: the status
//! of `summary.json`), or was stopped without finishing (a kill: INTERRUPTED).
//!
//! Must not: write anything, or take the lock (probing it is enough).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    validate_orchestration_id, OrchestrationState, OrchestrationStatus, OrchestrationSummary,
    RunCounts, SchedulingEvent, SchedulingRecord, StateError,
};
use crate::bounded_read::{self, Links};
use crate::metadata::lock_is_held;
use crate::protocol::RunStatus;

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
    /// Why the folder is UNREADABLE, or a note (how a RUNNING-looking one ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
        error: Some(reason),
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
        counts: journal.counts(),
        error: None,
        dir: dir.to_path_buf(),
    };
    if held {
        return listing;
    }
    match (journal.finished, read_summary(dir)) {
        (Some(_), Ok(Some(summary))) => {
            listing.status = summary.status.into();
            listing.counts = summary.totals.counts;
            listing.ended_at = Some(summary.ended_at);
        }
        (Some(status), Ok(None)) => listing.status = status.into(),
        (_, Err(reason)) => {
            listing.status = ListedStatus::Unreadable;
            listing.error = Some(reason);
        }
        (None, Ok(_)) => {
            listing.status = ListedStatus::Interrupted;
            listing.error = Some(
                "the process driving it stopped without finishing (killed?); resume it with \
                 `delta orchestrate --resume <id> -w <workspace>`"
                    .to_owned(),
            );
        }
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
    /// The status of the last finish, when no start came after it.
    finished: Option<OrchestrationStatus>,
    /// Planned runs per stage (the latest expansion).
    planned: BTreeMap<String, usize>,
    /// The latest outcome per run id.
    outcomes: BTreeMap<String, RunStatus>,
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
                (SchedulingEvent::OrchestrationStarted { plan, .. }, None) => {
                    view = Some(JournalView {
                        plan,
                        started_at: record.timestamp,
                        finished: None,
                        planned: BTreeMap::new(),
                        outcomes: BTreeMap::new(),
                    });
                }
                (_, None) => return Err("it does not begin with ORCHESTRATION_STARTED".to_owned()),
                (SchedulingEvent::OrchestrationStarted { .. }, Some(view)) => view.finished = None,
                (SchedulingEvent::StageStarted { stage, runs }, Some(view)) => {
                    view.planned.insert(stage, runs);
                }
                (SchedulingEvent::RunFinished { run_id, status, .. }, Some(view)) => {
                    view.outcomes.insert(run_id, status);
                }
                (SchedulingEvent::OrchestrationFinished { status }, Some(view)) => {
                    view.finished = Some(status);
                }
                (
                    SchedulingEvent::RunSubmitted { .. } | SchedulingEvent::StageFinished { .. },
                    Some(_),
                ) => {}
            }
        }
        view.ok_or_else(|| "it is empty".to_owned())
    }

    fn counts(&self) -> RunCounts {
        RunCounts::of_statuses(self.planned.values().sum(), self.outcomes.values().copied())
    }
}
