//! A request's JSON as sent: the one field list that serializes a [`ChatRequest`], written
//! with an endpoint's [`WireOptions`] (streaming, the form of tool-call turns, the name of the
//! reply cap, the system role, sampling parameters), and [`MessageJson`], which keeps each
//! message's JSON text from one of a run's requests to the next.
//!
//! Why the cache: a request carries the whole history, so every iteration escaped every
//! earlier message's text again (`serde_json`'s string escaping was 14 % of the run thread's
//! samples with a tool printing 109 KB per call, and it grows with the square of a run's
//! length). With [`MessageJson`] only the messages that changed are serialized; the others
//! are copied as the text they already are. The bytes sent are the same either way.
//!
//! Must not: change what a request means: with the default options, field order, omitted
//! fields and message text are exactly `ChatRequest`'s serialization (tested below).

use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::value::RawValue;

use super::dialect::{MaxTokensField, SystemRole, ToolCallContent, WireOptions};
use super::types::{ChatMessage, ChatRequest, Messages, Role, ToolCall, ToolList};

/// The serialized shape of a [`ChatRequest`], with its messages in any form that serializes
/// as a JSON array of messages: the messages themselves, or their JSON text.
#[derive(Serialize)]
struct WireRequest<'a, M: Serialize> {
    model: &'a str,
    messages: M,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "no_tools")]
    tools: &'a ToolList,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(flatten, skip_serializing_if = "serde_json::Map::is_empty")]
    extra: &'a serde_json::Map<String, serde_json::Value>,
}

/// `stream_options`: ask for the usage in a last chunk.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

fn no_tools(tools: &&ToolList) -> bool {
    tools.is_empty()
}

impl<'a, M: Serialize> WireRequest<'a, M> {
    /// `for_wire`: OpenAI rejects `tool_choice` when no `tools` are sent, so it is dropped
    /// then (see [`ChatRequest::for_wire`]).
    fn of(request: &'a ChatRequest, messages: M, for_wire: bool, options: &WireOptions) -> Self {
        let drop_choice = for_wire && request.tools.is_empty();
        let sampling = |value: Option<f64>| value.filter(|_| options.sampling);
        let (max_tokens, max_completion_tokens) = match options.max_tokens_field {
            MaxTokensField::MaxTokens => (request.max_tokens, None),
            MaxTokensField::MaxCompletionTokens => (None, request.max_tokens),
        };
        WireRequest {
            model: &request.model,
            messages,
            temperature: sampling(request.temperature),
            max_tokens,
            max_completion_tokens,
            top_p: sampling(request.top_p),
            frequency_penalty: sampling(request.frequency_penalty),
            presence_penalty: sampling(request.presence_penalty),
            tools: &request.tools,
            tool_choice: request.tool_choice.as_deref().filter(|_| !drop_choice),
            stream: options.stream.then_some(true),
            stream_options: (options.stream && options.stream_usage).then_some(StreamOptions {
                include_usage: true,
            }),
            extra: &request.extra,
        }
    }
}

impl Serialize for ChatRequest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireRequest::of(self, &self.messages, false, &WireOptions::default()).serialize(serializer)
    }
}

/// One message as an endpoint wants it: with the default options, exactly the message's own
/// serialization (role, content, tool_calls when there are some, tool_call_id when set).
struct WireMessage<'a> {
    message: &'a ChatMessage,
    options: &'a WireOptions,
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let message = self.message;
        let calls = message.tool_calls();
        let role = match message.role {
            Role::System => self.options.system_role.name(),
            other => other.as_str(),
        };
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("role", role)?;
        match (&message.content, self.options.tool_call_content) {
            (None, ToolCallContent::EmptyString) if !calls.is_empty() => {
                map.serialize_entry("content", "")?
            }
            (content, _) => map.serialize_entry("content", content)?,
        }
        if !calls.is_empty() {
            map.serialize_entry::<_, [ToolCall]>("tool_calls", calls)?;
        }
        if let Some(id) = &message.tool_call_id {
            map.serialize_entry("tool_call_id", id)?;
        }
        map.end()
    }
}

/// True when `options` write messages exactly as their own serialization does.
fn plain_messages(options: &WireOptions) -> bool {
    options.tool_call_content == ToolCallContent::JsonNull
        && options.system_role == SystemRole::System
}

/// `request` serialized for the wire (as [`ChatRequest::for_wire`]) with `options`, without
/// a message cache: what the HTTP backend sends when the caller did not serialize it.
pub fn request_body(
    request: &ChatRequest,
    options: &WireOptions,
) -> Result<Vec<u8>, serde_json::Error> {
    let messages: Vec<WireMessage<'_>> = request
        .messages
        .iter()
        .map(|message| WireMessage { message, options })
        .collect();
    serde_json::to_vec(&WireRequest::of(request, messages, true, options))
}

