//! The run inspector's data: a run's journal read into one entry per thing that happened (no
//! task, answer or interruption told twice; a `resumed` marker where a continuation begins)
//! and into spans for a waterfall (each model call, tool call and wait for a human answer,
//! with its start and end), plus the reply the model is streaming right now
//! (`io/reply.partial`). The details of one model call and one tool call are [`super::calls`].
//!
//! Everything is read through [`super::bounded_file`] and shown as stored: a sensitive answer
//! is the journal's `[REDACTED…]` text; the run's `secrets/` folder is never read.
//!
//! Must not: write anything, or read outside `<workspace>/.delta/<run_id>/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::bounded_file::{self, FileError};
use crate::protocol::{RunStatus, TokenUsage};
use crate::workspace::live_reply::{partial_reply_path, PartialReply};
use crate::workspace::{control_dir, validate_run_id};

/// Most journal bytes read for one trace: a longer journal is read from its last this many
/// bytes (the trace says so).
pub const MAX_JOURNAL_BYTES: u64 = 8 * 1024 * 1024;
/// Most entries and spans a trace sends (the latest; the trace says when some were left out).
pub const MAX_TRACE_ITEMS: usize = 5_000;
/// Most bytes of `metadata.json` read.
pub const MAX_METADATA_BYTES: u64 = 16 * 1024 * 1024;
/// Most bytes of `io/reply.partial` read.
pub const MAX_PARTIAL_BYTES: u64 = 4 * 1024 * 1024;
/// Longest text of one entry sent to the page (the details have more).
pub const MAX_ENTRY_TEXT: usize = 4 * 1024;

/// The ERROR kinds of a model call that failed for good (the run ends on it).
const MODEL_CALL_ERRORS: [&str; 2] = ["llm_error", "llm_timeout"];

/// Why a run cannot be inspected.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The run id (or another name from the request) cannot name a run folder.
    #[error("invalid {what} `{value}`: {hint}")]
    Invalid {
        /// What it names.
        what: &'static str,
        /// The value, cut to 80 characters.
        value: String,
        /// What a valid one looks like.
        hint: &'static str,
    },
    /// No such run, call or file.
    #[error("{0}")]
    NotFound(String),
    /// A file of the run could not be read (a FIFO, a link, too large, not JSON...).
    #[error("cannot read {}: {reason}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why, with a hint.
        reason: String,
    },
}

impl InspectError {
    pub(crate) fn unreadable(path: &Path, reason: impl ToString) -> InspectError {
        InspectError::Unreadable {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }
}

/// `<workspace>/.delta/<run_id>`, for a valid run id only.
pub fn run_dir(workspace: &Path, run_id: &str) -> Result<PathBuf, InspectError> {
    validate_run_id(run_id).map_err(|_| InspectError::Invalid {
        what: "run id",
        value: run_id.chars().take(80).collect(),
        hint: "run ids are the folder names `delta list-runs` shows",
    })?;
    let dir = control_dir(workspace).join(run_id);
    if !dir.is_dir() {
        return Err(InspectError::NotFound(format!(
            "no run `{run_id}` in {} (no folder {})",
            workspace.display(),
            dir.display()
        )));
    }
    Ok(dir)
}

/// Milliseconds since the Unix epoch of an RFC 3339 time.
pub fn epoch_ms(timestamp: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(timestamp)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Text cut to `limit` bytes (on a character boundary), saying how much was left out.
pub fn clip(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes more)", &text[..end], text.len() - end)
}

/// The part of `metadata.json` the views need; unknown or missing fields are tolerated.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunRecord {
    /// The run's status.
    pub status: Option<RunStatus>,
    /// The agent's name.
    #[serde(default)]
    pub agent_name: String,
    /// The task.
    #[serde(default)]
    pub initial_message: String,
    /// When the run was created.
    #[serde(default)]
    pub created_at: String,
    /// When it last reached a final status.
    #[serde(default)]
    pub end_time: Option<String>,
    /// Iterations over its whole life.
    #[serde(default)]
    pub iterations: u32,
    /// Tokens of its last start or continuation.
    #[serde(default)]
    pub usage: TokenUsage,
    /// Tokens over its whole life (zero in older records: then `usage`).
    #[serde(default)]
    pub cumulative_usage: TokenUsage,
    /// Wall time of its last start or continuation.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// Its orchestration, for runs of a plan.
    #[serde(default)]
    pub orchestration_id: Option<String>,
    /// Why it failed or stopped.
    #[serde(default)]
    pub error: Option<Value>,
}

