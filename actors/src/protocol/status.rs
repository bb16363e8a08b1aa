//! A run's status and its token usage: the words every layer shares.

use serde::{Deserialize, Serialize};

/// The five states of a run (spec §2.1.4). Serialized in SCREAMING_SNAKE_CASE, as on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    /// Being driven, or its process died without recording an end (the janitor turns a
    /// RUNNING run whose lock is free into INTERRUPTED).
    Running,
    /// Stopped at an `ask_human` call without a terminal to ask on; `delta continue` with the
    /// answer resumes it (the CLI exits 101).
    WaitingForInput,
    /// The model answered without a tool call: the run's final answer is recorded.
    Completed,
    /// Ended by an error (see the RunResult's error kind), including the iteration cap.
    Failed,
    /// Stopped from outside (cancel, Ctrl-C, a dead owner found by the janitor); it can be
    /// continued.
    Interrupted,
}

impl RunStatus {
    /// The on-disk spelling, e.g. `WAITING_FOR_INPUT`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "RUNNING",
            RunStatus::WaitingForInput => "WAITING_FOR_INPUT",
            RunStatus::Completed => "COMPLETED",
            RunStatus::Failed => "FAILED",
            RunStatus::Interrupted => "INTERRUPTED",
        }
    }

    /// Parses the on-disk spelling (case-insensitive).
    pub fn parse(s: &str) -> Option<RunStatus> {
        match s.to_ascii_uppercase().as_str() {
            "RUNNING" => Some(RunStatus::Running),
            "WAITING_FOR_INPUT" => Some(RunStatus::WaitingForInput),
            "COMPLETED" => Some(RunStatus::Completed),
            "FAILED" => Some(RunStatus::Failed),
            "INTERRUPTED" => Some(RunStatus::Interrupted),
            _ => None,
        }
    }

    /// A final status ends the driving of a run (everything but RUNNING).
    pub fn is_final(self) -> bool {
        !matches!(self, RunStatus::Running)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Token usage summed over a run's model calls, as the provider reported it. A call whose
/// reply carried no `usage` (a server that sends none in its streams) is counted from an
/// estimate made from the bytes sent and received, and the sum says so with `estimated`.
/// Sums saturate: a hostile or broken endpoint cannot wrap a counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Prompt tokens (the provider's `prompt_tokens`).
    pub input_tokens: u64,
    /// Completion tokens (the provider's `completion_tokens`).
    pub output_tokens: u64,
    /// The provider's `total_tokens` (not recomputed, so it may differ from the sum).
    pub total_tokens: u64,
    /// Some of these tokens are delta's estimate (about 4 bytes a token), not the
    /// provider's count: a call was answered without `usage`. Left out of JSON when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub estimated: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl TokenUsage {
    /// True when nothing was counted.
    pub fn is_zero(&self) -> bool {
        self.input_tokens == 0 && self.output_tokens == 0 && self.total_tokens == 0
    }

    /// Adds `other`'s counts to these, field by field, saturating at `u64::MAX`; the sum is
    /// estimated when either part is.
    pub fn add(&mut self, other: TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
        self.estimated |= other.estimated;
    }

    /// Prompt plus completion tokens, saturating.
    pub fn sum(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a usage of `u64::MAX` summed with another wrapped (to
    /// 18446744073709551614 in a release build; a panic in a debug one).
    #[test]
    fn usage_sums_saturate_instead_of_wrapping() {
        let huge = TokenUsage {
            input_tokens: u64::MAX,
            output_tokens: u64::MAX,
            total_tokens: u64::MAX,
            estimated: false,
        };
        let mut total = huge;
        total.add(huge);
        assert_eq!(total.input_tokens, u64::MAX);
        assert_eq!(total.output_tokens, u64::MAX);
        assert_eq!(total.total_tokens, u64::MAX);
        assert_eq!(total.sum(), u64::MAX);
        assert!(!total.estimated);
        total.add(TokenUsage {
            input_tokens: 1,
            estimated: true,
            ..TokenUsage::default()
        });
        assert!(total.estimated, "an estimated part makes the sum estimated");
    }

    #[test]
    fn the_estimated_mark_is_left_out_of_json_unless_set() {
        let exact = TokenUsage {
            input_tokens: 3,
            ..TokenUsage::default()
        };
        let text = serde_json::to_string(&exact).unwrap_or_default();
        assert!(!text.contains("estimated"), "{text}");
        let read: TokenUsage =
            serde_json::from_str(r#"{"input_tokens":1,"output_tokens":2,"total_tokens":3}"#)
                .unwrap_or_default();
        assert_eq!(read.sum(), 3);
        let estimated = TokenUsage {
            estimated: true,
            ..exact
        };
        let text = serde_json::to_string(&estimated).unwrap_or_default();
        assert!(text.contains(r#""estimated":true"#), "{text}");
    }
}
