//! tool::process::launch — starts the program of a [`ProcessSpec`] in its own process group,
//! through the tool spawner when the spec names one, else in this process
//! (`tokio::process`). Either way the caller gets the leader to wait for and the pipe ends.
//!
//! Owns: the in-process `Command`, the choice of path, the fallback to in-process when the
//! spawner has died (one warning per spawner), and the FAILED TO START wording (the same for
//! both paths).
//! Must not: wait for the leader or touch the pipes' contents (that is `process.rs`).

use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::{Child, Command};

use super::{is_engine_secret, ProcessSpec};
use crate::tool::spawner::{ExitWatch, Launch, SpawnError};

/// The group leader, started in-process or by the spawner.
pub(super) enum Leader {
    InProcess(Child),
    Spawned(ExitWatch),
}

impl Leader {
    pub(super) async fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            Leader::InProcess(child) => child.wait().await,
            Leader::Spawned(exit) => exit.wait().await,
        }
    }

    pub(super) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self {
            Leader::InProcess(child) => child.try_wait(),
            Leader::Spawned(exit) => exit.try_wait(),
        }
    }
}

pub(super) type Input = Box<dyn AsyncWrite + Send + Unpin>;
pub(super) type Output = Box<dyn AsyncRead + Send + Unpin>;

/// A started program.
pub(super) struct Launched {
    pub pid: u32,
    pub leader: Leader,
    pub stdin: Option<Input>,
    pub stdout: Option<Output>,
    pub stderr: Option<Output>,
}

/// Starts `spec` (`program` as written, `resolved` as found on the tool's PATH). The error is
/// the FAILED TO START reason.
pub(super) async fn launch(
    spec: &ProcessSpec,
    program: &str,
    resolved: &Path,
) -> Result<Launched, String> {
    if let Some(spawner) = &spec.spawner {
        // Defence in depth: even a hand-built env never hands the engine's secrets to a child.
        let env: Vec<(&str, &str)> = spec
            .env
            .iter()
            .filter(|(name, _)| !is_engine_secret(name))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let request = Launch {
            program: resolved,
            argv: &spec.argv,
            env: &env,
            cwd: &spec.cwd,
            stdin_pipe: spec.stdin.is_some(),
        };
        match spawner.spawn(request).await {
            Ok(child) => {
                return Ok(Launched {
                    pid: child.pid,
                    leader: Leader::Spawned(child.exit),
                    stdin: child.stdin.map(|pipe| Box::new(pipe) as Input),
                    stdout: Some(Box::new(child.stdout)),
                    stderr: Some(Box::new(child.stderr)),
                })
            }
            Err(SpawnError::Start(error)) => {
                return Err(failed_to_start(&error, program, resolved, spec))
            }
            Err(SpawnError::Lost) => return Err(SpawnError::Lost.to_string()),
            Err(SpawnError::Unavailable(reason)) => {
                if spawner.first_fallback() {
                    tracing::warn!(
                        spawner_pid = spawner.pid(),
                        "the tool spawner is not available ({reason}); tools start from the engine process from now on"
                    );
                }
            }
        }
    }
    launch_in_process(spec, program, resolved)
}

fn launch_in_process(
    spec: &ProcessSpec,
    program: &str,
    resolved: &Path,
) -> Result<Launched, String> {
    let mut command = Command::new(resolved);
    command
        .arg0(program)
        .args(&spec.argv[1..])
        .env_clear()
        // Defence in depth: even a hand-built env never hands the engine's secrets to a child.
        .envs(
            spec.env
                .iter()
                .filter(|(name, _)| !is_engine_secret(name))
                .map(|(k, v)| (k, v)),
        )
        .current_dir(&spec.cwd)
        .process_group(0)
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the hook runs in the child between fork and exec and only makes
    // async-signal-safe system calls. It costs `posix_spawn` (std forks instead when a hook
    // is set), and is what keeps descriptors an embedder inherited, without close-on-exec,
    // out of its tools (the spawner does the same for its own).
    unsafe {
        command.pre_exec(crate::tool::isolation::close_on_exec_in_child);
    }
    let mut child = command
        .spawn()
        .map_err(|error| failed_to_start(&error, program, resolved, spec))?;
    let Some(pid) = child.id() else {
        return Err("the child exited before it could be tracked".into());
    };
    Ok(Launched {
        pid,
        stdin: child.stdin.take().map(|pipe| Box::new(pipe) as Input),
        stdout: child.stdout.take().map(|pipe| Box::new(pipe) as Output),
        stderr: child.stderr.take().map(|pipe| Box::new(pipe) as Output),
        leader: Leader::InProcess(child),
    })
}

fn failed_to_start(
    error: &io::Error,
    program: &str,
    resolved: &Path,
    spec: &ProcessSpec,
) -> String {
    format!(
        "{error}: {program} (hint: check that {} exists, is executable and that the workspace {} exists)",
        resolved.display(),
        spec.cwd.display()
    )
}
