//! tool::process::service — a long-lived child that the engine talks to over its stdin and
//! stdout (an MCP server), started exactly like a tool: its own process group, the complete
//! cleaned environment of the [`ProcessSpec`], through the tool spawner when one runs (so a
//! `kill -9` of the engine takes it down too), registered with the live groups (so Ctrl-C
//! kills it).
//!
//! Owns: starting it, watching its leader's exit, keeping the tail of its stderr for error
//! messages, and killing its group when the [`ServiceProcess`] is dropped or stopped.
//! Must not: speak any protocol over the pipes (the caller does), wait on the run's
//! thread, or kill a group whose leader has already exited (its pgid may be reused).

use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use super::launch::{self, Launched};
use super::{env, live_groups, signal_group, ProcessSpec};

/// Bytes of a server's stderr kept to explain why it failed.
const STDERR_TAIL_BYTES: usize = 2048;
/// After the leader exited, how long its last stderr lines may take to arrive (a child that
/// it left behind may hold the pipe open).
const STDERR_AFTER_EXIT: Duration = Duration::from_millis(250);

/// A started service's group, killed when this is dropped; its pipes go to the caller's
/// protocol ([`ServicePipes`]).
pub struct ServiceProcess {
    /// The leader's pid, also its process group id.
    pub pid: u32,
    exit: watch::Receiver<Option<ExitStatus>>,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    /// True once stderr reached its end (or could not be read).
    stderr_closed: watch::Receiver<bool>,
    group: ServiceGroup,
}

/// The group as long as its leader runs: registered in the live groups, killed when the
/// [`ServiceProcess`] owning it is dropped.
struct ServiceGroup {
    pgid: i32,
    /// False once the leader exited (nothing may be killed by that pgid any more); shared
    /// with the task that waits for the leader.
    running: Arc<Mutex<bool>>,
}

impl ServiceGroup {
    fn new(pgid: i32) -> ServiceGroup {
        live_groups().insert(pgid);
        ServiceGroup {
            pgid,
            running: Arc::new(Mutex::new(true)),
        }
    }

    /// SIGKILLs the whole group if its leader still runs.
    fn kill(&self) {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if *running {
            signal_group(self.pgid, Signal::SIGKILL);
        }
    }
}

/// Marks the group's leader as exited: it leaves the live groups, and is never signalled.
fn leader_exited(pgid: i32, running: &Mutex<bool>) {
    let mut running = running.lock().unwrap_or_else(PoisonError::into_inner);
    if *running {
        *running = false;
        live_groups().remove(&pgid);
    }
}

impl Drop for ServiceGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Our ends of a service's stdin and stdout.
pub struct ServicePipes {
    /// Its stdin.
    pub stdin: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    /// Its stdout.
    pub stdout: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
}