impl RunRecord {
    /// Tokens over the run's whole life.
    pub fn tokens(&self) -> TokenUsage {
        if self.cumulative_usage.is_zero() {
            self.usage
        } else {
            self.cumulative_usage
        }
    }

    /// The error as `(kind, message)`, from either form metadata has used.
    pub fn error_parts(&self) -> Option<(String, String)> {
        match self.error.as_ref()? {
            Value::Object(map) => Some((
                map.get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                map.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )),
            Value::String(text) => Some(match text.split_once(": ") {
                Some((kind, message)) => (kind.to_string(), message.to_string()),
                None => (String::new(), text.clone()),
            }),
            _ => None,
        }
    }
}

/// A run's `metadata.json` (bounded, never through a link).
pub fn read_record(dir: &Path) -> Result<RunRecord, InspectError> {
    let path = dir.join("metadata.json");
    let bytes = bounded_file::read_capped(&path, MAX_METADATA_BYTES)
        .map_err(|e| InspectError::unreadable(&path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| InspectError::unreadable(&path, e))
}

/// One thing that happened in a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceEntry {
    /// The journal sequence number of the event that made it.
    pub seq: u64,
    /// Its time, as written.
    pub timestamp: String,
    /// Milliseconds since the epoch.
    pub at: i64,
    /// `start`, `message`, `reply`, `tool`, `question`, `resumed`, `end`, `note`, `hook`,
    /// `compaction` (a point where the context was compacted: later requests see less).
    pub kind: &'static str,
    /// One line.
    pub title: String,
    /// The body (task, reply, observation, prompt...), cut to [`MAX_ENTRY_TEXT`].
    #[serde(skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// The iteration it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// The tool call (or ask_human call) it is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// SUCCESS / FAILED / ERROR of a tool call; the run status of an end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Tool calls a reply asked for: `name(arguments)`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallSummary>,
    /// For a question: the answer as stored (`[REDACTED…]` for a sensitive one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// For a question: the answer is redacted (sensitive).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// For a question: asked as sensitive.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sensitive: bool,
}

/// A tool call as the model asked for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallSummary {
    /// The call's id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments' JSON text, cut.
    pub arguments: String,
}

/// One bar of the waterfall.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    /// `model`, `tool` or `human`.
    pub kind: &'static str,
    /// The model call's (or the asking reply's) iteration.
    pub iteration: u32,
    /// The tool call's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// What to call it: `model call 3`, the tool's name, the question.
    pub label: String,
    /// Start, ms since the epoch.
    pub start: i64,
    /// End; `None` while it is still going on.
    pub end: Option<i64>,
    /// The start is not known (a call whose run was resumed in its middle): `start` is its end.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub start_unknown: bool,
    /// How it ended: SUCCESS / FAILED / ERROR, `stop` / `tool_calls` / `length`...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// A time the run was not driven (between an end and its continuation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pause {
    /// When the start or continuation ended.
    pub from: i64,
    /// When the next one began.
    pub to: i64,
}

/// Everything the inspector shows of a run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunTrace {
    pub run_id: String,
    pub workspace: PathBuf,
    pub status: Option<RunStatus>,
    pub agent: String,
    pub task: String,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    pub iterations: u32,
    /// Tokens over the run's whole life.
    pub tokens: TokenUsage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orchestration_id: Option<String>,
    /// `(kind, message)` of the run's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<(String, String)>,
    /// Why the metadata could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    pub entries: Vec<TraceEntry>,
    pub spans: Vec<Span>,
    pub pauses: Vec<Pause>,
    /// The journal's size: pass it back as `known` to be told when nothing changed.
    pub journal_bytes: u64,
    /// Only the journal's last [`MAX_JOURNAL_BYTES`] were read, or only the last
    /// [`MAX_TRACE_ITEMS`] entries and spans are sent.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The reply the model is streaming now (a running run's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialReply>,
    /// When this was read (ms since the epoch): open spans end here.
    pub now: i64,
}

