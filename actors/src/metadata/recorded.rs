//! A finished run's RunResult rebuilt from its metadata.json, for a run whose process died
//! after its journal's end but before it could answer (`delta continue` reports it).
//!
//! Must not: read the journal (the janitor has already settled the record from it).

use std::collections::BTreeMap;
use std::path::Path;

use super::RunMetadata;
use crate::protocol::{RunMetrics, RunResult, RunResultMetadata, UsageReport};

impl RunMetadata {
    /// The RunResult this record describes (durations are unknown: zero).
    pub fn recorded_result(&self, run_dir: &Path) -> RunResult {
        let meta = self;
        let error = meta.error.as_ref().map(|e| e.to_info());
        // A record written before delta priced calls: its last start counts as its life.
        let last_cost = meta.cost.clone().unwrap_or_else(|| meta.cost_so_far());
        RunResult {
            schema_version: "2.0".into(),
            run_id: meta.run_id.clone(),
            status: meta.status,
            result: meta.result.clone(),
            empty_answer: meta.status == crate::protocol::RunStatus::Completed
                && meta.result.as_deref().is_some_and(|r| r.trim().is_empty()),
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
                    total_cost_usd: last_cost.total_usd(),
                    cost_note: last_cost.note(),
                    input_tokens: meta.usage.input_tokens,
                    output_tokens: meta.usage.output_tokens,
                    model_usage: BTreeMap::new(),
                    estimated: meta.usage.estimated,
                },
                cumulative_usage: meta.usage_so_far(),
                cumulative_cost_usd: meta.cost_so_far().total_usd(),
                tokens_saved: 0,
                compactions: 0,
            },
            metadata: RunResultMetadata {
                agent_name: meta.agent_name.clone(),
                workspace_path: meta.work_dir.clone(),
                run_dir: run_dir.to_string_lossy().into_owned(),
            },
        }
    }
}
