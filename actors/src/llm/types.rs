//! The OpenAI chat-completions wire format: messages, tool calls, requests, completions and
//! usage, plus [`parse_completion`] for provider bodies.
//!
//! Owns how a history is serialized so that it is always valid for the OpenAI API
//! (assistant turns without text carry `content: null`, never the string `"null"`; empty
//! `tool_calls` arrays are omitted). Does not do I/O, retries or history repair.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Value};

use super::shared_list::{ChunkLog, SharedList};
use super::LlmError;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Also accepts OpenAI's newer `developer` role, which plays the same part.
    #[serde(alias = "developer")]
    System,
    /// The task and later user messages (an ask_human answer is a tool result, not this).
    User,
    /// The model's turns: text and/or tool calls.
    Assistant,
    /// A tool call's result, answering one call by its id.
    Tool,
}

impl Role {
    /// The wire spelling, e.g. `assistant`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One chat message. `content` is always serialized (as `null` when absent) because OpenAI
/// requires the key on assistant turns that only carry tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// The text; `None` on assistant turns with tool calls only. The array-of-parts form
    /// is read too (its text parts joined).
    #[serde(default, deserialize_with = "deserialize_content")]
    pub content: Option<String>,
    /// Assistant turns: the calls asked for (left out of the JSON when empty).
    #[serde(default, skip_serializing_if = "no_tool_calls")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Tool turns: the id of the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, Some(content.into()))
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, Some(content.into()))
    }

    /// An assistant turn; `content: None` is sent as `null`.
    pub fn assistant(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        ChatMessage {
            role: Role::Assistant,
            content,
            tool_calls: if tool_calls.is_empty() {
                None
            } else {
                Some(tool_calls)
            },
            tool_call_id: None,
        }
    }

    /// The result of the tool call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: None,
            tool_call_id: Some(tool_call_id.into()),
        }
    }

    fn plain(role: Role, content: Option<String>) -> Self {
        ChatMessage {
            role,
            content,
            tool_calls: None,
            tool_call_id: None,
        }
    }

    /// The tool calls of this message (empty for non-assistant turns).
    pub fn tool_calls(&self) -> &[ToolCall] {
        self.tool_calls.as_deref().unwrap_or(&[])
    }
}

fn no_tool_calls(calls: &Option<Vec<ToolCall>>) -> bool {
    !matches!(calls, Some(list) if !list.is_empty())
}

/// Accepts `null`, a string, or the array-of-parts form (`[{"type":"text","text":..}]`)
/// that some clients send; parts are concatenated.
fn deserialize_content<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let value = Option::<Value>::deserialize(d)?;
    Ok(match value {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        Some(other) => Some(other.to_string()),
    })
}

/// One function call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which its tool result must name (generated when a provider sends
    /// none).
    #[serde(default)]
    pub id: String,
    /// `type` on the wire: always `function` today.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

impl ToolCall {
    /// A `function` tool call with JSON-encoded `arguments`.
    pub fn function(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

fn function_kind() -> String {
    "function".to_owned()
}

/// The function name and its arguments as a JSON string (as OpenAI sends them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// Some providers send an object instead of a JSON string; it is re-encoded.
    #[serde(default, deserialize_with = "deserialize_arguments")]
    pub arguments: String,
}

fn deserialize_arguments<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let value = Option::<Value>::deserialize(d)?;
    Ok(match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
    })
}

/// A request's messages: segments shared with the run's other requests and with its
/// [`MessageLog`], read, compared and serialized as one list.
pub type Messages = SharedList<ChatMessage>;

/// A run's conversation between requests, whose chunks its requests share (see
/// [`super::shared_list`]).
pub type MessageLog = ChunkLog<ChatMessage>;

/// A chat-completions request. `None` fields are omitted, as are `tools` when empty.
/// Serialized through `wire.rs`, which holds the one list of its fields as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct ChatRequest {
    /// The model name.
    pub model: String,
    /// The conversation, system messages first (segments shared with the run's other
    /// requests: cloning a request does not copy its history).
    pub messages: Messages,
    /// Sampling temperature, 0 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Cap on the reply's length, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Nucleus sampling, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// -2 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// -2 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    /// The tools offered, as OpenAI function definitions. Shared, and written as JSON text
    /// once: a run offers the same list at every iteration, and copying it, then serializing
    /// it, per call showed in the profile (BENCHMARKS.md).
    #[serde(default, skip_serializing_if = "ToolList::is_empty")]
    pub tools: ToolList,
    /// Only the string forms (`auto`, `none`, `required`) are modelled; an object form
    /// received by the scripted server is ignored.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "deserialize_tool_choice"
    )]
    pub tool_choice: Option<String>,
    /// Any other top-level field (e.g. `seed`, `stop`, `response_format`, or whatever a
    /// `pre_llm_req` hook adds), passed through untouched.
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, Value>,
}

