//! One tool call as a job: what to run ([`ToolJob`]: a process, or an engine call such as an
//! MCP tool, see `tool::kind`), running it to completion ([`execute`]: a process in its own
//! group with output caps; an engine call through its kind; both within the call's time
//! limit, with the `io/tool_executions/` audit record) and the result the run records
//! ([`ToolExecution`]). The record and the full-output files have the run's sensitive answers
//! redacted; the observation keeps the real text (the journal writer redacts it).
//!
//! Must not: touch the journal (the run records results in reply order) or import actix
//! (the `ToolActor` in `runtime/` runs [`execute`] as one actor per call).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};
use tokio_util::sync::CancellationToken;

use crate::redact::SecretSet;
use crate::sandbox::RunSandbox;
use crate::tool::kind::{EngineCall, EngineEnding};
use crate::tool::observation::{cut_text, format_observation, is_success, ObservationLimits};
use crate::tool::process::{run_process, CaptureSpec, ProcessSpec, ProgramCache, Termination};
use crate::workspace::ToolRecordName;

/// Everything needed to run one call.
pub struct ToolJob {
    pub tool_name: String,
    /// What the call does: start a program, or ask the engine (an MCP server).
    pub work: JobWork,
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
}

/// What one job does.
pub enum JobWork {
    /// Start a program in its own process group.
    Process(ProcessWork),
    /// An answer computed in the engine (an MCP tool).
    Engine(EngineCall),
}

/// A program to start for one call.
pub struct ProcessWork {
    pub argv: Vec<String>,
    pub stdin: Option<String>,
    pub cwd: PathBuf,
    pub env: std::sync::Arc<Vec<(String, String)>>,
    /// Where the run's programs were found on its `PATH` (shared by the run's calls).
    pub programs: Option<ProgramCache>,
    /// The run's sandbox (`None`: the program runs with the user's rights).
    pub sandbox: Option<std::sync::Arc<RunSandbox>>,
}

impl ToolJob {
    /// What the `pre_tool_execution` hook is told the call runs: `argv` for a process,
    /// `target` (e.g. `{"server": .., "tool": ..}`) for an engine call.
    pub fn hook_field(&self) -> (&'static str, Json) {
        match &self.work {
            JobWork::Process(work) => ("argv", json!(work.argv)),
            JobWork::Engine(call) => ("target", call.tool.target()),
        }
    }

    /// One line for progress displays: the command line, or the engine call.
    pub fn summary(&self) -> String {
        let line = match &self.work {
            JobWork::Process(work) => shell_words::join(&work.argv),
            JobWork::Engine(call) => call.rendered.clone(),
        };
        if line.chars().count() > 120 {
            let cut: String = line.chars().take(117).collect();
            format!("{cut}...")
        } else {
            line
        }
    }
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
pub async fn execute(mut job: ToolJob, cancel: CancellationToken) -> ToolExecution {
    let work = std::mem::replace(
        &mut job.work,
        JobWork::Process(ProcessWork {
            argv: Vec::new(),
            stdin: None,
            cwd: PathBuf::new(),
            env: Default::default(),
            programs: None,
            sandbox: None,
        }),
    );
    match work {
        JobWork::Process(work) => execute_process(job, work, cancel).await,
        JobWork::Engine(call) => execute_engine(job, call, cancel).await,
    }
}

async fn execute_process(
    job: ToolJob,
    work: ProcessWork,
    cancel: CancellationToken,
) -> ToolExecution {
    let stdout_path = job.record.output_file("stdout");
    let stderr_path = job.record.output_file("stderr");
    let stdin_len = work.stdin.as_ref().map(|s| s.len());
    let spec = ProcessSpec {
        argv: work.argv.clone(),
        stdin: work.stdin.map(String::into_bytes),
        cwd: work.cwd.clone(),
        env: work.env,
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
        programs: work.programs,
        sandbox: work.sandbox.clone(),
    };
    let outcome = run_process(spec, cancel).await;
    let mut observation = format_observation(&outcome, &job.display_root);
    let success = is_success(&outcome);
    if let (false, Some(sandbox)) = (success, &work.sandbox) {
        let output = format!(
            "{}\n{}",
            outcome.stderr.text_lossy(),
            outcome.stdout.text_lossy()
        );
        if let Some(notes) = crate::sandbox::explain(sandbox, &work.cwd, &output) {
            observation.push_str("\n\n");
            observation.push_str(&notes);
        }
    }
    let (termination, signal) = match &outcome.termination {
        Termination::Exited(_) => ("exited", None),
        Termination::Signaled(s) => ("signaled", Some(*s)),
        Termination::TimedOut => ("timed_out", None),
        Termination::Cancelled => ("cancelled", None),
        Termination::SpawnFailed(_) => ("spawn_failed", None),
    };
    let record = json!({
        "tool_name": job.tool_name,
        "kind": "process",
        "argv": work.argv,
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
        "sandbox": work.sandbox.as_ref().map(|sandbox| sandbox.audit_json()),
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

/// An engine call (an MCP tool): answered by its kind within the job's time limit; a long
/// answer is cut for the model like a process's output, its whole text written redacted
/// beside the record (`<record>.output`).
async fn execute_engine(
    job: ToolJob,
    call: EngineCall,
    cancel: CancellationToken,
) -> ToolExecution {
    let started = Instant::now();
    let answer = call
        .tool
        .call(call.arguments.clone(), job.timeout, cancel)
        .await;
    let duration = started.elapsed();
    let limits = ObservationLimits {
        head_bytes: job.head_bytes,
        tail_bytes: job.tail_bytes,
    };
    let cut = answer.text.len() > limits.head_bytes.saturating_add(limits.tail_bytes);
    let full_file = cut.then(|| job.record.output_file("output"));
    let mut file_error = None;
    if let Some(path) = &full_file {
        let mut text = job.secrets.redact(&answer.text).into_owned().into_bytes();
        text.truncate(usize::try_from(job.file_cap).unwrap_or(usize::MAX));
        let target = path.clone();
        let written = crate::blocking::run_to_end(move || {
            crate::workspace::write_private_file(&target, &text)
        })
        .await;
        file_error = match written {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("{}: {e}", path.display())),
            Err(e) => Some(format!("{}: {e}", path.display())),
        };
    }
    let observation = cut_text(
        &answer.text,
        limits,
        full_file.as_deref().filter(|_| file_error.is_none()),
        &job.display_root,
    );
    let record = json!({
        "tool_name": job.tool_name,
        "kind": call.tool.kind(),
        "target": call.tool.target(),
        "arguments": call.arguments,
        "ending": answer.ending,
        "success": answer.success,
        "timed_out": answer.ending == EngineEnding::TimedOut,
        "timeout_ms": job.timeout.as_millis() as u64,
        "duration_ms": duration.as_millis() as u64,
        "output": {
            "bytes": answer.text.len(),
            "file": full_file.as_ref().filter(|_| file_error.is_none()).map(|p| p.to_string_lossy().into_owned()),
            "file_error": file_error,
        },
        "details": answer.details,
    });
    let (record_path, written) = job.record.write(&record, &job.secrets);
    let record_error = written.err().map(|e| e.to_string());
    ToolExecution {
        observation,
        success: answer.success,
        exit_code: None,
        duration,
        cancelled: answer.ending == EngineEnding::Cancelled,
        record_path,
        record_error,
    }
}
