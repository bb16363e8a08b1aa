//! What the engine answers for one run: the [`RunResult`] (schema 2.0, spec §2.6.6), for
//! every final status, with its error, pending question, metrics and where its files are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::status::{RunStatus, TokenUsage};

/// Why a run failed, was interrupted or could not be taken: the `type` of a RunResult's
/// `error`, of a journal `ERROR` event and of metadata.json's `error`. Serialised as the
/// snake_case strings on disk (`llm_error`, `setup_error`...); a kind written by another
/// version that this one does not know is kept as [`RunErrorKind::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RunErrorKind {
    /// The iteration cap was reached without a final answer.
    MaxIterations,
    /// The model call failed for good (after retries).
    LlmError,
    /// Every attempt of the model call ran past `llm.request_timeout` / `llm.idle_timeout`.
    LlmTimeout,
    /// The reply was cut at the output limit before an answer or a tool call.
    Truncated,
    /// A `context.yaml` source failed.
    ContextError,
    /// The journal could not be written.
    JournalError,
    /// The run ended, but its metadata.json could not be written.
    MetadataError,
    /// The run's actor died without answering.
    EnginePanic,
    /// The run was stopped (Ctrl-C, a cancel).
    Interrupted,
    /// The run's own time limit expired.
    Timeout,
    /// The run was refused: it exists already, is locked, cannot be continued as asked...
    SetupError,
    /// The run could not be taken because its files could not be written or read.
    SetupIoError,
    /// `ask_human` got no answer on the terminal (EOF, no terminal).
    HumanInputError,
    /// Where the run executed (a Slurm job...) ended without finishing it (node failure,
    /// `scancel`, preemption, time limit); retried like a failure. Read from files written
    /// before it had this name as `slurm_job_lost`.
    ExecutorLost,
    /// Where the run executed was stopped cleanly by someone other than the orchestration
    /// (`scancel`, preemption, time limit); retried like a failure. Formerly
    /// `slurm_job_stopped`.
    ExecutorStopped,
    /// The model's final answer was empty (no text, no tool call) and the agent says
    /// `empty_answer: fail`.
    EmptyAnswer,
    /// A spending cap (`--budget-usd`, a plan's `budget:`) would have been passed by the
    /// next model call: the run stopped INTERRUPTED before it, and continues later.
    BudgetExhausted,
    /// A kind this version does not know (read from a file written by another one).
    Other(String),
}

impl RunErrorKind {
    /// Every kind this version writes, for documentation and tests.
    pub const KNOWN: [RunErrorKind; 17] = [
        RunErrorKind::MaxIterations,
        RunErrorKind::LlmError,
        RunErrorKind::LlmTimeout,
        RunErrorKind::Truncated,
        RunErrorKind::ContextError,
        RunErrorKind::JournalError,
        RunErrorKind::MetadataError,
        RunErrorKind::EnginePanic,
        RunErrorKind::Interrupted,
        RunErrorKind::Timeout,
        RunErrorKind::SetupError,
        RunErrorKind::SetupIoError,
        RunErrorKind::HumanInputError,
        RunErrorKind::ExecutorLost,
        RunErrorKind::ExecutorStopped,
        RunErrorKind::EmptyAnswer,
        RunErrorKind::BudgetExhausted,
    ];

    /// The on-disk spelling.
    pub fn as_str(&self) -> &str {
        match self {
            RunErrorKind::MaxIterations => "max_iterations",
            RunErrorKind::LlmError => "llm_error",
            RunErrorKind::LlmTimeout => "llm_timeout",
            RunErrorKind::Truncated => "truncated",
            RunErrorKind::ContextError => "context_error",
            RunErrorKind::JournalError => "journal_error",
            RunErrorKind::MetadataError => "metadata_error",
            RunErrorKind::EnginePanic => "engine_panic",
            RunErrorKind::Interrupted => "interrupted",
            RunErrorKind::Timeout => "timeout",
            RunErrorKind::SetupError => "setup_error",
            RunErrorKind::SetupIoError => "setup_io_error",
            RunErrorKind::HumanInputError => "human_input_error",
            RunErrorKind::ExecutorLost => "executor_lost",
            RunErrorKind::ExecutorStopped => "executor_stopped",
            RunErrorKind::EmptyAnswer => "empty_answer",
            RunErrorKind::BudgetExhausted => "budget_exhausted",
            RunErrorKind::Other(kind) => kind,
        }
    }

    /// Parses the on-disk spelling (and the former names of renamed kinds); an unknown one
    /// is kept as [`RunErrorKind::Other`].
    pub fn parse(text: &str) -> RunErrorKind {
        match text {
            "slurm_job_lost" => return RunErrorKind::ExecutorLost,
            "slurm_job_stopped" => return RunErrorKind::ExecutorStopped,
            _ => {}
        }
        RunErrorKind::KNOWN
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .unwrap_or_else(|| RunErrorKind::Other(text.to_string()))
    }
}

