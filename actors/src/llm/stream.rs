//! Streamed chat completions (`stream: true`): [`SseDecoder`] splits the server-sent events
//! of a response body into their `data:` payloads, and [`StreamAssembler`] folds the
//! `chat.completion.chunk` objects into the one [`ChatCompletion`] a non-streamed call would
//! have returned: content and reasoning text concatenated, `tool_calls` deltas merged by
//! `index` (arguments concatenated), the last `finish_reason` and `usage`.
//!
//! The assembled completion's `raw` is a `chat.completion` body in the non-streamed shape,
//! so the journal, the io/ records and hooks see a streamed reply exactly as they see any
//! other.
//!
//! Provider differences handled here (see docs/providers.md): the name and id of a tool call
//! repeated in every chunk (llama-cpp-python), tool calls without an `index` (each one whole,
//! some OpenAI-compatible gateways), reasoning text under `reasoning_content` (DeepSeek,
//! vLLM, llama.cpp) or `reasoning` (OpenRouter, Ollama), usage in a last chunk with no
//! choices (OpenAI's `stream_options.include_usage`) or under `x_groq` (Groq), an `error`
//! object in the middle of a stream (OpenRouter), and SSE comments used as keep-alives.
//!
//! Must not: do I/O or apply time limits (the HTTP backend reads the body and applies the
//! idle limit between chunks).

use serde::Deserialize;
use serde_json::{json, Map, Value};

pub use super::endpoint::ChunkText;
use super::endpoint::LlmError;
use super::types::{provider_error_message, ChatCompletion, ChatMessage, ToolCall, Usage};

/// Longest SSE line kept while it is incomplete: a line longer than this is a broken or
/// hostile stream, not a chunk.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Most tool calls one streamed reply may assemble (each `index` is a slot).
const MAX_TOOL_CALLS: usize = 1024;

/// Splits an SSE byte stream into events. Feed it the body as it arrives; each complete
/// event's `data` (its `data:` lines joined by `\n`) is handed to the callback.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the current, incomplete line.
    line: Vec<u8>,
    /// `data:` of the current event so far.
    data: String,
    /// The current event has at least one `data:` line.
    has_data: bool,
    /// The last byte fed was `\r`: a `\n` right after it ends no second line.
    after_cr: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Consumes `bytes`; calls `on_data` with each complete event's data, in order. Stops at
    /// the first error `on_data` returns.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        on_data: &mut dyn FnMut(&str) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr && rest[0] == b'\n' {
                rest = &rest[1..];
                self.after_cr = false;
                continue;
            }
            match rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
                Some(end) => {
                    self.after_cr = rest[end] == b'\r';
                    if self.line.is_empty() {
                        self.line_done(&rest[..end], on_data)?;
                    } else {
                        self.line.extend_from_slice(&rest[..end]);
                        let line = std::mem::take(&mut self.line);
                        self.line_done(&line, on_data)?;
                    }
                    rest = &rest[end + 1..];
                }
                None => {
                    self.after_cr = false;
                    if self.line.len() + rest.len() > MAX_LINE_BYTES {
                        return Err(LlmError::InvalidResponse(format!(
                            "a line of the event stream is longer than {MAX_LINE_BYTES} bytes"
                        )));
                    }
                    self.line.extend_from_slice(rest);
                    rest = &[];
                }
            }
        }
        Ok(())
    }

    /// The end of the body: a last event not followed by a blank line is still delivered
    /// (servers that close right after their last `data:` line).
    pub fn finish(
        &mut self,
        on_data: &mut dyn FnMut(&str) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, on_data)?;
        }
        self.dispatch(on_data)
    }

    fn line_done(
        &mut self,
        line: &[u8],
        on_data: &mut dyn FnMut(&str) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        if line.is_empty() {
            return self.dispatch(on_data);
        }
        // Comments (`: ping`) keep a connection alive and carry nothing; other fields
        // (`event:`, `id:`, `retry:`) are not used by chat completions.
        let Some(value) = line.strip_prefix(b"data:") else {
            return Ok(());
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let text = std::str::from_utf8(value).map_err(|_| {
            LlmError::InvalidResponse("the event stream is not valid UTF-8".to_owned())
        })?;
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(text);
        self.has_data = true;
        Ok(())
    }

    fn dispatch(
        &mut self,
        on_data: &mut dyn FnMut(&str) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        if !self.has_data {
            return Ok(());
        }
        self.has_data = false;
        let result = on_data(&self.data);
        self.data.clear();
        result
    }
}

