//! A last line of defence before a history is sent: [`repair_history`] turns whatever the
//! journal produced (interrupted tool calls, a message typed between a tool call and its
//! result, legacy `"null"` texts) into a history the OpenAI API accepts.
//!
//! Pure function over messages. It never invents model output: missing tool results get a
//! caller-chosen placeholder and deferred messages keep their order.

use std::collections::HashSet;

use super::types::{ChatMessage, Role, ToolCall};

/// Returns `messages` made valid for the OpenAI API (see [`super::validate_history`]):
/// - an assistant text equal to the string `"null"` becomes JSON `null`, and an assistant
///   turn with neither text nor tool calls gets an empty text;
/// - every tool call is followed by exactly one result: missing ones get
///   `placeholder(call)` (e.g. "interrupted before this tool ran"), extra or orphan tool
///   messages are dropped;
/// - user/system messages that arrived between a tool call and its results are moved after
///   the results (so `continue -m` on a paused run stays valid);
/// - a repeated tool call id in a later turn is renamed with a `_dupN` suffix (its result,
///   which follows it, is renamed with it).
pub fn repair_history(
    messages: Vec<ChatMessage>,
    placeholder: impl Fn(&ToolCall) -> String,
) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut used_ids: HashSet<String> = HashSet::new();
    let mut iter = messages.into_iter().peekable();
    while let Some(mut message) = iter.next() {
        match message.role {
            Role::Tool => continue, // a result with no call right before it: orphan
            Role::System | Role::User => {
                out.push(message);
                continue;
            }
            Role::Assistant => {}
        }
        if message.content.as_deref() == Some("null") {
            message.content = None;
        }
        let mut calls = message.tool_calls.take().unwrap_or_default();
        if calls.is_empty() {
            if message.content.is_none() {
                message.content = Some(String::new());
            }
            out.push(message);
            continue;
        }
        // Renames: (original id, id sent) for calls whose id was already used.
        let mut renamed: Vec<(String, String)> = Vec::new();
        for call in &mut calls {
            if !used_ids.insert(call.id.clone()) || call.id.is_empty() {
                let fresh = unique_id(&call.id, &used_ids);
                used_ids.insert(fresh.clone());
                renamed.push((call.id.clone(), fresh.clone()));
                call.id = fresh;
            }
        }
        // Gather everything up to the next assistant turn: results and interlopers.
        let mut results: Vec<Option<ChatMessage>> = vec![None; calls.len()];
        let mut deferred = Vec::new();
        while let Some(next) = iter.next_if(|m| m.role != Role::Assistant) {
            if next.role != Role::Tool {
                deferred.push(next);
                continue;
            }
            let answered = next.tool_call_id.clone().unwrap_or_default();
            // The call with this id, else a renamed duplicate of it, whose slot is still free.
            let candidates = std::iter::once(answered.as_str()).chain(
                renamed
                    .iter()
                    .filter(|(original, _)| *original == answered)
                    .map(|(_, fresh)| fresh.as_str()),
            );
            let free_slot = candidates
                .filter_map(|id| calls.iter().position(|c| c.id == id))
                .find(|slot| results[*slot].is_none());
            if let Some(slot) = free_slot {
                let mut result = next;
                result.tool_call_id = Some(calls[slot].id.clone());
                if result.content.is_none() {
                    result.content = Some(String::new());
                }
                results[slot] = Some(result);
            }
        }
        let answers: Vec<ChatMessage> = calls
            .iter()
            .zip(results)
            .map(|(call, result)| {
                result.unwrap_or_else(|| ChatMessage::tool(call.id.clone(), placeholder(call)))
            })
            .collect();
        message.tool_calls = Some(calls);
        out.push(message);
        out.extend(answers);
        out.extend(deferred);
    }
    out
}

