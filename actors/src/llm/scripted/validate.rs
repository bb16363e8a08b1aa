//! Strict chat-history validation, as the real OpenAI API enforces it (and a little
//! stricter): the scripted model uses it to reject with HTTP 400 the invalid histories the
//! original engine used to send (reference §19 item 2).
//!
//! Pure function over messages; it reports the first problem and never repairs anything.

use std::collections::HashSet;

use crate::llm::types::{ChatMessage, Role};

/// Checks, in order of messages:
/// - the history is not empty and its first non-system message is a user message;
/// - user and system messages have content; assistant content is never the string `"null"`
///   and an assistant turn has content or tool calls;
/// - tool call ids are non-empty and unique, function names non-empty;
/// - every tool call is answered by exactly one tool message before the next
///   user/assistant/system message, and no tool message answers an unknown or already
///   answered call.
pub fn validate_history<'a, M>(messages: M) -> Result<(), String>
where
    M: IntoIterator<Item = &'a ChatMessage>,
    M::IntoIter: Clone,
{
    let messages = messages.into_iter();
    if messages.clone().next().is_none() {
        return Err("`messages` is empty".to_owned());
    }
    match messages.clone().find(|m| m.role != Role::System) {
        Some(m) if m.role == Role::User => {}
        Some(m) => {
            return Err(format!(
                "the first non-system message must be a user message, found {}",
                m.role.as_str()
            ))
        }
        None => return Err("there is no user message".to_owned()),
    }
    // Calls of the latest assistant turn still waiting for their result.
    let mut pending: Vec<String> = Vec::new();
    let mut seen_ids: HashSet<&str> = HashSet::new();
    for (i, m) in messages.enumerate() {
        let at = format!("messages[{i}] ({})", m.role.as_str());
        if m.role != Role::Tool {
            if let Some(missing) = pending.first() {
                return Err(format!(
                    "{at}: tool call {missing:?} has no tool result (every tool call must be \
                     answered by a tool message before the next turn)"
                ));
            }
        }
        if m.role != Role::Assistant && !m.tool_calls().is_empty() {
            return Err(format!(
                "{at}: only assistant messages may carry tool_calls"
            ));
        }
        match m.role {
            Role::System | Role::User => {
                if m.content.is_none() {
                    return Err(format!("{at}: content is required"));
                }
            }
            Role::Assistant => {
                if m.content.as_deref() == Some("null") {
                    return Err(format!(
                        "{at}: content is the string \"null\" (send JSON null for no text)"
                    ));
                }
                if m.content.is_none() && m.tool_calls().is_empty() {
                    return Err(format!(
                        "{at}: an assistant message needs content or tool_calls"
                    ));
                }
                for call in m.tool_calls() {
                    if call.id.is_empty() {
                        return Err(format!("{at}: a tool call has an empty id"));
                    }
                    if call.function.name.is_empty() {
                        return Err(format!(
                            "{at}: tool call {:?} has no function name",
                            call.id
                        ));
                    }
                    if !seen_ids.insert(call.id.as_str()) {
                        return Err(format!("{at}: tool call id {:?} is used twice", call.id));
                    }
                    pending.push(call.id.clone());
                }
            }
            Role::Tool => {
                let Some(id) = m.tool_call_id.as_deref() else {
                    return Err(format!("{at}: tool message without tool_call_id"));
                };
                if m.content.is_none() {
                    return Err(format!("{at}: content is required"));
                }
                match pending.iter().position(|p| p == id) {
                    Some(pos) => {
                        pending.remove(pos);
                    }
                    None => {
                        return Err(format!(
                            "{at}: tool_call_id {id:?} does not answer a pending tool call of \
                             the preceding assistant message (unknown or already answered)"
                        ))
                    }
                }
            }
        }
    }
    match pending.first() {
        Some(missing) => Err(format!(
            "tool call {missing:?} of the last assistant message has no tool result"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::types::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall::function(id, "ls", "{}")
    }

    fn calls(ids: &[&str]) -> ChatMessage {
        ChatMessage::assistant(None, ids.iter().map(|i| call(i)).collect())
    }

    #[test]
    fn validation_table() {
        let sys = ChatMessage::system("s");
        let user = ChatMessage::user("u");
        let answer = ChatMessage::assistant(Some("done".into()), vec![]);
        let tool = |id: &str| ChatMessage::tool(id, "out");
        let mut string_null = answer.clone();
        string_null.content = Some("null".into());
        let mut no_id_tool = tool("a");
        no_id_tool.tool_call_id = None;
        let mut user_with_calls = user.clone();
        user_with_calls.tool_calls = Some(vec![call("x")]);
        let empty_assistant = ChatMessage::assistant(None, vec![]);

        let cases: Vec<(&str, Vec<ChatMessage>, Option<&str>)> = vec![
            (
                "plain",
                vec![sys.clone(), user.clone(), answer.clone()],
                None,
            ),
            (
                "parallel calls answered in any order",
                vec![
                    user.clone(),
                    calls(&["a", "b"]),
                    tool("b"),
                    tool("a"),
                    answer.clone(),
                ],
                None,
            ),
            (
                "continue after answer",
                vec![user.clone(), answer.clone(), user.clone()],
                None,
            ),
            ("empty", vec![], Some("empty")),
            ("only system", vec![sys.clone()], Some("no user message")),
            (
                "starts with assistant",
                vec![sys.clone(), answer.clone()],
                Some("first non-system"),
            ),
            (
                "string null",
                vec![user.clone(), string_null],
                Some("\"null\""),
            ),
            (
                "empty assistant",
                vec![user.clone(), empty_assistant],
                Some("content or tool_calls"),
            ),
            (
                "unanswered at end",
                vec![user.clone(), calls(&["a", "b"]), tool("a")],
                Some("\"b\""),
            ),
            (
                "user between call and result",
                vec![user.clone(), calls(&["a"]), user.clone(), tool("a")],
                Some("messages[2] (user): tool call \"a\""),
            ),
            (
                "orphan tool",
                vec![user.clone(), tool("zz")],
                Some("\"zz\""),
            ),
            (
                "answered twice",
                vec![user.clone(), calls(&["a"]), tool("a"), tool("a")],
                Some("already answered"),
            ),
            (
                "duplicate ids across turns",
                vec![
                    user.clone(),
                    calls(&["a"]),
                    tool("a"),
                    calls(&["a"]),
                    tool("a"),
                ],
                Some("used twice"),
            ),
            (
                "tool without id",
                vec![user.clone(), calls(&["a"]), no_id_tool],
                Some("without tool_call_id"),
            ),
            (
                "user with tool calls",
                vec![user_with_calls],
                Some("only assistant"),
            ),
            (
                "empty call id",
                vec![user.clone(), calls(&[""])],
                Some("empty id"),
            ),
        ];
        for (name, messages, expected) in cases {
            let got = validate_history(&messages);
            match expected {
                None => assert!(got.is_ok(), "{name}: {got:?}"),
                Some(fragment) => {
                    let err = got.expect_err(name);
                    assert!(err.contains(fragment), "{name}: {err}");
                }
            }
        }
    }

    /// Builds a valid history from a shape: each entry is one assistant turn with that many
    /// tool calls (0 = a text answer followed by a new user message), results in a rotated order.
    fn history_from(shape: &[(usize, usize)]) -> Vec<ChatMessage> {
        let mut messages = vec![ChatMessage::system("s"), ChatMessage::user("task")];
        for (turn, (n_calls, rotation)) in shape.iter().enumerate() {
            if *n_calls == 0 {
                messages.push(ChatMessage::assistant(Some("text".into()), vec![]));
                messages.push(ChatMessage::user("more"));
                continue;
            }
            let ids: Vec<String> = (0..*n_calls).map(|k| format!("call_{turn}_{k}")).collect();
            messages.push(ChatMessage::assistant(
                None,
                ids.iter().map(|i| call(i)).collect(),
            ));
            for k in 0..*n_calls {
                let id = &ids[(k + rotation) % n_calls];
                messages.push(ChatMessage::tool(id.clone(), "out"));
            }
        }
        messages
    }

    proptest::proptest! {
        #[test]
        fn generated_valid_histories_pass(shape in proptest::collection::vec((0usize..4, 0usize..4), 0..8)) {
            let messages = history_from(&shape);
            proptest::prop_assert!(validate_history(&messages).is_ok(), "{:?}", validate_history(&messages));
        }

        #[test]
        fn dropping_any_tool_result_is_caught(
            shape in proptest::collection::vec((1usize..4, 0usize..4), 1..6),
            pick in 0usize..100,
        ) {
            let mut messages = history_from(&shape);
            let tool_positions: Vec<usize> = messages
                .iter()
                .enumerate()
                .filter(|(_, m)| m.role == Role::Tool)
                .map(|(i, _)| i)
                .collect();
            messages.remove(tool_positions[pick % tool_positions.len()]);
            proptest::prop_assert!(validate_history(&messages).is_err());
        }
    }
}
