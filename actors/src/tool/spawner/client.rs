//! tool::spawner::client — the engine's handle on its spawner process: start it, ask it to
//! start tools, learn when their leaders exit.
//!
//! Owns: starting the spawner (its own process group, the control socket as stdin) and
//! checking its `Ready`, sending one request per tool with the tool's pipe ends, handing the
//! caller its own pipe ends and the leader's exit. A request abandoned halfway (its future
//! dropped) kills its tool as soon as it starts. Replies are routed by `replies.rs`.
//! Must not: block an async task (a full socket queues the request in `outbox.rs`), or leave
//! a waiter hanging when the spawner is gone (every pending reply and exit then resolves with
//! an error).

use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::outbox::Outbox;
use super::protocol::{self, RequestHeader};
use super::replies::{kill_group, read_replies, Answer, Pending, Shared, State};
use super::request::{check_no_nul, spec_memfd, Launch, Pipes};
use super::sys;
use crate::sandbox::Step;
/// How long dropping the handle waits for the spawner to exit and be reaped.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// The control socket's send buffer asked for (granted up to `net.core.wmem_max`).
const SEND_BUFFER_BYTES: usize = 4 << 20;

/// The program that serves as the spawner: it must call
/// [`serve_stdin`](super::serve_stdin) (the `delta` binary: `delta __spawner`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (for `delta`: `__spawner`).
    pub args: Vec<OsString>,
}

impl SpawnerCommand {
    /// `program` run with `args`.
    pub fn new(
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        Self {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }
}

/// Why a spawner could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The socket pair could not be created (descriptor limit).
    #[error("cannot create the tool spawner's control socket: {0}")]
    Socket(io::Error),
    /// The program could not be started.
    #[error("cannot start the tool spawner {program}: {source} (hint: the engine re-executes its own binary; check that it still exists)")]
    Launch {
        /// The program.
        program: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The thread reading the spawner's replies could not be started.
    #[error("cannot start the tool spawner's reader thread: {0}")]
    Reader(io::Error),
}

/// Why the spawner did not start a tool.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The request never reached a working spawner: starting the tool in-process is safe.
    #[error("the tool spawner is not available: {0}")]
    Unavailable(String),
    /// The program could not be started; the error an in-process spawn gives.
    #[error(transparent)]
    Start(io::Error),
    /// The sandbox could not be applied in the child: the tool did not run.
    #[error("{}: {error}", step.describe())]
    Sandbox {
        /// What failed.
        step: Step,
        /// The system's error.
        error: io::Error,
    },
    /// The spawner died while handling the request: the tool may have started.
    #[error("the tool spawner exited while starting the tool (hint: it may have been killed; later tools start in-process)")]
    Lost,
}

/// A tool the spawner started: the leader of its own process group.
pub struct SpawnedChild {
    /// The leader's pid, which is also its process group id.
    pub pid: u32,
    /// Our end of its stdin pipe, when [`Launch::stdin_pipe`] asked for one.
    pub stdin: Option<pipe::Sender>,
    /// Our end of its stdout.
    pub stdout: pipe::Receiver,
    /// Our end of its stderr.
    pub stderr: pipe::Receiver,
    /// Its exit status, when the spawner reaps it.
    pub exit: ExitWatch,
}

/// The leader's exit, as the spawner reaps it. Holds the spawner alive meanwhile.
pub struct ExitWatch {
    receiver: oneshot::Receiver<i32>,
    status: Option<ExitStatus>,
    _spawner: Arc<Spawner>,
}

fn spawner_gone() -> io::Error {
    io::Error::other("the tool spawner exited before reporting the tool's exit")
}

impl ExitWatch {
    /// Waits for the leader's exit status; an error when the spawner died first.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let raw = (&mut self.receiver).await.map_err(|_| spawner_gone())?;
        let status = ExitStatus::from_raw(raw);
        self.status = Some(status);
        Ok(status)
    }

    /// The exit status if the leader has exited, `None` while it runs; an error when the
    /// spawner died first.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        match self.receiver.try_recv() {
            Ok(raw) => {
                self.status = Some(ExitStatus::from_raw(raw));
                Ok(self.status)
            }
            Err(oneshot::error::TryRecvError::Empty) => Ok(None),
            Err(oneshot::error::TryRecvError::Closed) => Err(spawner_gone()),
        }
    }
}