fn unique_id(base: &str, used: &HashSet<String>) -> String {
    let base = if base.is_empty() { "call" } else { base };
    (1..)
        .map(|n| format!("{base}_dup{n}"))
        .find(|candidate| !used.contains(candidate))
        .unwrap_or_else(|| format!("{base}_{}", uuid::Uuid::new_v4().simple()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::scripted::validate_history;

    fn calls(ids: &[&str]) -> ChatMessage {
        ChatMessage::assistant(
            None,
            ids.iter()
                .map(|i| ToolCall::function(*i, "f", "{}"))
                .collect(),
        )
    }

    fn interrupted(call: &ToolCall) -> String {
        format!("{} was interrupted before it ran", call.function.name)
    }

    #[test]
    fn missing_results_are_synthesised_and_interlopers_deferred() {
        let history = vec![
            ChatMessage::user("task"),
            calls(&["a", "b"]),
            ChatMessage::tool("a", "A"),
            ChatMessage::user("continue -m message"),
        ];
        let fixed = repair_history(history, interrupted);
        validate_history(&fixed).unwrap();
        assert_eq!(fixed[2].content.as_deref(), Some("A"));
        assert_eq!(fixed[3].tool_call_id.as_deref(), Some("b"));
        assert_eq!(
            fixed[3].content.as_deref(),
            Some("f was interrupted before it ran")
        );
        assert_eq!(fixed[4].content.as_deref(), Some("continue -m message"));
    }

    #[test]
    fn results_follow_call_order_and_extras_are_dropped() {
        let history = vec![
            ChatMessage::user("task"),
            calls(&["a", "b"]),
            ChatMessage::tool("b", "B"),
            ChatMessage::tool("zz", "orphan"),
            ChatMessage::tool("a", "A"),
            ChatMessage::tool("a", "again"),
        ];
        let fixed = repair_history(history, interrupted);
        validate_history(&fixed).unwrap();
        let contents: Vec<_> = fixed.iter().map(|m| m.content.clone()).collect();
        assert_eq!(
            contents,
            vec![
                Some("task".into()),
                None,
                Some("A".into()),
                Some("B".into())
            ]
        );
    }

    #[test]
    fn legacy_null_text_and_empty_turns_are_fixed() {
        let mut null_text = calls(&["a"]);
        null_text.content = Some("null".into());
        let history = vec![
            ChatMessage::user("t"),
            null_text,
            ChatMessage::tool("a", "x"),
            ChatMessage::assistant(Some("null".into()), vec![]),
        ];
        let fixed = repair_history(history, interrupted);
        validate_history(&fixed).unwrap();
        assert_eq!(fixed[1].content, None);
        assert_eq!(fixed[3].content.as_deref(), Some(""));
    }

    #[test]
    fn repeated_ids_are_renamed_with_their_results() {
        let history = vec![
            ChatMessage::user("t"),
            calls(&["call_0"]),
            ChatMessage::tool("call_0", "first"),
            calls(&["call_0"]),
            ChatMessage::tool("call_0", "second"),
        ];
        let fixed = repair_history(history, interrupted);
        validate_history(&fixed).unwrap();
        assert_eq!(fixed[3].tool_calls()[0].id, "call_0_dup1");
        assert_eq!(fixed[4].tool_call_id.as_deref(), Some("call_0_dup1"));
        assert_eq!(fixed[4].content.as_deref(), Some("second"));
    }

    #[test]
    fn duplicate_ids_in_one_turn_keep_their_results_in_order() {
        let history = vec![
            ChatMessage::user("t"),
            calls(&["a", "a"]),
            ChatMessage::tool("a", "one"),
            ChatMessage::tool("a", "two"),
        ];
        let fixed = repair_history(history, interrupted);
        validate_history(&fixed).unwrap();
        assert_eq!(fixed[2].tool_call_id.as_deref(), Some("a"));
        assert_eq!(fixed[2].content.as_deref(), Some("one"));
        assert_eq!(fixed[3].tool_call_id.as_deref(), Some("a_dup1"));
        assert_eq!(fixed[3].content.as_deref(), Some("two"));
    }

    #[test]
    fn valid_histories_are_unchanged() {
        let history = vec![
            ChatMessage::system("s"),
            ChatMessage::user("t"),
            calls(&["a", "b"]),
            ChatMessage::tool("a", "A"),
            ChatMessage::tool("b", "B"),
            ChatMessage::assistant(Some("done".into()), vec![]),
            ChatMessage::user("more"),
        ];
        assert_eq!(repair_history(history.clone(), interrupted), history);
    }

    fn arbitrary_message() -> impl proptest::strategy::Strategy<Value = ChatMessage> {
        use proptest::prelude::*;
        let id = prop_oneof![Just("a"), Just("b"), Just("c"), Just("")];
        prop_oneof![
            Just(ChatMessage::user("u")),
            Just(ChatMessage::system("s")),
            proptest::collection::vec(id.clone(), 0..3).prop_map(|ids| calls(&ids)),
            id.clone().prop_map(|i| ChatMessage::tool(i, "r")),
            Just(ChatMessage::assistant(Some("null".into()), vec![])),
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_history_starting_with_a_user_message_becomes_valid(
            tail in proptest::collection::vec(arbitrary_message(), 0..12)
        ) {
            let mut history = vec![ChatMessage::user("task")];
            history.extend(tail);
            let fixed = repair_history(history, interrupted);
            proptest::prop_assert!(validate_history(&fixed).is_ok(), "{:?}", validate_history(&fixed));
        }
    }
}
