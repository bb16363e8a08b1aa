//! Questions asked of a run's journal when it is taken or resumed: the ask_human call still
//! waiting for its answer, the tool calls a crash left without a result, and a final answer
//! journaled before the process died.
//!
//! Must not: write anything (the caller decides what to append).

use std::collections::HashSet;

use super::{Event, JournalEvent};

/// The finish reason of a reply cut at the output limit (`max_tokens`): not an answer.
pub(crate) const TRUNCATED_FINISH_REASON: &str = "length";

/// The ask_human call still waiting for its answer, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingQuestion {
    /// The iteration of the question.
    pub iteration: u32,
    /// The ask_human call's id.
    pub action_id: String,
    /// The answer must be kept secret (`sensitive`, or `input_type: password`).
    pub sensitive: bool,
}

/// The last ask_human question without an answer: a journaled request, or (in a journal of
/// the original engine, which journals none) the last unanswered `ask_human` call.
pub(crate) fn pending_ask_human(events: &[JournalEvent]) -> Option<PendingQuestion> {
    let answered = answered_ids(events);
    let journaled = events.iter().rev().find_map(|e| match &e.event {
        Event::HumanInputRequest {
            iteration,
            action_id,
            sensitive,
            input_type,
            ..
        } if !answered.contains(action_id.as_str()) => Some(PendingQuestion {
            iteration: *iteration,
            action_id: action_id.clone(),
            sensitive: *sensitive || input_type == "password",
        }),
        _ => None,
    });
    journaled.or_else(|| unanswered_ask_human_call(events, &answered))
}

/// The original engine journals no HUMAN_INPUT_REQUEST when it pauses: the question is the
/// last unanswered `ask_human` call, and its sensitivity is read from the call's arguments.
fn unanswered_ask_human_call(
    events: &[JournalEvent],
    answered: &HashSet<&str>,
) -> Option<PendingQuestion> {
    events.iter().rev().find_map(|e| match &e.event {
        Event::Thought {
            iteration,
            tool_calls,
            ..
        } => tool_calls
            .iter()
            .rev()
            .find(|c| c.name == "ask_human" && !answered.contains(c.id.as_str()))
            .map(|call| {
                let args: serde_json::Value =
                    serde_json::from_str(&call.arguments).unwrap_or_default();
                PendingQuestion {
                    iteration: *iteration,
                    action_id: call.id.clone(),
                    sensitive: args["sensitive"] == true || args["input_type"] == "password",
                }
            }),
        _ => None,
    })
}

fn answered_ids(events: &[JournalEvent]) -> HashSet<&str> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ActionResult { action_id, .. } => Some(action_id.as_str()),
            _ => None,
        })
        .collect()
}

/// Calls requested by the model (THOUGHT tool_calls) that have no ACTION_RESULT.
pub(crate) fn unanswered_calls(events: &[JournalEvent]) -> Vec<(u32, String, String)> {
    let answered = answered_ids(events);
    let mut out = Vec::new();
    for e in events {
        if let Event::Thought {
            iteration,
            tool_calls,
            ..
        } = &e.event
        {
            for call in tool_calls {
                if !answered.contains(call.id.as_str()) {
                    out.push((*iteration, call.id.clone(), call.name.clone()));
                }
            }
        }
    }
    out
}

/// The final answer a resumed run already has: the last conversation event is a THOUGHT
/// without tool calls (the process died after journaling it, before ENGINE_END). Asking the
/// model again would add a turn the original run never had, so the run completes with it.
pub fn recorded_final_answer(events: &[JournalEvent]) -> Option<String> {
    let last = events.iter().rev().find(|e| {
        matches!(
            e.event,
            Event::UserMessage { .. }
                | Event::Thought { .. }
                | Event::ActionRequest { .. }
                | Event::ActionResult { .. }
                | Event::HumanInputRequest { .. }
                | Event::HumanInputReceived { .. }
        )
    })?;
    match &last.event {
        // A reply cut at the output limit is not an answer (the run failed `truncated`).
        Event::Thought {
            content,
            tool_calls,
            finish_reason,
            ..
        } if tool_calls.is_empty() && finish_reason.as_deref() != Some(TRUNCATED_FINISH_REASON) => {
            Some(content.clone().unwrap_or_default())
        }
        _ => None,
    }
}
