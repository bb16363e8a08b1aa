//! What a run's trace is made of, as the page gets it (camelCase JSON): [`TraceEntry`], one
//! thing that happened; [`Span`], one bar of the waterfall; [`Pause`], a time the run was
//! not driven. [`super::trace_builder`] makes them from the journal's events and
//! [`super::inspector`] sends them.
//!
//! Must not: read files or know the journal's format; change a serialised name (the page
//! reads them).

use serde::Serialize;

/// Longest text of one entry sent to the page (the details have more).
pub const MAX_ENTRY_TEXT: usize = 4 * 1024;

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