/// Handle on a running spawner process. Shared by every run (`Send + Sync`); dropping the
/// last handle closes the control socket, and the spawner exits.
pub struct Spawner {
    shared: Arc<Shared>,
    outbox: Arc<Outbox>,
    pid: u32,
    fallback_warned: AtomicBool,
    reader_done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner")
            .field("pid", &self.pid)
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl Spawner {
    /// Starts `command` with a new control socket as its stdin, in its own process group (so
    /// a signal to the engine's group spares it: it must outlive the engine long enough to
    /// kill the tools). Returns without waiting for the spawner to be ready: requests queue
    /// meanwhile, and if it never becomes ready they start in-process (one warning).
    pub fn start(command: &SpawnerCommand) -> Result<Spawner, StartError> {
        let (engine_end, spawner_end) = sys::control_socket_pair().map_err(StartError::Socket)?;
        let mut child = std::process::Command::new(&command.program)
            .args(&command.args)
            // Nothing of the engine's environment: every request carries the tool's own, and
            // a tool could read ours from /proc/<spawner>/environ (the API key, the tokens).
            .env_clear()
            .stdin(Stdio::from(spawner_end))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|source| StartError::Launch {
                program: command.program.clone(),
                source,
            })?;
        let pid = child.id();
        // Room for a burst of requests (a few KiB each) before the outbox has to queue them;
        // the kernel caps it at net.core.wmem_max.
        sys::set_send_buffer(engine_end.as_fd(), SEND_BUFFER_BYTES);
        let shared = Arc::new(Shared {
            socket: engine_end,
            state: Mutex::new(State::default()),
        });
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let reader_shared = shared.clone();
        let reader = std::thread::Builder::new()
            .name("delta-tool-spawner".into())
            .spawn(move || {
                read_replies(&reader_shared, &mut child);
                let _ = done_tx.send(());
            });
        // Without its thread the closure (and the child in it) is gone; returning drops the
        // socket, and the spawner, seeing EOF, exits.
        reader.map_err(StartError::Reader)?;
        Ok(Spawner {
            shared,
            outbox: Arc::default(),
            pid,
            fallback_warned: AtomicBool::new(false),
            reader_done: Mutex::new(Some(done_rx)),
        })
    }

    /// The spawner's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// False once the spawner is gone (every later spawn returns `Unavailable`).
    pub fn is_alive(&self) -> bool {
        !self.shared.state().dead
    }

    /// True the first time it is called: the caller logs the one fallback warning.
    pub fn first_fallback(&self) -> bool {
        !self.fallback_warned.swap(true, Ordering::Relaxed)
    }

    /// Starts one tool. Must be called inside a tokio runtime (the pipe ends register with it).
    pub async fn spawn(self: &Arc<Self>, launch: Launch<'_>) -> Result<SpawnedChild, SpawnError> {
        if !self.is_alive() {
            return Err(SpawnError::Unavailable("it exited".into()));
        }
        check_no_nul(&launch).map_err(SpawnError::Start)?;
        let pipes = Pipes::new(launch.stdin_pipe).map_err(SpawnError::Start)?;
        let writable: Vec<&[u8]>;
        let hidden: Vec<&[u8]>;
        let sandbox = match launch.sandbox {
            Some(sandbox) => {
                writable = sandbox
                    .writable
                    .iter()
                    .map(|p| p.as_os_str().as_bytes())
                    .collect();
                hidden = sandbox
                    .hidden
                    .iter()
                    .map(|h| h.path.as_os_str().as_bytes())
                    .collect();
                Some(protocol::SandboxFields {
                    confine_writes: sandbox.confines_writes(),
                    network_off: sandbox.network_off(),
                    landlock_abi: sandbox.layers.landlock_abi,
                    seccomp: sandbox.layers.seccomp,
                    mounts: sandbox.layers.mounts,
                    writable: &writable,
                    hidden: &hidden,
                })
            }
            None => None,
        };
        let spec = protocol::encode_spec(
            launch.program.as_os_str().as_bytes(),
            launch.argv.iter().map(|a| a.as_bytes()),
            launch.env.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())),
            launch.cwd.as_os_str().as_bytes(),
            sandbox,
        );
        let memfd = if spec.len() > protocol::INLINE_SPEC_MAX {
            Some(spec_memfd(&spec).map_err(SpawnError::Start)?)
        } else {
            None
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        let (exit_tx, exit_rx) = oneshot::channel();
        let id = {
            let mut state = self.shared.state();
            if state.dead {
                return Err(SpawnError::Unavailable("it exited".into()));
            }
            let id = state.next_id;
            state.next_id += 1;
            let pending = Pending {
                reply: reply_tx,
                exit: exit_tx,
            };
            state.pending.insert(id, pending);
            id
        };
        let header = RequestHeader {
            id,
            stdin_pipe: launch.stdin_pipe,
            spec_in_memfd: memfd.is_some(),
        };
        let inline: &[u8] = if memfd.is_some() { &[] } else { &spec };
        let message = protocol::encode_request(header, inline);
        let ((stdin, stdout, stderr), mut tool_ends) = pipes.split();
        tool_ends.extend(memfd);
        if let Err(error) = self.outbox.send(&self.shared, id, message, tool_ends) {
            self.shared.state().pending.remove(&id);
            return Err(SpawnError::Unavailable(format!(
                "cannot send it a request: {error}"
            )));
        }
        let mut waiting = AbandonGuard {
            shared: &self.shared,
            id,
            reply: Some(reply_rx),
        };
        let Some(reply) = waiting.reply.as_mut() else {
            return Err(SpawnError::Lost);
        };
        let answer = reply.await;
        waiting.reply = None;
        let pid = match answer {
            Ok(Answer::Started(pid)) => pid,
            Ok(Answer::Failed(errno, 0)) => {
                return Err(SpawnError::Start(io::Error::from_raw_os_error(errno)))
            }
            Ok(Answer::Failed(errno, step)) => {
                let error = io::Error::from_raw_os_error(errno);
                return Err(match Step::from_code(step) {
                    Some(step) => SpawnError::Sandbox { step, error },
                    None => SpawnError::Start(error),
                });
            }
            Ok(Answer::NotStarted) => {
                return Err(SpawnError::Unavailable("it did not start".into()))
            }
            Err(_) => return Err(SpawnError::Lost),
        };
        let registered = (|| -> io::Result<_> {
            let stdin = stdin
                .map(pipe::Sender::from_owned_fd_unchecked)
                .transpose()?;
            let stdout = pipe::Receiver::from_owned_fd_unchecked(stdout)?;
            let stderr = pipe::Receiver::from_owned_fd_unchecked(stderr)?;
            Ok((stdin, stdout, stderr))
        })();
        let (stdin, stdout, stderr) = match registered {
            Ok(ends) => ends,
            Err(error) => {
                kill_group(pid);
                return Err(SpawnError::Start(error));
            }
        };
        Ok(SpawnedChild {
            pid,
            stdin,
            stdout,
            stderr,
            exit: ExitWatch {
                receiver: exit_rx,
                status: None,
                _spawner: self.clone(),
            },
        })
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.shared.state().closing = true;
        self.outbox.close();
        // Our EOF tells the spawner to exit; its EOF ends the reader, which reaps it.
        // SAFETY: shutdown on our own open socket.
        unsafe {
            libc::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(&self.shared.socket),
                libc::SHUT_RDWR,
            );
        }
        let done = self
            .reader_done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(done) = done {
            let _ = done.recv_timeout(EXIT_WAIT);
        }
    }
}