impl ChatRequest {
    /// The request as it should go on the wire: OpenAI rejects `tool_choice` when no
    /// `tools` are sent, so it is dropped in that case.
    pub fn for_wire(&self) -> std::borrow::Cow<'_, ChatRequest> {
        if self.tools.is_empty() && self.tool_choice.is_some() {
            std::borrow::Cow::Owned(ChatRequest {
                tool_choice: None,
                ..self.clone()
            })
        } else {
            std::borrow::Cow::Borrowed(self)
        }
    }
}

/// The tools of a request (OpenAI function definitions): cheap to clone, and serialized once
/// — the JSON text is made the first time the list is written and reused for every later
/// request that shares it. Reads as a slice of the definitions.
#[derive(Clone, Default)]
pub struct ToolList(Arc<ToolListInner>);

#[derive(Default)]
struct ToolListInner {
    definitions: Vec<Value>,
    json: std::sync::OnceLock<Box<serde_json::value::RawValue>>,
}

impl ToolList {
    /// A list of these definitions.
    pub fn new(definitions: Vec<Value>) -> ToolList {
        ToolList(Arc::new(ToolListInner {
            definitions,
            json: std::sync::OnceLock::new(),
        }))
    }

    /// True when no tool is offered (`tools` is then left out of the request).
    pub fn is_empty(&self) -> bool {
        self.0.definitions.is_empty()
    }

    /// The list's JSON text, made on first use.
    fn json(&self) -> Result<&serde_json::value::RawValue, serde_json::Error> {
        if let Some(json) = self.0.json.get() {
            return Ok(json);
        }
        let made = serde_json::value::to_raw_value(&self.0.definitions)?;
        Ok(self.0.json.get_or_init(|| made))
    }
}

impl From<Vec<Value>> for ToolList {
    fn from(definitions: Vec<Value>) -> ToolList {
        ToolList::new(definitions)
    }
}

impl std::ops::Deref for ToolList {
    type Target = [Value];

    fn deref(&self) -> &[Value] {
        &self.0.definitions
    }
}

impl std::fmt::Debug for ToolList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.definitions.iter()).finish()
    }
}

impl PartialEq for ToolList {
    fn eq(&self, other: &ToolList) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.definitions == other.0.definitions
    }
}

impl Serialize for ToolList {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json()
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolList, D::Error> {
        Vec::<Value>::deserialize(d).map(ToolList::new)
    }
}

fn deserialize_tool_choice<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let value = Option::<Value>::deserialize(d)?;
    Ok(match value {
        Some(Value::String(s)) => Some(s),
        _ => None,
    })
}

/// Token accounting reported by the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(from = "UsageWire", into = "UsageWire")]
pub struct Usage {
    /// Tokens of the request.
    pub prompt_tokens: u64,
    /// Tokens of the reply.
    pub completion_tokens: u64,
    /// As the provider reports it.
    pub total_tokens: u64,
    /// Of `prompt_tokens`, those the provider served from its prompt cache (OpenAI's
    /// `prompt_tokens_details.cached_tokens`); 0 when it reports none. They are priced at
    /// the cached-input price.
    pub cached_prompt_tokens: u64,
}

impl Usage {
    /// Both counts together, each field capped at `u64::MAX` (a provider's absurd figure
    /// must not wrap a run's total).
    pub fn saturating_add(self, other: Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            completion_tokens: self
                .completion_tokens
                .saturating_add(other.completion_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
            cached_prompt_tokens: self
                .cached_prompt_tokens
                .saturating_add(other.cached_prompt_tokens),
        }
    }
}

