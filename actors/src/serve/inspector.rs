//! The run inspector's data: a run's trace ([`run_trace`]: its record's header, and from its
//! journal the entries, waterfall spans and pauses [`super::trace_builder`] makes, plus the
//! reply the model is streaming right now, `io/reply.partial`), the spans alone for the batch
//! timeline ([`run_phases`]), and the decision a page's poll needs ([`poll_trace`]: when the
//! journal is still the size the page has, a short "unchanged" answer instead of the trace).
//! The details of one model call and one tool call are [`super::calls`].
//!
//! Everything is read through [`super::run_files`] and shown as stored: a sensitive answer is
//! the journal's `[REDACTED…]` text; the run's `secrets/` folder is never read.
//!
//! Must not: write anything, or read outside `<workspace>/.delta/<run_id>/`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::run_files::{clip, journal_size, read_partial, read_run_journal, run_dir, InspectError};
use super::trace::{Pause, Span, TraceEntry, MAX_ENTRY_TEXT};
use super::trace_builder::TraceBuilder;
use crate::metadata::read_metadata_lenient;
use crate::protocol::{RunStatus, TokenUsage};
use crate::workspace::live_reply::PartialReply;

/// Most entries and spans a trace sends (the latest; the trace says when some were left out).
pub const MAX_TRACE_ITEMS: usize = 5_000;

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
    /// Dollars over the run's whole life; null when unknown (`cost_note` says why) or
    /// the record could not be read.
    pub cost_usd: Option<f64>,
    /// "cost unknown (no price for model X: set llm.price)" when `cost_usd` is null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_note: Option<String>,
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
    /// Only the journal's last [`super::run_files::MAX_JOURNAL_BYTES`] were read, or only
    /// the last [`MAX_TRACE_ITEMS`] entries and spans are sent.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Complete journal lines that are not events this delta reads (hand-edited, or a newer
    /// delta's), left out of the trace.
    #[serde(skip_serializing_if = "is_zero")]
    pub skipped_lines: usize,
    /// The reply the model is streaming now (a running run's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialReply>,
    /// When this was read (ms since the epoch): open spans end here.
    pub now: i64,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
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
    match read_metadata_lenient(&dir) {
        Ok(record) => {
            trace.status = Some(record.status);
            trace.task = clip(&record.initial_message, MAX_ENTRY_TEXT);
            trace.iterations = record.iterations;
            trace.tokens = record.usage_so_far();
            let cost = record.cost_so_far();
            trace.cost_usd = cost.total_usd();
            trace.cost_note = cost.note();
            trace.duration_ms = record.duration_ms;
            trace.error = record
                .error
                .map(|error| (error.kind.to_string(), error.message));
            trace.agent = record.agent_name;
            trace.created_at = record.created_at;
            trace.ended_at = record.end_time;
            trace.orchestration_id = record.orchestration_id;
        }
        Err(e) => trace.unreadable = Some(e.to_string()),
    }
    let journal = read_run_journal(&dir)?;
    let mut builder = TraceBuilder::default();
    for event in &journal.events {
        builder.event(event);
    }
    let built = builder.build(trace.status == Some(RunStatus::Running));
    trace.journal_bytes = journal.size;
    trace.skipped_lines = journal.skipped;
    trace.truncated =
        journal.cut || built.entries.len() > MAX_TRACE_ITEMS || built.spans.len() > MAX_TRACE_ITEMS;
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
    let running =
        read_metadata_lenient(&dir).is_ok_and(|record| record.status == RunStatus::Running);
    let journal = read_run_journal(&dir)?;
    let mut builder = TraceBuilder::default();
    for event in &journal.events {
        builder.event(event);
    }
    Ok(latest(builder.build(running).spans)
        .into_iter()
        .map(|span| (span.kind, span.start, span.end))
        .collect())
}

/// What a trace poll answers when the journal did not change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unchanged {
    /// Always true: the page tells this answer from a trace by it.
    pub unchanged: bool,
    /// The journal's size, as the page knew it.
    pub journal_bytes: u64,
    /// The run's status now (it may change without a journal line: a janitor's verdict).
    pub status: Option<RunStatus>,
    /// The reply the model is streaming now, for a running run.
    pub partial: Option<PartialReply>,
    /// When this was read (ms since the epoch).
    pub now: i64,
}

/// A page's poll for a run's trace: the whole trace, or that nothing changed.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum TracePoll {
    /// The journal is still the size the page has.
    Unchanged(Unchanged),
    /// The trace, read again.
    Trace(Box<RunTrace>),
}

/// The answer to a page that has the trace of a journal of `known` bytes (or none), for a
/// journal now `size` bytes long: `None` when the trace must be read again; otherwise the
/// short answer, with the reply being streamed (`partial`, read only for a running run).
pub fn unchanged_since(
    known: Option<u64>,
    size: u64,
    status: impl FnOnce() -> Option<RunStatus>,
    partial: impl FnOnce() -> Option<PartialReply>,
    now: i64,
) -> Option<Unchanged> {
    if known != Some(size) {
        return None;
    }
    let status = status();
    let running = status == Some(RunStatus::Running);
    Some(Unchanged {
        unchanged: true,
        journal_bytes: size,
        status,
        partial: running.then(partial).flatten(),
        now,
    })
}

/// What a page polling run `run_id` with the journal size it has (`known`) is answered.
pub fn poll_trace(
    workspace: &Path,
    run_id: &str,
    known: Option<u64>,
) -> Result<TracePoll, InspectError> {
    if let Some(known) = known {
        let dir = run_dir(workspace, run_id)?;
        let unchanged = unchanged_since(
            Some(known),
            journal_size(&dir)?,
            || read_metadata_lenient(&dir).ok().map(|record| record.status),
            || read_partial(&dir),
            chrono::Utc::now().timestamp_millis(),
        );
        if let Some(unchanged) = unchanged {
            return Ok(TracePoll::Unchanged(unchanged));
        }
    }
    run_trace(workspace, run_id).map(|trace| TracePoll::Trace(Box::new(trace)))
}

#[cfg(test)]
#[path = "inspector_tests.rs"]
mod tests;
