//! Reading an endpoint's refusal: does it name a detail of the request that delta can write
//! another way, and which? Only a refusal that names the field as the problem teaches
//! anything: Azure's content filter ("...the prompt triggering Azure OpenAI's content
//! management policy") is not about `content`, a `max_tokens` that is too large is not a
//! refusal of the name `max_tokens`, and a message that mentions a stream in passing is not a
//! refusal of streaming. Recognised by the provider's structured `param` and `code` when it
//! sends them (OpenAI, Azure), else by the field quoted or as a path (`'content'`,
//! `messages.2.content`, `` `stream` ``) beside words that refuse the parameter itself.
//!
//! Must not: do I/O, or decide whether a lesson may be learned (`learned.rs` keeps each
//! lesson to once per field); every decision here is a pure function of the refusal and of
//! the request it answers.

use super::dialect::{Adjustment, MaxTokensField, SystemRole, WireOptions};

/// What an endpoint answered when it refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal<'a> {
    /// The HTTP status.
    pub status: u16,
    /// The provider's message (its `error.message`, else the body's start).
    pub message: &'a str,
    /// The provider's `error.param`: the field it refuses, when it says (OpenAI, Azure).
    pub param: Option<&'a str>,
    /// The provider's `error.code` (`unsupported_parameter`, `content_filter`...).
    pub code: Option<&'a str>,
}