/// [`Usage`] as OpenAI writes it (the cached tokens nested in `prompt_tokens_details`).
#[derive(Serialize, Deserialize)]
struct UsageWire {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

/// OpenAI's `usage.prompt_tokens_details`.
#[derive(Serialize, Deserialize)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl From<UsageWire> for Usage {
    fn from(wire: UsageWire) -> Usage {
        Usage {
            prompt_tokens: wire.prompt_tokens,
            completion_tokens: wire.completion_tokens,
            total_tokens: wire.total_tokens,
            cached_prompt_tokens: wire
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens)
                .unwrap_or(0),
        }
    }
}

impl From<Usage> for UsageWire {
    fn from(usage: Usage) -> UsageWire {
        UsageWire {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
            prompt_tokens_details: (usage.cached_prompt_tokens > 0).then_some(
                PromptTokensDetails {
                    cached_tokens: Some(usage.cached_prompt_tokens),
                },
            ),
        }
    }
}

/// The first choice of a completion plus what the provider said about it. `raw` keeps the
/// provider's full body so it can be stored beside the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatCompletion {
    /// The provider's completion id.
    pub id: Option<String>,
    /// The model that answered, as the provider names it.
    pub model: Option<String>,
    /// The reply (`choices[0].message`).
    pub message: ChatMessage,
    /// `stop`, `tool_calls`, `length` (cut at `max_tokens`)...
    pub finish_reason: Option<String>,
    /// Token accounting, when the provider sent it.
    pub usage: Option<Usage>,
    /// The provider's whole body.
    pub raw: Value,
}

impl ChatCompletion {
    /// The OpenAI response body for this completion (what the scripted server sends).
    pub fn to_openai_json(&self, created_unix: i64) -> Value {
        json!({
            "id": self.id.clone().unwrap_or_else(|| "chatcmpl-delta".to_owned()),
            "object": "chat.completion",
            "created": created_unix,
            "model": self.model.clone().unwrap_or_default(),
            "choices": [{
                "index": 0,
                "message": self.message,
                "finish_reason": self.finish_reason,
            }],
            "usage": self.usage.unwrap_or_default(),
        })
    }
}

#[derive(Deserialize)]
struct WireCompletion {
    id: Option<String>,
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChoice>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: Option<WireMessage>,
    finish_reason: Option<String>,
}

/// The response message; `role` is optional because some providers leave it out.
#[derive(Deserialize)]
struct WireMessage {
    #[serde(default, deserialize_with = "deserialize_content")]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
}

/// Parses a provider's chat-completion body. Fails with [`LlmError::InvalidResponse`] when
/// the body is not JSON, carries an `error` object, or has no `choices[0].message`.
/// Tool calls without an id get a generated one so every call can be answered.
pub fn parse_completion(body: &[u8]) -> Result<ChatCompletion, LlmError> {
    let raw: Value = serde_json::from_slice(body).map_err(|e| {
        LlmError::InvalidResponse(format!(
            "body is not JSON ({e}); it starts with {:?}",
            preview(body)
        ))
    })?;
    if let Some(error) = raw.get("error").filter(|e| !e.is_null()) {
        return Err(LlmError::InvalidResponse(format!(
            "the provider returned an error object: {}",
            provider_error_message(error)
        )));
    }
    // From the tree by reference: the tree itself is kept as `raw`, uncloned.
    let wire = WireCompletion::deserialize(&raw)
        .map_err(|e| LlmError::InvalidResponse(format!("unexpected chat.completion shape: {e}")))?;
    let choice = wire.choices.into_iter().next().ok_or_else(|| {
        LlmError::InvalidResponse(
            "`choices` is empty or missing (hint: check the model name)".into(),
        )
    })?;
    let message = choice
        .message
        .ok_or_else(|| LlmError::InvalidResponse("`choices[0].message` is missing".into()))?;
    let mut tool_calls = message.tool_calls.unwrap_or_default();
    for call in tool_calls.iter_mut().filter(|c| c.id.is_empty()) {
        call.id = format!("call_{}", uuid::Uuid::new_v4().simple());
    }
    Ok(ChatCompletion {
        id: wire.id,
        model: wire.model,
        message: ChatMessage::assistant(message.content, tool_calls),
        finish_reason: choice.finish_reason,
        usage: wire.usage,
        raw,
    })
}

/// The human-readable message inside a provider error value (`{"message":..}` or a string).
pub(crate) fn provider_error_message(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        Value::Object(map) => map
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string()),
        other => other.to_string(),
    }
}

