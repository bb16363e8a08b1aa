//! The conversation as the model sees it: journal events in, an OpenAI-valid conversation
//! out, with every CONTEXT_COMPACTED event of the journal applied. A pure function of the
//! events ([`conversation_view`]), so the next request, `delta continue` after a crash and
//! `delta serve`'s inspector all rebuild the same view; and a cache of it for a run being
//! driven ([`ConversationCache`]), which converts only the events new since the last request.
//!
//! What a compaction changes, from the event on: a masked tool result is a one-line stub
//! naming the tool, its size and its io/ record; a cut one keeps its head and tail around a
//! line saying what was cut; the events up to `dropped_through` (the task excepted) are left
//! out, with the summary written of them (or a note saying they were left out) as a system
//! message before the task. Tool calls and their results stay paired: a result is only ever
//! sent right after its call, and a call left out takes its results with it.
//!
//! Must not: decide what to compact (`compact.rs`), or write anything.

use std::collections::{HashMap, HashSet};

use crate::journal::{Event, JournalEvent, ToolCallRecord};
use crate::llm::{ChatMessage, FunctionCall, MessageLog, Role, ToolCall};
use crate::redact::SecretSet;

use super::INTERRUPTED_OBSERVATION;

/// Bytes counted for each message beyond its text: its role, its framing, its ids.
pub(crate) const MESSAGE_FRAME_BYTES: u64 = 16;

/// What a message of the view is, for the budget's decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MessageKind {
    /// The summary of (or the note about) what a compaction left out.
    Preface,
    /// The run's first user message.
    Task,
    /// A later user message (`delta continue -m`, an answer).
    User,
    /// A model reply; `thought` counts the replies of the view from 0.
    Assistant { thought: usize },
    /// A tool result: the size of its whole observation, and of its message as a stub.
    ToolResult {
        action_id: String,
        full_bytes: u64,
        stub_bytes: u64,
        masked: bool,
        cut: bool,
    },
}

/// A message's size and kind, and the journal event it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessageMeta {
    pub(crate) bytes: u64,
    pub(crate) kind: MessageKind,
    /// The event's seq (0 for the preface).
    pub(crate) seq: u64,
}

/// The conversation of a journal, with the size and kind of each message. The messages are
/// kept in chunks that every request shares ([`MessageLog`]), and their size as a
/// running total: neither is walked again for the next request.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct View {
    pub(crate) messages: MessageLog,
    pub(crate) meta: Vec<MessageMeta>,
    /// The sum of `meta`'s bytes.
    bytes: u64,
}

impl View {
    /// The bytes of all messages, as the budget counts them.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    fn push(&mut self, message: ChatMessage, meta: MessageMeta) {
        self.bytes += meta.bytes;
        self.meta.push(meta);
        self.messages.push(message);
    }

    /// Adds `other`'s messages at the end.
    fn append(&mut self, other: View) {
        self.bytes += other.bytes;
        self.meta.extend(other.meta);
        for message in other.messages.into_vec() {
            self.messages.push(message);
        }
    }
}

/// The size of `message` as the budget counts it: its text, its calls, its ids and a frame.
pub(crate) fn message_bytes(message: &ChatMessage) -> u64 {
    let text = message.content.as_deref().map_or(0, str::len);
    let calls: usize = message
        .tool_calls()
        .iter()
        .map(|c| c.id.len() + c.function.name.len() + c.function.arguments.len())
        .sum();
    let id = message.tool_call_id.as_deref().map_or(0, str::len);
    (text + calls + id) as u64 + MESSAGE_FRAME_BYTES
}

/// Every compaction of a journal, folded: what the view changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Compactions {
    /// Results shown as a stub.
    pub(crate) masked: HashSet<String>,
    /// Results cut head and tail: bytes kept.
    pub(crate) cut: HashMap<String, u64>,
    /// Events up to this seq (the task excepted) are left out.
    pub(crate) dropped_through: Option<u64>,
    /// The latest summary, and the seq it covers up to.
    pub(crate) summary: Option<(String, u64)>,
    /// How many CONTEXT_COMPACTED events were folded.
    pub(crate) count: usize,
}

