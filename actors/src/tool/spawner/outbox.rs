//! tool::spawner::outbox — how a spawn request reaches the control socket without ever
//! blocking the caller's thread.
//!
//! Why: the caller is a run's arbiter thread, shared by hundreds of runs. When many runs start
//! tools at once the spawner falls behind, the socket's send buffer fills, and a blocking
//! `sendmsg` parked the whole arbiter until the spawner caught up (seen in the profile of
//! 1,000 concurrent runs as `sock_alloc_send_pskb` → `schedule` on the arbiter).
//!
//! How: a request is sent with `MSG_DONTWAIT` while nothing is queued. When the socket is
//! full it is queued, with the descriptors it carries, and a sender thread (started on the
//! first overflow) sends the queue in order with blocking sends. Once anything is queued,
//! later requests queue behind it, so requests reach the spawner in the order they were made.
//! Owns: the queue, its thread, and answering a queued request that can no longer be sent
//! (`NotStarted`: nothing started, the caller may start the tool in-process).
//! Must not: block the caller beyond a short lock, or hold the queue's lock across a
//! blocking send.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::replies::{Answer, Shared};
use super::sys::{self, SendMode};

/// A request waiting for room in the socket, with the descriptors it carries.
struct Queued {
    id: u64,
    message: Vec<u8>,
    fds: Vec<OwnedFd>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Queued>,
    /// The sender thread holds a request it took from `waiting` (order: nothing may be sent
    /// directly meanwhile).
    sending: bool,
    sender_started: bool,
    /// The spawner handle is gone: send what is queued (it fails) and stop.
    closed: bool,
}

