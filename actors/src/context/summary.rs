//! The request that asks a model to summarize the iterations a `summarize` compaction
//! replaces: a system prompt (context.yaml's `summary_prompt`, else [`DEFAULT_SUMMARY_PROMPT`])
//! and one user message holding the task, the summary written before (if any) and the
//! iterations as a plain transcript.
//!
//! The transcript is bounded: each result is cut head and tail to [`MAX_RESULT_BYTES`], and
//! a transcript longer than the room the budget leaves keeps its end (the latest work).
//!
//! Must not: call the model (the run does), or decide what is summarized (`compact.rs`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;

use super::view::{cut_text, MessageKind, View};
use crate::llm::{ChatMessage, Role};

/// The summarizer's instructions when context.yaml gives none.
pub const DEFAULT_SUMMARY_PROMPT: &str = "You summarize the earlier part of an AI agent's run so that the agent can go on without it: its context window cannot hold the whole run. Write a concise summary of what the agent was asked, what it did (the tools it called and what they returned that still matters), what it found out and decided, and what is left to do. Keep names, numbers, file paths, identifiers and errors exactly as they appear. Do not invent anything, and do not address the user: the summary is read by the agent itself.";
/// The first words of the summary request's user message.
pub const SUMMARY_REQUEST_HEADER: &str = "Summarize this part of an agent's run.";
/// The most bytes of one tool result in the transcript.
pub const MAX_RESULT_BYTES: u64 = 4000;

/// The messages of the summary call for `span` of `view`, within `max_bytes` of transcript.
pub fn summary_messages(
    view: &View,
    span: Range<usize>,
    prompt: Option<&str>,
    max_bytes: usize,
) -> Vec<ChatMessage> {
    let task = view
        .messages
        .iter()
        .zip(&view.meta)
        .find(|(_, meta)| meta.kind == MessageKind::Task)
        .and_then(|(m, _)| m.content.as_deref())
        .unwrap_or("");
    let earlier = view
        .messages
        .iter()
        .zip(&view.meta)
        .find(|(_, meta)| meta.kind == MessageKind::Preface)
        .and_then(|(m, _)| m.content.as_deref());
    let transcript = transcript(view, span);
    let transcript = if transcript.len() > max_bytes {
        let mut start = transcript.len() - max_bytes;
        while !transcript.is_char_boundary(start) {
            start += 1;
        }
        format!(
            "[... the beginning of this part is left out ...]\n{}",
            &transcript[start..]
        )
    } else {
        transcript
    };
    let mut request = format!("{SUMMARY_REQUEST_HEADER}\n\n## The task\n\n{task}\n\n");
    if let Some(earlier) = earlier {
        let _ = write!(
            request,
            "## What came before (already summarized)\n\n{earlier}\n\n"
        );
    }
    let _ = write!(request, "## The part to summarize\n\n{transcript}");
    vec![
        ChatMessage {
            role: Role::System,
            content: Some(prompt.unwrap_or(DEFAULT_SUMMARY_PROMPT).to_string()),
            tool_calls: None,
            tool_call_id: None,
        },
        ChatMessage {
            role: Role::User,
            content: Some(request),
            tool_calls: None,
            tool_call_id: None,
        },
    ]
}

/// The messages of `span` as plain text: who said what, which tools were called with what,
/// and what they returned.
fn transcript(view: &View, span: Range<usize>) -> String {
    let mut text = String::new();
    let mut names: HashMap<&str, &str> = HashMap::new();
    let messages = view.messages.iter().skip(span.start).take(span.len());
    for (message, meta) in messages.zip(&view.meta[span]) {
        let content = message.content.as_deref().unwrap_or("");
        match &meta.kind {
            MessageKind::User | MessageKind::Task => {
                let _ = write!(text, "User: {content}\n\n");
            }
            MessageKind::Assistant { .. } => {
                if !content.is_empty() {
                    let _ = write!(text, "Agent: {content}\n\n");
                }
                for call in message.tool_calls() {
                    names.insert(&call.id, &call.function.name);
                    let _ = write!(
                        text,
                        "Agent called {}({})\n\n",
                        call.function.name, call.function.arguments
                    );
                }
            }
            MessageKind::ToolResult { action_id, .. } => {
                let tool = names.get(action_id.as_str()).copied().unwrap_or("the tool");
                let shown = cut_text(content, MAX_RESULT_BYTES, None);
                let _ = write!(text, "{tool} returned:\n{shown}\n\n");
            }
            MessageKind::Preface => {}
        }
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::journal::{ActionStatus, Event, JournalEvent, ToolCallRecord};
    use crate::redact::SecretSet;

    fn ev(seq: u64, event: Event) -> JournalEvent {
        JournalEvent {
            seq,
            timestamp: String::new(),
            event,
        }
    }

    #[test]
    fn the_request_holds_the_task_and_the_iterations_as_a_transcript() {
        let events = vec![
            ev(
                1,
                Event::UserMessage {
                    content: "Read the book.".into(),
                },
            ),
            ev(
                2,
                Event::Thought {
                    iteration: 1,
                    content: Some("Page one first.".into()),
                    tool_calls: vec![ToolCallRecord {
                        id: "c1".into(),
                        name: "read_page".into(),
                        arguments: "{\"page\":\"1\"}".into(),
                    }],
                    llm_invocation_ref: None,
                    finish_reason: None,
                    usage: None,
                    prompt: None,
                },
            ),
            ev(
                3,
                Event::ActionResult {
                    iteration: 1,
                    action_id: "c1".into(),
                    tool_name: "read_page".into(),
                    status: ActionStatus::Success,
                    observation_content: format!("A fox.{}", "x".repeat(9000)),
                    exit_code: Some(0),
                    execution_ref: None,
                },
            ),
        ];
        let view = super::super::view::conversation_view(&events, None, &SecretSet::default());
        let messages = summary_messages(&view, 1..3, None, 100_000);
        assert_eq!(messages[0].content.as_deref(), Some(DEFAULT_SUMMARY_PROMPT));
        let request = messages[1].content.clone().unwrap();
        assert!(request.starts_with(SUMMARY_REQUEST_HEADER), "{request}");
        assert!(
            request.contains("## The task\n\nRead the book."),
            "{request}"
        );
        assert!(request.contains("Agent: Page one first."), "{request}");
        assert!(
            request.contains("Agent called read_page({\"page\":\"1\"})"),
            "{request}"
        );
        assert!(request.contains("read_page returned:\nA fox."), "{request}");
        assert!(request.len() < 5000, "results are cut: {}", request.len());
        let short = summary_messages(&view, 1..3, Some("Be brief."), 200);
        assert_eq!(short[0].content.as_deref(), Some("Be brief."));
        assert!(short[1]
            .content
            .as_deref()
            .unwrap()
            .contains("the beginning of this part is left out"));
    }
}
