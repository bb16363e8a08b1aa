//! The run inspector's details: one model call (the request's messages with the context
//! sources marked so the page can fold them, the reply, its tool calls, tokens, timings, and
//! every attempt with its error) from `io/invocations/`, and one tool call (argv, exit code,
//! duration, stdout and stderr as head + tail) from the journal and `io/tool_executions/`.
//!
//! Files are found by name in the run's own `io/` folders (a reference from the journal is
//! checked to be a plain file name there, never followed as a path) and read through
//! [`super::bounded_file`]. Records are shown as stored: the engine redacted sensitive
//! answers in them before writing.
//!
//! Must not: write anything, or read outside `<workspace>/.delta/<run_id>/io/` and its journal.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::bounded_file::{self, HeadTail};
use super::run_files::{clip, read_run_journal, run_dir, InspectError};
use crate::journal::Event;

/// Most bytes of one io/ record read.
pub const MAX_RECORD_BYTES: u64 = 32 * 1024 * 1024;
/// Longest text of one message shown.
pub const MAX_MESSAGE_TEXT: usize = 64 * 1024;
/// Bytes of a tool's output shown from its start, and from its end.
pub const OUTPUT_HEAD: u64 = 32 * 1024;
/// See [`OUTPUT_HEAD`].
pub const OUTPUT_TAIL: u64 = 32 * 1024;
/// Most io/invocations entries looked at to find a call's records.
const MAX_DIR_ENTRIES: usize = 200_000;
/// Longest text shown of a tool call's arguments or of a model call's (or one attempt's)
/// error, in bytes (cut at a character boundary): enough to read, bounded so one broken
/// call cannot fill the page.
pub const MAX_SHORT_TEXT: usize = 4096;

/// One message of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    pub role: String,
    pub content: String,
    /// A system message or a context block (`# Context Block: <id>`): folded by default.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub collapsed: bool,
    /// The context source it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// An assistant message's tool calls: `name(arguments)`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// A tool message's call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A failed attempt of the call.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    pub attempt: Option<u64>,
    pub error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
}

/// One model call.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCallView {
    pub iteration: u32,
    /// The record's file name under io/invocations/.
    pub record: String,
    pub model: String,
    pub messages: Vec<MessageView>,
    /// The tools offered.
    pub tools: Vec<String>,
    /// The reply's text.
    pub reply: String,
    /// Reasoning text, from models that send it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    /// The reply's tool calls: `name(arguments)`.
    pub reply_tool_calls: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The provider's usage object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Time spent waiting for the endpoint's limits (in-flight cap, rate limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u64>,
    /// Why the call failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every failed attempt, from the call's own record and the attempts' records.
    pub failed_attempts: Vec<AttemptView>,
}

/// `<ts>_<iteration>[_<n>].json` or `<ts>_<iteration>_attempt<a>[_<n>].json`: the iteration
/// and the attempt (None for the call's own record).
fn parse_record_name(name: &str) -> Option<(u32, Option<u64>)> {
    let stem = name.strip_suffix(".json")?;
    let mut parts = stem.split('_');
    let timestamp = parts.next()?;
    if timestamp.len() != 20 || !timestamp.ends_with('Z') {
        return None;
    }
    let iteration: u32 = parts.next()?.parse().ok()?;
    let attempt = match parts.next() {
        Some(part) => match part.strip_prefix("attempt") {
            Some(n) => Some(n.parse().ok()?),
            None => {
                part.parse::<u32>().ok()?; // a same-millisecond suffix
                None
            }
        },
        None => None,
    };
    Some((iteration, attempt))
}

/// A name of a file directly in `folder` (`io/invocations/x.json`), from a journal reference.
fn plain_name<'a>(reference: &'a str, folder: &str) -> Option<&'a str> {
    let name = reference.strip_prefix(folder)?.strip_prefix('/')?;
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    plain.then_some(name)
}

