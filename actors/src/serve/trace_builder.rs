//! The run inspector's one pass over a run's journal events: one [`TraceEntry`] per thing
//! that happened (no task, answer or interruption told twice; a `resumed` marker where a
//! continuation begins), the waterfall's [`Span`]s (each model call, tool call and wait for a
//! human answer, with its start and end) and the [`Pause`]s between a stop and its
//! continuation.
//!
//! It matches on the typed [`Event`]: a renamed event or field is a compile error here, not an
//! empty page. An event this builder has no entry for (a context cache lookup) still moves the trace's clock and its resumed and stop bookkeeping, and
//! gets its entry in the one `match` of [`TraceBuilder::event`].
//!
//! Must not: read files (the caller hands it events), or show a sensitive answer other than
//! as the journal stores it.

use std::collections::HashMap;

use super::run_files::{clip, epoch_ms};
use super::trace::{CallSummary, Pause, Span, TraceEntry, MAX_ENTRY_TEXT};
use super::trace_compaction::{compaction_entry, Compaction};
use crate::journal::{ActionStatus, Event, JournalEvent, ToolCallRecord};
use crate::protocol::{RunErrorKind, RunStatus};

/// Builds entries and spans from the journal's events in one pass.
#[derive(Default)]
pub(super) struct TraceBuilder {
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
pub(super) struct Built {
    pub(super) entries: Vec<TraceEntry>,
    pub(super) spans: Vec<Span>,
    pub(super) pauses: Vec<Pause>,
    /// The iteration of the last model reply (0 before the first).
    pub(super) last_reply_iteration: u32,
}

/// A model call the run failed on for good: the run ends on it, without a reply.
fn is_model_call_error(error_type: &str) -> bool {
    matches!(
        RunErrorKind::parse(error_type),
        RunErrorKind::LlmError | RunErrorKind::LlmTimeout
    )
}

/// Ends the run's driving: a stop waits for it, and what follows it is a continuation.
fn is_end(event: &Event) -> bool {
    matches!(event, Event::EngineEnd { .. })
}

/// Belongs to a stop (INTERRUPTED, ERROR, ENGINE_END): does not flush a stop left open.
fn is_stop(event: &Event) -> bool {
    matches!(
        event,
        Event::Interrupted { .. } | Event::Error { .. } | Event::EngineEnd { .. }
    )
}

fn call_summaries(tool_calls: &[ToolCallRecord]) -> Vec<CallSummary> {
    tool_calls
        .iter()
        .map(|call| CallSummary {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: clip(&call.arguments, 2048),
        })
        .collect()
}

impl TraceBuilder {
    /// Everything made, once every event was handed in; `running` opens the model call a
    /// running run waits for.
    pub(super) fn build(mut self, running: bool) -> Built {
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

    /// Takes in the journal's next event.
    pub(super) fn event(&mut self, line: &JournalEvent) {
        let event = &line.event;
        let at = epoch_ms(&line.timestamp).unwrap_or(0);
        if matches!(self.last, Some((_, true))) && !is_end(event) {
            self.resumed(line, at);
        }
        if !is_stop(event) {
            if let Some(stop) = self.stop.take() {
                // A stop the process never closed with an end (it died).
                self.entries.push(stop);
            }
        }
        let entry = TraceEntry {
            seq: line.seq,
            timestamp: line.timestamp.clone(),
            at,
            ..TraceEntry::default()
        };
        let previous = self.last;
        match event {
            Event::EngineStart {
                task, agent_name, ..
            } => {
                self.task = Some(task.clone());
                self.entries.push(TraceEntry {
                    kind: "start",
                    title: format!("Run started: agent {agent_name}"),
                    text: clip(task, MAX_ENTRY_TEXT),
                    ..entry
                });
            }
            Event::UserMessage { content } => {
                // The task is the run's first user message: told once, by the start.
                if self.task.as_deref() == Some(content.as_str()) && self.entries.len() == 1 {
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
            Event::Thought {
                iteration,
                content,
                tool_calls,
                finish_reason,
                ..
            } => self.thought(
                *iteration,
                content.as_deref().unwrap_or(""),
                tool_calls,
                finish_reason.as_deref(),
                entry,
                previous,
            ),
            Event::ActionRequest {
                iteration,
                action_id,
                tool_name,
                tool_args,
                resolved_command,
            } => {
                let asking = tool_name == "ask_human";
                let text = if asking {
                    tool_args
                        .get("prompt")
                        .and_then(|p| p.as_str())
                        .unwrap_or("")
                } else {
                    resolved_command
                };
                self.action_request(*iteration, action_id, tool_name, text, entry);
            }
            Event::ActionResult {
                iteration,
                action_id,
                tool_name,
                status,
                observation_content,
                ..
            } => self.action_result(
                *iteration,
                action_id,
                tool_name,
                *status,
                observation_content,
                entry,
            ),
            Event::HumanInputRequest {
                iteration,
                action_id,
                prompt,
                sensitive,
                ..
            } => self.question(*iteration, action_id, prompt, *sensitive, entry),
            Event::HumanInputReceived {
                iteration,
                action_id,
                response,
                redacted,
            } => self.answer(*iteration, action_id, response, *redacted, &entry),
            Event::Interrupted { reason } => {
                self.stop = Some(TraceEntry {
                    kind: "end",
                    title: "Interrupted".into(),
                    text: clip(reason, MAX_ENTRY_TEXT),
                    status: Some(RunStatus::Interrupted.as_str().into()),
                    ..entry
                });
            }
            Event::Error {
                error_type,
                error_message,
                ..
            } => self.error(error_type, error_message, entry, previous),
            Event::EngineEnd {
                status,
                result,
                error,
                ..
            } => self.end(*status, result.as_deref(), error.as_deref(), entry),
            Event::Warning { message } => self.entries.push(TraceEntry {
                kind: "note",
                title: "Warning".into(),
                text: clip(message, MAX_ENTRY_TEXT),
                ..entry
            }),
            Event::HookExecuted {
                hook_name,
                status,
                reason,
                ..
            } => self.entries.push(TraceEntry {
                kind: "hook",
                title: format!("Hook {hook_name}: {status}"),
                text: clip(reason.as_deref().unwrap_or(""), MAX_ENTRY_TEXT),
                status: Some(status.clone()),
                ..entry
            }),
            Event::ContextCompacted {
                iteration,
                strategy,
                reason,
                masked,
                cut,
                dropped_through,
                summary,
                tokens_before,
                tokens_after,
                ..
            } => self.entries.push(compaction_entry(
                &Compaction {
                    iteration: *iteration,
                    strategy,
                    reason,
                    masked,
                    cut,
                    dropped_through: *dropped_through,
                    summary: summary.as_deref(),
                    tokens_before: *tokens_before,
                    tokens_after: *tokens_after,
                },
                entry,
            )),
            // A newer event gets its entry here. Until then it is no entry, but it did
            // happen: the clock below moves past it.
            _ => {}
        }
        self.last = Some((at, is_end(event)));
    }

    fn resumed(&mut self, line: &JournalEvent, at: i64) {
        if let Some((ended, _)) = self.last {
            self.pauses.push(Pause {
                from: ended,
                to: at,
            });
        }
        let how = match line.event {
            Event::HumanInputReceived { .. } => "with the answer to its question",
            Event::UserMessage { .. } => "with a new message",
            _ => "where it stopped",
        };
        self.entries.push(TraceEntry {
            seq: line.seq,
            timestamp: line.timestamp.clone(),
            at,
            kind: "resumed",
            title: format!("Resumed {how} (delta continue)"),
            ..TraceEntry::default()
        });
    }

    fn thought(
        &mut self,
        iteration: u32,
        content: &str,
        tool_calls: &[ToolCallRecord],
        finish: Option<&str>,
        entry: TraceEntry,
        previous: Option<(i64, bool)>,
    ) {
        let calls = call_summaries(tool_calls);
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
            status: finish.map(str::to_string),
        });
        self.last_reply_text = calls.is_empty().then(|| content.to_string());
        self.last_reply_iteration = self.last_reply_iteration.max(iteration);
        self.entries.push(TraceEntry {
            kind: "reply",
            title,
            text: clip(content, MAX_ENTRY_TEXT),
            iteration: Some(iteration),
            status: finish.map(str::to_string),
            calls,
            ..entry
        });
    }

    /// An ERROR: the stop it belongs to (said once), and the model call it failed on.
    fn error(
        &mut self,
        error_type: &str,
        error_message: &str,
        entry: TraceEntry,
        previous: Option<(i64, bool)>,
    ) {
        if is_model_call_error(error_type) {
            self.failed_model_call(entry.at, previous);
        }
        let message = clip(error_message, MAX_ENTRY_TEXT);
        match &mut self.stop {
            // The interruption said it already.
            Some(stop) if RunErrorKind::parse(error_type) == RunErrorKind::Interrupted => {
                if stop.text.is_empty() {
                    stop.text = message;
                }
            }
            _ => {
                self.stop = Some(TraceEntry {
                    kind: "end",
                    title: format!("Failed: {error_type}"),
                    text: message,
                    status: Some(RunStatus::Failed.as_str().into()),
                    ..entry
                })
            }
        }
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
            status: Some(ActionStatus::Failed.as_str().into()),
        });
    }

