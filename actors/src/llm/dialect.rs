//! How a request is written for one endpoint: the OpenAI-compatible servers people use
//! disagree on a few details, and a request one accepts another refuses. [`Dialect`] is what
//! the agent set (`llm.stream`, `llm.tool_call_content`, `llm.max_tokens_field`,
//! `llm.system_role`; unset = detect), [`WireOptions`] what one request is written with, and
//! [`Learned`] what an endpoint's refusals taught the process (kept for the endpoint's life).
//! [`adjustment_for`] reads a refusal and says what to change; the HTTP backend applies it
//! and the call is sent once more. docs/providers.md lists who needs what.
//!
//! Must not: do I/O or know about HTTP clients; every decision here is a pure function of
//! what the agent set, what was learned and what the endpoint said.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// `llm.tool_call_content`: how an assistant turn that only carries tool calls writes its
/// `content`. OpenAI documents `null`; llama-cpp-python, LM Studio and some gateways refuse
/// `null` and take only `""`; AWS Bedrock's OpenAI-compatible endpoint refuses `""`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ToolCallContent {
    /// `"content": null` (OpenAI's form, the default).
    #[default]
    JsonNull,
    /// `"content": ""`.
    EmptyString,
}

impl ToolCallContent {
    /// The setting's spelling in agent.yaml.
    pub fn name(self) -> &'static str {
        match self {
            ToolCallContent::JsonNull => "json_null",
            ToolCallContent::EmptyString => "empty_string",
        }
    }

    /// Reads the agent.yaml spelling.
    pub fn parse(text: &str) -> Option<ToolCallContent> {
        match text {
            "json_null" => Some(ToolCallContent::JsonNull),
            "empty_string" => Some(ToolCallContent::EmptyString),
            _ => None,
        }
    }

    fn other(self) -> ToolCallContent {
        match self {
            ToolCallContent::JsonNull => ToolCallContent::EmptyString,
            ToolCallContent::EmptyString => ToolCallContent::JsonNull,
        }
    }
}

/// `llm.max_tokens_field`: the name `llm.max_tokens` is sent under. OpenAI's reasoning models
/// (o1, o3, o4-mini, gpt-5) refuse `max_tokens` and take `max_completion_tokens`; many other
/// servers know only `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MaxTokensField {
    /// `max_tokens` (the default for every model but OpenAI's reasoning models).
    #[default]
    MaxTokens,
    /// `max_completion_tokens`.
    MaxCompletionTokens,
}

impl MaxTokensField {
    /// The field's (and the setting's) spelling.
    pub fn name(self) -> &'static str {
        match self {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        }
    }

    /// Reads the agent.yaml spelling.
    pub fn parse(text: &str) -> Option<MaxTokensField> {
        match text {
            "max_tokens" => Some(MaxTokensField::MaxTokens),
            "max_completion_tokens" => Some(MaxTokensField::MaxCompletionTokens),
            _ => None,
        }
    }
}

/// `llm.system_role`: the role system messages are sent with. OpenAI's o1 models refuse
/// `system` (`developer` plays its part); o1-mini and o1-preview take neither, only `user`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SystemRole {
    /// `system` (the default).
    #[default]
    System,
    /// `developer`.
    Developer,
    /// `user`: the system prompt as the first user message.
    User,
}

impl SystemRole {
    /// The role's (and the setting's) spelling.
    pub fn name(self) -> &'static str {
        match self {
            SystemRole::System => "system",
            SystemRole::Developer => "developer",
            SystemRole::User => "user",
        }
    }

    /// Reads the agent.yaml spelling.
    pub fn parse(text: &str) -> Option<SystemRole> {
        match text {
            "system" => Some(SystemRole::System),
            "developer" => Some(SystemRole::Developer),
            "user" => Some(SystemRole::User),
            _ => None,
        }
    }
}

/// What an agent set for its endpoint; `None` everywhere means "detect" (the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dialect {
    /// `llm.stream` / `DELTA_LLM_STREAM`: `Some(true)` always stream, `Some(false)` never,
    /// `None` (auto) stream unless the endpoint showed it cannot.
    pub stream: Option<bool>,
    /// `llm.tool_call_content`.
    pub tool_call_content: Option<ToolCallContent>,
    /// `llm.max_tokens_field`.
    pub max_tokens_field: Option<MaxTokensField>,
    /// `llm.system_role`.
    pub system_role: Option<SystemRole>,
}

