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

/// Token usage summed over a run's model calls, as the provider reported it (a reply without
/// a `usage` object adds nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Prompt tokens (the provider's `prompt_tokens`).
    pub input_tokens: u64,
    /// Completion tokens (the provider's `completion_tokens`).
    pub output_tokens: u64,
    /// The provider's `total_tokens` (not recomputed, so it may differ from the sum).
    pub total_tokens: u64,
}

impl TokenUsage {
    /// True when nothing was counted.
    pub fn is_zero(&self) -> bool {
        *self == TokenUsage::default()
    }

    /// Adds `other`'s counts to these, field by field.
    pub fn add(&mut self, other: TokenUsage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens += other.total_tokens;
    }
}