impl Compactions {
    /// Folds every CONTEXT_COMPACTED of `events`.
    pub(crate) fn of(events: &[JournalEvent]) -> Compactions {
        let mut folded = Compactions::default();
        for event in events {
            folded.add(&event.event);
        }
        folded
    }

    fn add(&mut self, event: &Event) {
        let Event::ContextCompacted {
            masked,
            cut,
            dropped_through,
            summary,
            ..
        } = event
        else {
            return;
        };
        self.count += 1;
        self.masked.extend(masked.iter().cloned());
        for c in cut {
            self.cut.insert(c.action_id.clone(), c.kept_bytes);
        }
        if let Some(through) = dropped_through {
            self.dropped_through = Some(self.dropped_through.map_or(*through, |d| d.max(*through)));
            if let Some(summary) = summary {
                self.summary = Some((summary.clone(), *through));
            }
        }
    }

    /// The system message that stands for what was left out, when something was;
    /// `last_dropped` is the last iteration it left out.
    fn preface(&self, last_dropped: Option<u32>) -> Option<String> {
        let through = self.dropped_through?;
        let later = match last_dropped {
            Some(1) => " (iteration 1)".to_string(),
            Some(i) => format!(" (iterations 1 to {i})"),
            None => String::new(),
        };
        Some(match &self.summary {
            Some((summary, covered)) if *covered >= through => format!(
                "# Context Block: conversation summary\n\nThe earlier part of this conversation{later} was replaced by this summary to fit the model's context window (the run's journal keeps all of it):\n\n{summary}"
            ),
            Some((summary, _)) => format!(
                "# Context Block: conversation summary\n\nThe earlier part of this conversation{later} was left out to fit the model's context window (the run's journal keeps all of it). A summary of its beginning:\n\n{summary}"
            ),
            None => format!(
                "# Context Block: conversation summary\n\nThe earlier part of this conversation{later} was left out to fit the model's context window; the run's journal keeps all of it."
            ),
        })
    }
}

/// The stub a masked result is shown as.
pub(crate) fn stub(tool_name: &str, full_bytes: u64, execution_ref: Option<&str>) -> String {
    let record = execution_ref.unwrap_or("the run's journal");
    format!("[{tool_name} result left out to fit the context window: {full_bytes} bytes; full text in {record}]")
}

/// `text` cut to about `kept_bytes` (half from its start, half from its end) around a line
/// saying what was cut and where the whole is.
pub(crate) fn cut_text(text: &str, kept_bytes: u64, execution_ref: Option<&str>) -> String {
    let kept = usize::try_from(kept_bytes).unwrap_or(usize::MAX);
    if text.len() <= kept {
        return text.to_string();
    }
    let mut head = kept / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (kept - kept / 2);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let record = execution_ref.unwrap_or("the run's journal");
    format!(
        "{}\n[... {} bytes of this result cut to fit the context window; full text in {record} ...]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// A recorded result, for its message.
#[derive(Clone, Copy)]
struct ResultRef<'a> {
    tool_name: &'a str,
    observation: &'a str,
    execution_ref: Option<&'a str>,
}

/// The conversation of `events` with every compaction applied; `max_iterations` keeps the
/// last that many replies (and the task). Sensitive answers' markers are replaced by the
/// answers (`secrets`).
pub(crate) fn conversation_view(
    events: &[JournalEvent],
    max_iterations: Option<u32>,
    secrets: &SecretSet,
) -> View {
    let compactions = Compactions::of(events);
    let results = results_of(events);
    let trim_start = match max_iterations {
        Some(n) if n > 0 => trimmed_start(events, n as usize),
        _ => 0,
    };
    let through = compactions.dropped_through.unwrap_or(0);
    let kept = |e: &JournalEvent| e.seq > through;
    let task_index = events
        .iter()
        .position(|e| matches!(e.event, Event::UserMessage { .. }));
    let mut view = View::default();
    // The left-out events never change: what the preface says of them is stable.
    let last_dropped = events
        .iter()
        .take_while(|e| e.seq <= through)
        .filter_map(|e| match &e.event {
            Event::Thought { iteration, .. } => Some(*iteration),
            _ => None,
        })
        .max();
    if let Some(preface) = compactions.preface(last_dropped) {
        push(&mut view, system(preface), MessageKind::Preface, 0, secrets);
    }
    // The task is sent first whenever the loop below would not send it.
    let task_in_loop = task_index.is_some_and(|i| i >= trim_start && kept(&events[i]));
    if let (Some(i), false) = (task_index, task_in_loop) {
        if let Event::UserMessage { content } = &events[i].event {
            push(
                &mut view,
                user(content.clone()),
                MessageKind::Task,
                events[i].seq,
                secrets,
            );
        }
    }
    let mut converter = Converter::default();
    for (index, event) in events.iter().enumerate().skip(trim_start) {
        if !kept(event) {
            continue;
        }
        let is_task = Some(index) == task_index;
        converter.event(&mut view, event, is_task, &results, &compactions, secrets);
    }
    view
}

/// The first recorded result of each call: later duplicates are ignored.
fn results_of(events: &[JournalEvent]) -> HashMap<&str, ResultRef<'_>> {
    let mut results = HashMap::new();
    for event in events {
        add_result(&mut results, event);
    }
    results
}

