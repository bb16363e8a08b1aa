//! tool::process::launch — starts the program of a [`ProcessSpec`] in its own process group,
//! through the tool spawner when the spec names one, else in this process
//! (`tokio::process`). Either way the caller gets the leader to wait for and the pipe ends.
//!
//! A spec with a sandbox is confined between fork and exec on both paths (the spawner applies
//! it in its child; in-process, a `pre_exec` hook does), and gets `TMPDIR` pointed at the
//! sandbox's temporary folder.
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
use crate::sandbox::Prepared;
use crate::tool::spawner::{ExitWatch, Launch, SpawnError};

/// The variable a sandboxed tool finds its private temporary folder in.
const TMPDIR_VAR: &str = "TMPDIR";

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
    let temp_dir = spec
        .sandbox
        .as_ref()
        .map(|sandbox| sandbox.temp_dir.to_string_lossy().into_owned());
    if let Some(spawner) = &spec.spawner {
        // Defence in depth: even a hand-built env never hands the engine's secrets to a child.
        let mut env: Vec<(&str, &str)> = spec
            .env
            .iter()
            .filter(|(name, _)| !is_engine_secret(name))
            .filter(|(name, _)| temp_dir.is_none() || name != TMPDIR_VAR)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if let Some(dir) = &temp_dir {
            env.push((TMPDIR_VAR, dir));
        }
        let request = Launch {
            program: resolved,
            argv: &spec.argv,
            env: &env,
            cwd: &spec.cwd,
            stdin_pipe: spec.stdin.is_some(),
            sandbox: spec.sandbox.as_deref(),
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
            Err(error @ SpawnError::Sandbox { .. }) => return Err(sandbox_failed(&error)),
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
    if let Some(sandbox) = &spec.sandbox {
        command.env(TMPDIR_VAR, &sandbox.temp_dir);
        let prepared = sandbox
            .child_paths(&spec.cwd)
            .and_then(|paths| Prepared::new(&sandbox.child_plan(&paths)))
            .map_err(|error| {
                format!(
                    "cannot prepare the sandbox: {error} (hint: docs/sandbox.md says what the                      sandbox needs from the kernel)"
                )
            })?;
        // SAFETY: `apply` only makes system calls (no allocation, no lock): it is made for
        // the child between fork and exec.
        unsafe {
            command.pre_exec(move || {
                prepared
                    .apply()
                    .map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno))
            });
        }
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
    let sandboxed = if spec.sandbox.is_some() {
        "; the tool starts in a sandbox: if all of that holds, the sandbox could not be \
         applied (docs/sandbox.md)"
    } else {
        ""
    };
    format!(
        "{error}: {program} (hint: check that {} exists, is executable and that the workspace {} exists{sandboxed})",
        resolved.display(),
        spec.cwd.display()
    )
}

/// A sandbox step failed in the spawner's child: the tool never ran.
fn sandbox_failed(error: &SpawnError) -> String {
    format!(
        "the sandbox could not be applied: {error} (hint: the tool did not run; \
         docs/sandbox.md says what the sandbox needs from the kernel, and `required: false` \
         runs tools with what it offers)"
    )
}