/// Folds a stream's chunks into one completion.
#[derive(Debug, Default)]
pub struct StreamAssembler {
    id: Option<String>,
    model: Option<String>,
    created: Option<i64>,
    content: String,
    /// Content was sent at all (even empty): an answer of `""` is not an absent one.
    content_seen: bool,
    reasoning: String,
    /// The field the reasoning came in, kept under the same name in the assembled body.
    reasoning_key: Option<&'static str>,
    calls: Vec<PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
    chunks: u32,
}

#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: String,
    kind: Option<String>,
    name: String,
    arguments: String,
}

/// A `chat.completion.chunk`, as much of it as is used.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    created: Option<i64>,
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    /// Groq sends the usage of a streamed reply here, in its last chunk.
    #[serde(default)]
    x_groq: Option<GroqExtra>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct GroqExtra {
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<ChunkDelta<'a>>,
    /// Some servers send the whole message in the last chunk instead of (or besides) deltas.
    #[serde(default, borrow)]
    message: Option<ChunkDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChunkDelta<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ChunkCall<'a>>>,
}

#[derive(Deserialize)]
struct ChunkCall<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<ChunkFunction<'a>>,
}

#[derive(Deserialize)]
struct ChunkFunction<'a> {
    #[serde(default, borrow)]
    name: Option<std::borrow::Cow<'a, str>>,
    /// A string almost always; an object from a few servers (re-encoded).
    #[serde(default)]
    arguments: Option<Value>,
}

impl StreamAssembler {
    /// An assembler for a new stream.
    pub fn new() -> StreamAssembler {
        StreamAssembler::default()
    }

    /// `true` once the stream said `[DONE]`.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Chunks received so far (`[DONE]` not counted).
    pub fn chunks(&self) -> u32 {
        self.chunks
    }

    /// Some of the reply came: text, reasoning or a tool call (a first chunk with only the
    /// role is not yet a reply).
    pub fn has_reply(&self) -> bool {
        !self.content.is_empty() || !self.reasoning.is_empty() || !self.calls.is_empty()
    }