fn add_result<'a>(results: &mut HashMap<&'a str, ResultRef<'a>>, event: &'a JournalEvent) {
    if let Event::ActionResult {
        action_id,
        tool_name,
        observation_content,
        execution_ref,
        ..
    } = &event.event
    {
        results.entry(action_id.as_str()).or_insert(ResultRef {
            tool_name,
            observation: observation_content,
            execution_ref: execution_ref.as_deref(),
        });
    }
}

/// Converts events to messages in order, one at a time.
#[derive(Debug, Default, Clone)]
struct Converter {
    /// Tool-call ids already sent: a THOUGHT journaled twice (a replay bug, a pasted line
    /// under a new seq) must not send the same call again, which providers refuse.
    sent_calls: HashSet<String>,
    /// Replies converted so far.
    thoughts: usize,
}

impl Converter {
    /// Adds the messages of `event`; false when a call of it has no result in `results`
    /// (it got the interrupted observation, which a later result would replace).
    fn event(
        &mut self,
        view: &mut View,
        event: &JournalEvent,
        is_task: bool,
        results: &HashMap<&str, ResultRef<'_>>,
        compactions: &Compactions,
        secrets: &SecretSet,
    ) -> bool {
        match &event.event {
            Event::UserMessage { content } => {
                let kind = if is_task {
                    MessageKind::Task
                } else {
                    MessageKind::User
                };
                push(view, user(content.clone()), kind, event.seq, secrets);
                true
            }
            Event::Thought {
                content,
                tool_calls,
                ..
            } => self.thought(
                view,
                event.seq,
                content,
                tool_calls,
                results,
                compactions,
                secrets,
            ),
            // Results are placed right after their call.
            _ => true,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn thought(
        &mut self,
        view: &mut View,
        seq: u64,
        content: &Option<String>,
        tool_calls: &[ToolCallRecord],
        results: &HashMap<&str, ResultRef<'_>>,
        compactions: &Compactions,
        secrets: &SecretSet,
    ) -> bool {
        let text = content.clone().filter(|c| !c.is_empty());
        let repeats_only = !tool_calls.is_empty()
            && tool_calls
                .iter()
                .all(|c| self.sent_calls.contains(c.id.as_str()));
        if repeats_only {
            return true;
        }
        let calls: Vec<&ToolCallRecord> = tool_calls
            .iter()
            .filter(|c| self.sent_calls.insert(c.id.clone()))
            .collect();
        let thought = self.thoughts;
        if calls.is_empty() {
            // An empty answer (no text, no call) is left out of the history sent back:
            // vLLM, Mistral and OpenAI's own validator refuse an assistant turn that says
            // nothing (docs/providers.md), and it tells the model nothing.
            if let Some(text) = text {
                self.thoughts += 1;
                let message = ChatMessage {
                    role: Role::Assistant,
                    content: Some(text),
                    tool_calls: None,
                    tool_call_id: None,
                };
                push(
                    view,
                    message,
                    MessageKind::Assistant { thought },
                    seq,
                    secrets,
                );
            }
            return true;
        }
        self.thoughts += 1;
        let assistant = ChatMessage {
            role: Role::Assistant,
            content: text,
            tool_calls: Some(
                calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.id.clone(),
                        kind: "function".to_string(),
                        function: FunctionCall {
                            name: c.name.clone(),
                            arguments: c.arguments.clone(),
                        },
                    })
                    .collect(),
            ),
            tool_call_id: None,
        };
        push(
            view,
            assistant,
            MessageKind::Assistant { thought },
            seq,
            secrets,
        );
        let mut answered = true;
        for call in calls {
            let (observation, full_bytes, stub_len, masked, cut) =
                match results.get(call.id.as_str()) {
                    Some(result) => {
                        let full = result.observation.len() as u64;
                        let stub = stub(result.tool_name, full, result.execution_ref);
                        let stub_len = stub.len() as u64;
                        if compactions.masked.contains(&call.id) {
                            (stub, full, stub_len, true, false)
                        } else if let Some(kept) = compactions.cut.get(&call.id) {
                            let text = cut_text(result.observation, *kept, result.execution_ref);
                            (text, full, stub_len, false, true)
                        } else {
                            (result.observation.to_string(), full, stub_len, false, false)
                        }
                    }
                    None => {
                        answered = false;
                        let text = INTERRUPTED_OBSERVATION.to_string();
                        let full = text.len() as u64;
                        (text, full, full, false, false)
                    }
                };
            let message = ChatMessage {
                role: Role::Tool,
                content: Some(observation),
                tool_calls: None,
                tool_call_id: Some(call.id.clone()),
            };
            let kind = MessageKind::ToolResult {
                action_id: call.id.clone(),
                full_bytes,
                stub_bytes: stub_len + call.id.len() as u64 + MESSAGE_FRAME_BYTES,
                masked,
                cut,
            };
            push(view, message, kind, seq, secrets);
        }
        answered
    }
}

