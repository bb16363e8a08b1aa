//! tool::process — runs one tool / hook / generator program as a child process group.
//!
//! Owns: spawning (direct argv, no shell of ours; in-process or through the tool spawner, see
//! `launch.rs`), the process group, stdin as a pipe only when there is stdin text (else
//! /dev/null), the timeout and cancellation kill sequence (SIGTERM to the whole group, SIGKILL
//! after the grace period), bounded output capture, and a registry of live groups so a Ctrl-C
//! handler can kill them all.
//! Must not: import actix, block the executor thread, format text for the model (that is
//! `observation.rs`), or kill a group whose leader exited normally (daemons a tool starts on
//! purpose survive it).

mod budget;
mod capture;
mod env;
mod launch;
mod service;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

pub use budget::{default_max_tool_processes, max_tool_processes, set_max_tool_processes};
pub use capture::StreamCapture;
pub use env::{
    build_child_env, engine_vars, is_engine_secret, ProgramCache, API_KEY_VAR, ENGINE_SECRET_VARS,
    RELAY_TOKEN_VAR, SERVE_TOKEN_VAR,
};

use capture::{capture_stream, StreamLimits};
use launch::{Launched, Leader};
pub use service::{ServicePipes, ServiceProcess};

use crate::redact::SecretSet;
use crate::sandbox::RunSandbox;
use crate::tool::spawner::Spawner;

/// Default per-tool wall-clock limit.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(300_000);
/// Default delay between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// Default bytes of each stream kept for the model, at the start and at the end.
pub const DEFAULT_HEAD_BYTES: usize = 8 * 1024;
/// See [`DEFAULT_HEAD_BYTES`].
pub const DEFAULT_TAIL_BYTES: usize = 8 * 1024;
/// Default cap of each full-output file.
pub const DEFAULT_FILE_CAP_BYTES: u64 = 64 * 1024 * 1024;
/// After the leader exits, how long to keep reading pipes that a background child still holds
/// open, before giving up on them (the child keeps running).
const PIPE_DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);
/// How often the kill sequence checks whether the group is gone.
const GROUP_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Everything needed to run one program.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// `argv[0]` is resolved via `PATH` in `env` (not the parent's `PATH`).
    pub argv: Vec<String>,
    /// `Some` => a pipe written concurrently with reading the outputs; `None` => /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// The working directory.
    pub cwd: PathBuf,
    /// The COMPLETE environment (the parent's is cleared); build it with [`build_child_env`].
    /// Shared: a run's tools all get the same one.
    pub env: Arc<Vec<(String, String)>>,
    /// Wall-clock limit; on expiry the group gets SIGTERM, then SIGKILL after `kill_grace`.
    pub timeout: Duration,
    /// SIGTERM -> SIGKILL delay.
    pub kill_grace: Duration,
    /// How much output to keep, in memory and on disk.
    pub capture: CaptureSpec,
    /// Start the program through this spawner (`None`: from this process). A spawner that
    /// has died falls back to this process, with one warning.
    pub spawner: Option<Arc<Spawner>>,
    /// Where `argv[0]` was found before, for a spec that repeats with the same `env` and
    /// `cwd` (a run's tools); `None`: looked up on every start.
    pub programs: Option<ProgramCache>,
    /// Confine the program (and all it starts) in this sandbox before it runs, with `TMPDIR`
    /// set to the sandbox's temporary folder; `None`: it runs with the user's rights.
    pub sandbox: Option<Arc<RunSandbox>>,
}

impl ProcessSpec {
    /// A spec with the default timeout, grace and capture limits and no stdin.
    pub fn new(
        argv: Vec<String>,
        cwd: PathBuf,
        env: impl Into<Arc<Vec<(String, String)>>>,
    ) -> Self {
        Self {
            argv,
            stdin: None,
            cwd,
            env: env.into(),
            timeout: DEFAULT_TIMEOUT,
            kill_grace: DEFAULT_KILL_GRACE,
            capture: CaptureSpec::default(),
            spawner: None,
            programs: None,
            sandbox: None,
        }
    }
}

