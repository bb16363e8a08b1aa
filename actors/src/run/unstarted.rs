//! The RunResults of runs the loop never drove to an end: one that could not be taken (its
//! files were never created, or it was refused), one cancelled while still queued, and one
//! whose actor died without answering (a panic: best effort, its files are marked FAILED).
//!
//! Must not: take a run's lock or touch a run that another process may drive, except to mark
//! a panicked run of this process FAILED.

use crate::clock::now_rfc3339;
use crate::journal::{Event, Journal};
use crate::metadata::{read_metadata, write_metadata};
use crate::protocol::{
    RecordedError, RunErrorInfo, RunErrorKind, RunMetrics, RunResult, RunResultMetadata, RunStatus,
};
use crate::request::RunRequest;
use crate::workspace::RunPaths;

/// A RunResult for a run that could not even start (its files were never created).
pub fn setup_failure(request: &RunRequest, run_id: &str, message: &str) -> RunResult {
    let now = now_rfc3339();
    let paths = RunPaths::new(&request.work_dir, run_id);
    RunResult {
        schema_version: "2.0".into(),
        run_id: run_id.to_string(),
        status: RunStatus::Failed,
        result: None,
        empty_answer: false,
        error: Some(RunErrorInfo::new(RunErrorKind::SetupError, message)),
        interaction: None,
        metrics: RunMetrics {
            iterations: 0,
            duration_ms: 0,
            model_time_ms: 0,
            queue_time_ms: 0,
            tool_time_ms: 0,
            start_time: now.clone(),
            end_time: now,
            // Nothing was sent, so nothing was spent.
            usage: crate::protocol::UsageReport {
                total_cost_usd: Some(0.0),
                ..Default::default()
            },
            cumulative_usage: Default::default(),
            cumulative_cost_usd: Some(0.0),
            tokens_saved: 0,
            compactions: 0,
        },
        metadata: RunResultMetadata {
            agent_name: request.agent.name.clone(),
            workspace_path: request.work_dir.to_string_lossy().into_owned(),
            run_dir: paths.run_dir.to_string_lossy().into_owned(),
        },
    }
}

/// Records the failure of a run whose actor died without answering (a panic). Best effort:
/// metadata goes FAILED with the reason, the journal gets an ERROR and an ENGINE_END.
pub fn record_panic_failure(request: &RunRequest, run_id: &str) -> RunResult {
    let message = "the run's actor stopped unexpectedly (engine panic); see engine.log".to_string();
    let paths = RunPaths::new(&request.work_dir, run_id);
    if let Ok((mut journal, _)) = Journal::open(&paths.run_dir, Default::default()) {
        let _ = journal.append(Event::Error {
            error_type: RunErrorKind::EnginePanic.to_string(),
            error_message: message.clone(),
            error_details: None,
        });
        let _ = journal.append(Event::EngineEnd {
            run_id: run_id.to_string(),
            status: RunStatus::Failed,
            final_iteration: 0,
            result: None,
            error: Some(message.clone()),
        });
    }
    if let Ok(mut meta) = read_metadata(&paths.run_dir) {
        meta.status = RunStatus::Failed;
        meta.error = Some(RecordedError {
            kind: RunErrorKind::EnginePanic,
            message: message.clone(),
        });
        meta.end_time = Some(now_rfc3339());
        let _ = write_metadata(&paths.run_dir, &meta);
    }
    let mut result = setup_failure(request, run_id, &message);
    if let Some(e) = result.error.as_mut() {
        e.kind = RunErrorKind::EnginePanic;
    }
    result
}

/// The RunResult of a queued run cancelled before it started (nothing of it was written):
/// INTERRUPTED, whether one run or every run was cancelled.
pub fn unstarted_interrupted(request: &RunRequest, run_id: &str, reason: &str) -> RunResult {
    let mut result = setup_failure(request, run_id, reason);
    result.status = RunStatus::Interrupted;
    if let Some(e) = result.error.as_mut() {
        e.kind = RunErrorKind::Interrupted;
    }
    result
}
