//! A run's status and its token usage: the words every layer shares.

use serde::{Deserialize, Serialize};

/// The five states of a run (spec §2.1.4). Serialized in SCREAMING_SNAKE_CASE, as on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    Running,
    WaitingForInput,
    Completed,
    Failed,
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

/// Token usage summed over a run's model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

impl TokenUsage {
    pub fn add(&mut self, other: TokenUsage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens += other.total_tokens;
    }
}