/// How much output to keep, in memory and on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSpec {
    /// Bytes kept in memory from the start of each stream (default 8 KiB).
    pub head_bytes: usize,
    /// Bytes kept in memory from the end of each stream (default 8 KiB).
    pub tail_bytes: usize,
    /// stdout / stderr files for the full text, created only when the stream is non-empty.
    pub full_output: Option<(PathBuf, PathBuf)>,
    /// Cap of each full-output file in bytes (default 64 MiB); a note ends a capped file.
    pub file_cap_bytes: u64,
    /// Sensitive answers, replaced by their markers in the full-output files as they are
    /// written (the captured head and tail keep the real text).
    pub secrets: SecretSet,
}

impl Default for CaptureSpec {
    fn default() -> Self {
        Self {
            head_bytes: DEFAULT_HEAD_BYTES,
            tail_bytes: DEFAULT_TAIL_BYTES,
            full_output: None,
            file_cap_bytes: DEFAULT_FILE_CAP_BYTES,
            secrets: SecretSet::default(),
        }
    }
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Termination {
    /// The leader exited with this code.
    Exited(i32),
    /// The leader was killed by this signal (not by us).
    Signaled(i32),
    /// The timeout expired; the group was killed.
    TimedOut,
    /// The cancellation token fired; the group was killed.
    Cancelled,
    /// The program could not be started; the reason names it and gives a hint.
    SpawnFailed(String),
}

/// What happened, with the captured output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutcome {
    /// How it ended.
    pub termination: Termination,
    /// The leader's exit code when it exited by itself (also after a timeout, if it exited
    /// with a code on SIGTERM).
    pub exit_code: Option<i32>,
    /// What stdout produced.
    pub stdout: StreamCapture,
    /// What stderr produced.
    pub stderr: StreamCapture,
    /// Wall time from start to the end of output capture.
    pub duration: Duration,
    /// The leader's pid (also its process group id); `None` when it never started.
    pub pid: Option<u32>,
    /// The limit the run had, so a timeout can be reported exactly.
    pub timeout: Duration,
}

impl ProcessOutcome {
    /// An outcome for a program that never started.
    pub fn spawn_failed(reason: impl Into<String>, timeout: Duration) -> Self {
        Self {
            termination: Termination::SpawnFailed(reason.into()),
            exit_code: None,
            stdout: StreamCapture::default(),
            stderr: StreamCapture::default(),
            duration: Duration::ZERO,
            pid: None,
            timeout,
        }
    }
}

/// Process groups of children still running, so a shutdown path can kill them all.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn live_groups() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    LIVE_GROUPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends `SIGKILL` to every tool process group still running; for the Ctrl-C / SIGTERM path
/// of the whole process. Returns how many groups were signalled.
pub fn kill_all_live_groups() -> usize {
    let groups: Vec<i32> = live_groups().iter().copied().collect();
    for pgid in &groups {
        signal_group(*pgid, Signal::SIGKILL);
    }
    groups.len()
}

/// The number of tool process groups currently running.
pub fn live_group_count() -> usize {
    live_groups().len()
}

/// Keeps a group registered while it runs, and SIGKILLs it if the future driving it is
/// dropped halfway (an actor stopped, a select lost): no orphan survives an abandoned run.
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl GroupGuard {
    fn new(pgid: i32) -> Self {
        live_groups().insert(pgid);
        Self { pgid, armed: true }
    }

    /// The leader exited normally or the group was killed: nothing left to clean up.
    fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            live_groups().remove(&self.pgid);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, Signal::SIGKILL);
            self.disarm();
        }
    }
}

fn signal_group(pgid: i32, signal: Signal) {
    // ESRCH (group already gone) is the expected, harmless case.
    let _ = killpg(Pid::from_raw(pgid), signal);
}

fn group_is_gone(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_err()
}

