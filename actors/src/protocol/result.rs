//! What the engine answers for one run: the [`RunResult`] (schema 2.0, spec §2.6.6), for
//! every final status, with its error, pending question, metrics and where its files are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::status::{RunStatus, TokenUsage};

/// `error` of a RunResult (spec §2.6.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunErrorInfo {
    /// `max_iterations`, `llm_error`, `llm_timeout`, `truncated`, `context_error`,
    /// `journal_error`, `metadata_error`, `engine_panic`, `interrupted`, `timeout`,
    /// `setup_error` (refused), `setup_io_error` (its files could not be written).
    /// A run whose final record could not be written keeps its status and carries
    /// `metadata_error` here (or, when it already has an error, in `details`).
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

/// `interaction` of a RunResult: the pending ask_human question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionInfo {
    pub prompt: String,
    pub input_type: String,
    pub sensitive: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    pub total_cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Per model: `{input_tokens, output_tokens, total_tokens}`.
    pub model_usage: BTreeMap<String, TokenUsage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    pub iterations: u32,
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
    pub start_time: String,
    pub end_time: String,
    pub usage: UsageReport,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResultMetadata {
    pub agent_name: String,
    pub workspace_path: String,
    pub run_dir: String,
}

/// The outcome of one run (RunResult schema 2.0, spec §2.6.6), printed by the CLI for every
/// final status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema_version: String,
    pub run_id: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunErrorInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interaction: Option<InteractionInfo>,
    pub metrics: RunMetrics,
    pub metadata: RunResultMetadata,
}

impl RunResult {
    /// The RunResult a finished run recorded, rebuilt from its metadata (for a run whose
    /// process died after its journal's end but before it could answer).
    pub fn from_metadata(
        meta: &crate::metadata::RunMetadata,
        run_dir: &std::path::Path,
    ) -> RunResult {
        let error = meta.error.as_ref().map(|e| {
            let (kind, message) = e.split_once(": ").unwrap_or(("error", e.as_str()));
            RunErrorInfo {
                kind: kind.to_string(),
                message: message.to_string(),
                details: None,
            }
        });
        RunResult {
            schema_version: "2.0".into(),
            run_id: meta.run_id.clone(),
            status: meta.status,
            result: meta.result.clone(),
            error,
            interaction: None,
            metrics: RunMetrics {
                iterations: meta.iterations,
                duration_ms: 0,
                model_time_ms: 0,
                queue_time_ms: 0,
                tool_time_ms: 0,
                start_time: meta.created_at.clone(),
                end_time: meta
                    .end_time
                    .clone()
                    .unwrap_or_else(|| meta.updated_at.clone()),
                usage: UsageReport {
                    total_cost_usd: 0.0,
                    input_tokens: meta.usage.input_tokens,
                    output_tokens: meta.usage.output_tokens,
                    model_usage: BTreeMap::new(),
                },
            },
            metadata: RunResultMetadata {
                agent_name: meta.agent_name.clone(),
                workspace_path: meta.work_dir.clone(),
                run_dir: run_dir.to_string_lossy().into_owned(),
            },
        }
    }

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
