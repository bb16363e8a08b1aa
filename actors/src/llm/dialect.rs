//! How a request is written for one endpoint: the OpenAI-compatible servers people use
//! disagree on a few details, and a request one accepts another refuses. [`Dialect`] is what
//! the agent set (`llm.stream`, `llm.tool_call_content`, `llm.max_tokens_field`,
//! `llm.system_role`; unset = detect), [`WireOptions`] what one request is written with, and
//! [`Adjustment`] one change to it. What a refusal teaches is read in `refusal.rs`, what an
//! endpoint taught is kept in `learned.rs` (and across processes in `memory.rs`); the HTTP
//! backend applies it and the call is sent once more. docs/providers.md lists who needs what.
//!
//! Must not: do I/O or know about HTTP clients; every decision here is a pure function of
//! what the agent set and what was learned.

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

    /// The other form.
    pub(super) fn other(self) -> ToolCallContent {
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

    /// How far from the default a role is: a refusal moves the role forward only
    /// (`system` → `developer` → `user`), never back.
    pub(super) fn rank(self) -> u8 {
        match self {
            SystemRole::System => 0,
            SystemRole::Developer => 1,
            SystemRole::User => 2,
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

/// One change to how requests are written, read from a refusal (or from how the endpoint
/// streams).
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

    /// What the endpoint refused, for the one line that announces a lesson: "refused
    /// `content: null` on a tool-call turn".
    pub fn refused(self) -> String {
        match self {
            Adjustment::NoStream => "refused to stream".to_owned(),
            Adjustment::NoStreamUsage => "refused `stream_options`".to_owned(),
            Adjustment::ToolCallContent(form) => format!(
                "refused `content: {}` on a tool-call turn",
                match form.other() {
                    ToolCallContent::JsonNull => "null",
                    ToolCallContent::EmptyString => "\"\"",
                }
            ),
            Adjustment::MaxTokensField(field) => format!(
                "refused `{}`",
                match field {
                    MaxTokensField::MaxTokens => "max_completion_tokens",
                    MaxTokensField::MaxCompletionTokens => "max_tokens",
                }
            ),
            Adjustment::SystemRole(role) => format!(
                "refused the `{}` role",
                match role {
                    SystemRole::System | SystemRole::Developer => "system",
                    SystemRole::User => "developer",
                }
            ),
            Adjustment::NoSampling => "refused temperature, top_p and penalties".to_owned(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

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
    fn an_adjustment_names_what_was_refused_and_what_is_sent() {
        let content = Adjustment::ToolCallContent(ToolCallContent::EmptyString);
        assert_eq!(
            content.refused(),
            "refused `content: null` on a tool-call turn"
        );
        assert!(content
            .describe()
            .contains("llm.tool_call_content: empty_string"));
        assert_eq!(
            Adjustment::MaxTokensField(MaxTokensField::MaxCompletionTokens).refused(),
            "refused `max_tokens`"
        );
        assert_eq!(
            Adjustment::SystemRole(SystemRole::User).refused(),
            "refused the `developer` role"
        );
    }
}
