//! One tool call as a job: what to run ([`ToolJob`]), running it to completion ([`execute`]:
//! own process group, timeout, output caps, the `io/tool_executions/` audit record) and the
//! result the run records ([`ToolExecution`]). The record and the full-output files have the
//! run's sensitive answers redacted; the observation keeps the real text (the journal writer
//! redacts it).
//!
//! Must not: touch the journal (the run records results in reply order) or import actix
//! (the `ToolActor` in `runtime/` runs [`execute`] as one actor per call).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::redact::SecretSet;
use crate::tool::observation::{format_observation, is_success};
use crate::tool::process::{run_process, CaptureSpec, ProcessSpec, ProgramCache, Termination};
use crate::workspace::ToolRecordName;

/// Everything needed to run one call.
pub struct ToolJob {
    pub tool_name: String,
    pub argv: Vec<String>,
    pub stdin: Option<String>,
    pub cwd: PathBuf,
    pub env: std::sync::Arc<Vec<(String, String)>>,
    pub timeout: Duration,
    pub head_bytes: usize,
    pub tail_bytes: usize,
    pub file_cap: u64,
    /// `io/tool_executions/<ts>_<tool>`: the record is created when the call ends, full
    /// outputs beside it with their first byte.
    pub record: ToolRecordName,
    /// Paths in the observation are shown relative to this directory (the run dir).
    pub display_root: PathBuf,
    /// The run's sensitive answers, kept out of the record and the full-output files.
    pub secrets: SecretSet,
    /// Where the run's programs were found on its `PATH` (shared by the run's calls).
    pub programs: Option<ProgramCache>,
}

/// The call's result as the run records it.
#[derive(Debug, Clone)]
pub struct ToolExecution {
    pub observation: String,
    pub success: bool,
    pub exit_code: Option<i32>,
    pub duration: Duration,
    pub cancelled: bool,
    /// The audit record as created (its name as chosen if it could not be written).
    pub record_path: PathBuf,
    /// Why the audit record could not be written (path and OS error), if it could not.
    pub record_error: Option<String>,
}

/// Runs one job to completion (the `ToolActor` calls it; it needs no actor system).
pub async fn execute(job: ToolJob, cancel: CancellationToken) -> ToolExecution {
    let stdout_path = job.record.output_file("stdout");
    let stderr_path = job.record.output_file("stderr");
    let stdin_len = job.stdin.as_ref().map(|s| s.len());
    let spec = ProcessSpec {
        argv: job.argv.clone(),
        stdin: job.stdin.map(String::into_bytes),
        cwd: job.cwd,
        env: job.env,
        timeout: job.timeout,
        kill_grace: Duration::from_secs(2),
        capture: CaptureSpec {
            head_bytes: job.head_bytes,
            tail_bytes: job.tail_bytes,
            full_output: Some((stdout_path, stderr_path)),
            file_cap_bytes: job.file_cap,
            secrets: job.secrets.clone(),
        },
        spawner: crate::tool::spawner::shared(),
        programs: job.programs,
    };
    let outcome = run_process(spec, cancel).await;
    let observation = format_observation(&outcome, &job.display_root);
    let success = is_success(&outcome);
    let (termination, signal) = match &outcome.termination {
        Termination::Exited(_) => ("exited", None),
        Termination::Signaled(s) => ("signaled", Some(*s)),
        Termination::TimedOut => ("timed_out", None),
        Termination::Cancelled => ("cancelled", None),
        Termination::SpawnFailed(_) => ("spawn_failed", None),
    };
    let record = json!({
        "tool_name": job.tool_name,
        "argv": job.argv,
        "stdin_bytes": stdin_len,
        "exit_code": outcome.exit_code,
        "signal": signal,
        "termination": termination,
        "timed_out": matches!(outcome.termination, Termination::TimedOut),
        "timeout_ms": job.timeout.as_millis() as u64,
        "duration_ms": outcome.duration.as_millis() as u64,
        "stdout": {
            "bytes": outcome.stdout.total_bytes,
            "file": outcome.stdout.file.as_ref().map(|p| p.to_string_lossy().into_owned()),
            "file_truncated": outcome.stdout.file_truncated,
        },
        "stderr": {
            "bytes": outcome.stderr.total_bytes,
            "file": outcome.stderr.file.as_ref().map(|p| p.to_string_lossy().into_owned()),
            "file_truncated": outcome.stderr.file_truncated,
        },
        "spawn_error": match &outcome.termination { Termination::SpawnFailed(e) => Some(e.clone()), _ => None },
    });
    // The audit record is best effort: a full disk must not turn a tool result into a crash
    // (the run journals a WARNING about it instead).
    let (record_path, written) = job.record.write(&record, &job.secrets);
    let record_error = written.err().map(|e| e.to_string());
    ToolExecution {
        observation,
        success,
        exit_code: outcome.exit_code,
        duration: outcome.duration,
        cancelled: matches!(outcome.termination, Termination::Cancelled),
        record_path,
        record_error,
    }
}
