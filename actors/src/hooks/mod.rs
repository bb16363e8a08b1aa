//! Running one lifecycle hook (spec §2.7.3): argv expansion, environment, payload on stdin,
//! timeout with a process-group kill, the `io/hooks/<hook>_<ts>.json` record, and an outcome
//! whose status and reason say exactly what happened (never "Unknown error" — reference §19
//! item 3). [`control`] reads what a hook printed (skip a tool, override a model request).
//!
//! Must not: import actix, write the journal (the RunActor journals `HOOK_EXECUTED` from the
//! outcome), decide what a hook's failure means for the run (it never stops a run), or put a
//! sensitive answer in a file in clear text (the record and the `TOOL_RESULT` file are
//! redacted; the hook's stdin and environment carry the real values, as a tool's do).

pub mod control;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::{expand_path_vars, HookName, HookSpec};
use crate::clock::now_rfc3339;
use crate::redact::SecretSet;
use crate::tool::process::{run_process, CaptureSpec, ProcessSpec, Termination};
use crate::workspace::{hook_record_path, write_private_file, write_redacted_json_file, RunPaths};

pub use control::{apply_request_override, parse_tool_control, ToolControl, OVERRIDABLE_FIELDS};

/// Timeout of a hook that sets no `timeout_ms`.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// SIGTERM → SIGKILL delay for a hook's process group (the original engine used 1 s).
pub const HOOK_KILL_GRACE: Duration = Duration::from_secs(1);
/// Bytes of each stream kept at the head; a request override must fit in it.
pub const HOOK_OUTPUT_HEAD_BYTES: usize = 4 * 1024 * 1024;
/// Bytes kept at the tail of each stream beyond the head (for the record).
pub const HOOK_OUTPUT_TAIL_BYTES: usize = 64 * 1024;

/// Everything a hook invocation needs besides its spec and payload.
#[derive(Debug, Clone)]
pub struct HookContext {
    pub paths: RunPaths,
    pub run_id: String,
    pub agent_home: PathBuf,
    /// The workspace: the hook's cwd and `${CWD}`.
    pub work_dir: PathBuf,
    /// The run's complete tool environment (API key already removed).
    pub env: Arc<Vec<(String, String)>>,
    /// `ITERATION_COUNT`: the run's current iteration (0 before the first).
    pub iteration: u32,
    /// `TOOL_NAME` (tool hooks).
    pub tool_name: Option<String>,
    /// Written to a file whose path is `TOOL_RESULT` (post_tool_execution).
    pub tool_result: Option<String>,
    /// `ERROR_MESSAGE` (on_error).
    pub error_message: Option<String>,
    /// The timeout when the spec sets none.
    pub default_timeout: Duration,
    /// An upper bound on the timeout whatever the spec says (on_run_end of a stopping run).
    pub max_timeout: Option<Duration>,
    /// Sensitive answers, replaced by their markers in every file the hook run writes.
    pub secrets: SecretSet,
}

impl HookContext {
    /// A context with no hook-specific variables, the default timeout and nothing to redact.
    pub fn new(
        paths: RunPaths,
        run_id: &str,
        agent_home: &Path,
        work_dir: &Path,
        env: Arc<Vec<(String, String)>>,
    ) -> HookContext {
        HookContext {
            paths,
            run_id: run_id.to_string(),
            agent_home: agent_home.to_path_buf(),
            work_dir: work_dir.to_path_buf(),
            env,
            iteration: 0,
            tool_name: None,
            tool_result: None,
            error_message: None,
            default_timeout: DEFAULT_HOOK_TIMEOUT,
            max_timeout: None,
            secrets: SecretSet::default(),
        }
    }

    fn timeout_for(&self, spec: &HookSpec) -> Duration {
        let wanted = spec
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.default_timeout);
        match self.max_timeout {
            Some(cap) => wanted.min(cap),
            None => wanted,
        }
    }
}

