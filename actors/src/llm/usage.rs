//! What one model call cost, as a run counts it: the provider's `usage` when it sent a
//! plausible one, an estimate from the bytes sent and received when it sent none (a server
//! that puts no usage in its streams), and the provider's error when what it sent is absurd
//! (more tokens than any context window holds, or counts whose sum overflows): such a usage
//! is reported, not summed, and the estimate stands in for it.
//!
//! Must not: do I/O or sum anything (the run adds what this decides, saturating, in
//! [`crate::protocol::TokenUsage::add`]).

use super::types::{ChatCompletion, Usage};

/// The most tokens one call can plausibly report for its prompt, its reply or in all. The
/// largest context windows offered are around ten million tokens; a count ten times that is
/// not a count but a broken or hostile endpoint.
pub const MAX_PLAUSIBLE_TOKENS: u64 = 100_000_000;

/// Bytes per token of the estimate: about four for English text and JSON with the tokenizers
/// of the common models (OpenAI's rule of thumb).
pub const BYTES_PER_ESTIMATED_TOKEN: u64 = 4;

/// How a call's tokens are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallUsage {
    /// The provider's own count.
    Reported(Usage),
    /// The reply carried no usage: an estimate from bytes.
    Estimated(Usage),
    /// The provider's count is not believable (`reason` says why): the estimate is counted
    /// in its place, and the run records the provider's figure as its error.
    Absurd {
        /// What the provider sent.
        reported: Usage,
        /// What is counted instead.
        estimate: Usage,
        /// Why `reported` was refused, e.g. "prompt_tokens 18446744073709551615 is more
        /// than any context window holds".
        reason: String,
    },
}

impl CallUsage {
    /// The tokens to count, and whether they are an estimate.
    pub fn counted(&self) -> (Usage, bool) {
        match self {
            CallUsage::Reported(usage) => (*usage, false),
            CallUsage::Estimated(usage)
            | CallUsage::Absurd {
                estimate: usage, ..
            } => (*usage, true),
        }
    }
}

/// How `completion`'s tokens are counted, `request_bytes` being the size of the request as
/// sent (its JSON body).
pub fn call_usage(completion: &ChatCompletion, request_bytes: usize) -> CallUsage {
    let estimate = || estimate_usage(request_bytes, completion);
    match completion.usage {
        None => CallUsage::Estimated(estimate()),
        Some(reported) => match implausible(&reported) {
            None => CallUsage::Reported(reported),
            Some(reason) => CallUsage::Absurd {
                reported,
                estimate: estimate(),
                reason,
            },
        },
    }
}

/// Why `usage` cannot be a real count, or `None` when it can.
pub fn implausible(usage: &Usage) -> Option<String> {
    for (name, value) in [
        ("prompt_tokens", usage.prompt_tokens),
        ("completion_tokens", usage.completion_tokens),
        ("total_tokens", usage.total_tokens),
    ] {
        if value > MAX_PLAUSIBLE_TOKENS {
            return Some(format!(
                "{name} {value} is more than any context window holds (at most {MAX_PLAUSIBLE_TOKENS} are believed)"
            ));
        }
    }
    // Unreachable below the bound today; kept so that raising the bound cannot bring the
    // overflow back.
    if usage
        .prompt_tokens
        .checked_add(usage.completion_tokens)
        .is_none()
    {
        return Some(format!(
            "prompt_tokens {} plus completion_tokens {} overflows a counter",
            usage.prompt_tokens, usage.completion_tokens
        ));
    }
    None
}

/// An estimate of a call's tokens: the request's bytes, and the reply's text, reasoning and
/// tool calls, at [`BYTES_PER_ESTIMATED_TOKEN`] bytes a token (rounded up, so a call that
/// sent or received anything never counts 0). An empty reply counts one output token: the
/// model generated at least the token that ended it, and the provider bills it.
pub fn estimate_usage(request_bytes: usize, completion: &ChatCompletion) -> Usage {
    let message = &completion.message;
    let mut reply_bytes = message.content.as_deref().map_or(0, str::len);
    for call in message.tool_calls() {
        reply_bytes = reply_bytes
            .saturating_add(call.function.name.len())
            .saturating_add(call.function.arguments.len());
    }
    for key in ["reasoning_content", "reasoning"] {
        let reasoning = completion.raw["choices"][0]["message"][key].as_str();
        reply_bytes = reply_bytes.saturating_add(reasoning.map_or(0, str::len));
    }
    let prompt_tokens = tokens_in(request_bytes);
    let completion_tokens = tokens_in(reply_bytes).max(1);
    Usage {
        cached_prompt_tokens: 0,
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens.saturating_add(completion_tokens),
    }
}