/// The trace of `run_id` in `workspace`.
pub fn run_trace(workspace: &Path, run_id: &str) -> Result<RunTrace, InspectError> {
    let dir = run_dir(workspace, run_id)?;
    let mut trace = RunTrace {
        run_id: run_id.to_string(),
        workspace: workspace.to_path_buf(),
        now: chrono::Utc::now().timestamp_millis(),
        ..RunTrace::default()
    };
    match read_record(&dir) {
        Ok(record) => {
            trace.status = record.status;
            trace.agent = record.agent_name.clone();
            trace.task = clip(&record.initial_message, MAX_ENTRY_TEXT);
            trace.created_at = record.created_at.clone();
            trace.ended_at = record.end_time.clone();
            trace.iterations = record.iterations;
            trace.tokens = record.tokens();
            trace.duration_ms = record.duration_ms;
            trace.orchestration_id = record.orchestration_id.clone();
            trace.error = record.error_parts();
        }
        Err(e) => trace.unreadable = Some(e.to_string()),
    }
    let journal = dir.join("journal.jsonl");
    let mut builder = TraceBuilder::default();
    let (size, cut) = read_journal(&journal, |event| builder.event(event))?;
    let built = builder.build(trace.status == Some(RunStatus::Running));
    trace.journal_bytes = size;
    trace.truncated =
        cut || built.entries.len() > MAX_TRACE_ITEMS || built.spans.len() > MAX_TRACE_ITEMS;
    trace.entries = latest(built.entries);
    trace.spans = latest(built.spans);
    trace.pauses = built.pauses;
    if trace.status == Some(RunStatus::Running) {
        trace.partial = read_partial(&dir)
            .filter(|partial| !partial.complete && partial.iteration > built.last_reply_iteration);
    }
    Ok(trace)
}

/// The last [`MAX_TRACE_ITEMS`] of `items`.
fn latest<T>(mut items: Vec<T>) -> Vec<T> {
    let extra = items.len().saturating_sub(MAX_TRACE_ITEMS);
    items.drain(..extra);
    items
}

/// One span as the batch timeline draws it: `(kind, start, end)`.
pub type Phase = (&'static str, i64, Option<i64>);

/// A run's spans alone (for the batch timeline's phases).
pub fn run_phases(workspace: &Path, run_id: &str) -> Result<Vec<Phase>, InspectError> {
    let dir = run_dir(workspace, run_id)?;
    let running = read_record(&dir).ok().and_then(|r| r.status) == Some(RunStatus::Running);
    let mut builder = TraceBuilder::default();
    read_journal(&dir.join("journal.jsonl"), |event| builder.event(event))?;
    Ok(latest(builder.build(running).spans)
        .into_iter()
        .map(|span| (span.kind, span.start, span.end))
        .collect())
}

/// The size of a run's journal (to tell a page that nothing changed without reading it).
pub fn journal_size(workspace: &Path, run_id: &str) -> Result<u64, InspectError> {
    let dir = run_dir(workspace, run_id)?;
    let path = dir.join("journal.jsonl");
    bounded_file::open_regular(&path)
        .map(|(_, size)| size)
        .map_err(|e| InspectError::unreadable(&path, e))
}

/// The streaming reply of a running run, if it writes one.
pub fn read_partial(dir: &Path) -> Option<PartialReply> {
    let bytes = bounded_file::read_capped(&partial_reply_path(dir), MAX_PARTIAL_BYTES).ok()?;
    // A write caught half done does not parse: the next read gets it.
    serde_json::from_slice(&bytes).ok()
}

/// Hands each event of the journal (its last [`MAX_JOURNAL_BYTES`] when longer) to `each`, one
/// parsed line at a time; returns the journal's size and whether it was cut. A torn last line
/// (a live run mid-write) is left for the next read.
pub fn read_journal(
    path: &Path,
    mut each: impl FnMut(&Value),
) -> Result<(u64, bool), InspectError> {
    let (_, size) = bounded_file::open_regular(path).map_err(|e| match e {
        FileError::Missing => InspectError::NotFound(format!("no journal {}", path.display())),
        e => InspectError::unreadable(path, e),
    })?;
    let from = size.saturating_sub(MAX_JOURNAL_BYTES);
    let tail = bounded_file::read_from(path, from, MAX_JOURNAL_BYTES)
        .map_err(|e| InspectError::unreadable(path, e))?;
    let mut text: &[u8] = &tail.bytes;
    if from > 0 {
        // Started mid-line: skip to the next whole line.
        let skip = text
            .iter()
            .position(|b| *b == b'\n')
            .map_or(text.len(), |i| i + 1);
        text = &text[skip..];
    }
    for line in text.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
        if let Ok(event) = serde_json::from_slice::<Value>(line) {
            if event.is_object() {
                each(&event);
            }
        }
    }
    Ok((tail.size, from > 0))
}

