//! A scripted reply as the server-sent events of a streamed chat completion, the way OpenAI
//! sends them: a first chunk with the role, the text in pieces, each tool call opened with
//! its id and name and then its arguments in pieces, a last chunk with the finish reason,
//! the usage in a chunk of its own when the request asked for it
//! (`stream_options.include_usage`), then `data: [DONE]`.
//!
//! Must not: sleep or write (the server spaces the events out and sends them).

use bytes::Bytes;
use serde_json::{json, Value};

use crate::llm::types::ChatCompletion;

/// Pieces a text is cut into when the step does not say: one per word, at most this many.
const DEFAULT_MAX_PIECES: usize = 64;

/// The events of `completion`, each a whole `data: ...\n\n` frame. The text (the content,
/// or else the first call's arguments) is cut into `pieces` pieces, or one per word.
pub(super) fn events(
    completion: &ChatCompletion,
    include_usage: bool,
    pieces: Option<usize>,
) -> Vec<Bytes> {
    let id = completion.id.clone().unwrap_or_default();
    let model = completion.model.clone().unwrap_or_default();
    let created = completion
        .raw
        .get("created")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let chunk = |delta: Value, finish: Value| {
        frame(&json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    };
    let message = &completion.message;
    let calls = message.tool_calls();
    let mut out = Vec::new();
    match &message.content {
        Some(text) => {
            out.push(chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            ));
            for piece in cut(text, pieces) {
                out.push(chunk(json!({"content": piece}), Value::Null));
            }
        }
        None => out.push(chunk(
            json!({"role": "assistant", "content": Value::Null}),
            Value::Null,
        )),
    }
    for (index, call) in calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{
                "index": index, "id": call.id, "type": call.kind,
                "function": {"name": call.function.name, "arguments": ""},
            }]}),
            Value::Null,
        ));
        // Only the first call's arguments are cut as asked when there is no text to cut.
        let wanted = if index == 0 && message.content.is_none() {
            pieces
        } else {
            Some(1)
        };
        for piece in cut(&call.function.arguments, wanted) {
            out.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    out.push(chunk(json!({}), json!(completion.finish_reason)));
    if include_usage {
        out.push(frame(&json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [], "usage": completion.usage.unwrap_or_default(),
        })));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

fn frame(value: &Value) -> Bytes {
    let mut bytes = b"data: ".to_vec();
    // Serializing a `Value` cannot fail.
    bytes.extend(serde_json::to_vec(value).unwrap_or_default());
    bytes.extend_from_slice(b"\n\n");
    Bytes::from(bytes)
}

/// `text` in `pieces` pieces of about equal length (cut at character boundaries; some may be
/// empty when the text is shorter), or one piece per word (its trailing space included), at
/// most [`DEFAULT_MAX_PIECES`].
fn cut(text: &str, pieces: Option<usize>) -> Vec<&str> {
    let wanted = match pieces {
        Some(n) => n.max(1),
        None => text
            .split_inclusive(' ')
            .count()
            .clamp(1, DEFAULT_MAX_PIECES),
    };
    if pieces.is_none() && text.split_inclusive(' ').count() <= DEFAULT_MAX_PIECES {
        let words: Vec<&str> = text.split_inclusive(' ').collect();
        return if words.is_empty() { vec![""] } else { words };
    }
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(at, _)| at)
        .chain(std::iter::once(text.len()))
        .collect();
    let chars = bounds.len() - 1;
    (0..wanted)
        .map(|i| {
            let from = bounds[chars * i / wanted];
            let to = bounds[chars * (i + 1) / wanted];
            &text[from..to]
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::stream::{SseDecoder, StreamAssembler};
    use crate::llm::types::{ChatMessage, ToolCall, Usage};

    fn completion(message: ChatMessage, finish: &str) -> ChatCompletion {
        let mut c = ChatCompletion {
            id: Some("c".into()),
            model: Some("m".into()),
            message,
            finish_reason: Some(finish.into()),
            usage: Some(Usage {
                cached_prompt_tokens: 0,
                prompt_tokens: 3,
                completion_tokens: 2,
                total_tokens: 5,
            }),
            raw: Value::Null,
        };
        c.raw = c.to_openai_json(1);
        c
    }

    fn reassemble(events: &[Bytes]) -> ChatCompletion {
        let mut decoder = SseDecoder::new();
        let mut assembler = StreamAssembler::new();
        for event in events {
            decoder
                .feed(event, &mut |data| assembler.push(data).map(drop))
                .unwrap();
        }
        assembler.finish().unwrap()
    }

    /// What the client assembles from the events is the completion they were cut from.
    #[test]
    fn the_events_assemble_back_into_the_reply() {
        for message in [
            ChatMessage::assistant(Some("hello there, streaming world".into()), vec![]),
            ChatMessage::assistant(Some(String::new()), vec![]),
            ChatMessage::assistant(
                Some("thinking".into()),
                vec![
                    ToolCall::function("call_0_0", "ls", r#"{"dir":"."}"#),
                    ToolCall::function("call_0_1", "cat", r#"{"f":"ü"}"#),
                ],
            ),
            ChatMessage::assistant(None, vec![ToolCall::function("a", "f", "{}")]),
        ] {
            for pieces in [None, Some(1), Some(3), Some(50)] {
                let original = completion(message.clone(), "stop");
                let sent = events(&original, true, pieces);
                let back = reassemble(&sent);
                assert_eq!(back.message, original.message, "{pieces:?}");
                assert_eq!(back.usage, original.usage);
                assert_eq!(back.finish_reason.as_deref(), Some("stop"));
            }
        }
    }

    #[test]
    fn usage_is_sent_only_when_asked_for() {
        let c = completion(ChatMessage::assistant(Some("x".into()), vec![]), "stop");
        assert!(reassemble(&events(&c, false, None)).usage.is_none());
        assert!(reassemble(&events(&c, true, None)).usage.is_some());
    }

    #[test]
    fn text_is_cut_into_the_pieces_asked_for() {
        assert_eq!(cut("abcdef", Some(3)), vec!["ab", "cd", "ef"]);
        assert_eq!(cut("ab", Some(4)).concat(), "ab");
        assert_eq!(cut("ab", Some(4)).len(), 4);
        assert_eq!(cut("one two", None), vec!["one ", "two"]);
        assert_eq!(cut("", None), vec![""]);
        let long = "w ".repeat(500);
        assert_eq!(cut(&long, None).len(), DEFAULT_MAX_PIECES);
        assert_eq!(cut(&long, None).concat(), long);
    }
}