/// Spawns `spec` in a new process group and waits for it. On timeout or cancellation the
/// WHOLE group gets SIGTERM, then SIGKILL after `kill_grace`; after a normal exit of the
/// leader nothing is killed. Never blocks the executor thread and never panics.
pub async fn run_process(spec: ProcessSpec, cancel: CancellationToken) -> ProcessOutcome {
    let started = Instant::now();
    let program = match spec.argv.first() {
        Some(first) => first,
        None => {
            return ProcessOutcome::spawn_failed(
                "empty command (hint: the tool's command has no words)",
                spec.timeout,
            )
        }
    };
    let found = match &spec.programs {
        Some(programs) => programs.resolve(program, &spec.env, &spec.cwd),
        None => env::resolve_program(program, &spec.env, &spec.cwd),
    };
    let resolved = match found {
        Ok(path) => path,
        Err(env::NotFound(reason)) => return ProcessOutcome::spawn_failed(reason, spec.timeout),
    };
    if cancel.is_cancelled() {
        // Shutting down already: starting a process only to kill it would be wasted work.
        let mut outcome = ProcessOutcome::spawn_failed(String::new(), spec.timeout);
        outcome.termination = Termination::Cancelled;
        return outcome;
    }
    // Held until this function returns, when the process's pipes are closed.
    let _descriptors = tokio::select! {
        slot = budget::acquire() => slot,
        _ = cancel.cancelled() => {
            let mut outcome = ProcessOutcome::spawn_failed(String::new(), spec.timeout);
            outcome.termination = Termination::Cancelled;
            return outcome;
        }
    };
    let Launched {
        pid,
        mut leader,
        stdin,
        stdout,
        stderr,
    } = match launch::launch(&spec, program, &resolved).await {
        Ok(launched) => launched,
        Err(reason) => return ProcessOutcome::spawn_failed(reason, spec.timeout),
    };
    // A pid always fits (pid_max <= 2^22); the group leader's pid is the group id.
    let pgid = i32::try_from(pid).unwrap_or(i32::MAX);
    let pid = Some(pid);
    let mut guard = GroupGuard::new(pgid);

    let stop_reading = CancellationToken::new();
    let (stdout_file, stderr_file) = match spec.capture.full_output.clone() {
        Some((out, err)) => (Some(out), Some(err)),
        None => (None, None),
    };
    let limits = |file| StreamLimits {
        head_bytes: spec.capture.head_bytes,
        tail_bytes: spec.capture.tail_bytes,
        file,
        file_cap_bytes: spec.capture.file_cap_bytes,
        secrets: spec.capture.secrets.clone(),
    };
    let stdin_writer = feed_stdin(stdin, spec.stdin, stop_reading.clone());
    let stdout_reader = capture_stream(stdout, limits(stdout_file), stop_reading.clone());
    let stderr_reader = capture_stream(stderr, limits(stderr_file), stop_reading.clone());
    let pipes = async move {
        let ((), stdout, stderr) = tokio::join!(stdin_writer, stdout_reader, stderr_reader);
        (stdout, stderr)
    };
    let supervision = supervise(&mut leader, pgid, spec.timeout, spec.kill_grace, &cancel);
    tokio::pin!(pipes);
    tokio::pin!(supervision);

    let (termination, exit_code) = tokio::select! {
        ended = &mut supervision => ended,
        // Both pipes closed first: the leader is about to exit (or a timeout will end it).
        captured = &mut pipes => {
            let ended = supervision.await;
            guard.disarm();
            return outcome(ended, captured, started, pid, spec.timeout);
        }
    };
    guard.disarm();
    let captured = match tokio::time::timeout(PIPE_DRAIN_AFTER_EXIT, &mut pipes).await {
        Ok(captured) => captured,
        Err(_) => {
            // A background child still holds a pipe; keep what we have and let it run.
            stop_reading.cancel();
            pipes.await
        }
    };
    outcome(
        (termination, exit_code),
        captured,
        started,
        pid,
        spec.timeout,
    )
}

fn outcome(
    (termination, exit_code): (Termination, Option<i32>),
    (stdout, stderr): (StreamCapture, StreamCapture),
    started: Instant,
    pid: Option<u32>,
    timeout: Duration,
) -> ProcessOutcome {
    ProcessOutcome {
        termination,
        exit_code,
        stdout,
        stderr,
        duration: started.elapsed(),
        pid,
        timeout,
    }
}

async fn feed_stdin<W: AsyncWrite + Unpin>(
    pipe: Option<W>,
    text: Option<Vec<u8>>,
    stop: CancellationToken,
) {
    let (Some(mut pipe), Some(text)) = (pipe, text) else {
        return;
    };
    tokio::select! {
        // A child that exits without reading gives EPIPE: not an error of the tool run.
        _ = pipe.write_all(&text) => {}
        () = stop.cancelled() => {}
    }
    drop(pipe);
}