/// At most 200 characters of a body, for error messages.
pub(crate) fn preview(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(200).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn usages_add_field_by_field_and_cap_instead_of_wrapping() {
        let failed = Usage {
            prompt_tokens: 100,
            completion_tokens: 0,
            total_tokens: 100,
            cached_prompt_tokens: 40,
        };
        let answered = Usage {
            prompt_tokens: 120,
            completion_tokens: 30,
            total_tokens: 150,
            cached_prompt_tokens: 100,
        };
        assert_eq!(
            failed.saturating_add(answered),
            Usage {
                prompt_tokens: 220,
                completion_tokens: 30,
                total_tokens: 250,
                cached_prompt_tokens: 140,
            }
        );
        let huge = Usage {
            prompt_tokens: u64::MAX,
            ..Usage::default()
        };
        assert_eq!(huge.saturating_add(answered).prompt_tokens, u64::MAX);
    }

    #[test]
    fn assistant_without_text_serializes_content_null_not_string() {
        let msg = ChatMessage::assistant(None, vec![ToolCall::function("c1", "ls", "{}")]);
        let v = serde_json::to_value(&msg).unwrap();
        assert_eq!(v["content"], Value::Null);
        assert!(v.as_object().unwrap().contains_key("content"));
        assert_eq!(v["tool_calls"][0]["type"], "function");
        assert!(!v.as_object().unwrap().contains_key("tool_call_id"));
    }

    #[test]
    fn empty_tool_calls_are_omitted() {
        let msg = ChatMessage::assistant(Some("hi".into()), vec![]);
        let v = serde_json::to_value(&msg).unwrap();
        assert!(!v.as_object().unwrap().contains_key("tool_calls"));
        let mut explicit = msg.clone();
        explicit.tool_calls = Some(vec![]);
        let v = serde_json::to_value(&explicit).unwrap();
        assert!(!v.as_object().unwrap().contains_key("tool_calls"));
    }

    /// The tool list is written as JSON text once and that text reused by every request
    /// sharing the list; what goes out is what the definitions say, compact or pretty, and it
    /// reads back as the same list.
    #[test]
    fn a_shared_tool_list_is_serialized_once_and_faithfully() {
        let definitions = vec![
            json!({"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "cat \"q\""}}),
        ];
        let tools = ToolList::new(definitions.clone());
        assert!(tools.0.json.get().is_none());
        let request = ChatRequest {
            model: "m".into(),
            tools: tools.clone(),
            ..Default::default()
        };
        let first = serde_json::to_value(&request).unwrap();
        assert_eq!(first["tools"], Value::Array(definitions.clone()));
        let made = tools.0.json.get().map(|text| text.get().as_ptr()).unwrap();
        let again = request.clone();
        let pretty = serde_json::to_string_pretty(&again).unwrap();
        assert_eq!(
            again.tools.0.json.get().map(|text| text.get().as_ptr()),
            Some(made),
            "the clone reuses the text made for the first request"
        );
        let read: ChatRequest = serde_json::from_str(&pretty).unwrap();
        assert_eq!(&*read.tools, definitions.as_slice());
        assert_eq!(read, request);
    }

    #[test]
    fn request_omits_unset_options_and_empty_tools() {
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("hi")].into(),
            ..Default::default()
        };
        let v = serde_json::to_value(&req).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, vec!["messages", "model"]);
        let req = ChatRequest {
            top_p: Some(0.5),
            presence_penalty: Some(0.1),
            tools: ToolList::new(vec![json!({"type":"function"})]),
            tool_choice: Some("auto".into()),
            ..req
        };
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(v["top_p"], 0.5);
        assert_eq!(v["presence_penalty"], 0.1);
        assert_eq!(v["tool_choice"], "auto");
        assert_eq!(v["tools"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn tool_choice_is_not_sent_without_tools() {
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("hi")].into(),
            tool_choice: Some("auto".into()),
            ..Default::default()
        };
        assert_eq!(req.for_wire().tool_choice, None);
        let with_tools = ChatRequest {
            tools: ToolList::new(vec![json!({"type": "function"})]),
            ..req
        };
        assert_eq!(with_tools.for_wire().tool_choice.as_deref(), Some("auto"));
    }

    #[test]
    fn unknown_request_fields_pass_through() {
        let text = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"seed":7,"stop":["\n"],"tool_choice":"auto"}"#;
        let req: ChatRequest = serde_json::from_str(text).unwrap();
        assert_eq!(req.extra["seed"], 7);
        assert_eq!(req.tool_choice.as_deref(), Some("auto"));
        assert!(!req.extra.contains_key("model"));
        let back = serde_json::to_value(&req).unwrap();
        assert_eq!(back["stop"][0], "\n");
        assert_eq!(back["seed"], 7);
    }

    #[test]
    fn parses_a_tool_call_completion_with_usage() {
        let body = br#"{"id":"x1","model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{\"a\":1}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;
        let c = parse_completion(body).unwrap();
        assert_eq!(c.id.as_deref(), Some("x1"));
        assert_eq!(c.message.role, Role::Assistant);
        assert_eq!(c.message.content, None);
        assert_eq!(c.message.tool_calls()[0].function.arguments, r#"{"a":1}"#);
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(c.usage.unwrap().total_tokens, 7);
        assert_eq!(c.raw["id"], "x1");
    }

    /// Issue 33: OpenAI reports prompt-cache hits in `prompt_tokens_details.cached_tokens`;
    /// they are priced apart, so they must be read (and a null or absent one is 0).
    #[test]
    fn cached_prompt_tokens_are_read_from_prompt_tokens_details() {
        let body = br#"{"choices":[{"message":{"content":"t"}}],"usage":{"prompt_tokens":1200,
            "completion_tokens":5,"total_tokens":1205,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0}}}"#;
        let usage = parse_completion(body).unwrap().usage.unwrap();
        assert_eq!(usage.cached_prompt_tokens, 1024);
        assert_eq!(usage.prompt_tokens, 1200);
        let back: Usage = serde_json::from_value(serde_json::to_value(usage).unwrap()).unwrap();
        assert_eq!(back, usage);
        for details in [
            r#""prompt_tokens_details":null,"#,
            r#""prompt_tokens_details":{"cached_tokens":null},"#,
            "",
        ] {
            let text =
                format!(r#"{{{details}"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#);
            let usage: Usage = serde_json::from_str(&text).unwrap();
            assert_eq!(usage.cached_prompt_tokens, 0, "{text}");
            assert_eq!(usage.prompt_tokens, 3, "{text}");
        }
    }

    #[test]
    fn object_arguments_and_missing_ids_are_normalised() {
        let body = br#"{"choices":[{"message":{"content":"t","tool_calls":[{"function":{"name":"f","arguments":{"k":"v"}}}]}}]}"#;
        let c = parse_completion(body).unwrap();
        let call = &c.message.tool_calls()[0];
        assert!(call.id.starts_with("call_"));
        assert_eq!(call.kind, "function");
        assert_eq!(call.function.arguments, r#"{"k":"v"}"#);
    }

    #[test]
    fn developer_role_reads_as_system() {
        let msg: ChatMessage =
            serde_json::from_str(r#"{"role":"developer","content":"d"}"#).unwrap();
        assert_eq!(msg.role, Role::System);
        assert!(serde_json::from_str::<ChatMessage>(r#"{"role":"wizard","content":"d"}"#).is_err());
    }

    #[test]
    fn content_parts_are_concatenated() {
        let msg: ChatMessage = serde_json::from_str(
            r#"{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}"#,
        )
        .unwrap();
        assert_eq!(msg.content.as_deref(), Some("ab"));
    }

    #[test]
    fn invalid_bodies_are_reported() {
        let err = parse_completion(b"<html>").unwrap_err();
        assert!(matches!(err, LlmError::InvalidResponse(ref m) if m.contains("<html>")));
        let err = parse_completion(br#"{"choices":[]}"#).unwrap_err();
        assert!(err.to_string().contains("choices"));
        let err = parse_completion(br#"{"error":{"message":"quota exceeded"}}"#).unwrap_err();
        assert!(err.to_string().contains("quota exceeded"));
    }

    #[test]
    fn completion_round_trips_through_openai_json() {
        let c = ChatCompletion {
            id: Some("a".into()),
            model: Some("m".into()),
            message: ChatMessage::assistant(None, vec![ToolCall::function("c", "f", "{}")]),
            finish_reason: Some("tool_calls".into()),
            usage: Some(Usage {
                cached_prompt_tokens: 0,
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
            }),
            raw: Value::Null,
        };
        let body = serde_json::to_vec(&c.to_openai_json(0)).unwrap();
        let back = parse_completion(&body).unwrap();
        assert_eq!(back.message, c.message);
        assert_eq!(back.usage, c.usage);
    }
}