    /// The finish reason, once a chunk gave it.
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// Takes one event's data. Returns the text it added, for live output.
    pub fn push<'s>(&'s mut self, data: &str) -> Result<ChunkText<'s>, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(ChunkText::default());
        }
        if data.is_empty() {
            return Ok(ChunkText::default());
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| {
            LlmError::InvalidResponse(format!(
                "a chunk of the event stream is not a chat.completion.chunk ({e}); it starts with {:?}",
                data.chars().take(200).collect::<String>()
            ))
        })?;
        self.chunks += 1;
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            return Err(stream_error(&error));
        }
        if self.id.is_none() {
            self.id = chunk.id.map(|s| s.into_owned());
        }
        if self.model.is_none() {
            self.model = chunk.model.map(|s| s.into_owned());
        }
        if self.created.is_none() {
            self.created = chunk.created;
        }
        if let Some(usage) = chunk.usage.or(chunk.x_groq.and_then(|x| x.usage)) {
            self.usage = Some(usage);
        }
        let content_from = self.content.len();
        let reasoning_from = self.reasoning.len();
        for choice in chunk.choices {
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason.into_owned());
            }
            for delta in [choice.delta, choice.message].into_iter().flatten() {
                self.take_delta(delta)?;
            }
        }
        Ok(ChunkText {
            content: &self.content[content_from..],
            reasoning: &self.reasoning[reasoning_from..],
        })
    }

    fn take_delta(&mut self, delta: ChunkDelta<'_>) -> Result<(), LlmError> {
        if let Some(text) = delta.content {
            self.content_seen = true;
            self.content.push_str(&text);
        }
        for (key, text) in [
            ("reasoning_content", delta.reasoning_content),
            ("reasoning", delta.reasoning),
        ] {
            if let Some(text) = text {
                self.reasoning_key.get_or_insert(key);
                self.reasoning.push_str(&text);
            }
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.take_call(call)?;
        }
        Ok(())
    }

    /// Merges a tool call delta into its slot: the slot of its `index`; without an index,
    /// a new slot when it names a new id, else the last slot.
    fn take_call(&mut self, call: ChunkCall<'_>) -> Result<(), LlmError> {
        let id = call.id.filter(|id| !id.is_empty());
        let slot = match call.index {
            Some(index) => self.calls.iter().position(|c| c.index == Some(index)),
            None => match (&id, self.calls.last()) {
                (Some(id), Some(last)) if last.id != **id => None,
                (_, Some(_)) => Some(self.calls.len() - 1),
                (_, None) => None,
            },
        };
        let slot = match slot {
            Some(slot) => slot,
            None => {
                if self.calls.len() >= MAX_TOOL_CALLS {
                    return Err(LlmError::InvalidResponse(format!(
                        "the streamed reply asks for more than {MAX_TOOL_CALLS} tool calls"
                    )));
                }
                self.calls.push(PartialCall {
                    index: call.index,
                    ..PartialCall::default()
                });
                self.calls.len() - 1
            }
        };
        let partial = &mut self.calls[slot];
        if let Some(id) = id {
            if partial.id.is_empty() {
                partial.id = id.into_owned();
            }
        }
        if let Some(kind) = call.kind {
            partial.kind.get_or_insert_with(|| kind.into_owned());
        }
        if let Some(function) = call.function {
            // The name comes whole in one chunk; servers that repeat it in every chunk
            // repeat the same name, so it is taken once.
            if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                if partial.name.is_empty() {
                    partial.name = name.into_owned();
                }
            }
            match function.arguments {
                Some(Value::String(piece)) => partial.arguments.push_str(&piece),
                Some(Value::Null) | None => {}
                Some(object) => partial.arguments = object.to_string(),
            }
        }
        Ok(())
    }

    /// The assembled completion. A stream that ended without `[DONE]` and without a
    /// `finish_reason` was cut short: a retryable error.
    pub fn finish(self) -> Result<ChatCompletion, LlmError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(LlmError::Transport(format!(
                "the response stream ended before the reply was complete ({} chunk(s), no finish_reason, no [DONE])",
                self.chunks
            )));
        }
        if self.chunks == 0 {
            return Err(LlmError::InvalidResponse(
                "the response stream carried no chunk before [DONE]".to_owned(),
            ));
        }
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .map(|c| ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{}", uuid::Uuid::new_v4().simple())
                } else {
                    c.id
                },
                kind: c.kind.unwrap_or_else(|| "function".to_owned()),
                function: super::types::FunctionCall {
                    name: c.name,
                    arguments: c.arguments,
                },
            })
            .collect();
        let content = (self.content_seen || tool_calls.is_empty()).then_some(self.content);
        let message = ChatMessage::assistant(content, tool_calls);
        let mut message_json = match serde_json::to_value(&message) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        if let Some(key) = self.reasoning_key {
            message_json.insert(key.to_owned(), Value::String(self.reasoning));
        }
        let mut raw = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message_json,
                "finish_reason": self.finish_reason,
            }],
        });
        if let (Some(usage), Value::Object(map)) = (self.usage, &mut raw) {
            map.insert("usage".to_owned(), json!(usage));
        }
        Ok(ChatCompletion {
            id: self.id,
            model: self.model,
            message,
            finish_reason: self.finish_reason,
            usage: self.usage,
            raw,
        })
    }
}