fn push(
    view: &mut View,
    mut message: ChatMessage,
    kind: MessageKind,
    seq: u64,
    secrets: &SecretSet,
) {
    if !secrets.is_empty() {
        if let Some(content) = message.content.as_mut() {
            secrets.restore_string(content);
        }
        for call in message.tool_calls.iter_mut().flatten() {
            secrets.restore_string(&mut call.function.arguments);
        }
    }
    let meta = MessageMeta {
        bytes: message_bytes(&message),
        kind,
        seq,
    };
    view.push(message, meta);
}

/// Index of the first event to keep so that only the last `n` thoughts remain.
fn trimmed_start(events: &[JournalEvent], n: usize) -> usize {
    let thought_positions: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.event, Event::Thought { .. }))
        .map(|(i, _)| i)
        .collect();
    if thought_positions.len() <= n {
        return 0;
    }
    let first_kept = thought_positions[thought_positions.len() - n];
    // Keep user messages that directly precede the first kept thought (the question it answers).
    let mut start = first_kept;
    while start > 0 && matches!(events[start - 1].event, Event::UserMessage { .. }) {
        start -= 1;
    }
    // The first user message (the task) is re-added by the caller when it falls outside.
    if events[..start]
        .iter()
        .any(|e| matches!(e.event, Event::UserMessage { .. }))
    {
        start
    } else {
        0
    }
}

fn user(content: String) -> ChatMessage {
    ChatMessage {
        role: Role::User,
        content: Some(content),
        tool_calls: None,
        tool_call_id: None,
    }
}

fn system(content: String) -> ChatMessage {
    ChatMessage {
        role: Role::System,
        content: Some(content),
        tool_calls: None,
        tool_call_id: None,
    }
}

/// A run's view, kept between its requests: each request converts only the events journaled
/// since the one before. Equal, request for request, to [`conversation_view`] of the whole
/// journal; built again from the journal whenever that could differ: after a compaction (it
/// changes earlier messages), with `max_iterations` (the kept part slides), or when a reply's
/// result was missing (a later result would replace its interrupted observation).
#[derive(Debug, Default)]
pub(crate) struct ConversationCache {
    view: View,
    /// Events converted.
    consumed: usize,
    /// The incremental state; `None` when the next update converts the whole journal.
    state: Option<CacheState>,
}

