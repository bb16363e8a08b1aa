//! The runs and batches a `delta serve` page shows: a workspace's runs (`list-runs` data plus
//! agent and tokens), its orchestrations under `.delta/orchestrations/` with per-stage
//! progress (from `summary.json` when finished, else from the scheduling journal), and a run's
//! journal as a readable timeline, read from a line offset so the page can tail it. Reads
//! files only, through `bounded_read` (a FIFO or a link is never waited on), bounded in how
//! much it reads; what a workspace scan keeps between scans is `workspace_scan`'s.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::ServeError;
use crate::bounded_read::{self, Links};
use crate::journal::{Event, JournalError, JournalEvent, JournalLine, JournalLines, JOURNAL_FILE};
use crate::metadata::{read_metadata, RunMetadata};
use crate::plan::state::{OrchestrationSummary, SchedulingEvent, SchedulingRecord, StageStatus};
use crate::protocol::{OrchestrationStatus, RunStatus, TokenUsage};
use crate::workspace::{control_dir, validate_run_id, RunSummary};

/// Most runs listed per workspace (newest first).
pub const MAX_RUNS: usize = 500;
/// Most orchestrations listed per workspace.
pub const MAX_ORCHESTRATIONS: usize = 100;
/// Most timeline entries returned per request.
pub const MAX_TIMELINE: usize = 2000;
/// Longest text of one timeline entry.
const MAX_ENTRY_TEXT: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRowView {
    pub run_id: String,
    pub status: RunStatus,
    pub agent: String,
    pub task: String,
    pub iterations: u32,
    /// Tokens over the run's whole life, as `delta list-runs` counts them.
    pub tokens: TokenUsage,
    /// Dollars over the run's whole life; null when a model it called had no price.
    pub cost_usd: Option<f64>,
    pub created_at: String,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orchestration_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageView {
    pub id: String,
    pub status: StageStatus,
    pub total: usize,
    pub completed: usize,
    pub failed: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrchestrationView {
    pub id: String,
    /// RUNNING, COMPLETED, FAILED or INTERRUPTED.
    pub status: OrchestrationStatus,
    pub plan: String,
    pub stages: Vec<StageView>,
}

/// A run folder whose metadata cannot be read (a FIFO, a link, not JSON...), listed as
/// UNREADABLE with the reason, as `delta list-runs` does.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnreadableRunView {
    pub run_id: String,
    pub reason: String,
}

/// Counts over every run of a workspace, the ones past [`MAX_RUNS`] included (the list the
/// page gets stops there; `/metrics` must not).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunTotals {
    /// Runs by orchestration (empty for a lone run) and status (`RUNNING`...).
    pub runs: BTreeMap<(String, &'static str), u64>,
    /// Input and output tokens over each run's life, by orchestration.
    pub tokens: BTreeMap<String, (u64, u64)>,
}

impl RunTotals {
    /// The totals of `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a RunRowView>) -> RunTotals {
        let mut totals = RunTotals::default();
        for row in rows {
            let plan = row.orchestration_id.clone().unwrap_or_default();
            *totals
                .runs
                .entry((plan.clone(), row.status.as_str()))
                .or_default() += 1;
            let sum = totals.tokens.entry(plan).or_default();
            sum.0 = sum.0.saturating_add(row.tokens.input_tokens);
            sum.1 = sum.1.saturating_add(row.tokens.output_tokens);
        }
        totals
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceView {
    pub path: PathBuf,
    /// The newest [`MAX_RUNS`] runs.
    pub runs: Vec<RunRowView>,
    /// Every run counted, for `/metrics`.
    #[serde(skip)]
    pub totals: RunTotals,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<UnreadableRunView>,
    pub orchestrations: Vec<OrchestrationView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl WorkspaceView {
    /// A workspace with nothing to show (yet).
    pub fn empty(path: &Path) -> WorkspaceView {
        WorkspaceView {
            path: path.to_path_buf(),
            runs: Vec::new(),
            totals: RunTotals::default(),
            unreadable: Vec::new(),
            orchestrations: Vec::new(),
            error: None,
        }
    }
}

/// The row of run `run_id` (its folder's name) from its metadata.
pub(crate) fn run_row(run_id: &str, meta: &RunMetadata) -> RunRowView {
    let summary = RunSummary::from_metadata(run_id, meta);
    RunRowView {
        agent: meta.agent_name.clone(),
        tokens: summary.usage,
        cost_usd: summary.total_cost_usd,
        orchestration_id: meta.orchestration_id.clone(),
        run_id: summary.run_id,
        status: summary.status,
        task: summary.task_summary,
        iterations: summary.iterations,
        created_at: summary.created_at,
        updated_at: summary.last_updated,
    }
}

/// The view of one orchestration folder: from `summary.json` when finished, else rebuilt
/// from its scheduling journal; `None` when neither reads.
pub(crate) fn orchestration_view(dir: &Path) -> Option<OrchestrationView> {
    let id = dir.file_name()?.to_string_lossy().into_owned();
    let summary = bounded_read::read_to_string(
        &dir.join("summary.json"),
        bounded_read::RECORD,
        Links::Refuse,
    );
    if let Ok(text) = summary {
        if let Ok(summary) = serde_json::from_str::<OrchestrationSummary>(&text) {
            return Some(OrchestrationView {
                id,
                status: summary.status,
                plan: summary.plan,
                stages: summary
                    .stages
                    .into_iter()
                    .map(|s| StageView {
                        id: s.id,
                        status: s.status,
                        total: s.counts.total,
                        completed: s.counts.completed,
                        failed: s.counts.failed,
                    })
                    .collect(),
            });
        }
    }
    // Still running (or killed): rebuild the progress from the scheduling journal.
    let file = bounded_read::open(&dir.join("journal.jsonl"), Links::Refuse).ok()?;
    let mut view = OrchestrationView {
        id,
        status: OrchestrationStatus::Running,
        plan: String::new(),
        stages: Vec::new(),
    };
    let mut finished: BTreeMap<String, BTreeMap<usize, RunStatus>> = BTreeMap::new();
    for line in BufReader::new(file.take(bounded_read::JOURNAL.max_bytes))
        .lines()
        .map_while(Result::ok)
        .take(1_000_000)
    {
        let Ok(record) = serde_json::from_str::<SchedulingRecord>(&line) else {
            continue;
        };
        match record.event {
            SchedulingEvent::OrchestrationStarted { plan, .. } => view.plan = plan,
            SchedulingEvent::StageStarted { stage, runs } => {
                view.stages.retain(|s| s.id != stage);
                view.stages.push(StageView {
                    id: stage,
                    status: StageStatus::Running,
                    total: runs,
                    completed: 0,
                    failed: 0,
                });
            }
            SchedulingEvent::RunFinished {
                stage,
                index,
                status,
                ..
            } => {
                finished.entry(stage).or_default().insert(index, status);
            }
            SchedulingEvent::StageFinished { stage, status, .. } => {
                if let Some(s) = view.stages.iter_mut().find(|s| s.id == stage) {
                    s.status = status;
                }
            }
            SchedulingEvent::OrchestrationFinished { status } => view.status = status,
            SchedulingEvent::RunSubmitted { .. } => {}
        }
    }
    for stage in &mut view.stages {
        if let Some(runs) = finished.get(&stage.id) {
            stage.completed = runs
                .values()
                .filter(|s| **s == RunStatus::Completed)
                .count();
            stage.failed = runs.values().filter(|s| **s == RunStatus::Failed).count();
        }
    }
    Some(view)
}

/// One readable line of a run's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEntry {
    pub seq: u64,
    pub timestamp: String,
    /// thought, tool-call, tool-result, error, message, question, answer, start, end, note.
    pub kind: &'static str,
    pub title: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    pub run_id: String,
    pub status: Option<RunStatus>,
    pub entries: Vec<TimelineEntry>,
    /// Pass as `from` to get only what came after.
    pub next: usize,
}

fn clip(text: &str) -> String {
    if text.len() <= MAX_ENTRY_TEXT {
        return text.to_string();
    }
    let mut end = MAX_ENTRY_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes more)", &text[..end], text.len() - end)
}

/// The journal of `run_id` in `workspace` from line `from` on.
pub fn timeline(workspace: &Path, run_id: &str, from: usize) -> Result<Timeline, ServeError> {
    validate_run_id(run_id).map_err(|_| ServeError::InvalidId {
        what: "run id",
        value: run_id.chars().take(80).collect(),
        hint: "run ids are the folder names `delta list-runs` shows",
    })?;
    let dir = control_dir(workspace).join(run_id);
    let path = dir.join(JOURNAL_FILE);
    let mut lines = JournalLines::open_at(&path, from).map_err(|e| match e {
        JournalError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            ServeError::BadRequest(format!(
                "no run `{run_id}` in {} (no {})",
                workspace.display(),
                path.display()
            ))
        }
        JournalError::Io { source, .. } => ServeError::io("cannot read", &path, source),
        // A FIFO, a link or a device a tool planted: said, never waited on nor followed.
        JournalError::Unreadable { reason, .. } => ServeError::Unreadable {
            path: path.clone(),
            reason: reason.to_string(),
        },
        other => ServeError::Unreadable {
            path: path.clone(),
            reason: other.to_string(),
        },
    })?;
    let status = read_metadata(&dir).ok().map(|m| m.status);
    let mut entries = Vec::new();
    let mut next = from;
    loop {
        match lines.next() {
            // A torn last line of a live run: read it again next time.
            None | Some(JournalLine::Unfinished) => break,
            Some(JournalLine::Skipped) => {}
            Some(JournalLine::Event(event)) => entries.extend(entries_of(&event)),
        }
        next = lines.position();
        if entries.len() >= MAX_TIMELINE {
            break;
        }
    }
    Ok(Timeline {
        run_id: run_id.to_string(),
        status,
        entries,
        next,
    })
}