impl Dialect {
    /// `true` when nothing is set (every choice is detected).
    pub fn is_auto(&self) -> bool {
        *self == Dialect::default()
    }
}

/// How one request is written. The default is the plain OpenAI form without streaming: what
/// the scripted model in process and every request before this module were sent as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WireOptions {
    /// `stream: true`.
    pub stream: bool,
    /// With `stream`, also `stream_options: {include_usage: true}` (the usage in a last
    /// chunk; without it OpenAI sends no usage at all when streaming).
    pub stream_usage: bool,
    /// The content of tool-call-only assistant turns.
    pub tool_call_content: ToolCallContent,
    /// The name `max_tokens` is sent under.
    pub max_tokens_field: MaxTokensField,
    /// The role of system messages.
    pub system_role: SystemRole,
    /// Send `temperature`, `top_p` and the penalties (reasoning models refuse them).
    pub sampling: bool,
}

impl Default for WireOptions {
    fn default() -> Self {
        WireOptions {
            stream: false,
            stream_usage: false,
            tool_call_content: ToolCallContent::JsonNull,
            max_tokens_field: MaxTokensField::MaxTokens,
            system_role: SystemRole::System,
            sampling: true,
        }
    }
}

/// OpenAI's reasoning models by name: `o1`, `o3`, `o4-mini`... and `gpt-5` (but not
/// `gpt-5-chat`, which samples like gpt-4o). A name with a provider prefix (`openai/o3` on
/// OpenRouter) is left alone: such routers translate `max_tokens` themselves.
pub fn is_openai_reasoning_model(model: &str) -> bool {
    if model.contains('/') {
        return false;
    }
    let model = model.to_ascii_lowercase();
    let o_series = model.len() >= 2
        && model.starts_with('o')
        && model.as_bytes()[1].is_ascii_digit()
        && model[1..]
            .split(['-', '.'])
            .next()
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()));
    o_series || (model.starts_with("gpt-5") && !model.starts_with("gpt-5-chat"))
}

/// What an endpoint's refusals taught: each lesson is learned at most once per endpoint and
/// kept for the life of the process.
#[derive(Debug, Default)]
pub struct Learned {
    state: Mutex<LearnedState>,
}

#[derive(Debug, Default, Clone)]
struct LearnedState {
    no_stream: bool,
    no_stream_usage: bool,
    tool_call_content: Option<ToolCallContent>,
    max_tokens_field: Option<MaxTokensField>,
    system_role: Option<SystemRole>,
    /// Models that refused sampling parameters.
    no_sampling: HashSet<String>,
}

impl Learned {
    /// Nothing learned yet.
    pub fn new() -> Learned {
        Learned::default()
    }

    /// The options for a request to `model` on an endpoint configured with `dialect`:
    /// what the agent set wins, then what was learned, then what the model's name implies.
    pub fn options(&self, dialect: &Dialect, model: &str) -> WireOptions {
        let learned = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let reasoning = is_openai_reasoning_model(model);
        let stream = dialect.stream.unwrap_or(!learned.no_stream);
        WireOptions {
            stream,
            stream_usage: stream && !learned.no_stream_usage,
            tool_call_content: dialect
                .tool_call_content
                .or(learned.tool_call_content)
                .unwrap_or_default(),
            max_tokens_field: dialect
                .max_tokens_field
                .or(learned.max_tokens_field)
                .unwrap_or(if reasoning {
                    MaxTokensField::MaxCompletionTokens
                } else {
                    MaxTokensField::MaxTokens
                }),
            system_role: dialect
                .system_role
                .or(learned.system_role)
                .unwrap_or_default(),
            sampling: !reasoning && !learned.no_sampling.contains(model),
        }
    }