fn read_json(path: &Path) -> Result<Value, InspectError> {
    let bytes = bounded_file::read_capped(path, MAX_RECORD_BYTES)
        .map_err(|e| InspectError::unreadable(path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| InspectError::unreadable(path, e))
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn tool_calls_of(message: &Value) -> Vec<String> {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|call| {
            let function = call.get("function").unwrap_or(&Value::Null);
            format!(
                "{}({})",
                function.get("name").and_then(Value::as_str).unwrap_or("?"),
                clip(
                    function
                        .get("arguments")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                    MAX_SHORT_TEXT
                )
            )
        })
        .collect()
}

fn message_view(message: &Value) -> MessageView {
    let role = message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    let content = text_of(message.get("content").unwrap_or(&Value::Null));
    let source = content
        .strip_prefix("# Context Block: ")
        .and_then(|rest| rest.lines().next())
        .map(|id| id.trim().to_string());
    MessageView {
        collapsed: role == "system" || source.is_some(),
        source,
        tool_calls: tool_calls_of(message),
        tool_call_id: message
            .get("tool_call_id")
            .and_then(Value::as_str)
            .map(str::to_string),
        content: clip(&content, MAX_MESSAGE_TEXT),
        role,
    }
}

/// The model call of iteration `iteration` of a run.
pub fn model_call(
    workspace: &Path,
    run_id: &str,
    iteration: u32,
) -> Result<ModelCallView, InspectError> {
    let dir = run_dir(workspace, run_id)?;
    let folder = dir.join("io").join("invocations");
    // The journal names the record of a call that got a reply.
    let journal = read_run_journal(&dir)?;
    let referenced = journal
        .events
        .iter()
        .filter_map(|line| match &line.event {
            Event::Thought {
                iteration: of,
                llm_invocation_ref: Some(reference),
                ..
            } if *of == iteration => plain_name(reference, "io/invocations"),
            _ => None,
        })
        .next_back()
        .map(str::to_string);
    let mut records: Vec<(String, Option<u64>)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&folder) {
        for entry in entries.flatten().take(MAX_DIR_ENTRIES) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some((found, attempt)) = parse_record_name(&name) {
                if found == iteration {
                    records.push((name, attempt));
                }
            }
        }
    }
    records.sort();
    let main = referenced.or_else(|| {
        records
            .iter()
            .rev()
            .find(|(_, attempt)| attempt.is_none())
            .map(|(name, _)| name.clone())
    });
    let Some(main) = main else {
        return Err(InspectError::NotFound(format!(
            "no record of model call {iteration} of run `{run_id}` in {}",
            folder.display()
        )));
    };
    let record = read_json(&folder.join(&main))?;
    let mut view = call_view(&record, iteration, main);
    for (name, attempt) in records.iter().filter(|(_, a)| a.is_some()) {
        let Ok(failed) = read_json(&folder.join(name)) else {
            continue;
        };
        view.failed_attempts.push(AttemptView {
            attempt: *attempt,
            error: clip(
                failed.get("error").and_then(Value::as_str).unwrap_or(""),
                MAX_SHORT_TEXT,
            ),
            retry_in_ms: failed.get("retry_in_ms").and_then(Value::as_u64),
        });
    }
    if view.failed_attempts.is_empty() {
        // Records written before each attempt had its own: the call's list.
        view.failed_attempts = record
            .get("failed_attempts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|error| AttemptView {
                attempt: None,
                error: clip(error, MAX_SHORT_TEXT),
                retry_in_ms: None,
            })
            .collect();
    }
    Ok(view)
}

fn call_view(record: &Value, iteration: u32, name: String) -> ModelCallView {
    let request = record.get("request").unwrap_or(&Value::Null);
    let response = record.get("response").unwrap_or(&Value::Null);
    let choice = response
        .get("choices")
        .and_then(|c| c.get(0))
        .unwrap_or(&Value::Null);
    let message = choice.get("message").unwrap_or(&Value::Null);
    ModelCallView {
        iteration,
        record: name,
        model: response
            .get("model")
            .or_else(|| request.get("model"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        messages: request
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(message_view)
            .collect(),
        tools: request
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t.get("function")?.get("name")?.as_str())
            .map(str::to_string)
            .collect(),
        reply: clip(
            &text_of(message.get("content").unwrap_or(&Value::Null)),
            MAX_MESSAGE_TEXT,
        ),
        reasoning: clip(
            message
                .get("reasoning_content")
                .or_else(|| message.get("reasoning"))
                .and_then(Value::as_str)
                .unwrap_or(""),
            MAX_MESSAGE_TEXT,
        ),
        reply_tool_calls: tool_calls_of(message),
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        usage: response.get("usage").cloned().filter(|u| !u.is_null()),
        duration_ms: record.get("duration_ms").and_then(Value::as_u64),
        waited_ms: record.get("waited_ms").and_then(Value::as_u64),
        stream: record.get("stream").and_then(Value::as_bool),
        attempts: record.get("attempts").and_then(Value::as_u64),
        error: record
            .get("error")
            .and_then(Value::as_str)
            .map(|e| clip(e, MAX_SHORT_TEXT)),
        failed_attempts: Vec::new(),
    }
}

/// One tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallView {
    pub action_id: String,
    pub tool: String,
    pub iteration: Option<u64>,
    /// The arguments the model gave, as parsed.
    pub arguments: Value,
    /// What ran, as the journal says it.
    pub command: String,
    /// The argv, from the execution record.
    pub argv: Vec<String>,
    /// SUCCESS / FAILED / ERROR.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spawn_error: Option<String>,
    /// What the model was shown.
    pub observation: String,
    /// The full stdout as stored: head and tail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<HeadTail>,
    /// The full stderr as stored: head and tail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<HeadTail>,
    /// The stored output was cut at the engine's cap when it was written.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// The execution record's file name, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
}