    fn action_request(
        &mut self,
        iteration: u32,
        action_id: &str,
        tool: &str,
        text: &str,
        entry: TraceEntry,
    ) {
        let asking = tool == "ask_human";
        let (kind, title) = if asking {
            ("question", "Asks a human".to_string())
        } else {
            ("tool", format!("Tool {tool}"))
        };
        self.calls.insert(action_id.to_string(), self.entries.len());
        self.open_spans
            .insert(action_id.to_string(), self.spans.len());
        self.spans.push(Span {
            kind: if asking { "human" } else { "tool" },
            iteration,
            action_id: Some(action_id.to_string()),
            label: if asking {
                "waiting for an answer".into()
            } else {
                tool.to_string()
            },
            start: entry.at,
            end: None,
            start_unknown: false,
            status: None,
        });
        self.entries.push(TraceEntry {
            kind,
            title,
            text: clip(text, MAX_ENTRY_TEXT),
            iteration: Some(iteration),
            action_id: Some(action_id.to_string()),
            ..entry
        });
    }

    fn action_result(
        &mut self,
        iteration: u32,
        action_id: &str,
        tool: &str,
        status: ActionStatus,
        observation: &str,
        entry: TraceEntry,
    ) {
        let status = status.as_str();
        if let Some(span) = self.open_spans.remove(action_id) {
            if let Some(span) = self.spans.get_mut(span) {
                span.end = Some(entry.at);
                span.status = Some(status.to_string());
            }
        }
        let observation = clip(observation, MAX_ENTRY_TEXT);
        match self.calls.get(action_id).copied() {
            Some(index) => {
                let Some(call) = self.entries.get_mut(index) else {
                    return;
                };
                call.status = Some(status.to_string());
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
                    title: format!("Tool {tool} → {status}"),
                    text: observation,
                    iteration: Some(iteration),
                    action_id: Some(action_id.to_string()),
                    status: Some(status.to_string()),
                    ..entry
                });
            }
        }
    }

    fn question(
        &mut self,
        iteration: u32,
        action_id: &str,
        prompt: &str,
        sensitive: bool,
        entry: TraceEntry,
    ) {
        let prompt = clip(prompt, MAX_ENTRY_TEXT);
        match self.calls.get(action_id).copied() {
            Some(index) => {
                if let Some(question) = self.entries.get_mut(index) {
                    question.kind = "question";
                    question.text = prompt;
                    question.sensitive = sensitive;
                }
            }
            None => {
                self.calls.insert(action_id.to_string(), self.entries.len());
                self.entries.push(TraceEntry {
                    kind: "question",
                    title: "Asks a human".into(),
                    text: prompt,
                    iteration: Some(iteration),
                    action_id: Some(action_id.to_string()),
                    sensitive,
                    ..entry
                });
            }
        }
    }

    fn answer(
        &mut self,
        iteration: u32,
        action_id: &str,
        response: &str,
        redacted: bool,
        entry: &TraceEntry,
    ) {
        // As stored: a sensitive answer is the journal's redaction marker.
        let response = clip(response, MAX_ENTRY_TEXT);
        if let Some(index) = self.calls.get(action_id).copied() {
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
            iteration: Some(iteration),
            action_id: Some(action_id.to_string()),
            ..entry.clone()
        });
    }

    fn end(
        &mut self,
        status: RunStatus,
        result: Option<&str>,
        error: Option<&str>,
        entry: TraceEntry,
    ) {
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
            stop.status = Some(status.as_str().to_string());
            self.entries.push(stop);
            return;
        }
        let (title, text) = match status {
            RunStatus::Completed => {
                let result = result.unwrap_or("");
                // The final answer is the last reply: shown there, not again here.
                let text = if self.last_reply_text.as_deref() == Some(result) {
                    String::new()
                } else {
                    clip(result, MAX_ENTRY_TEXT)
                };
                ("Completed".to_string(), text)
            }
            RunStatus::WaitingForInput => {
                ("Paused: waiting for an answer".to_string(), String::new())
            }
            other => (
                format!("Ended: {}", other.as_str()),
                clip(error.unwrap_or(""), MAX_ENTRY_TEXT),
            ),
        };
        self.entries.push(TraceEntry {
            kind: "end",
            title,
            text,
            status: Some(status.as_str().to_string()),
            ..entry
        });
    }
}