    /// Records `adjustment` for the endpoint (and `model`, for what is per model). Returns
    /// `false` when it was already known: the endpoint refused the adjusted form too, and
    /// sending again would not help.
    pub fn learn(&self, adjustment: Adjustment, model: &str) -> bool {
        let mut learned = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match adjustment {
            Adjustment::NoStream => !std::mem::replace(&mut learned.no_stream, true),
            Adjustment::NoStreamUsage => !std::mem::replace(&mut learned.no_stream_usage, true),
            Adjustment::ToolCallContent(form) => {
                learned.tool_call_content.replace(form) != Some(form)
            }
            Adjustment::MaxTokensField(field) => {
                learned.max_tokens_field.replace(field) != Some(field)
            }
            Adjustment::SystemRole(role) => learned.system_role.replace(role) != Some(role),
            Adjustment::NoSampling => learned.no_sampling.insert(model.to_owned()),
        }
    }
}

/// One change to how requests are written, read from a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// Stop streaming to this endpoint.
    NoStream,
    /// Stream without `stream_options`.
    NoStreamUsage,
    /// Write tool-call-only assistant turns' content this way.
    ToolCallContent(ToolCallContent),
    /// Send the reply cap under this name.
    MaxTokensField(MaxTokensField),
    /// Send system messages with this role.
    SystemRole(SystemRole),
    /// Stop sending sampling parameters for this model.
    NoSampling,
}

impl Adjustment {
    /// What is sent differently, to follow "it is sent again ".
    pub fn describe(self) -> String {
        match self {
            Adjustment::NoStream => "without streaming (llm.stream: false)".to_owned(),
            Adjustment::NoStreamUsage => "streamed without stream_options".to_owned(),
            Adjustment::ToolCallContent(form) => format!(
                "with tool-call turns' content as {} (llm.tool_call_content: {})",
                match form {
                    ToolCallContent::JsonNull => "null",
                    ToolCallContent::EmptyString => "\"\"",
                },
                form.name()
            ),
            Adjustment::MaxTokensField(field) => {
                format!(
                    "with the reply cap as `{}` (llm.max_tokens_field: {})",
                    field.name(),
                    field.name()
                )
            }
            Adjustment::SystemRole(role) => format!(
                "with system messages as role `{}` (llm.system_role: {})",
                role.name(),
                role.name()
            ),
            Adjustment::NoSampling => {
                "without temperature, top_p and penalties (the model refuses them)".to_owned()
            }
        }
    }
}

/// What a request that was refused looked like, beside the options it was written with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SentShape {
    /// It had an assistant turn with tool calls and no text.
    pub tool_call_turn: bool,
    /// It had a system message.
    pub system_message: bool,
    /// It had `max_tokens` set.
    pub max_tokens: bool,
    /// It had a sampling parameter set.
    pub sampling: bool,
}

/// Reads a refusal (`status`, the provider's `message`) of a request sent with `sent` and
/// shaped like `shape`: the one change that answers it, or `None` when the message points at
/// nothing this module can change. Recognised by the field the message names (providers word
/// their refusals differently, but they all name the field):
/// - `stream_options` → stream without it; `stream` (4xx) → do not stream;
/// - `content`, when the request had a tool-call-only turn → the other content form;
/// - `max_tokens` / `max_completion_tokens` → the other name;
/// - the `system` / `developer` role → `developer`, then `user`;
/// - `temperature` / `top_p` unsupported → drop sampling parameters for the model.
pub fn adjustment_for(
    status: u16,
    message: &str,
    sent: &WireOptions,
    shape: &SentShape,
) -> Option<Adjustment> {
    if !(400..600).contains(&status) || status == 429 || status == 408 {
        return None;
    }
    let text = message.to_ascii_lowercase();
    let refuses = |word: &str| text.contains(word);
    if sent.stream_usage && refuses("stream_options") {
        return Some(Adjustment::NoStreamUsage);
    }
    if sent.stream && status < 500 && mentions_field(&text, "stream") {
        return Some(Adjustment::NoStream);
    }
    if shape.max_tokens {
        match sent.max_tokens_field {
            MaxTokensField::MaxTokens
                if refuses("max_completion_tokens")
                    || (mentions_field(&text, "max_tokens") && unsupported(&text)) =>
            {
                return Some(Adjustment::MaxTokensField(
                    MaxTokensField::MaxCompletionTokens,
                ))
            }
            MaxTokensField::MaxCompletionTokens
                if refuses("max_completion_tokens") && unsupported(&text) =>
            {
                return Some(Adjustment::MaxTokensField(MaxTokensField::MaxTokens))
            }
            _ => {}
        }
    }
    if shape.sampling
        && sent.sampling
        && (refuses("temperature") || refuses("top_p") || refuses("penalty"))
        && unsupported(&text)
    {
        return Some(Adjustment::NoSampling);
    }
    if shape.system_message
        && (refuses("'system'") || refuses("\"system\"") || refuses("role"))
        && unsupported(&text)
    {
        match sent.system_role {
            SystemRole::System if refuses("system") => {
                return Some(Adjustment::SystemRole(SystemRole::Developer))
            }
            SystemRole::Developer if refuses("developer") => {
                return Some(Adjustment::SystemRole(SystemRole::User))
            }
            _ => {}
        }
    }
    if shape.tool_call_turn && mentions_field(&text, "content") {
        return Some(Adjustment::ToolCallContent(sent.tool_call_content.other()));
    }
    None
}