/// The tool call `action_id` of a run (its latest, should a resumed run have made it again).
pub fn tool_call(
    workspace: &Path,
    run_id: &str,
    action_id: &str,
) -> Result<ToolCallView, InspectError> {
    let dir = run_dir(workspace, run_id)?;
    // The call's latest request and result (a resumed run may have made it again).
    let journal = read_run_journal(&dir)?;
    let latest = |wanted: fn(&Event) -> bool| {
        journal
            .events
            .iter()
            .rev()
            .find(|line| wanted(&line.event) && action_of(&line.event) == Some(action_id))
    };
    let request = latest(|e| matches!(e, Event::ActionRequest { .. }));
    let result = latest(|e| matches!(e, Event::ActionResult { .. }));
    let Some(any) = request.or(result) else {
        return Err(InspectError::NotFound(format!(
            "no tool call `{}` in run `{run_id}`",
            action_id.chars().take(80).collect::<String>()
        )));
    };
    let mut view = ToolCallView {
        action_id: action_id.to_string(),
        ..ToolCallView::default()
    };
    if let Event::ActionRequest {
        iteration,
        tool_name,
        ..
    }
    | Event::ActionResult {
        iteration,
        tool_name,
        ..
    } = &any.event
    {
        view.tool.clone_from(tool_name);
        view.iteration = Some(u64::from(*iteration));
    }
    if let Some(Event::ActionRequest {
        tool_args,
        resolved_command,
        ..
    }) = request.map(|line| &line.event)
    {
        view.arguments = tool_args.clone();
        view.command = clip(resolved_command, MAX_MESSAGE_TEXT);
    }
    let mut execution_ref = None;
    if let Some(Event::ActionResult {
        status,
        exit_code,
        observation_content,
        execution_ref: reference,
        ..
    }) = result.map(|line| &line.event)
    {
        view.status = Some(status.as_str().to_string());
        view.exit_code = exit_code.map(i64::from);
        view.observation = clip(observation_content, MAX_MESSAGE_TEXT);
        execution_ref = reference.as_deref();
    }
    let folder = dir.join("io").join("tool_executions");
    if let Some(name) = execution_ref.and_then(|r| plain_name(r, "io/tool_executions")) {
        execution_details(&mut view, &folder, name)?;
    }
    Ok(view)
}

/// The tool call an event is about.
fn action_of(event: &Event) -> Option<&str> {
    match event {
        Event::ActionRequest { action_id, .. } | Event::ActionResult { action_id, .. } => {
            Some(action_id)
        }
        _ => None,
    }
}

fn execution_details(
    view: &mut ToolCallView,
    folder: &Path,
    name: &str,
) -> Result<(), InspectError> {
    let record = read_json(&folder.join(name))?;
    view.argv = record
        .get("argv")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| clip(a.as_str().unwrap_or(""), MAX_MESSAGE_TEXT))
        .collect();
    view.exit_code = record
        .get("exit_code")
        .and_then(Value::as_i64)
        .or(view.exit_code);
    view.signal = record.get("signal").cloned().filter(|s| !s.is_null());
    view.duration_ms = record.get("duration_ms").and_then(Value::as_u64);
    view.timed_out = record.get("timed_out").and_then(Value::as_bool);
    view.spawn_error = record
        .get("spawn_error")
        .and_then(Value::as_str)
        .map(str::to_string);
    // The outputs sit beside the record under the same stem; the record's own path to them
    // is not followed (a record is a file a tool could have replaced).
    let stem = name.strip_suffix(".json").unwrap_or(name);
    for (stream, slot) in [("stdout", &mut view.stdout), ("stderr", &mut view.stderr)] {
        let stored = record.get(stream).unwrap_or(&Value::Null);
        if stored
            .get("file_truncated")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            view.output_truncated = true;
        }
        let path: PathBuf = folder.join(format!("{stem}.{stream}"));
        match bounded_file::read_head_tail(&path, OUTPUT_HEAD, OUTPUT_TAIL) {
            Ok(output) => *slot = Some(output),
            Err(e) if e.is_missing() => {}
            Err(e) => return Err(InspectError::unreadable(&path, e)),
        }
    }
    view.record = Some(name.to_string());
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn record_names_give_their_iteration_and_attempt() {
        assert_eq!(
            parse_record_name("20261126T173628.109Z_12.json"),
            Some((12, None))
        );
        assert_eq!(
            parse_record_name("20261126T173628.109Z_12_2.json"),
            Some((12, None))
        );
        assert_eq!(
            parse_record_name("20261126T173628.109Z_3_attempt2.json"),
            Some((3, Some(2)))
        );
        assert_eq!(parse_record_name("reply.partial"), None);
        assert_eq!(parse_record_name("x_1.json"), None);
        assert_eq!(
            plain_name("io/invocations/a_1.json", "io/invocations"),
            Some("a_1.json")
        );
        for hostile in [
            "io/invocations/../../metadata.json",
            "io/invocations/",
            "/etc/passwd",
            "io/invocations/a/b.json",
        ] {
            assert_eq!(plain_name(hostile, "io/invocations"), None, "{hostile}");
        }
    }
}
