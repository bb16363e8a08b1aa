//! tool::spawner::replies — the engine side of the spawner's answers: the state shared by
//! every tool start (requests waiting for `Spawned`/`Failed`, leaders waiting for `Exited`),
//! the `Ready` handshake, and the reader thread that routes each reply.
//!
//! A message of replies is routed under one lock; each waiter is woken as its reply is
//! routed.
//!
//! The engine does not wait for `Ready` before sending requests (the spawner's start then
//! overlaps the engine's): they queue in the socket. The spawner answers `Ready` before it
//! reads any request, so a spawner that dies or misbehaves before `Ready` started nothing, and
//! its waiting requests are told to start in-process instead.
//! Owns: what happens when the spawner is gone: every waiter is answered or failed, the socket
//! is shut down (so the spawner sees EOF too), the spawner is reaped.
//! Must not: block anything but its own thread.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::Child;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::protocol::{self, Reply, PROTOCOL_VERSION};
use super::sys;

/// How long a new spawner may take to answer `Ready` (a busy machine execs slowly).
const READY_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) struct Shared {
    pub(super) socket: OwnedFd,
    pub(super) state: Mutex<State>,
}

/// A spawn request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    Started(u32),
    /// The errno, and the sandbox step that failed (0: the start itself).
    Failed(i32, u8),
    /// The spawner never became ready: nothing was started.
    NotStarted,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) dead: bool,
    /// `Ready` arrived: requests may have been acted on.
    pub(super) ready: bool,
    /// The engine is closing the spawner (its last handle was dropped): a handshake cut
    /// short by that is the engine's own doing, not a spawner that failed to start.
    pub(super) closing: bool,
    pub(super) next_id: u64,
    pub(super) pending: HashMap<u64, Pending>,
    pub(super) exits: HashMap<u32, oneshot::Sender<i32>>,
}

pub(super) struct Pending {
    /// Closed when the requester gave up: its tool is then killed as soon as it starts.
    pub(super) reply: oneshot::Sender<Answer>,
    pub(super) exit: oneshot::Sender<i32>,
}

impl Shared {
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) fn kill_group(pid: u32) {
    if let Ok(pgid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Waits for the spawner's `Ready`, or why it is not a spawner.
fn await_ready(socket: BorrowedFd<'_>) -> Result<(), String> {
    match sys::wait_readable(socket, READY_TIMEOUT) {
        Ok(true) => {}
        Ok(false) => return Err(format!("no answer within {} s", READY_TIMEOUT.as_secs())),
        Err(error) => return Err(error.to_string()),
    }
    let mut buffer = [0u8; protocol::REPLY_BUFFER];
    let mut fds = Vec::new();
    let received = sys::recv_with_fds(socket, &mut buffer, &mut fds).map_err(|e| e.to_string())?;
    if received.len == 0 {
        return Err("it exited without answering".into());
    }
    match Reply::decode(&buffer[..received.len]) {
        Ok(Reply::Ready { version, .. }) if version == PROTOCOL_VERSION => Ok(()),
        Ok(Reply::Ready { version, .. }) => Err(format!(
            "it speaks protocol {version}, this engine {PROTOCOL_VERSION}"
        )),
        Ok(other) => Err(format!("unexpected first message {other:?}")),
        Err(error) => Err(error.to_string()),
    }
}

/// The reader thread: checks `Ready`, routes replies until the spawner is gone, then answers
/// or fails every waiter, makes sure the spawner sees EOF too, and reaps it.
pub(super) fn read_replies(shared: &Shared, child: &mut Child) {
    match await_ready(shared.socket.as_fd()) {
        Ok(()) => {
            shared.state().ready = true;
            route_until_gone(shared);
        }
        // A run that ends at once (a refused setup) closes the engine before the spawner
        // has answered: nothing failed, and a warning would send the user looking for a
        // problem that is not there.
        Err(reason) if shared.state().closing => {
            tracing::debug!(
                spawner_pid = child.id(),
                "the tool spawner was closed before it was ready ({reason})"
            );
            let _ = child.kill();
        }
        Err(reason) => {
            tracing::warn!(
                spawner_pid = child.id(),
                "the tool spawner did not start ({reason}); tools start from the engine process"
            );
            let _ = child.kill();
        }
    }
    {
        let mut state = shared.state();
        state.dead = true;
        let ready = state.ready;
        for (_, pending) in state.pending.drain() {
            if !ready {
                let _ = pending.reply.send(Answer::NotStarted);
            }
        }
        state.exits.clear();
    }
    // SAFETY: shutdown on our own open socket (a no-op when the spawner already closed it).
    unsafe {
        libc::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&shared.socket),
            libc::SHUT_RDWR,
        );
    }
    let _ = child.wait();
}

fn route_until_gone(shared: &Shared) {
    let mut buffer = [0u8; protocol::REPLY_BUFFER];
    let mut fds = Vec::new();
    loop {
        fds.clear();
        let received = match sys::recv_with_fds(shared.socket.as_fd(), &mut buffer, &mut fds) {
            Ok(received) if received.len > 0 && !received.truncated => received,
            Ok(_) => return,
            Err(_) => return,
        };
        match Reply::decode_all(&buffer[..received.len]) {
            Ok(replies) => {
                let mut state = shared.state();
                for reply in replies {
                    route(&mut state, reply);
                }
            }
            Err(error) => {
                tracing::warn!(%error, "the tool spawner sent a damaged reply; tools start in-process from now on");
                return;
            }
        }
    }
}

fn route(state: &mut State, reply: Reply) {
    match reply {
        Reply::Spawned { id, pid } => {
            let Some(pending) = state.pending.remove(&id) else {
                return;
            };
            if pending.reply.send(Answer::Started(pid)).is_ok() {
                state.exits.insert(pid, pending.exit);
            } else {
                // The request was abandoned (see `AbandonGuard`).
                kill_group(pid);
            }
        }
        Reply::Failed { id, errno, step } => {
            if let Some(pending) = state.pending.remove(&id) {
                let _ = pending.reply.send(Answer::Failed(errno, step));
            }
        }
        Reply::Exited { pid, status } => {
            if let Some(exit) = state.exits.remove(&pid) {
                let _ = exit.send(status);
            }
        }
        Reply::Ready { .. } => {}
    }
}