/// The engine's queue of spawn requests the socket could not take yet.
#[derive(Default)]
pub(super) struct Outbox {
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// What became of a request handed to [`Outbox::send`].
#[derive(Debug)]
pub(super) enum Posted {
    /// In the socket.
    Sent,
    /// Queued behind a full socket; the sender thread sends it.
    Queued,
}

impl Outbox {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends request `id` now if the socket has room and nothing is queued before it, else
    /// queues it. An error means it was neither sent nor queued (the spawner is gone).
    pub(super) fn send(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        id: u64,
        message: Vec<u8>,
        fds: Vec<OwnedFd>,
    ) -> io::Result<Posted> {
        let mut queue = self.queue();
        if queue.waiting.is_empty() && !queue.sending {
            let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
            match sys::send_with_fds(shared.socket.as_fd(), &message, &borrowed, SendMode::NoWait) {
                Ok(()) => return Ok(Posted::Sent),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if queue.closed {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        queue.waiting.push_back(Queued { id, message, fds });
        if !queue.sender_started {
            let outbox = Arc::clone(self);
            let shared = Arc::clone(shared);
            std::thread::Builder::new()
                .name("delta-tool-sender".into())
                .spawn(move || outbox.send_queued(&shared))?;
            queue.sender_started = true;
        }
        drop(queue);
        self.wake.notify_one();
        Ok(Posted::Queued)
    }

    /// The sender thread: sends the queue in order, waiting for room each time, until the
    /// handle is closed and the queue is empty.
    fn send_queued(&self, shared: &Shared) {
        loop {
            let next = {
                let mut queue = self.queue();
                loop {
                    if let Some(next) = queue.waiting.pop_front() {
                        queue.sending = true;
                        break next;
                    }
                    if queue.closed {
                        return;
                    }
                    queue = self
                        .wake
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            let borrowed: Vec<BorrowedFd<'_>> = next.fds.iter().map(AsFd::as_fd).collect();
            let sent = sys::send_with_fds(
                shared.socket.as_fd(),
                &next.message,
                &borrowed,
                SendMode::Wait,
            );
            drop(borrowed);
            drop(next.fds);
            if sent.is_err() {
                // Never reached the spawner: nothing started. The reader may have answered
                // it already (the spawner died), then there is nobody left to tell.
                if let Some(pending) = shared.state().pending.remove(&next.id) {
                    let _ = pending.reply.send(Answer::NotStarted);
                }
            }
            self.queue().sending = false;
        }
    }

    /// The handle is gone: the sender thread sends (or fails) what is queued, then exits.
    pub(super) fn close(&self) {
        self.queue().closed = true;
        self.wake.notify_all();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tool::spawner::replies::{Pending, State};
    use std::time::Duration;
    use tokio::sync::oneshot;

    /// The engine's side of a socket pair whose send buffer holds only a few messages, and the
    /// spawner's end.
    fn small_socket() -> (Arc<Shared>, OwnedFd) {
        let (engine, spawner) = sys::control_socket_pair().unwrap();
        // The kernel's minimum (a few KiB): a handful of 1 KiB messages fill it.
        sys::set_send_buffer(engine.as_fd(), 1);
        let shared = Arc::new(Shared {
            socket: engine,
            state: Mutex::new(State::default()),
        });
        (shared, spawner)
    }

    fn message(id: u64) -> Vec<u8> {
        let mut bytes = id.to_le_bytes().to_vec();
        bytes.resize(1024, 0);
        bytes
    }

    fn pending(shared: &Shared, id: u64) -> oneshot::Receiver<Answer> {
        let (reply, answer) = oneshot::channel();
        let (exit, _) = oneshot::channel();
        shared.state().pending.insert(id, Pending { reply, exit });
        answer
    }

    /// Posts requests 0..count from another thread and returns how each was posted, failing
    /// the test if the posting thread does not return (a blocking send would park it).
    fn post_all(outbox: &Arc<Outbox>, shared: &Arc<Shared>, count: u64) -> Vec<Posted> {
        let (done, posted) = std::sync::mpsc::channel();
        let (outbox, shared) = (Arc::clone(outbox), Arc::clone(shared));
        std::thread::spawn(move || {
            for id in 0..count {
                let (read, write) = sys::cloexec_pipe().unwrap();
                drop(read);
                let how = outbox.send(&shared, id, message(id), vec![write]).unwrap();
                done.send(how).unwrap();
            }
        });
        (0..count)
            .map(|_| {
                posted
                    .recv_timeout(Duration::from_secs(30))
                    .expect("posting a request blocked its caller")
            })
            .collect()
    }

    #[test]
    fn a_full_socket_queues_requests_and_they_arrive_in_order_with_their_descriptors() {
        let (shared, spawner) = small_socket();
        let outbox = Arc::new(Outbox::default());
        let count = 64;
        let posted = post_all(&outbox, &shared, count);
        assert!(
            posted.iter().any(|p| matches!(p, Posted::Queued)),
            "the socket never filled: {posted:?}"
        );
        for id in 0..count {
            let mut buffer = [0u8; 2048];
            let mut fds = Vec::new();
            let got = sys::recv_with_fds(spawner.as_fd(), &mut buffer, &mut fds).unwrap();
            assert_eq!(got.len, 1024);
            assert_eq!(u64::from_le_bytes(buffer[..8].try_into().unwrap()), id);
            assert_eq!(fds.len(), 1, "request {id} lost its descriptor");
        }
        outbox.close();
    }

    #[test]
    fn a_queued_request_that_cannot_be_sent_is_answered_not_started() {
        let (shared, spawner) = small_socket();
        let outbox = Arc::new(Outbox::default());
        let count = 64;
        let answers: Vec<_> = (0..count).map(|id| pending(&shared, id)).collect();
        let posted = post_all(&outbox, &shared, count);
        let first_queued = posted
            .iter()
            .position(|p| matches!(p, Posted::Queued))
            .expect("the socket never filled");
        // The spawner goes away without reading anything.
        drop(spawner);
        for (id, answer) in answers.into_iter().enumerate().skip(first_queued) {
            let answer = answer.blocking_recv();
            assert_eq!(answer.ok(), Some(Answer::NotStarted), "request {id}");
        }
        outbox.close();
    }
}