impl<'a> Refusal<'a> {
    /// A refusal with only a status and a message.
    pub fn text(status: u16, message: &'a str) -> Refusal<'a> {
        Refusal {
            status,
            message,
            param: None,
            code: None,
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

/// Reads a refusal of a request sent with `sent` and shaped like `shape`: the one change
/// that answers it, or `None` when it names nothing delta can write another way:
/// - `stream_options` refused → stream without it; `stream` refused (4xx) → do not stream;
/// - `max_tokens` / `max_completion_tokens` refused as a parameter → the other name;
/// - `temperature` / `top_p` / a penalty refused as a parameter → no sampling parameters;
/// - the `system` / `developer` role refused → `developer`, then `user`;
/// - `content` named as the problem, when the request had a tool-call-only turn → the other
///   form.
///
/// Never from a 408 or 429, a content filter, a value that is out of range (too large, too
/// long, beyond the context), or a 5xx that is not a request-validation error.
pub fn adjustment_for(
    refusal: &Refusal<'_>,
    sent: &WireOptions,
    shape: &SentShape,
) -> Option<Adjustment> {
    let status = refusal.status;
    if !(400..600).contains(&status) || status == 429 || status == 408 {
        return None;
    }
    if status >= 500 && !is_validation_error(status, refusal.message) {
        return None;
    }
    let text = refusal.message.to_ascii_lowercase();
    let param = refusal.param.map(str::to_ascii_lowercase);
    if is_about_something_else(&text, refusal.code) {
        return None;
    }
    let names = |field: &str| names_field(&text, param.as_deref(), field);
    let refused = refuses_parameter(&text, refusal.code);
    if sent.stream_usage && names("stream_options") && refused {
        return Some(Adjustment::NoStreamUsage);
    }
    if sent.stream && status < 500 && refused && (names("stream") || names_streaming(&text)) {
        return Some(Adjustment::NoStream);
    }
    if shape.max_tokens {
        match sent.max_tokens_field {
            MaxTokensField::MaxTokens
                if (names("max_tokens") && refused)
                    || points_to("max_completion_tokens", &text) =>
            {
                return Some(Adjustment::MaxTokensField(
                    MaxTokensField::MaxCompletionTokens,
                ))
            }
            MaxTokensField::MaxCompletionTokens
                if (names("max_completion_tokens") && refused)
                    || points_to("max_tokens", &text) =>
            {
                return Some(Adjustment::MaxTokensField(MaxTokensField::MaxTokens))
            }
            _ => {}
        }
    }
    let sampling_named = [
        "temperature",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
    ]
    .iter()
    .any(|field| names(field) || mentions_field(&text, field));
    if shape.sampling && sent.sampling && sampling_named && refused {
        return Some(Adjustment::NoSampling);
    }
    // Before the role: pydantic's list of errors for a refused content names every message
    // type it tried, roles included.
    if shape.tool_call_turn && names("content") {
        return Some(Adjustment::ToolCallContent(sent.tool_call_content.other()));
    }
    if shape.system_message && refused {
        let role_named =
            mentions_field(&text, "role") || param.as_deref().is_some_and(|p| p.ends_with("role"));
        match sent.system_role {
            SystemRole::System if quoted(&text, "system") && role_named => {
                return Some(Adjustment::SystemRole(SystemRole::Developer))
            }
            SystemRole::Developer if quoted(&text, "developer") && role_named => {
                return Some(Adjustment::SystemRole(SystemRole::User))
            }
            _ => {}
        }
    }
    None
}

/// `field` is named as the problem: it is the provider's `param` (or its last path
/// component: `messages.[1].content`), or the message quotes it (`'field'`, `"field"`,
/// `` `field` ``) or writes it as a path component (`messages.2.content`,
/// `messages[1].content`, pydantic's `('body', 'messages', 1, ..., 'content')`). A field
/// whose name is snake_case (`max_tokens`, `stream_options`) cannot be prose: named as a
/// word is enough.
fn names_field(text: &str, param: Option<&str>, field: &str) -> bool {
    if let Some(param) = param {
        let last = param.rsplit(['.', '[', ']']).find(|p| !p.is_empty());
        if param == field || last == Some(field) {
            return true;
        }
    }
    if field.contains('_') && mentions_field(text, field) {
        return true;
    }
    quoted(text, field)
        || text.match_indices(field).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + field.len()..].chars().next();
            let word_after = after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            !word_after && matches!(before, Some('.' | '['))
        })
}

/// `field` in quotes of any kind.
fn quoted(text: &str, field: &str) -> bool {
    ['\'', '"', '`']
        .iter()
        .any(|q| text.contains(&format!("{q}{field}{q}")))
}

/// Streaming as the subject of a refusal, in the words servers use: "Stream request is not
/// supported", "Cannot use tools with stream", "streaming is not supported", "stream is not
/// supported".
fn names_streaming(text: &str) -> bool {
    text.starts_with("stream ")
        || [
            "streaming",
            "stream request",
            "with stream",
            "stream mode",
            "stream is not",
            "stream not ",
            "stream=true",
            "stream: true",
        ]
        .iter()
        .any(|w| text.contains(w))
}

/// "Use 'max_completion_tokens' instead": the message names the field to send instead.
fn points_to(field: &str, text: &str) -> bool {
    ["'", "\"", "`", ""]
        .iter()
        .any(|q| text.contains(&format!("{q}{field}{q} instead")))
}

/// `field` named as a word (so `content` is not found in `content_filter`, nor `stream` in
/// `upstream`).
pub(crate) fn mentions_field(text: &str, field: &str) -> bool {
    text.match_indices(field).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + field.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

/// The message refuses a parameter itself (not its value): unsupported, unknown, not
/// allowed, or the provider's code says so.
fn refuses_parameter(text: &str, code: Option<&str>) -> bool {
    if code.is_some_and(|c| {
        matches!(
            c,
            "unsupported_parameter" | "unsupported_value" | "unknown_parameter" | "extra_forbidden"
        )
    }) {
        return true;
    }
    [
        "unsupported",
        "not supported",
        "does not support",
        "not allowed",
        "not permitted",
        "unrecognized",
        "unknown parameter",
        "unknown field",
        "unknown argument",
        "unexpected keyword",
        "extra inputs",
        "only the default",
        "cannot use",
        "can not be used",
        "cannot be used",
    ]
    .iter()
    .any(|w| text.contains(w))
}

/// The refusal is about something no way of writing the request changes: a content filter
/// or safety system, or a value out of range (too large, too long, beyond the context
/// window).
fn is_about_something_else(text: &str, code: Option<&str>) -> bool {
    if let Some(code) = code.map(str::to_ascii_lowercase) {
        let value_code = [
            "content_filter",
            "content_policy",
            "context_length",
            "invalid_value",
            "above_max",
            "below_min",
            "max_length",
            "too_large",
            "too_long",
            "quota",
            "rate_limit",
        ]
        .iter()
        .any(|w| code.contains(w));
        if value_code {
            return true;
        }
    }
    [
        // Content filters and safety systems.
        "content_filter",
        "content filter",
        "content management policy",
        "content policy",
        "responsibleaipolicyviolation",
        "safety system",
        "flagged",
        // Values out of range.
        "too large",
        "too long",
        "too many",
        "maximum context length",
        "context length",
        "context window",
        "exceed",
        "below minimum",
        "above maximum",
        "expected a value",
        "must be less",
        "must be greater",
        "must be at most",
        "must be at least",
        "less than or equal",
        "greater than or equal",
        "out of range",
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
    use crate::llm::dialect::ToolCallContent;

    /// llama-cpp-python's answer to `"content": null` on a tool-call turn (HTTP 500).
    const LLAMA_CPP_PYTHON_CONTENT: &str = "7 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}";
    /// Azure OpenAI's content filter (HTTP 400, `param: prompt`, `code: content_filter`).
    const AZURE_CONTENT_FILTER: &str = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766";

    fn tool_turn() -> SentShape {
        SentShape {
            tool_call_turn: true,
            ..SentShape::default()
        }
    }

    fn everything() -> SentShape {
        SentShape {
            tool_call_turn: true,
            system_message: true,
            max_tokens: true,
            sampling: true,
        }
    }

    fn streamed() -> WireOptions {
        WireOptions {
            stream: true,
            stream_usage: true,
            ..WireOptions::default()
        }
    }

    fn read(
        status: u16,
        message: &str,
        sent: &WireOptions,
        shape: &SentShape,
    ) -> Option<Adjustment> {
        adjustment_for(&Refusal::text(status, message), sent, shape)
    }

    #[test]
    fn a_refused_null_content_switches_to_the_empty_string_and_back() {
        let sent = WireOptions::default();
        assert_eq!(
            read(500, LLAMA_CPP_PYTHON_CONTENT, &sent, &tool_turn()),
            Some(Adjustment::ToolCallContent(ToolCallContent::EmptyString))
        );
        let sent_empty = WireOptions {
            tool_call_content: ToolCallContent::EmptyString,
            ..sent
        };
        assert_eq!(
            read(
                400,
                "messages.2.content: must not be empty",
                &sent_empty,
                &tool_turn()
            ),
            Some(Adjustment::ToolCallContent(ToolCallContent::JsonNull))
        );
        assert_eq!(
            read(
                400,
                "'content' field must be a string or an array of objects",
                &sent,
                &tool_turn()
            ),
            Some(Adjustment::ToolCallContent(ToolCallContent::EmptyString)),
            "LM Studio"
        );
        assert_eq!(
            read(500, LLAMA_CPP_PYTHON_CONTENT, &sent, &SentShape::default()),
            None,
            "without a tool-call turn, content is not the problem delta can change"
        );
    }

    /// Regression: Azure's content filter names no field, but says "content" (management
    /// policy): delta flipped `content` between null and "" on every attempt.
    #[test]
    fn a_content_filter_teaches_nothing() {
        let azure = Refusal {
            status: 400,
            message: AZURE_CONTENT_FILTER,
            param: Some("prompt"),
            code: Some("content_filter"),
        };
        for sent in [WireOptions::default(), streamed()] {
            assert_eq!(adjustment_for(&azure, &sent, &everything()), None);
            assert_eq!(
                read(400, AZURE_CONTENT_FILTER, &sent, &everything()),
                None,
                "the words alone are not a refusal of `content` either"
            );
        }
        assert_eq!(
            read(
                400,
                "content_filter triggered",
                &WireOptions::default(),
                &tool_turn()
            ),
            None
        );
        assert_eq!(
            read(
                400,
                "Invalid 'messages[1].content': string too long. Expected a string with maximum length 10485760, but got a string with length 20000000 instead.",
                &WireOptions::default(),
                &tool_turn()
            ),
            None,
            "a content that is too long is not written another way"
        );
    }

    /// Regression: a `max_tokens` value error switched every later request to
    /// `max_completion_tokens`.
    #[test]
    fn a_max_tokens_value_error_is_not_a_refusal_of_the_name() {
        let sent = WireOptions::default();
        let shape = everything();
        let openai = Refusal {
            status: 400,
            message: "max_tokens is too large: 20480. This model supports at most 16384 completion tokens, whereas you provided 20480.",
            param: Some("max_tokens"),
            code: Some("invalid_value"),
        };
        assert_eq!(adjustment_for(&openai, &sent, &shape), None);
        for message in [
            openai.message,
            // vLLM names both fields.
            "'max_tokens' or 'max_completion_tokens' is too large: 64000. This model's maximum context length is 64001 tokens and your request has 24235 input tokens (64000 > 64001 - 24235). None",
            "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead.",
        ] {
            assert_eq!(read(400, message, &sent, &shape), None, "{message}");
        }
        let sent_completion = WireOptions {
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            ..sent
        };
        assert_eq!(
            read(
                400,
                "The parameter `max_completion_tokens` specified in the request are not valid: integer above maximum value, expected a value <= 12288, but got 32000 instead.",
                &sent_completion,
                &shape
            ),
            None
        );
    }

    /// Regression: any 400 containing "stream" turned streaming off.
    #[test]
    fn a_refusal_that_mentions_a_stream_in_passing_does_not_stop_streaming() {
        let sent = streamed();
        for message in [
            "Invalid request: the upstream provider closed the stream unexpectedly",
            "Error parsing tool output: unexpected end of stream in arguments",
            "Stream options can only be defined when `stream=True`.",
        ] {
            let got = read(400, message, &sent, &SentShape::default());
            assert!(
                !matches!(got, Some(Adjustment::NoStream)),
                "{message}: {got:?}"
            );
        }
        assert_eq!(
            read(
                400,
                "The upstream stream was reset",
                &sent,
                &SentShape::default()
            ),
            None
        );
    }

    #[test]
    fn real_refusals_of_streaming_are_read() {
        let sent = streamed();
        let shape = SentShape::default();
        for message in [
            "stream is not supported",
            "Unsupported value: 'stream' does not support true with this model. Only the default (false) value is supported.",
            "Stream request is not supported currently.",
            "Cannot use tools with stream",
        ] {
            assert_eq!(
                read(400, message, &sent, &shape),
                Some(Adjustment::NoStream),
                "{message}"
            );
        }
        assert_eq!(
            read(
                400,
                "Unrecognized request argument supplied: stream_options",
                &sent,
                &shape
            ),
            Some(Adjustment::NoStreamUsage)
        );
        assert_eq!(
            read(502, "upstream stream broke", &sent, &shape),
            None,
            "a server error mentioning a stream is not a refusal of streaming"
        );
        assert_eq!(read(429, "stream_options", &sent, &shape), None);
        let structured = Refusal {
            status: 400,
            message: "Unsupported value with this model.",
            param: Some("stream"),
            code: Some("unsupported_value"),
        };
        assert_eq!(
            adjustment_for(&structured, &sent, &shape),
            Some(Adjustment::NoStream)
        );
    }

    #[test]
    fn openai_reasoning_model_refusals_are_read() {
        let sent = WireOptions::default();
        let shape = everything();
        assert_eq!(
            read(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", &sent, &shape),
            Some(Adjustment::MaxTokensField(MaxTokensField::MaxCompletionTokens))
        );
        assert_eq!(
            read(400, "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is supported.", &sent, &shape),
            Some(Adjustment::NoSampling)
        );
        assert_eq!(
            read(
                400,
                "Unsupported value: 'messages[0].role' does not support 'system' with this model.",
                &sent,
                &shape
            ),
            Some(Adjustment::SystemRole(SystemRole::Developer))
        );
        let sent_developer = WireOptions {
            system_role: SystemRole::Developer,
            ..sent
        };
        assert_eq!(
            read(
                400,
                "Unsupported value: 'messages[0].role' does not support 'developer' with this model.",
                &sent_developer,
                &shape
            ),
            Some(Adjustment::SystemRole(SystemRole::User))
        );
        let sent_completion = WireOptions {
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            ..sent
        };
        assert_eq!(
            read(
                400,
                "Unrecognized request argument supplied: max_completion_tokens",
                &sent_completion,
                &shape
            ),
            Some(Adjustment::MaxTokensField(MaxTokensField::MaxTokens))
        );
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
        assert_eq!(
            read(
                500,
                "internal error while reading 'content'",
                &WireOptions::default(),
                &tool_turn()
            ),
            None,
            "a 5xx that is not a validation error teaches nothing"
        );
    }
}