fn str_of<'a>(event: &'a Value, key: &str) -> &'a str {
    event.get(key).and_then(Value::as_str).unwrap_or("")
}

fn u32_of(event: &Value, key: &str) -> Option<u32> {
    event
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// A compaction point: what the requests from there on no longer carry.
fn compaction(event: &Value, entry: TraceEntry) -> TraceEntry {
    let number = |key: &str| event.get(key).and_then(Value::as_u64).unwrap_or(0);
    let count = |key: &str| event.get(key).and_then(Value::as_array).map_or(0, Vec::len);
    let refused = str_of(event, "reason") == "refusal";
    let mut lines = Vec::new();
    if refused {
        lines.push("The server refused the request as longer than the model's window.".to_string());
    }
    if count("masked") > 0 {
        lines.push(format!(
            "{} tool result(s) shown as a one-line stub.",
            count("masked")
        ));
    }
    if count("cut") > 0 {
        lines.push(format!(
            "{} tool result(s) cut head and tail.",
            count("cut")
        ));
    }
    if let Some(through) = event.get("dropped_through").and_then(Value::as_u64) {
        lines.push(match event.get("summary").and_then(Value::as_str) {
            Some(summary) => format!(
                "Events up to #{through} replaced by this summary:
{summary}"
            ),
            None => format!("Events up to #{through} left out."),
        });
    }
    TraceEntry {
        kind: "compaction",
        title: format!(
            "Context compacted: {} → {} tokens ({})",
            number("tokens_before"),
            number("tokens_after"),
            str_of(event, "strategy")
        ),
        text: clip(&lines.join("\n"), MAX_ENTRY_TEXT),
        iteration: u32_of(event, "iteration"),
        ..entry
    }
}

/// Builds entries and spans from the journal's events in one pass.
#[derive(Default)]
struct TraceBuilder {
    entries: Vec<TraceEntry>,
    spans: Vec<Span>,
    pauses: Vec<Pause>,
    /// Entry index of each tool or question call, by action id.
    calls: HashMap<String, usize>,
    /// Span index of each tool or human wait, by action id.
    open_spans: HashMap<String, usize>,
    /// The time of the last event, and whether it was an end.
    last: Option<(i64, bool)>,
    /// The task, to drop the USER_MESSAGE that repeats it.
    task: Option<String>,
    /// The last reply's text, to drop the end's repeat of the final answer.
    last_reply_text: Option<String>,
    last_reply_iteration: u32,
    /// An INTERRUPTED or ERROR waiting for the ENGINE_END it belongs to.
    stop: Option<TraceEntry>,
}

/// What the builder made.
struct Built {
    entries: Vec<TraceEntry>,
    spans: Vec<Span>,
    pauses: Vec<Pause>,
    last_reply_iteration: u32,
}

impl TraceBuilder {
    fn build(mut self, running: bool) -> Built {
        if let Some(stop) = self.stop.take() {
            self.entries.push(stop);
        }
        if running {
            self.open_model_call();
        }
        Built {
            entries: self.entries,
            spans: self.spans,
            pauses: self.pauses,
            last_reply_iteration: self.last_reply_iteration,
        }
    }

    /// A running run whose last event waits for the model: the call in progress.
    fn open_model_call(&mut self) {
        let Some((at, false)) = self.last else {
            return;
        };
        let tools_running = self
            .spans
            .iter()
            .any(|s| s.end.is_none() && s.kind != "model");
        if tools_running {
            return;
        }
        let iteration = self.last_reply_iteration + 1;
        self.spans.push(Span {
            kind: "model",
            iteration,
            action_id: None,
            label: format!("model call {iteration}"),
            start: at,
            end: None,
            start_unknown: false,
            status: None,
        });
    }

    fn event(&mut self, event: &Value) {
        let timestamp = str_of(event, "timestamp").to_string();
        let at = epoch_ms(&timestamp).unwrap_or(0);
        let kind = str_of(event, "type");
        let resumed = matches!(self.last, Some((_, true))) && kind != "ENGINE_END";
        if resumed {
            self.resumed(event, at, &timestamp);
        }
        if !matches!(kind, "INTERRUPTED" | "ERROR" | "ENGINE_END") {
            if let Some(stop) = self.stop.take() {
                // A stop the process never closed with an end (it died).
                self.entries.push(stop);
            }
        }
        let entry = TraceEntry {
            seq: event.get("seq").and_then(Value::as_u64).unwrap_or(0),
            timestamp,
            at,
            ..TraceEntry::default()
        };
        let previous = self.last;
        match kind {
            "ENGINE_START" => {
                let task = str_of(event, "task").to_string();
                self.task = Some(task.clone());
                self.entries.push(TraceEntry {
                    kind: "start",
                    title: format!("Run started: agent {}", str_of(event, "agent_name")),
                    text: clip(&task, MAX_ENTRY_TEXT),
                    ..entry
                });
            }
            "USER_MESSAGE" => {
                let content = str_of(event, "content");
                // The task is the run's first user message: told once, by the start.
                if self.task.as_deref() == Some(content) && self.entries.len() == 1 {
                    self.task = None;
                } else {
                    self.entries.push(TraceEntry {
                        kind: "message",
                        title: "Message".into(),
                        text: clip(content, MAX_ENTRY_TEXT),
                        ..entry
                    });
                }
            }
            "THOUGHT" => self.thought(event, entry, previous),
            "ACTION_REQUEST" => self.action_request(event, entry),
            "ACTION_RESULT" => self.action_result(event, entry),
            "HUMAN_INPUT_REQUEST" => self.question(event, entry),
            "HUMAN_INPUT_RECEIVED" => self.answer(event, &entry),
            "INTERRUPTED" => {
                self.stop = Some(TraceEntry {
                    kind: "end",
                    title: "Interrupted".into(),
                    text: clip(str_of(event, "reason"), MAX_ENTRY_TEXT),
                    status: Some("INTERRUPTED".into()),
                    ..entry
                });
            }
            "ERROR" => {
                let error_type = str_of(event, "error_type");
                if MODEL_CALL_ERRORS.contains(&error_type) {
                    self.failed_model_call(entry.at, previous);
                }
                let message = clip(str_of(event, "error_message"), MAX_ENTRY_TEXT);
                match &mut self.stop {
                    // The interruption said it already.
                    Some(stop) if error_type == "interrupted" => {
                        if stop.text.is_empty() {
                            stop.text = message;
                        }
                    }
                    _ => {
                        self.stop = Some(TraceEntry {
                            kind: "end",
                            title: format!("Failed: {error_type}"),
                            text: message,
                            status: Some("FAILED".into()),
                            ..entry
                        })
                    }
                }
            }
            "ENGINE_END" => self.end(event, entry),
            "WARNING" => self.entries.push(TraceEntry {
                kind: "note",
                title: "Warning".into(),
                text: clip(str_of(event, "message"), MAX_ENTRY_TEXT),
                ..entry
            }),
            "CONTEXT_COMPACTED" => self.entries.push(compaction(event, entry)),
            "HOOK_EXECUTED" => {
                let reason = str_of(event, "reason");
                self.entries.push(TraceEntry {
                    kind: "hook",
                    title: format!(
                        "Hook {}: {}",
                        str_of(event, "hook_name"),
                        str_of(event, "status")
                    ),
                    text: clip(reason, MAX_ENTRY_TEXT),
                    status: Some(str_of(event, "status").to_string()),
                    ..entry
                })
            }
            _ => {}
        }
        self.last = Some((at, kind == "ENGINE_END"));
    }

    fn resumed(&mut self, event: &Value, at: i64, timestamp: &str) {
        if let Some((ended, _)) = self.last {
            self.pauses.push(Pause {
                from: ended,
                to: at,
            });
        }
        let how = match str_of(event, "type") {
            "HUMAN_INPUT_RECEIVED" => "with the answer to its question",
            "USER_MESSAGE" => "with a new message",
            _ => "where it stopped",
        };
        self.entries.push(TraceEntry {
            seq: event.get("seq").and_then(Value::as_u64).unwrap_or(0),
            timestamp: timestamp.to_string(),
            at,
            kind: "resumed",
            title: format!("Resumed {how} (delta continue)"),
            ..TraceEntry::default()
        });
    }

    fn thought(&mut self, event: &Value, entry: TraceEntry, previous: Option<(i64, bool)>) {
        let iteration = u32_of(event, "iteration").unwrap_or(0);
        let content = str_of(event, "content").to_string();
        let calls: Vec<CallSummary> = event
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|call| CallSummary {
                id: str_of(call, "id").to_string(),
                name: str_of(call, "name").to_string(),
                arguments: clip(str_of(call, "arguments"), 2048),
            })
            .collect();
        let finish = event
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        let title = if calls.is_empty() {
            format!("Model reply {iteration}: final answer")
        } else {
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            format!("Model reply {iteration}: calls {}", names.join(", "))
        };
        let (start, start_unknown) = match previous {
            Some((at, false)) => (at, false),
            _ => (entry.at, true),
        };
        self.spans.push(Span {
            kind: "model",
            iteration,
            action_id: None,
            label: format!("model call {iteration}"),
            start,
            end: Some(entry.at),
            start_unknown,
            status: finish.clone(),
        });
        self.last_reply_text = calls.is_empty().then(|| content.clone());
        self.last_reply_iteration = self.last_reply_iteration.max(iteration);
        self.entries.push(TraceEntry {
            kind: "reply",
            title,
            text: clip(&content, MAX_ENTRY_TEXT),
            iteration: Some(iteration),
            status: finish,
            calls,
            ..entry
        });
    }

    /// The model call a run failed on has no reply (no THOUGHT): its bar runs from the event
    /// before it to the ERROR, marked FAILED, so the call that ended the run is not missing.
    fn failed_model_call(&mut self, at: i64, previous: Option<(i64, bool)>) {
        let iteration = self.last_reply_iteration + 1;
        let (start, start_unknown) = match previous {
            Some((started, false)) => (started, false),
            _ => (at, true),
        };
        self.spans.push(Span {
            kind: "model",
            iteration,
            action_id: None,
            label: format!("model call {iteration}"),
            start,
            end: Some(at),
            start_unknown,
            status: Some("FAILED".into()),
        });
    }

    fn action_request(&mut self, event: &Value, entry: TraceEntry) {
        let action_id = str_of(event, "action_id").to_string();
        let tool = str_of(event, "tool_name").to_string();
        let iteration = u32_of(event, "iteration").unwrap_or(0);
        let asking = tool == "ask_human";
        let (kind, title, text) = if asking {
            let prompt = event
                .get("tool_args")
                .and_then(|a| a.get("prompt"))
                .and_then(Value::as_str)
                .unwrap_or("");
            ("question", "Asks a human".to_string(), prompt.to_string())
        } else {
            (
                "tool",
                format!("Tool {tool}"),
                str_of(event, "resolved_command").to_string(),
            )
        };
        self.calls.insert(action_id.clone(), self.entries.len());
        self.open_spans.insert(action_id.clone(), self.spans.len());
        self.spans.push(Span {
            kind: if asking { "human" } else { "tool" },
            iteration,
            action_id: Some(action_id.clone()),
            label: if asking {
                "waiting for an answer".into()
            } else {
                tool
            },
            start: entry.at,
            end: None,
            start_unknown: false,
            status: None,
        });
        self.entries.push(TraceEntry {
            kind,
            title,
            text: clip(&text, MAX_ENTRY_TEXT),
            iteration: Some(iteration),
            action_id: Some(action_id),
            ..entry
        });
    }

    fn action_result(&mut self, event: &Value, entry: TraceEntry) {
        let action_id = str_of(event, "action_id").to_string();
        let status = str_of(event, "status").to_string();
        if let Some(span) = self.open_spans.remove(&action_id) {
            if let Some(span) = self.spans.get_mut(span) {
                span.end = Some(entry.at);
                span.status = Some(status.clone());
            }
        }
        let observation = clip(str_of(event, "observation_content"), MAX_ENTRY_TEXT);
        match self.calls.get(&action_id).copied() {
            Some(index) => {
                let Some(call) = self.entries.get_mut(index) else {
                    return;
                };
                call.status = Some(status.clone());
                if call.kind == "tool" {
                    call.title = format!("{} → {status}", call.title);
                    // The command line stays in the details; the entry shows what came back.
                    call.text = observation;
                }
            }
            None => {
                // An older journal without ACTION_REQUEST lines.
                self.entries.push(TraceEntry {
                    kind: "tool",
                    title: format!("Tool {} → {status}", str_of(event, "tool_name")),
                    text: observation,
                    iteration: u32_of(event, "iteration"),
                    action_id: Some(action_id),
                    status: Some(status),
                    ..entry
                });
            }
        }
    }

    fn question(&mut self, event: &Value, entry: TraceEntry) {
        let action_id = str_of(event, "action_id").to_string();
        let sensitive = event
            .get("sensitive")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let prompt = clip(str_of(event, "prompt"), MAX_ENTRY_TEXT);
        match self.calls.get(&action_id).copied() {
            Some(index) => {
                if let Some(question) = self.entries.get_mut(index) {
                    question.kind = "question";
                    question.text = prompt;
                    question.sensitive = sensitive;
                }
            }
            None => {
                self.calls.insert(action_id.clone(), self.entries.len());
                self.entries.push(TraceEntry {
                    kind: "question",
                    title: "Asks a human".into(),
                    text: prompt,
                    iteration: u32_of(event, "iteration"),
                    action_id: Some(action_id),
                    sensitive,
                    ..entry
                });
            }
        }
    }

    fn answer(&mut self, event: &Value, entry: &TraceEntry) {
        let action_id = str_of(event, "action_id").to_string();
        let redacted = event
            .get("redacted")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        // As stored: a sensitive answer is the journal's redaction marker.
        let response = clip(str_of(event, "response"), MAX_ENTRY_TEXT);
        if let Some(index) = self.calls.get(&action_id).copied() {
            if let Some(question) = self.entries.get_mut(index) {
                question.answer = Some(response);
                question.redacted = redacted;
                return;
            }
        }
        self.entries.push(TraceEntry {
            kind: "question",
            title: "Answer".into(),
            answer: Some(response),
            redacted,
            iteration: u32_of(event, "iteration"),
            action_id: Some(action_id),
            ..entry.clone()
        });
    }

    fn end(&mut self, event: &Value, entry: TraceEntry) {
        let status = str_of(event, "status").to_string();
        // Tool calls a stop cut short end here; a question stays open until its answer.
        let spans = &mut self.spans;
        self.open_spans
            .retain(|_, index| match spans.get_mut(*index) {
                Some(span) if span.kind == "human" => true,
                Some(span) => {
                    span.end.get_or_insert(entry.at);
                    false
                }
                None => false,
            });
        if let Some(mut stop) = self.stop.take() {
            stop.status = Some(status);
            self.entries.push(stop);
            return;
        }
        let (title, text) = match status.as_str() {
            "COMPLETED" => {
                let result = str_of(event, "result");
                // The final answer is the last reply: shown there, not again here.
                let text = if self.last_reply_text.as_deref() == Some(result) {
                    String::new()
                } else {
                    clip(result, MAX_ENTRY_TEXT)
                };
                ("Completed".to_string(), text)
            }
            "WAITING_FOR_INPUT" => ("Paused: waiting for an answer".to_string(), String::new()),
            other => (
                format!("Ended: {other}"),
                clip(str_of(event, "error"), MAX_ENTRY_TEXT),
            ),
        };
        self.entries.push(TraceEntry {
            kind: "end",
            title,
            text,
            status: Some(status),
            ..entry
        });
    }
}

#[cfg(test)]
#[path = "inspector_tests.rs"]
mod tests;