/// Compares with the on-disk spelling: `kind == "llm_error"`.
impl PartialEq<str> for RunErrorKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for RunErrorKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for RunErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RunErrorKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunErrorKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(RunErrorKind::parse(&text))
    }
}

/// `error` of a RunResult (spec §2.6.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunErrorInfo {
    /// What kind of failure. A run whose final record could not be written keeps its status
    /// and carries [`RunErrorKind::MetadataError`] here (or, when it already has an error,
    /// that cause in `details`).
    #[serde(rename = "type")]
    pub kind: RunErrorKind,
    /// One line for a person: what failed, naming the file, key or endpoint involved.
    pub message: String,
    /// More context when there is some: the provider's reply, a second failure (e.g. the
    /// metadata write that failed after the run had already failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

impl RunErrorInfo {
    /// An error of `kind` with `message` and no details.
    pub fn new(kind: RunErrorKind, message: impl Into<String>) -> RunErrorInfo {
        RunErrorInfo {
            kind,
            message: message.into(),
            details: None,
        }
    }
}

/// A run's error as metadata.json records it: `{"type": "llm_error", "message": "..."}`.
/// Records written before this shape held one string, `"llm_error: ..."`; both are read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedError {
    /// The error's kind (`type` on disk).
    #[serde(rename = "type")]
    pub kind: RunErrorKind,
    /// The error's message, as in the RunResult.
    pub message: String,
}

impl RecordedError {
    /// The record of `error` (its details are in the journal's ERROR event).
    pub fn of(error: &RunErrorInfo) -> RecordedError {
        RecordedError {
            kind: error.kind.clone(),
            message: error.message.clone(),
        }
    }

    /// Reads the older `"kind: message"` form (a text without a kind is kind `error`).
    pub fn from_legacy(text: &str) -> RecordedError {
        let (kind, message) = text.split_once(": ").unwrap_or(("error", text));
        RecordedError {
            kind: RunErrorKind::parse(kind),
            message: message.to_string(),
        }
    }

    /// The error as a RunResult carries it.
    pub fn to_info(&self) -> RunErrorInfo {
        RunErrorInfo::new(self.kind.clone(), self.message.clone())
    }
}

/// `kind: message`, as summaries and listings show it.
impl std::fmt::Display for RecordedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl<'de> Deserialize<'de> for RecordedError {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            #[serde(rename = "type")]
            kind: RunErrorKind,
            #[serde(default)]
            message: String,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Legacy(String),
            Fields(Fields),
        }
        Ok(match Either::deserialize(deserializer)? {
            Either::Legacy(text) => RecordedError::from_legacy(&text),
            Either::Fields(f) => RecordedError {
                kind: f.kind,
                message: f.message,
            },
        })
    }
}

/// `interaction` of a RunResult: the pending ask_human question.
/// Present when the status is WAITING_FOR_INPUT; `delta continue --message` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionInfo {
    /// The question the model asked.
    pub prompt: String,
    /// `text`, `password` or `confirmation`, as the model asked.
    pub input_type: String,
    /// The answer will be kept out of every file and event (asked with `sensitive: true` or
    /// `input_type: password`).
    pub sensitive: bool,
}

/// `metrics.usage` of a RunResult: tokens of this start or continuation's model calls, as
/// the provider reported them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    /// Dollars of these tokens at agent.yaml's `llm.price` or delta's model catalogue;
    /// `null` when a call's model has no price (a partial sum would understate it: see
    /// `cost_note`), never a made-up 0.
    pub total_cost_usd: Option<f64>,
    /// Why `total_cost_usd` is null: "cost unknown (no price for model X: set
    /// llm.price)". Absent when the cost is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_note: Option<String>,
    /// Prompt tokens over every model.
    pub input_tokens: u64,
    /// Completion tokens over every model.
    pub output_tokens: u64,
    /// Per model: `{input_tokens, output_tokens, total_tokens}` (and `estimated: true`
    /// where some of them are).
    pub model_usage: BTreeMap<String, TokenUsage>,
    /// Some of these tokens are estimated from bytes: a reply came without `usage` (left out
    /// of JSON when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