/// `field` named as a word (so `content` is not found in `content_filter`, nor `stream` in
/// `upstream`).
fn mentions_field(text: &str, field: &str) -> bool {
    text.match_indices(field).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + field.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

/// The message says a parameter or value is not accepted.
fn unsupported(text: &str) -> bool {
    [
        "unsupported",
        "not supported",
        "does not support",
        "not allowed",
        "unrecognized",
        "unknown",
        "extra inputs",
        "only the default",
        "invalid",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// A 5xx whose message is a request-validation error: the server checked the request and
/// refused it, but answered with a server error status (llama-cpp-python answers every
/// validation failure with HTTP 500 and pydantic's text). Recognised by pydantic's and
/// FastAPI's wording (`validation error`, `Input should be`, `Field required`) or a JSON
/// schema's (`is not valid under`, `is a required property`). Retrying sends the same
/// request and gets the same answer, so such an error is final.
pub fn is_validation_error(status: u16, message: &str) -> bool {
    if !(500..600).contains(&status) {
        return false;
    }
    let text = message.to_ascii_lowercase();
    [
        "validation error",
        "input should be",
        "field required",
        "is not valid under",
        "is a required property",
        "extra inputs are not permitted",
    ]
    .iter()
    .any(|w| text.contains(w))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const LLAMA_CPP_PYTHON_CONTENT: &str = "7 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}";

    fn tool_turn() -> SentShape {
        SentShape {
            tool_call_turn: true,
            ..SentShape::default()
        }
    }

    #[test]
    fn reasoning_models_are_known_by_name() {
        for m in [
            "o1",
            "o1-mini",
            "o3",
            "o3-mini-2025-01-31",
            "o4-mini",
            "gpt-5",
            "gpt-5-mini",
            "GPT-5-nano",
        ] {
            assert!(is_openai_reasoning_model(m), "{m}");
        }
        for m in [
            "gpt-4o",
            "gpt-5-chat-latest",
            "openai/o3",
            "omni",
            "o",
            "ollama",
            "gpt-4.1",
            "o1x",
        ] {
            assert!(!is_openai_reasoning_model(m), "{m}");
        }
    }

    #[test]
    fn a_reasoning_model_gets_max_completion_tokens_and_no_sampling() {
        let learned = Learned::new();
        let o = learned.options(&Dialect::default(), "o3-mini");
        assert_eq!(o.max_tokens_field, MaxTokensField::MaxCompletionTokens);
        assert!(!o.sampling);
        assert!(o.stream && o.stream_usage, "auto streams");
        let o = learned.options(&Dialect::default(), "gpt-4o");
        assert_eq!(o.max_tokens_field, MaxTokensField::MaxTokens);
        assert!(o.sampling);
    }

    #[test]
    fn what_the_agent_set_wins_over_what_was_learned() {
        let learned = Learned::new();
        assert!(learned.learn(
            Adjustment::ToolCallContent(ToolCallContent::EmptyString),
            "m"
        ));
        assert!(learned.learn(Adjustment::NoStream, "m"));
        let auto = learned.options(&Dialect::default(), "m");
        assert_eq!(auto.tool_call_content, ToolCallContent::EmptyString);
        assert!(!auto.stream && !auto.stream_usage);
        let set = Dialect {
            stream: Some(true),
            tool_call_content: Some(ToolCallContent::JsonNull),
            ..Dialect::default()
        };
        let o = learned.options(&set, "m");
        assert!(o.stream);
        assert_eq!(o.tool_call_content, ToolCallContent::JsonNull);
    }

    #[test]
    fn each_lesson_is_learned_once() {
        let learned = Learned::new();
        let fix = Adjustment::ToolCallContent(ToolCallContent::EmptyString);
        assert!(learned.learn(fix, "m"));
        assert!(
            !learned.learn(fix, "m"),
            "a second refusal of the same form is final"
        );
        assert!(learned.learn(Adjustment::NoSampling, "a"));
        assert!(
            learned.learn(Adjustment::NoSampling, "b"),
            "sampling is per model"
        );
        assert!(learned.options(&Dialect::default(), "gpt-4o").sampling);
        assert!(!learned.options(&Dialect::default(), "a").sampling);
    }

    /// The 500 llama-cpp-python answers to `"content": null` on a tool-call turn.
    #[test]
    fn a_refused_null_content_switches_to_the_empty_string_and_back() {
        let sent = WireOptions::default();
        assert_eq!(
            adjustment_for(500, LLAMA_CPP_PYTHON_CONTENT, &sent, &tool_turn()),
            Some(Adjustment::ToolCallContent(ToolCallContent::EmptyString))
        );
        let sent_empty = WireOptions {
            tool_call_content: ToolCallContent::EmptyString,
            ..sent
        };
        assert_eq!(
            adjustment_for(
                400,
                "messages.2.content: must not be empty",
                &sent_empty,
                &tool_turn()
            ),
            Some(Adjustment::ToolCallContent(ToolCallContent::JsonNull))
        );
        assert_eq!(
            adjustment_for(500, LLAMA_CPP_PYTHON_CONTENT, &sent, &SentShape::default()),
            None,
            "without a tool-call turn, content is not the problem delta can change"
        );
        assert_eq!(
            adjustment_for(400, "content_filter triggered", &sent, &tool_turn()),
            None
        );
    }

    #[test]
    fn openai_reasoning_model_refusals_are_read() {
        let sent = WireOptions::default();
        let shape = SentShape {
            max_tokens: true,
            sampling: true,
            system_message: true,
            ..SentShape::default()
        };
        assert_eq!(
            adjustment_for(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", &sent, &shape),
            Some(Adjustment::MaxTokensField(MaxTokensField::MaxCompletionTokens))
        );
        assert_eq!(
            adjustment_for(400, "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is supported.", &sent, &shape),
            Some(Adjustment::NoSampling)
        );
        assert_eq!(
            adjustment_for(
                400,
                "Unsupported value: 'messages[0].role' does not support 'system' with this model.",
                &sent,
                &shape
            ),
            Some(Adjustment::SystemRole(SystemRole::Developer))
        );
        let sent_completion = WireOptions {
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            ..sent
        };
        assert_eq!(
            adjustment_for(
                400,
                "Unrecognized request argument supplied: max_completion_tokens",
                &sent_completion,
                &shape
            ),
            Some(Adjustment::MaxTokensField(MaxTokensField::MaxTokens))
        );
    }

    #[test]
    fn stream_refusals_are_read() {
        let sent = WireOptions {
            stream: true,
            stream_usage: true,
            ..WireOptions::default()
        };
        let shape = SentShape::default();
        assert_eq!(
            adjustment_for(
                400,
                "Unrecognized request argument supplied: stream_options",
                &sent,
                &shape
            ),
            Some(Adjustment::NoStreamUsage)
        );
        assert_eq!(
            adjustment_for(400, "stream is not supported", &sent, &shape),
            Some(Adjustment::NoStream)
        );
        assert_eq!(
            adjustment_for(502, "upstream stream broke", &sent, &shape),
            None,
            "a server error mentioning a stream is not a refusal of streaming"
        );
        assert_eq!(adjustment_for(429, "stream_options", &sent, &shape), None);
    }

    #[test]
    fn validation_errors_behind_a_server_error_are_recognised() {
        assert!(is_validation_error(500, LLAMA_CPP_PYTHON_CONTENT));
        assert!(is_validation_error(
            500,
            "1 validation error: Field required"
        ));
        assert!(!is_validation_error(500, "CUDA out of memory"));
        assert!(
            !is_validation_error(400, LLAMA_CPP_PYTHON_CONTENT),
            "4xx are final anyway"
        );
    }
}