/// How a hook invocation ended, as journaled in `HOOK_EXECUTED.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStatus {
    /// Exit code 0.
    Success,
    /// Non-zero exit, death by a signal, or the program could not be started.
    Failed,
    /// The timeout expired; the group was killed.
    TimedOut,
    /// The run was stopped while the hook ran; the group was killed.
    Cancelled,
    /// Not started: the run was already stopping.
    Skipped,
}

impl HookStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HookStatus::Success => "SUCCESS",
            HookStatus::Failed => "FAILED",
            HookStatus::TimedOut => "TIMED_OUT",
            HookStatus::Cancelled => "CANCELLED",
            HookStatus::Skipped => "SKIPPED",
        }
    }
}

/// What one invocation did. `reason` is set for every status but SUCCESS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutcome {
    pub name: HookName,
    pub status: HookStatus,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    /// Full stdout when it fit in [`HOOK_OUTPUT_HEAD_BYTES`] (see `stdout_complete`).
    pub stdout: String,
    pub stdout_complete: bool,
    pub stderr: String,
    pub duration: Duration,
    /// `io/hooks/<file>.json`, relative to the run directory.
    pub io_path_ref: String,
    /// Set when the record could not be written (the outcome is still valid).
    pub record_error: Option<String>,
}

impl HookOutcome {
    pub fn succeeded(&self) -> bool {
        self.status == HookStatus::Success
    }
}

/// Runs `spec` for the hook `name`: argv with `${AGENT_HOME}`/`${CWD}` expanded, cwd = the
/// workspace, env = the run's tool env plus the hook variables, `payload` as JSON on stdin
/// (then closed). Never fails: every problem is a status with a reason. The record is written
/// before returning.
pub async fn run_hook(
    name: HookName,
    spec: &HookSpec,
    payload: &Value,
    ctx: &HookContext,
    cancel: CancellationToken,
) -> HookOutcome {
    let argv: Vec<String> = spec
        .command
        .iter()
        .map(|word| expand_path_vars(word, &ctx.agent_home, &ctx.work_dir))
        .collect();
    let record_path = hook_record_path(&ctx.paths, name.as_str());
    let io_path_ref = record_path
        .file_name()
        .map(|n| format!("io/hooks/{}", n.to_string_lossy()))
        .unwrap_or_else(|| "io/hooks/".to_string());
    let tool_result_path = record_path.with_extension("tool_result.txt");
    let mut added = hook_variables(name, ctx);
    let mut tool_result_error = None;
    if let Some(result) = &ctx.tool_result {
        match write_private_file(&tool_result_path, ctx.secrets.redact(result).as_bytes()) {
            Ok(()) => added.push((
                "TOOL_RESULT".to_string(),
                tool_result_path.to_string_lossy().into_owned(),
            )),
            Err(e) => {
                tool_result_error = Some(format!(
                    "cannot write the TOOL_RESULT file {}: {e}",
                    tool_result_path.display()
                ))
            }
        }
    }
    let mut env: Vec<(String, String)> = ctx
        .env
        .iter()
        .filter(|(k, _)| !added.iter().any(|(a, _)| a == k))
        .cloned()
        .collect();
    env.extend(added.iter().cloned());

    let timeout = ctx.timeout_for(spec);
    let stdin = serde_json::to_vec(payload).unwrap_or_else(|_| b"null".to_vec());
    let process = ProcessSpec {
        argv: argv.clone(),
        stdin: Some(stdin),
        cwd: ctx.work_dir.clone(),
        env: env.into(),
        timeout,
        kill_grace: HOOK_KILL_GRACE,
        capture: CaptureSpec {
            head_bytes: HOOK_OUTPUT_HEAD_BYTES,
            tail_bytes: HOOK_OUTPUT_TAIL_BYTES,
            full_output: None,
            ..CaptureSpec::default()
        },
        spawner: crate::tool::spawner::shared(),
        programs: None,
        // Hooks are the user's own programs: they run unconfined (docs/sandbox.md).
        sandbox: None,
    };
    let started_at = now_rfc3339();
    let ran = run_process(process, cancel).await;
    let stdout_complete = !ran.stdout.is_cut();
    let stdout = ran.stdout.text_lossy();
    let stderr = ran.stderr.text_lossy();
    let (status, mut reason) = judge(&ran.termination, ran.pid, &stderr, timeout, &argv);
    if let Some(problem) = tool_result_error {
        reason = Some(match reason {
            Some(r) => format!("{r}; {problem}"),
            None => problem,
        });
    }
    let record = json!({
        "hook_name": name.as_str(),
        "command": argv,
        "cwd": ctx.work_dir,
        "started_at": started_at,
        "duration_ms": ran.duration.as_millis() as u64,
        "timeout_ms": timeout.as_millis() as u64,
        "status": status.as_str(),
        "reason": reason,
        "exit_code": ran.exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": !stdout_complete,
        "variables": added.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
    });
    let record_error = write_redacted_json_file(&record_path, &record, &ctx.secrets)
        .err()
        .map(|e| e.to_string());
    HookOutcome {
        name,
        status,
        reason,
        exit_code: ran.exit_code,
        stdout,
        stdout_complete,
        stderr,
        duration: ran.duration,
        io_path_ref,
        record_error,
    }
}