fn entries_of(line: &JournalEvent) -> Vec<TimelineEntry> {
    let entry = |kind: &'static str, title: String, body: &str| TimelineEntry {
        seq: line.seq,
        timestamp: line.timestamp.clone(),
        kind,
        title,
        text: clip(body),
    };
    match &line.event {
        Event::EngineStart {
            agent_name, task, ..
        } => vec![entry("start", format!("Run started: {agent_name}"), task)],
        Event::UserMessage { content } => vec![entry("message", "Message".into(), content)],
        Event::Thought {
            content,
            tool_calls,
            ..
        } => {
            let mut out = Vec::new();
            if let Some(content) = content.as_deref().filter(|c| !c.is_empty()) {
                out.push(entry("thought", "Thought".into(), content));
            }
            for call in tool_calls {
                out.push(entry(
                    "tool-call",
                    format!("Tool call: {}", call.name),
                    &call.arguments,
                ));
            }
            out
        }
        Event::ActionResult {
            tool_name,
            status,
            observation_content,
            ..
        } => vec![entry(
            "tool-result",
            format!("{tool_name} → {}", status.as_str()),
            observation_content,
        )],
        Event::Error {
            error_type,
            error_message,
            ..
        } => vec![entry(
            "error",
            format!("Error: {error_type}"),
            error_message,
        )],
        Event::EngineEnd {
            status,
            result,
            error,
            ..
        } => {
            let body = error
                .as_deref()
                .filter(|e| !e.is_empty())
                .or(result.as_deref())
                .unwrap_or("");
            vec![entry(
                "end",
                format!("Run ended: {}", status.as_str()),
                body,
            )]
        }
        Event::HumanInputRequest { prompt, .. } => {
            vec![entry("question", "Asks for input".into(), prompt)]
        }
        Event::HumanInputReceived { response, .. } => {
            vec![entry("answer", "Answer".into(), response)]
        }
        Event::Interrupted { reason } => vec![entry("note", "Interrupted".into(), reason)],
        Event::Warning { message } => vec![entry("note", "Warning".into(), message)],
        // Told by the inspector; a newer event gets its line here.
        _ => Vec::new(),
    }
}

#[cfg(test)]
#[path = "runs_view_tests.rs"]
mod tests;