/// An `error` object sent inside a stream (after a 200): retried by its `code` when it is an
/// HTTP status (OpenRouter sends `{"error":{"code":502,...}}`), else as a server error.
fn stream_error(error: &Value) -> LlmError {
    let status = error
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(500);
    LlmError::Http {
        status,
        message: format!(
            "error in the response stream: {}",
            provider_error_message(error)
        ),
        retry_after: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<String> {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder
                .feed(chunk, &mut |data| {
                    out.push(data.to_owned());
                    Ok(())
                })
                .unwrap();
        }
        decoder
            .finish(&mut |data| {
                out.push(data.to_owned());
                Ok(())
            })
            .unwrap();
        out
    }

    #[test]
    fn events_are_split_across_any_chunk_boundary_and_line_ending() {
        let body =
            b"data: {\"a\":1}\n\n: ping\n\ndata: one\r\ndata: two\r\n\r\nevent: x\rdata:[DONE]\r\r";
        let whole = events(&[body]);
        assert_eq!(whole, vec!["{\"a\":1}", "one\ntwo", "[DONE]"]);
        for split in 1..body.len() {
            let (a, b) = body.split_at(split);
            assert_eq!(events(&[a, b]), whole, "split at {split}");
        }
        let bytewise: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(events(&bytewise), whole);
    }

    #[test]
    fn a_last_event_without_a_blank_line_is_delivered() {
        assert_eq!(events(&[b"data: x\n"]), vec!["x"]);
        assert_eq!(events(&[b"data: y"]), vec!["y"]);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut decoder = SseDecoder::new();
        let big = vec![b'a'; 1024 * 1024];
        let mut failed = false;
        for _ in 0..20 {
            if decoder.feed(&big, &mut |_| Ok(())).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
    }

    fn assemble(chunks: &[&str]) -> Result<ChatCompletion, LlmError> {
        let mut assembler = StreamAssembler::new();
        for chunk in chunks {
            assembler.push(chunk)?;
        }
        assembler.finish()
    }

    #[test]
    fn content_tool_calls_and_usage_are_assembled() {
        let c = assemble(&[
            r#"{"id":"c1","model":"m","created":7,"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"look."}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"ls","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"cat","arguments":"{\"f\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"d\":\".\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(c.id.as_deref(), Some("c1"));
        assert_eq!(c.message.content.as_deref(), Some("Let me look."));
        let calls = c.message.tool_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].function.name.as_str()),
            ("call_a", "ls")
        );
        assert_eq!(calls[0].function.arguments, r#"{"d":"."}"#);
        assert_eq!(calls[1].function.arguments, r#"{"f":"x"}"#);
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(c.usage.unwrap().total_tokens, 15);
        assert_eq!(c.raw["object"], "chat.completion");
        assert_eq!(c.raw["usage"]["prompt_tokens"], 10);
        // The assembled body parses as a non-streamed completion, to the same reply.
        let again = super::super::parse_completion(&serde_json::to_vec(&c.raw).unwrap()).unwrap();
        assert_eq!(again.message, c.message);
    }

    /// llama-cpp-python repeats the call's id, type and name in every chunk.
    #[test]
    fn a_name_repeated_in_every_chunk_is_taken_once() {
        let piece = |args: &str| {
            format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":null,"tool_calls":[{{"index":0,"id":"call__0_ls","type":"function","function":{{"name":"ls","arguments":"{args}"}}}}]}}}}]}}"#
            )
        };
        let chunks = [piece("{"), piece("}"), "[DONE]".to_owned()];
        let c = assemble(&chunks.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        let calls = c.message.tool_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].function.name, "ls");
        assert_eq!(calls[0].function.arguments, "{}");
        assert_eq!(
            c.message.content, None,
            "tool calls only: content is absent"
        );
    }

    #[test]
    fn calls_without_an_index_are_told_apart_by_id() {
        let c = assemble(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":{"k":1}}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ])
        .unwrap();
        let calls = c.message.tool_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].function.arguments, r#"{"k":1}"#);
    }

    #[test]
    fn reasoning_is_kept_under_its_own_name_and_reported_as_it_comes() {
        let mut a = StreamAssembler::new();
        let text = a
            .push(r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#)
            .unwrap();
        assert_eq!(text.reasoning, "think");
        let text = a
            .push(r#"{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}"#)
            .unwrap();
        assert_eq!(
            text,
            ChunkText {
                content: "ok",
                reasoning: ""
            }
        );
        let c = a.finish().unwrap();
        assert_eq!(c.raw["choices"][0]["message"]["reasoning_content"], "think");
        assert_eq!(c.message.content.as_deref(), Some("ok"));
    }

    #[test]
    fn a_stream_cut_short_is_a_retryable_error() {
        let err =
            assemble(&[r#"{"choices":[{"index":0,"delta":{"content":"par"}}]}"#]).unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
        assert!(
            err.to_string()
                .contains("ended before the reply was complete"),
            "{err}"
        );
        // A finish_reason without [DONE] is a complete reply.
        let c = assemble(&[
            r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert_eq!(c.message.content.as_deref(), Some("x"));
    }

    #[test]
    fn an_error_inside_the_stream_keeps_its_status() {
        let err =
            assemble(&[r#"{"error":{"message":"upstream overloaded","code":502}}"#]).unwrap_err();
        assert_eq!(err.status(), Some(502));
        assert!(err.is_retryable());
        assert!(err.to_string().contains("upstream overloaded"), "{err}");
        let err = assemble(&[r#"{"error":{"message":"bad","code":"invalid"}}"#]).unwrap_err();
        assert_eq!(err.status(), Some(500));
    }

    #[test]
    fn garbage_in_the_stream_is_an_invalid_response() {
        let err = assemble(&["<html>"]).unwrap_err();
        assert!(matches!(err, LlmError::InvalidResponse(_)), "{err:?}");
        assert!(!err.is_retryable());
        let err = assemble(&["[DONE]"]).unwrap_err();
        assert!(err.to_string().contains("no chunk"), "{err}");
    }

    /// Groq puts a streamed reply's usage under `x_groq` in its last chunk.
    #[test]
    fn groq_usage_is_read_from_x_groq() {
        let c = assemble(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"queue_time":0.07,"prompt_tokens":23,"completion_tokens":19,"total_tokens":42}}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(c.usage.unwrap().total_tokens, 42);
    }

    #[test]
    fn an_empty_answer_is_content_not_absence() {
        let c = assemble(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(c.message.content.as_deref(), Some(""));
    }
}