/// The variables a hook gets on top of the run's tool environment.
fn hook_variables(name: HookName, ctx: &HookContext) -> Vec<(String, String)> {
    let mut vars = vec![
        (
            "RUN_DIR".to_string(),
            ctx.paths.run_dir.to_string_lossy().into_owned(),
        ),
        (
            "JOURNAL_PATH".to_string(),
            ctx.paths.journal.to_string_lossy().into_owned(),
        ),
        ("ITERATION_COUNT".to_string(), ctx.iteration.to_string()),
        ("DELTA_RUN_ID".to_string(), ctx.run_id.clone()),
        ("DELTA_HOOK".to_string(), name.as_str().to_string()),
    ];
    if let Some(tool) = &ctx.tool_name {
        vars.push(("TOOL_NAME".to_string(), tool.clone()));
    }
    if let Some(message) = &ctx.error_message {
        vars.push(("ERROR_MESSAGE".to_string(), message.clone()));
    }
    vars
}

/// Status and reason from how the process ended. The reason always names the cause.
fn judge(
    termination: &Termination,
    pid: Option<u32>,
    stderr: &str,
    timeout: Duration,
    argv: &[String],
) -> (HookStatus, Option<String>) {
    match termination {
        Termination::Exited(0) => (HookStatus::Success, None),
        Termination::Exited(code) => {
            let first = stderr
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(|l| format!(": {}", l.chars().take(300).collect::<String>()))
                .unwrap_or_else(|| " (stderr was empty)".to_string());
            (
                HookStatus::Failed,
                Some(format!("exited with code {code}{first}")),
            )
        }
        Termination::Signaled(signal) => (
            HookStatus::Failed,
            Some(format!("killed by signal {signal}")),
        ),
        Termination::TimedOut => (
            HookStatus::TimedOut,
            Some(format!(
                "timed out after {} ms; its process group was killed (raise timeout_ms in hooks.yaml if it needs longer)",
                timeout.as_millis()
            )),
        ),
        Termination::Cancelled if pid.is_none() => (
            HookStatus::Skipped,
            Some("not started: the run was already stopping".to_string()),
        ),
        Termination::Cancelled => (
            HookStatus::Cancelled,
            Some("the run was stopped while the hook ran; its process group was killed".to_string()),
        ),
        Termination::SpawnFailed(why) => (
            HookStatus::Failed,
            Some(format!(
                "could not start `{}`: {why}",
                argv.first().map(String::as_str).unwrap_or("")
            )),
        ),
    }
}

#[cfg(test)]
mod tests;