#[derive(Debug, Clone)]
struct CacheState {
    converter: Converter,
    /// Index of the task in the events (it is always the first user message).
    task_index: Option<usize>,
    /// The journal's compactions when the view was built (a new one rebuilds it).
    compactions: Compactions,
    /// Calls with a result among the converted events: a new reply naming one of them
    /// (a pasted or replayed line) is converted with the whole journal.
    answered: HashSet<String>,
}

impl ConversationCache {
    /// The view of `events`, converting only what is new when it can.
    pub(crate) fn update(
        &mut self,
        events: &[JournalEvent],
        max_iterations: Option<u32>,
        secrets: &SecretSet,
    ) -> &View {
        if !self.try_append(events, max_iterations, secrets) {
            self.rebuild(events, max_iterations, secrets);
        }
        &self.view
    }

    fn rebuild(
        &mut self,
        events: &[JournalEvent],
        max_iterations: Option<u32>,
        secrets: &SecretSet,
    ) {
        self.view = conversation_view(events, max_iterations, secrets);
        self.consumed = events.len();
        let answered: HashSet<String> = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::ActionResult { action_id, .. } => Some(action_id.clone()),
                _ => None,
            })
            .collect();
        let complete = events.iter().all(|e| match &e.event {
            Event::Thought { tool_calls, .. } => {
                tool_calls.iter().all(|c| answered.contains(c.id.as_str()))
            }
            _ => true,
        });
        if max_iterations.is_some() || !complete {
            self.state = None;
            return;
        }
        let compactions = Compactions::of(events);
        let through = compactions.dropped_through.unwrap_or(0);
        let mut converter = Converter::default();
        for event in events.iter().filter(|e| e.seq > through) {
            if let Event::Thought { tool_calls, .. } = &event.event {
                for call in tool_calls {
                    converter.sent_calls.insert(call.id.clone());
                }
            }
        }
        converter.thoughts = self
            .view
            .meta
            .iter()
            .filter(|m| matches!(m.kind, MessageKind::Assistant { .. }))
            .count();
        self.state = Some(CacheState {
            converter,
            task_index: events
                .iter()
                .position(|e| matches!(e.event, Event::UserMessage { .. })),
            compactions,
            answered,
        });
    }

    /// Converts `events[consumed..]` onto the cached view; false when it cannot (the view,
    /// and the incremental state this may have changed, must be built again).
    fn try_append(
        &mut self,
        events: &[JournalEvent],
        max_iterations: Option<u32>,
        secrets: &SecretSet,
    ) -> bool {
        if max_iterations.is_some() || events.len() < self.consumed {
            return false;
        }
        let Some(state) = self.state.as_mut() else {
            return false;
        };
        let new = &events[self.consumed..];
        let rebuild = new.iter().any(|e| match &e.event {
            // A compaction changes earlier messages.
            Event::ContextCompacted { .. } => true,
            // The task arriving decides the layout.
            Event::UserMessage { .. } => state.task_index.is_none(),
            Event::Thought { tool_calls, .. } => tool_calls
                .iter()
                .any(|c| state.answered.contains(c.id.as_str())),
            _ => false,
        });
        if rebuild {
            return false;
        }
        let mut results = HashMap::new();
        for event in new {
            add_result(&mut results, event);
        }
        // Converted in place: when it fails, the caller builds the view (and this state)
        // again from the journal. (A copy of the converter would copy every call id sent.)
        let converter = &mut state.converter;
        let mut appended = View::default();
        for (offset, event) in new.iter().enumerate() {
            let is_task = state.task_index == Some(self.consumed + offset);
            let converted = converter.event(
                &mut appended,
                event,
                is_task,
                &results,
                &state.compactions,
                secrets,
            );
            if !converted {
                return false;
            }
        }
        state
            .answered
            .extend(results.keys().map(|id| (*id).to_string()));
        self.view.append(appended);
        self.consumed = events.len();
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