impl ServiceProcess {
    /// Starts `spec` (its `stdin` is ignored: a service always gets a stdin pipe; its
    /// timeout and capture settings do not apply). Must be called inside a tokio runtime:
    /// the leader's exit and its stderr are watched by tasks spawned on it. The error is the
    /// FAILED TO START reason.
    pub async fn start(spec: &ProcessSpec) -> Result<(ServiceProcess, ServicePipes), String> {
        let program = spec
            .argv
            .first()
            .ok_or_else(|| "empty command (hint: the server's command has no words)".to_owned())?;
        let resolved = env::resolve_program(program, &spec.env, &spec.cwd)
            .map_err(|env::NotFound(reason)| reason)?;
        let mut piped = spec.clone();
        piped.stdin = Some(Vec::new());
        let Launched {
            pid,
            mut leader,
            stdin,
            stdout,
            stderr,
        } = launch::launch(&piped, program, &resolved).await?;
        let group = ServiceGroup::new(i32::try_from(pid).unwrap_or(i32::MAX));
        let (exit_tx, exit) = watch::channel(None);
        let (pgid, running) = (group.pgid, Arc::clone(&group.running));
        tokio::spawn(async move {
            let status = leader.wait().await;
            if status.is_err() {
                // The spawner died: nobody can report this group's end; do not leave it.
                signal_group(pgid, Signal::SIGKILL);
            }
            leader_exited(pgid, &running);
            match status {
                Ok(status) => {
                    let _ = exit_tx.send(Some(status));
                }
                Err(_) => {
                    let _ = exit_tx.send(Some(std::os::unix::process::ExitStatusExt::from_raw(
                        libc::SIGKILL,
                    )));
                }
            }
        });
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let (closed_tx, stderr_closed) = watch::channel(stderr.is_none());
        if let Some(mut stderr) = stderr {
            let tail = Arc::clone(&stderr_tail);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                    tail.extend(&buf[..n]);
                    let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                    tail.drain(..excess);
                }
                let _ = closed_tx.send(true);
            });
        }
        let service = ServiceProcess {
            pid,
            exit,
            stderr_tail,
            stderr_closed,
            group,
        };
        match (stdin, stdout) {
            (Some(stdin), Some(stdout)) => Ok((service, ServicePipes { stdin, stdout })),
            // Dropping the service kills what was started.
            _ => Err("the service started without its stdin and stdout pipes".into()),
        }
    }

    /// The leader's exit status, once it has exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    /// True once the leader has exited, also when that is not reported yet: a leader killed
    /// a moment ago is a zombie (`/proc/<pid>/stat` says `Z`) until the spawner or the
    /// runtime reaps it and its status reaches us.
    pub fn has_exited(&self) -> bool {
        if self.exit_status().is_some() {
            return true;
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
            // Gone already (reaped), or no /proc to tell: only the report says.
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        }
    }

    /// The leader's exit status, waiting at most `within` for it (a broken pipe is often
    /// seen a moment before the exit is reported).
    pub async fn exit_within(&self, within: Duration) -> Option<ExitStatus> {
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(within, exit.wait_for(Option::is_some)).await;
        self.exit_status()
    }

    /// A receiver that sees the leader's exit status when it exits.
    pub fn exit_watch(&self) -> watch::Receiver<Option<ExitStatus>> {
        self.exit.clone()
    }

    /// The last bytes the service wrote on stderr (lossy UTF-8, trimmed).
    pub fn stderr_tail(&self) -> String {
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let bytes: Vec<u8> = tail.iter().copied().collect();
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }

    /// [`stderr_tail`](Self::stderr_tail) once stderr has reached its end, or after a short
    /// wait when something still holds it open: for the message about a service that exited.
    pub async fn stderr_tail_after_exit(&self) -> String {
        let mut closed = self.stderr_closed.clone();
        let _ = tokio::time::timeout(STDERR_AFTER_EXIT, closed.wait_for(|done| *done)).await;
        self.stderr_tail()
    }

    /// SIGKILLs the service's whole group now (if its leader still runs).
    pub fn kill(&self) {
        self.group.kill();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;

    fn spec(script: &str) -> ProcessSpec {
        ProcessSpec::new(
            vec!["sh".into(), "-c".into(), script.into()],
            std::env::temp_dir(),
            vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
        )
    }

    #[tokio::test]
    async fn a_service_talks_over_its_pipes_and_dropping_it_kills_its_group() {
        let (service, pipes) = ServiceProcess::start(&spec("echo started >&2; sleep 300 & cat"))
            .await
            .unwrap();
        let mut stdin = pipes.stdin;
        let mut stdout = BufReader::new(pipes.stdout);
        stdin.write_all(b"ping\n").await.unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).await.unwrap();
        assert_eq!(line, "ping\n");
        let pgid = i32::try_from(service.pid).unwrap();
        assert!(live_groups().contains(&pgid));
        let mut exit = service.exit_watch();
        drop(service);
        let status = tokio::time::timeout(Duration::from_secs(10), exit.wait_for(Option::is_some))
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(!status.success());
        assert!(!live_groups().contains(&pgid));
        // The grandchild (`sleep 300`) got the SIGKILL too: within a bound, no living member
        // of the group is left (a killed process is a zombie until it is reaped).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !living_members(pgid).is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(living_members(pgid), Vec::<i32>::new());
    }

    /// Processes of group `pgid` that are not zombies, from /proc.
    fn living_members(pgid: i32) -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_string_lossy().parse::<i32>().ok())
            .filter(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map(|(_, rest)| rest.split_whitespace().collect())
                    .unwrap_or_default();
                fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
            })
            .collect()
    }

    #[tokio::test]
    async fn a_service_that_exits_reports_its_status_and_stderr() {
        let (service, _pipes) = ServiceProcess::start(&spec("echo 'no config file' >&2; exit 3"))
            .await
            .unwrap();
        let mut exit = service.exit_watch();
        let status = *exit.wait_for(Option::is_some).await.unwrap();
        assert_eq!(status.unwrap().code(), Some(3));
        assert_eq!(service.stderr_tail_after_exit().await, "no config file");
    }

    #[tokio::test]
    async fn a_missing_program_fails_to_start_with_a_hint() {
        let mut spec = spec("");
        spec.argv = vec!["no-such-mcp-server-here".into()];
        let error = ServiceProcess::start(&spec).await.err().unwrap();
        assert!(error.contains("no-such-mcp-server-here"), "{error}");
        assert!(error.contains("hint"), "{error}");
    }
}