fn tokens_in(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_ESTIMATED_TOKEN)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, ToolCall};

    fn reply(text: Option<&str>, calls: Vec<ToolCall>, usage: Option<Usage>) -> ChatCompletion {
        ChatCompletion {
            id: None,
            model: None,
            message: ChatMessage::assistant(text.map(str::to_owned), calls),
            finish_reason: Some("stop".into()),
            usage,
            raw: serde_json::Value::Null,
        }
    }

    fn usage(prompt: u64, completion: u64, total: u64) -> Usage {
        Usage {
            cached_prompt_tokens: 0,
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: total,
        }
    }

    #[test]
    fn a_plausible_usage_is_counted_as_reported() {
        let completion = reply(Some("hi"), vec![], Some(usage(12, 3, 15)));
        assert_eq!(
            call_usage(&completion, 400),
            CallUsage::Reported(usage(12, 3, 15))
        );
        assert_eq!(
            call_usage(&completion, 400).counted(),
            (usage(12, 3, 15), false)
        );
    }

    /// Regression: a stream without usage (llama-cpp-python) was counted as 0 tokens.
    #[test]
    fn a_reply_without_usage_is_estimated_from_bytes_and_never_zero() {
        let text = reply(Some("Hello there, friend"), vec![], None);
        let (counted, estimated) = call_usage(&text, 401).counted();
        assert!(estimated);
        assert_eq!(
            counted.prompt_tokens, 101,
            "401 bytes at 4 a token, rounded up"
        );
        assert_eq!(counted.completion_tokens, 5, "19 bytes");
        assert_eq!(counted.total_tokens, 106);
        let call = reply(
            None,
            vec![ToolCall::function(
                "c",
                "print_message",
                r#"{"message":"hello"}"#,
            )],
            None,
        );
        let (counted, _) = call_usage(&call, 1).counted();
        assert_eq!(counted.prompt_tokens, 1);
        assert_eq!(counted.completion_tokens, 8, "13 + 19 bytes of the call");
    }

    /// Regression: the hello-world run against llama-cpp-python recorded `output_tokens: 0`
    /// when the model answered with nothing (its stream carries no usage): a reply, even an
    /// empty one, ended with a generated token.
    #[test]
    fn an_empty_reply_without_usage_counts_one_output_token() {
        let empty = reply(Some(""), vec![], None);
        let (counted, estimated) = call_usage(&empty, 8).counted();
        assert!(estimated);
        assert_eq!(counted.completion_tokens, 1);
        assert_eq!(counted.total_tokens, 3);
        let nothing = reply(None, vec![], None);
        assert_eq!(call_usage(&nothing, 8).counted().0.completion_tokens, 1);
    }

    /// Regression: a usage of u64::MAX was summed (and wrapped).
    #[test]
    fn an_absurd_usage_is_the_providers_error_and_the_estimate_counts() {
        for (bad, phrase) in [
            (usage(u64::MAX, 1, 2), "prompt_tokens 18446744073709551615"),
            (usage(1, u64::MAX, 2), "completion_tokens"),
            (usage(1, 1, MAX_PLAUSIBLE_TOKENS + 1), "total_tokens"),
        ] {
            let completion = reply(Some("ok"), vec![], Some(bad));
            let CallUsage::Absurd {
                reported,
                estimate,
                reason,
            } = call_usage(&completion, 8)
            else {
                panic!("{bad:?} was believed");
            };
            assert_eq!(reported, bad);
            assert_eq!(estimate, usage(2, 1, 3));
            assert!(reason.contains(phrase), "{reason}");
            assert_eq!(call_usage(&completion, 8).counted(), (usage(2, 1, 3), true));
        }
        assert!(implausible(&usage(MAX_PLAUSIBLE_TOKENS, MAX_PLAUSIBLE_TOKENS, 0)).is_none());
    }
}
