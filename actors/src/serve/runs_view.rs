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
use crate::metadata::{read_metadata, RunMetadata};
use crate::plan::state::{OrchestrationSummary, SchedulingEvent, SchedulingRecord, StageStatus};
use crate::protocol::{RunStatus, TokenUsage};
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
    pub tokens: TokenUsage,
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
    pub status: String,
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

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceView {
    pub path: PathBuf,
    pub runs: Vec<RunRowView>,
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
        tokens: meta.usage,
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
                status: summary.status.as_str().to_string(),
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
        status: "RUNNING".into(),
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
            SchedulingEvent::OrchestrationFinished { status } => {
                view.status = status.as_str().to_string()
            }
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
    let path = dir.join("journal.jsonl");
    let file = bounded_read::open(&path, Links::Refuse).map_err(|e| match e {
        e if e.is_not_found() => ServeError::BadRequest(format!(
            "no run `{run_id}` in {} (no {})",
            workspace.display(),
            path.display()
        )),
        // A FIFO, a link or a device a tool planted: said, never waited on nor followed.
        bounded_read::ReadError::Io(e) => ServeError::io("cannot read", &path, e),
        e => ServeError::Unreadable {
            path: path.clone(),
            reason: e.to_string(),
        },
    })?;
    let status = read_metadata(&dir).ok().map(|m| m.status);
    let mut entries = Vec::new();
    let mut next = from;
    let lines = BufReader::new(file.take(bounded_read::JOURNAL.max_bytes)).lines();
    for (index, line) in lines.enumerate().skip(from) {
        let Ok(line) = line else { break };
        // A torn last line of a live run: read it again next time.
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else {
            break;
        };
        next = index + 1;
        entries.extend(entries_of(&value));
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

fn entries_of(value: &serde_json::Value) -> Vec<TimelineEntry> {
    let text = |key: &str| {
        value
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string()
    };
    let seq = value.get("seq").and_then(|v| v.as_u64()).unwrap_or(0);
    let timestamp = text("timestamp");
    let entry = |kind: &'static str, title: String, body: String| TimelineEntry {
        seq,
        timestamp: timestamp.clone(),
        kind,
        title,
        text: clip(&body),
    };
    match text("type").as_str() {
        "ENGINE_START" => vec![entry(
            "start",
            format!("Run started: {}", text("agent_name")),
            text("task"),
        )],
        "USER_MESSAGE" => vec![entry("message", "Message".into(), text("content"))],
        "THOUGHT" => {
            let mut out = Vec::new();
            let content = text("content");
            if !content.is_empty() {
                out.push(entry("thought", "Thought".into(), content));
            }
            for call in value
                .get("tool_calls")
                .and_then(|c| c.as_array())
                .into_iter()
                .flatten()
            {
                let name = call.get("name").and_then(|n| n.as_str()).unwrap_or("?");
                let arguments = call.get("arguments").and_then(|a| a.as_str()).unwrap_or("");
                out.push(entry(
                    "tool-call",
                    format!("Tool call: {name}"),
                    arguments.to_string(),
                ));
            }
            out
        }
        "ACTION_RESULT" => {
            let status = text("status");
            vec![entry(
                "tool-result",
                format!("{} → {status}", text("tool_name")),
                text("observation_content"),
            )]
        }
        "ERROR" => vec![entry(
            "error",
            format!("Error: {}", text("error_type")),
            text("error_message"),
        )],
        "ENGINE_END" => {
            let body = if text("error").is_empty() {
                text("result")
            } else {
                text("error")
            };
            vec![entry("end", format!("Run ended: {}", text("status")), body)]
        }
        "HUMAN_INPUT_REQUEST" => vec![entry("question", "Asks for input".into(), text("prompt"))],
        "HUMAN_INPUT_RECEIVED" => vec![entry("answer", "Answer".into(), text("response"))],
        "INTERRUPTED" => vec![entry("note", "Interrupted".into(), text("reason"))],
        "WARNING" => vec![entry("note", "Warning".into(), text("message"))],
        _ => Vec::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_reads_as_a_timeline_from_an_offset() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".delta/R1");
        std::fs::create_dir_all(&dir).unwrap();
        let lines = [
            r#"{"seq":1,"timestamp":"t","type":"ENGINE_START","run_id":"R1","agent_home":"a","work_dir":"w","agent_name":"demo","task":"do it"}"#,
            r#"{"seq":2,"timestamp":"t","type":"THOUGHT","iteration":1,"content":"thinking","tool_calls":[{"id":"c","name":"ls","arguments":"{}"}]}"#,
            r#"{"seq":3,"timestamp":"t","type":"ACTION_RESULT","iteration":1,"action_id":"c","tool_name":"ls","status":"SUCCESS","observation_content":"a.txt"}"#,
            r#"{"seq":4,"timestamp":"t","type":"ERROR","error_type":"x","error_message":"boom"}"#,
        ];
        std::fs::write(dir.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
        let all = timeline(tmp.path(), "R1", 0).unwrap();
        let kinds: Vec<_> = all.entries.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            ["start", "thought", "tool-call", "tool-result", "error"]
        );
        assert_eq!(all.next, 4);
        assert_eq!(all.entries[3].text, "a.txt");
        let rest = timeline(tmp.path(), "R1", 3).unwrap();
        assert_eq!(rest.entries.len(), 1);
        assert!(timeline(tmp.path(), "../x", 0).is_err());
        assert!(timeline(tmp.path(), "R2", 0).is_err());
    }

    /// Regression (issue 31 item 19): a FIFO planted as the journal was a 500 `io`; it is
    /// said as unreadable (422), at once, without waiting for a writer.
    #[test]
    fn a_fifo_journal_is_unreadable_not_an_io_failure() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".delta/R1");
        std::fs::create_dir_all(&dir).unwrap();
        nix::unistd::mkfifo(
            &dir.join("journal.jsonl"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let error = timeline(tmp.path(), "R1", 0).err().unwrap();
        assert_eq!(error.code(), "unreadable", "{error}");
        assert!(error.to_string().contains("FIFO"), "{error}");
    }

    #[test]
    fn a_running_orchestration_shows_stage_progress_from_its_journal() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".delta/orchestrations/o1");
        std::fs::create_dir_all(&dir).unwrap();
        let lines = [
            r#"{"timestamp":"t","type":"ORCHESTRATION_STARTED","plan":"p.yaml","workspace":"w","resumed":false}"#,
            r#"{"timestamp":"t","type":"STAGE_STARTED","stage":"map","runs":3}"#,
            r#"{"timestamp":"t","type":"RUN_FINISHED","stage":"map","index":0,"run_id":"a","status":"COMPLETED","attempt":1,"error":null}"#,
            r#"{"timestamp":"t","type":"RUN_FINISHED","stage":"map","index":1,"run_id":"b","status":"FAILED","attempt":1,"error":"x"}"#,
        ];
        std::fs::write(dir.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
        let orchestration = &orchestration_view(&dir).unwrap();
        assert_eq!(orchestration.status, "RUNNING");
        assert_eq!(orchestration.stages[0].id, "map");
        assert_eq!(
            (
                orchestration.stages[0].total,
                orchestration.stages[0].completed,
                orchestration.stages[0].failed
            ),
            (3, 1, 1)
        );
    }
}