/// The JSON text of the messages of a run's last request, each beside the message it was
/// made from. Holds the last request's messages as the request held them: sharing the run's
/// conversation segments ([`Messages`]), so this is no second copy of the history's text.
#[derive(Debug, Default)]
pub struct MessageJson {
    messages: Messages,
    /// The JSON text of each of `messages`.
    texts: Vec<Box<RawValue>>,
    /// The options the kept texts were written with: other options write other texts.
    options: WireOptions,
}

impl MessageJson {
    /// An empty cache, for a new run.
    pub fn new() -> MessageJson {
        MessageJson::default()
    }

    /// `request` serialized for the wire (as [`ChatRequest::for_wire`]) with `options`: the
    /// JSON text of each message equal to the one at the same place in the previous request
    /// (written with the same options) is reused, the others are serialized. Returns the body
    /// and how many messages were reused.
    pub fn wire_body(
        &mut self,
        request: &ChatRequest,
        options: &WireOptions,
    ) -> Result<(Box<RawValue>, usize), serde_json::Error> {
        if self.options != *options {
            self.messages = Messages::new();
            self.texts.clear();
            self.options = *options;
        }
        let plain = plain_messages(options);
        let mut previous = self.messages.iter().zip(std::mem::take(&mut self.texts));
        let mut texts = Vec::with_capacity(request.messages.len());
        let mut reused = 0;
        for message in &request.messages {
            match previous.next() {
                // The very message of the last request (a segment both share, which
                // `self.messages` keeps alive, so the address is not reused) needs no
                // comparison of its text; another one is compared.
                Some((before, text)) if std::ptr::eq(before, message) || before == message => {
                    reused += 1;
                    texts.push(text);
                }
                _ => texts.push(if plain {
                    serde_json::value::to_raw_value(message)?
                } else {
                    serde_json::value::to_raw_value(&WireMessage { message, options })?
                }),
            }
        }
        drop(previous);
        let body = {
            let texts: Vec<&RawValue> = texts.iter().map(|json| &**json).collect();
            serde_json::value::to_raw_value(&WireRequest::of(request, texts, true, options))?
        };
        self.messages = request.messages.clone();
        self.texts = texts;
        Ok((body, reused))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::types::{FunctionCall, ToolCall};
    use serde_json::json;

    fn history(observation: &str) -> Vec<ChatMessage> {
        vec![
            ChatMessage::system("You are \"careful\".\nLine two \u{1F600}"),
            ChatMessage::user("task with \\ backslash"),
            ChatMessage::assistant(
                None,
                vec![ToolCall {
                    id: "call_1".into(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: "echo".into(),
                        arguments: "{\"text\":\"a\\nb\"}".into(),
                    },
                }],
            ),
            ChatMessage::tool("call_1", observation),
        ]
    }

    fn requests() -> Vec<ChatRequest> {
        let bare = ChatRequest {
            model: "m\"odel".into(),
            messages: history("out").into(),
            tool_choice: Some("auto".into()),
            ..ChatRequest::default()
        };
        let mut full = bare.clone();
        full.temperature = Some(0.2);
        full.max_tokens = Some(64);
        full.top_p = Some(0.9);
        full.frequency_penalty = Some(0.1);
        full.presence_penalty = Some(-0.1);
        full.tools = ToolList::new(vec![
            json!({"type": "function", "function": {"name": "echo"}}),
        ]);
        full.extra.insert("seed".into(), json!(7));
        full.extra.insert("stop".into(), json!(["\n\n"]));
        vec![bare, full]
    }

    /// What `ChatRequest`'s derived serialization wrote for `requests()` before it moved
    /// here (checked against that build): the same bytes, field order included.
    const GOLDEN: [&str; 2] = [
        r#"{"model":"m\"odel","messages":[{"role":"system","content":"You are \"careful\".\nLine two 😀"},{"role":"user","content":"task with \\ backslash"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"a\\nb\"}"}}]},{"role":"tool","content":"out","tool_call_id":"call_1"}]}"#,
        r#"{"model":"m\"odel","messages":[{"role":"system","content":"You are \"careful\".\nLine two 😀"},{"role":"user","content":"task with \\ backslash"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"a\\nb\"}"}}]},{"role":"tool","content":"out","tool_call_id":"call_1"}],"temperature":0.2,"max_tokens":64,"top_p":0.9,"frequency_penalty":0.1,"presence_penalty":-0.1,"tools":[{"function":{"name":"echo"},"type":"function"}],"tool_choice":"auto","seed":7,"stop":["\n\n"]}"#,
    ];

    #[test]
    fn the_body_is_the_bytes_the_request_has_always_been_sent_as() {
        for (request, golden) in requests().iter().zip(GOLDEN) {
            let (body, reused) = MessageJson::new()
                .wire_body(request, &WireOptions::default())
                .unwrap();
            assert_eq!(reused, 0);
            assert_eq!(body.get(), golden);
            assert_eq!(serde_json::to_string(&*request.for_wire()).unwrap(), golden);
        }
        // Without `for_wire`, a `tool_choice` without tools is kept, as it always was.
        let plain = serde_json::to_string(&requests()[0]).unwrap();
        let without_closing_brace = &GOLDEN[0][..GOLDEN[0].len() - 1];
        assert_eq!(
            plain,
            format!(r#"{without_closing_brace},"tool_choice":"auto"}}"#)
        );
    }

    /// The cache holds the request's own messages (the segments the run's requests share),
    /// not a second copy of the history's text.
    #[test]
    fn the_cache_holds_the_requests_messages_not_a_copy() {
        let mut cache = MessageJson::new();
        let request = requests().remove(1);
        cache.wire_body(&request, &WireOptions::default()).unwrap();
        assert_eq!(cache.messages.len(), request.messages.len());
        for (kept, sent) in cache.messages.iter().zip(&request.messages) {
            assert!(std::ptr::eq(kept, sent), "{kept:?}");
        }
    }

    #[test]
    fn a_later_request_reuses_the_text_of_the_messages_it_shares() {
        let mut cache = MessageJson::new();
        let mut request = requests().remove(1);
        cache.wire_body(&request, &WireOptions::default()).unwrap();
        // The next iteration: the same history, one more turn.
        request
            .messages
            .push(ChatMessage::assistant(Some("done".into()), vec![]));
        let (body, reused) = cache.wire_body(&request, &WireOptions::default()).unwrap();
        assert_eq!(reused, 4);
        assert_eq!(body.get(), serde_json::to_string(&request).unwrap());
        // A context that changed (a new system prompt) is serialized again, and only it.
        request.messages[0] = ChatMessage::system("changed");
        let (body, reused) = cache.wire_body(&request, &WireOptions::default()).unwrap();
        assert_eq!(reused, 4);
        assert_eq!(body.get(), serde_json::to_string(&request).unwrap());
        // A shorter history (a hook replaced the messages) is right too.
        request.messages.truncate(2);
        let (body, reused) = cache.wire_body(&request, &WireOptions::default()).unwrap();
        assert_eq!(reused, 2);
        assert_eq!(body.get(), serde_json::to_string(&request).unwrap());
    }

    /// What llama-cpp-python and OpenAI's reasoning models need, written by the options:
    /// only the named details change, and the cached and uncached bodies agree.
    #[test]
    fn options_change_only_the_details_they_name() {
        use crate::llm::dialect::{MaxTokensField, SystemRole, ToolCallContent};
        let request = requests().remove(1);
        let options = WireOptions {
            stream: true,
            stream_usage: true,
            tool_call_content: ToolCallContent::EmptyString,
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            system_role: SystemRole::Developer,
            sampling: false,
        };
        let (cached, _) = MessageJson::new().wire_body(&request, &options).unwrap();
        let uncached = request_body(&request, &options).unwrap();
        assert_eq!(cached.get().as_bytes(), uncached.as_slice());
        let body: serde_json::Value = serde_json::from_str(cached.get()).unwrap();
        assert_eq!(body["messages"][0]["role"], "developer");
        assert_eq!(body["messages"][2]["content"], "");
        assert_eq!(
            body["messages"][3]["content"], "out",
            "other turns are untouched"
        );
        assert_eq!(body["max_completion_tokens"], 64);
        assert!(body.get("max_tokens").is_none());
        for sampling in [
            "temperature",
            "top_p",
            "frequency_penalty",
            "presence_penalty",
        ] {
            assert!(body.get(sampling).is_none(), "{sampling}");
        }
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["seed"], 7);
        // The default options are the golden bytes, by either path.
        let plain = request_body(&request, &WireOptions::default()).unwrap();
        assert_eq!(String::from_utf8(plain).unwrap(), GOLDEN[1]);
    }

    /// Texts kept for one set of options are not reused for another.
    #[test]
    fn other_options_serialize_every_message_again() {
        use crate::llm::dialect::ToolCallContent;
        let mut cache = MessageJson::new();
        let request = requests().remove(1);
        cache.wire_body(&request, &WireOptions::default()).unwrap();
        let empty = WireOptions {
            tool_call_content: ToolCallContent::EmptyString,
            ..WireOptions::default()
        };
        let (body, reused) = cache.wire_body(&request, &empty).unwrap();
        assert_eq!(reused, 0);
        assert!(body
            .get()
            .contains(r#""role":"assistant","content":"","tool_calls""#));
        let (_, reused) = cache.wire_body(&request, &empty).unwrap();
        assert_eq!(reused, 4);
    }
}