/// Waits for the leader, or kills the group on timeout / cancellation.
async fn supervise(
    child: &mut Leader,
    pgid: i32,
    timeout: Duration,
    kill_grace: Duration,
    cancel: &CancellationToken,
) -> (Termination, Option<i32>) {
    let reason = tokio::select! {
        status = child.wait() => return match status {
            Ok(status) => from_exit_status(status),
            Err(error) => {
                // Nobody can report this group's end any more: do not leave it unsupervised.
                signal_group(pgid, Signal::SIGKILL);
                (Termination::SpawnFailed(format!("cannot wait for the tool process: {error}")), None)
            }
        },
        () = tokio::time::sleep(timeout) => Termination::TimedOut,
        () = cancel.cancelled() => Termination::Cancelled,
    };
    let leader = kill_group(child, pgid, kill_grace).await;
    let exit_code = leader.and_then(|status| status.code());
    (reason, exit_code)
}

/// SIGTERM to the group; once the group is empty or `kill_grace` passed, SIGKILL to whatever
/// is left; then reaps the leader.
async fn kill_group(child: &mut Leader, pgid: i32, kill_grace: Duration) -> Option<ExitStatus> {
    signal_group(pgid, Signal::SIGTERM);
    let deadline = Instant::now() + kill_grace;
    let mut leader = None;
    while Instant::now() < deadline {
        if leader.is_none() {
            leader = child.try_wait().ok().flatten();
        }
        if leader.is_some() && group_is_gone(pgid) {
            return leader;
        }
        tokio::time::sleep(GROUP_POLL_INTERVAL).await;
    }
    signal_group(pgid, Signal::SIGKILL);
    match leader {
        Some(status) => Some(status),
        None => child.wait().await.ok(),
    }
}

fn from_exit_status(status: ExitStatus) -> (Termination, Option<i32>) {
    match (status.code(), status.signal()) {
        (Some(code), _) => (Termination::Exited(code), Some(code)),
        (None, Some(signal)) => (Termination::Signaled(signal), None),
        (None, None) => (Termination::Exited(-1), None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn spec(argv: &[&str]) -> ProcessSpec {
        ProcessSpec::new(
            argv.iter().map(|s| (*s).to_owned()).collect(),
            std::env::temp_dir(),
            vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
        )
    }

    #[tokio::test]
    async fn exit_code_is_reported() {
        let outcome = run_process(spec(&["sh", "-c", "exit 7"]), CancellationToken::new()).await;
        assert_eq!(outcome.termination, Termination::Exited(7));
        assert_eq!(outcome.exit_code, Some(7));
        assert_eq!(live_group_count_of(outcome.pid), 0);
    }

    #[tokio::test]
    async fn signal_is_reported() {
        let outcome =
            run_process(spec(&["sh", "-c", "kill -9 $$"]), CancellationToken::new()).await;
        assert_eq!(outcome.termination, Termination::Signaled(9));
        assert_eq!(outcome.exit_code, None);
    }

    #[tokio::test]
    async fn an_already_cancelled_token_starts_nothing() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let outcome = run_process(spec(&["sh", "-c", "exit 0"]), cancel).await;
        assert_eq!(outcome.termination, Termination::Cancelled);
        assert_eq!(outcome.pid, None);
    }

    #[tokio::test]
    async fn empty_argv_fails_to_start() {
        let outcome = run_process(spec(&[]), CancellationToken::new()).await;
        assert!(
            matches!(outcome.termination, Termination::SpawnFailed(ref r) if r.contains("empty command"))
        );
    }

    #[tokio::test]
    async fn a_daemon_holding_stdout_does_not_hang_a_normal_exit() {
        let outcome = run_process(
            spec(&["sh", "-c", "echo started; sleep 5 & exit 0"]),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert_eq!(outcome.stdout.text_lossy(), "started\n");
        assert!(outcome.duration < Duration::from_secs(4));
        // The daemon survives a normal exit by design; clean it up here.
        signal_group(
            i32::try_from(outcome.pid.unwrap()).unwrap(),
            Signal::SIGKILL,
        );
    }

    #[tokio::test]
    async fn api_key_is_dropped_even_from_a_hand_built_env() {
        let mut spec = spec(&["env"]);
        Arc::make_mut(&mut spec.env).push((API_KEY_VAR.to_owned(), "sk-secret".to_owned()));
        let outcome = run_process(spec, CancellationToken::new()).await;
        assert!(!outcome.stdout.text_lossy().contains("sk-secret"));
        assert!(outcome.stdout.text_lossy().contains("PATH=/usr/bin:/bin"));
    }

    fn live_group_count_of(pid: Option<u32>) -> usize {
        let pgid = i32::try_from(pid.unwrap()).unwrap();
        usize::from(live_groups().contains(&pgid))
    }
}