/// While a spawn request waits for its reply: if the future is dropped, the tool (if it
/// starts at all) is killed rather than left running unsupervised.
struct AbandonGuard<'a> {
    shared: &'a Shared,
    id: u64,
    reply: Option<oneshot::Receiver<Answer>>,
}

impl Drop for AbandonGuard<'_> {
    fn drop(&mut self) {
        let Some(mut reply) = self.reply.take() else {
            return;
        };
        // The reader answers under the lock: either it answered already (the pid is in the
        // channel) or it will find the channel closed, and kill the tool itself. The channel
        // must close before the lock is released, or an answer could slip in between.
        let mut state = self.shared.state();
        if !state.pending.contains_key(&self.id) {
            if let Ok(Answer::Started(pid)) = reply.try_recv() {
                state.exits.remove(&pid);
                kill_group(pid);
            }
        }
        drop(reply);
        drop(state);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::OnceLock;
    use std::time::Instant;

    /// What this test binary logs, from every thread (the spawner's reader logs on its own).
    #[derive(Clone, Default)]
    struct CapturedLog(Arc<Mutex<Vec<u8>>>);

    impl io::Write for CapturedLog {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl CapturedLog {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    fn captured_log() -> &'static CapturedLog {
        static LOG: OnceLock<CapturedLog> = OnceLock::new();
        LOG.get_or_init(|| {
            let log = CapturedLog::default();
            let writer = log.clone();
            tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::WARN)
                .try_init()
                .expect("no other test of this binary installs a global subscriber");
            log
        })
    }

    fn stand_in(script: &str) -> Spawner {
        Spawner::start(&SpawnerCommand::new("/bin/sh", ["-c", script])).unwrap()
    }

    #[test]
    fn a_spawner_closed_before_it_is_ready_is_not_reported_as_failed() {
        let log = captured_log();
        // Never answers Ready: the engine closes it first, as a run refused at setup does.
        let closed = stand_in("exec sleep 30");
        let closed_pid = closed.pid();
        drop(closed);
        // One that exits without answering while the engine still holds it is a failure.
        let failed = stand_in("exit 0");
        let failed_pid = failed.pid();
        let deadline = Instant::now() + Duration::from_secs(10);
        while failed.is_alive() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!failed.is_alive(), "the reader saw the stand-in exit");
        let text = log.text();
        assert!(
            text.contains(&format!("spawner_pid={failed_pid}")) && text.contains("did not start"),
            "{text}"
        );
        assert!(
            !text.contains(&format!("spawner_pid={closed_pid}")),
            "{text}"
        );
    }
}
