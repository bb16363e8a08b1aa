//! Server-sent events as the relay handles them: [`EventFramer`] cuts an upstream's byte
//! stream at event boundaries (a blank line), so each event is passed on whole, as soon as it
//! is complete, with the upstream's secrets redacted and its `usage` noted; and
//! [`completion_events`] writes a finished completion (the scripted model's) as the
//! `chat.completion.chunk` events an OpenAI endpoint would have streamed.
//!
//! Must not: hold more than one incomplete event (bounded by [`MAX_EVENT_BYTES`]), or
//! reorder or rewrite bytes other than secrets.

use serde_json::{json, Value};

use super::secrets::UpstreamSecrets;
use super::usage::usage_of;
use crate::llm::{ChatCompletion, Usage};

/// An incomplete event longer than this is passed on as it is (redacted on its own):
/// chunks of a chat completion are a few hundred bytes.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Cuts a byte stream into whole events. See the module docs.
#[derive(Debug, Default)]
pub struct EventFramer {
    pending: Vec<u8>,
    usage: Option<Usage>,
}

impl EventFramer {
    /// Takes `chunk`; returns the bytes of every event it completed (redacted), if any.
    pub fn push(&mut self, chunk: &[u8], secrets: &UpstreamSecrets) -> Option<Vec<u8>> {
        self.pending.extend_from_slice(chunk);
        let end = match last_boundary(&self.pending) {
            Some(end) => end,
            None if self.pending.len() > MAX_EVENT_BYTES => self.pending.len(),
            None => return None,
        };
        let complete: Vec<u8> = self.pending.drain(..end).collect();
        self.note_usage(&complete);
        Some(secrets.redact_bytes(&complete).into_owned())
    }

    /// What is left when the stream ends (an event without its blank line), redacted.
    pub fn finish(&mut self, secrets: &UpstreamSecrets) -> Option<Vec<u8>> {
        if self.pending.is_empty() {
            return None;
        }
        let rest = std::mem::take(&mut self.pending);
        self.note_usage(&rest);
        Some(secrets.redact_bytes(&rest).into_owned())
    }

    /// The last `usage` seen in a `data:` line.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn note_usage(&mut self, events: &[u8]) {
        if !contains(events, b"\"usage\"") {
            return;
        }
        for line in events.split(|b| *b == b'\n') {
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            if let Some(usage) = usage_of(data.trim_ascii()) {
                self.usage = Some(usage);
            }
        }
    }
}

/// The end of the last complete event in `bytes` (after its blank line).
fn last_boundary(bytes: &[u8]) -> Option<usize> {
    let lf = find_last(bytes, b"\n\n").map(|i| i + 2);
    let crlf = find_last(bytes, b"\r\n\r\n").map(|i| i + 4);
    lf.max(crlf)
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `completion` as an OpenAI stream: one chunk with the whole message (tool calls with
/// their `index`), one with the finish reason, one with the usage when `include_usage`,
/// then `data: [DONE]`.
pub fn completion_events(
    completion: &ChatCompletion,
    include_usage: bool,
    created: i64,
) -> Vec<u8> {
    let whole = completion.to_openai_json(created);
    let head = |choices: Value| {
        json!({
            "id": whole["id"],
            "object": "chat.completion.chunk",
            "created": created,
            "model": whole["model"],
            "choices": choices,
        })
    };
    let mut delta = whole["choices"][0]["message"].clone();
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (index, call) in calls.iter_mut().enumerate() {
            if let Some(call) = call.as_object_mut() {
                call.insert("index".into(), json!(index));
            }
        }
    }
    let mut events = vec![
        head(json!([{ "index": 0, "delta": delta, "finish_reason": null }])),
        head(json!([{ "index": 0, "delta": {}, "finish_reason": completion.finish_reason }])),
    ];
    if include_usage {
        let mut last = head(json!([]));
        last["usage"] = json!(completion.usage.unwrap_or_default());
        events.push(last);
    }
    let mut out = Vec::new();
    for event in events {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(event.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::ChatMessage;

    #[test]
    fn events_are_passed_whole_as_soon_as_complete_with_secrets_redacted() {
        let secrets = UpstreamSecrets::new("http://h/v1", Some("sk-test-key-42"));
        let mut framer = EventFramer::default();
        assert_eq!(framer.push(b"data: {\"a\":", &secrets), None);
        assert_eq!(
            framer.push(b"1}\n\ndata: {\"b\"", &secrets).unwrap(),
            b"data: {\"a\":1}\n\n"
        );
        assert_eq!(
            framer
                .push(b":\"sk-test-key-42\"}\r\n\r\n", &secrets)
                .unwrap(),
            b"data: {\"b\":\"[REDACTED]\"}\r\n\r\n"
        );
        framer.push(
            b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\ndata: [DONE]",
            &secrets,
        );
        assert_eq!(framer.usage().unwrap().completion_tokens, 2);
        assert_eq!(framer.finish(&secrets).unwrap(), b"data: [DONE]");
        assert_eq!(framer.finish(&secrets), None);
    }

    #[test]
    fn an_oversized_event_is_passed_on_rather_than_held() {
        let secrets = UpstreamSecrets::new("http://h/v1", None);
        let mut framer = EventFramer::default();
        let big = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(framer.push(&big, &secrets).unwrap().len(), big.len());
    }

    #[test]
    fn a_completion_becomes_chunks_with_indexed_tool_calls_and_usage() {
        let completion = ChatCompletion {
            id: Some("c1".into()),
            model: Some("m".into()),
            message: ChatMessage::assistant(
                None,
                vec![crate::llm::ToolCall::function("call_1", "ls", "{}")],
            ),
            finish_reason: Some("tool_calls".into()),
            usage: Some(Usage {
                cached_prompt_tokens: 0,
                prompt_tokens: 4,
                completion_tokens: 1,
                total_tokens: 5,
            }),
            raw: Value::Null,
        };
        let text = String::from_utf8(completion_events(&completion, true, 9)).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 4, "{text}");
        let first: Value = serde_json::from_str(&events[0]["data: ".len()..]).unwrap();
        assert_eq!(first["object"], "chat.completion.chunk");
        assert_eq!(first["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(
            first["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
            "ls"
        );
        let second: Value = serde_json::from_str(&events[1]["data: ".len()..]).unwrap();
        assert_eq!(second["choices"][0]["finish_reason"], "tool_calls");
        let third: Value = serde_json::from_str(&events[2]["data: ".len()..]).unwrap();
        assert_eq!(third["usage"]["total_tokens"], 5);
        assert_eq!(events[3], "data: [DONE]");
    }
}