/// `metrics` of a RunResult. Times are in milliseconds and cover this start or
/// continuation only ("this driving"), except `iterations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    /// The run's last iteration number, counted over its whole life (continuations
    /// included); 0 for a run that never started.
    pub iterations: u32,
    /// Wall time of this driving, from taking the run to its end.
    pub duration_ms: u64,
    /// Time the model spent answering (calls minus queueing and backoff), this driving only.
    #[serde(default)]
    pub model_time_ms: u64,
    /// Time waiting for the endpoint's limits and in retry backoff.
    #[serde(default)]
    pub queue_time_ms: u64,
    /// Wall time of the tool phases (parallel calls count once).
    #[serde(default)]
    pub tool_time_ms: u64,
    /// When this driving began (UTC, RFC 3339 with milliseconds).
    pub start_time: String,
    /// When it ended (same format).
    pub end_time: String,
    /// Token usage of this driving: every attempt of its model calls, failed ones too.
    pub usage: UsageReport,
    /// Token usage over the run's whole life: this driving plus every earlier start and
    /// continuation (a plan's retries continue the run, so they are in it). What the
    /// provider billed for the run, as far as it reported usage.
    #[serde(default)]
    pub cumulative_usage: TokenUsage,
    /// Dollars of `cumulative_usage` (the run's whole life), `null` when unknown (as
    /// `usage.total_cost_usd`).
    #[serde(default)]
    pub cumulative_cost_usd: Option<f64>,
    /// Prompt tokens this driving did not send because the context was compacted (an
    /// estimate: what each compaction took out, for every request after it). Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens_saved: u64,
    /// Compactions of the context in this driving. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub compactions: u32,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// `metadata` of a RunResult: which agent ran and where its files are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResultMetadata {
    /// `name` from the agent's `agent.yaml`.
    pub agent_name: String,
    /// The run's workspace (the request's `work_dir`).
    pub workspace_path: String,
    /// `<workspace>/.delta/<run_id>`: journal.jsonl, metadata.json, io/.
    pub run_dir: String,
}

/// The outcome of one run (RunResult schema 2.0, spec §2.6.6), printed by the CLI for every
/// final status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Always `"2.0"`.
    pub schema_version: String,
    /// The run's id (generated or given in the request).
    pub run_id: String,
    /// The final status (never RUNNING).
    pub status: RunStatus,
    /// The model's final answer, when COMPLETED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// True when the run COMPLETED with an empty (or blank) final answer: the model
    /// replied with no text and no tool call. A WARNING in the journal says so too; with
    /// agent.yaml `empty_answer: fail` the run fails instead. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub empty_answer: bool,
    /// Why the run failed or was interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunErrorInfo>,
    /// The pending question, when WAITING_FOR_INPUT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interaction: Option<InteractionInfo>,
    /// Iterations, times and token usage.
    pub metrics: RunMetrics,
    /// The agent and where the run's files are.
    pub metadata: RunResultMetadata,
}

impl RunResult {
    /// The documented exit code for this status: 0 COMPLETED, 1 FAILED, 101
    /// WAITING_FOR_INPUT, 130 INTERRUPTED.
    pub fn exit_code(&self) -> i32 {
        match self.status {
            RunStatus::Completed => 0,
            RunStatus::WaitingForInput => 101,
            RunStatus::Interrupted => 130,
            RunStatus::Failed | RunStatus::Running => 1,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_keep_their_on_disk_spelling_both_ways() {
        for kind in RunErrorKind::KNOWN {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(serde_json::from_str::<RunErrorKind>(&json).unwrap(), kind);
        }
        let foreign: RunErrorKind = serde_json::from_str("\"quota_exceeded\"").unwrap();
        assert_eq!(foreign, RunErrorKind::Other("quota_exceeded".into()));
        assert_eq!(
            serde_json::to_string(&foreign).unwrap(),
            "\"quota_exceeded\""
        );
    }

    #[test]
    fn executor_error_kinds_read_their_former_slurm_spellings() {
        // An error object as a run result or metadata.json written before the rename has it.
        let old =
            r#"{"type":"slurm_job_lost","message":"Slurm job 12 ended before the run started"}"#;
        let info: RunErrorInfo = serde_json::from_str(old).unwrap();
        assert_eq!(info.kind, RunErrorKind::ExecutorLost);
        assert!(serde_json::to_string(&info)
            .unwrap()
            .contains(r#""type":"executor_lost""#));
        let stopped: RunErrorKind = serde_json::from_str("\"slurm_job_stopped\"").unwrap();
        assert_eq!(stopped, RunErrorKind::ExecutorStopped);
    }

    #[test]
    fn a_recorded_error_is_written_as_type_and_message_and_read_in_both_forms() {
        let error = RecordedError {
            kind: RunErrorKind::LlmError,
            message: "model call failed: 500".into(),
        };
        let json = serde_json::to_value(&error).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "llm_error", "message": "model call failed: 500"})
        );
        assert_eq!(
            serde_json::from_value::<RecordedError>(json).unwrap(),
            error
        );
        let legacy: RecordedError =
            serde_json::from_str("\"llm_error: model call failed: 500\"").unwrap();
        assert_eq!(legacy, error);
        let bare: RecordedError = serde_json::from_str("\"something broke\"").unwrap();
        assert_eq!(bare.kind, RunErrorKind::Other("error".into()));
        assert_eq!(bare.message, "something broke");
        assert_eq!(error.to_string(), "llm_error: model call failed: 500");
    }
}
