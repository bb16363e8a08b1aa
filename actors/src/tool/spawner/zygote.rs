//! tool::spawner::zygote — the spawner process's main loop (`delta __spawner`): starts tools
//! on the engine's behalf and reports when their leaders exit, until the engine is gone.
//!
//! The engine starts this process before any run opened a file, with one end of a SEQPACKET
//! socket as its stdin. A process this small starts a tool in ~0.6 ms; the engine itself, once
//! it holds thousands of descriptors, pays ~1.4 ms (fork copies the descriptor table and exec
//! closes it). The main thread `poll`s the control socket and a SIGCHLD self-pipe; a burst's
//! `posix_spawn`s are spread over one thread per CPU (at most [`MAX_LAUNCH_THREADS`], see
//! [`Helpers`]), and only the main thread reaps, keeps the live set and replies.
//!
//! Owns: request handling (one `posix_spawn` per request, answered in order; the requests
//! already queued when it wakes, up to [`REPLIES_PER_MESSAGE`], are started together and
//! answered in one message, which wakes the engine's reader once instead of once per reply),
//! reaping its
//! children (`waitpid`, raw status reported), and the engine's death: EOF on the control
//! socket — whichever way the engine ended, `kill -9` included — SIGKILLs the process group
//! of every tool whose leader still runs, then returns. (`PR_SET_PDEATHSIG` is not used: it
//! fires when the engine *thread* that started us exits, not the engine.)
//! Must not: write to stdout or stderr, ignore a request (every one gets `Spawned` or
//! `Failed`), or keep a descriptor a tool could inherit (all are close-on-exec, the ones it
//! inherited from the engine included), or be readable by its tools (it is non-dumpable and
//! started with an empty environment: `tool::isolation`). It ignores
//! SIGINT, SIGTERM, SIGHUP and SIGQUIT: a Ctrl-C is the engine's to handle, and the tools it
//! is still supervising need their exit reported; tools get those signals back at default
//! (except the ones the engine itself ignored, e.g. under `nohup`: tools inherit those ignored,
//! as they would from the engine).

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::Pid;

use super::exec::Launcher;
use super::protocol::{self, Reply, RequestHeader, PROTOCOL_VERSION, REPLIES_PER_MESSAGE};

/// The most threads that start tools at once (see [`Helpers`]).
const MAX_LAUNCH_THREADS: usize = 4;
use super::sys;

/// Why the spawner could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Stdin is not the engine's control socket: the command was run by hand.
    #[error(
        "this command is internal to delta: the engine starts it with its control socket as \
         stdin, and stdin here is not a SOCK_SEQPACKET socket (nothing to do; run `delta run` \
         or `delta orchestrate` instead)"
    )]
    NotAControlSocket,
    /// A system call needed to serve failed.
    #[error("the tool spawner cannot {action}: {source}")]
    Setup {
        /// What it was doing, as a verb phrase.
        action: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

fn setup(action: &'static str) -> impl FnOnce(io::Error) -> ServeError {
    move |source| ServeError::Setup { action, source }
}

/// Serves the engine whose control socket is this process's stdin, until the engine is gone.
/// The hidden `delta __spawner` subcommand calls this; an embedder that ships its own binary
/// can call it the same way (see [`super::SpawnerCommand`]).
pub fn serve_stdin() -> Result<(), ServeError> {
    // SAFETY: descriptor 0 stays open for the life of the process (nothing here closes it).
    let control = unsafe { BorrowedFd::borrow_raw(0) };
    if sys::socket_type(control).ok() != Some(libc::SOCK_SEQPACKET) {
        return Err(ServeError::NotAControlSocket);
    }
    sys::set_cloexec(control).map_err(setup("mark its control socket close-on-exec"))?;
    // A tool must not inherit what the engine inherited (the spawner gets it in turn), nor
    // read this process's memory: tools are its children.
    crate::tool::isolation::close_inherited_descriptors_on_exec()
        .map_err(setup("mark inherited descriptors close-on-exec"))?;
    crate::tool::isolation::forbid_inspection().map_err(setup("make itself non-dumpable"))?;
    let ignored_by_the_engine = ignore_stop_signals()?;
    let (wake_read, wake_write) = sys::cloexec_pipe().map_err(setup("create its wake pipe"))?;
    for end in [&wake_read, &wake_write] {
        sys::set_nonblocking(end.as_fd()).map_err(setup("configure its wake pipe"))?;
    }
    install_sigchld_wake(&wake_write)?;
    let dev_null: OwnedFd = File::open("/dev/null")
        .map_err(setup("open /dev/null"))?
        .into();
    let launcher =
        Launcher::new(ignored_by_the_engine).map_err(setup("prepare posix_spawn attributes"))?;
    let launch = |slot: &mut Slot| slot.launch(&launcher, dev_null.as_fd());
    std::thread::scope(|scope| {
        let helpers = Helpers::start(scope, &launch, launch_threads() - 1)?;
        let mut zygote = Zygote::new(control, &launch, helpers);
        let ready = Reply::Ready {
            version: PROTOCOL_VERSION,
            pid: std::process::id(),
        };
        if zygote.send(ready) {
            zygote.serve(wake_read.as_fd());
        }
        zygote.kill_live_groups();
        // Dropping the zygote drops the helpers' job queues: they return, and the scope
        // joins them.
        Ok::<(), ServeError>(())
    })?;
    drop(wake_write);
    Ok(())
}

/// Threads that start tools at the same time, this one included: the number of CPUs, at
/// most [`MAX_LAUNCH_THREADS`].
fn launch_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_LAUNCH_THREADS)
}

/// Ignores the stop signals in the spawner itself, and answers which of them it was already
/// ignoring when it started: those were ignored by the engine (under `nohup`, or started in
/// the background by a shell), and a tool the engine started itself would inherit that, so
/// they stay ignored for tools instead of being reset to their default.
fn ignore_stop_signals() -> Result<SigSet, ServeError> {
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    let mut inherited = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGPIPE,
    ] {
        // SAFETY: installing SIG_IGN runs no code of ours in a signal context.
        let before = unsafe { sigaction(signal, &ignore) }
            .map_err(|e| setup("ignore stop signals")(e.into()))?;
        // SIGPIPE is no evidence: the Rust runtime ignores it in every Rust program at
        // start (this one too), and the engine's own starts reset it for tools.
        if before.handler() == SigHandler::SigIgn && signal != Signal::SIGPIPE {
            inherited.add(signal);
        }
    }
    Ok(inherited)
}

/// The write end of the wake pipe, for the SIGCHLD handler (-1 before it is set).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigchld(_: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) and errno access are async-signal-safe; errno is restored so the
        // interrupted code sees its own. A full pipe (EAGAIN) already holds a wake-up.
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, [1u8].as_ptr().cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// A self-pipe rather than a blocked SIGCHLD + signalfd: a process-directed signal goes to
/// any thread that does not block it, and a host binary (a test harness) may have others.
fn install_sigchld_wake(wake_write: &OwnedFd) -> Result<(), ServeError> {
    WAKE_FD.store(wake_write.as_raw_fd(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(on_sigchld),
        SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
        SigSet::empty(),
    );
    // SAFETY: the handler only performs async-signal-safe calls (see `on_sigchld`).
    unsafe { sigaction(Signal::SIGCHLD, &action) }
        .map_err(|e| setup("watch its children")(e.into()))?;
    Ok(())
}

/// One request taken from the control socket: its bytes and descriptors, then the outcome of
/// its launch. Slots are reused, so a burst allocates its buffers once.
struct Slot {
    buffer: Vec<u8>,
    len: usize,
    truncated: bool,
    fds: Vec<OwnedFd>,
    /// Where a spec sent in a memfd is read to.
    spec: Vec<u8>,
    outcome: Result<u32, i32>,
    /// With a failed outcome: the sandbox step that failed (0: the start itself).
    failed_step: u8,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            buffer: vec![0; protocol::REQUEST_BUFFER],
            len: 0,
            truncated: false,
            fds: Vec::new(),
            spec: Vec::new(),
            outcome: Err(libc::EPROTO),
            failed_step: 0,
        }
    }

    fn message(&self) -> &[u8] {
        &self.buffer[..self.len]
    }

    /// Starts the request's tool, records the outcome, and closes the request's descriptors
    /// (the tool holds its own copies now; ours must not outlive the request).
    fn launch(&mut self, launcher: &Launcher, dev_null: BorrowedFd<'_>) {
        let launched = if self.truncated {
            Err((libc::EPROTO, 0))
        } else {
            launch_request(
                launcher,
                dev_null,
                &self.buffer[..self.len],
                &mut self.fds,
                &mut self.spec,
            )
        };
        self.failed_step = launched.err().map_or(0, |(_, step)| step);
        self.outcome = launched.map_err(|(errno, _)| errno);
        self.fds.clear();
    }
}

/// The threads that start tools beside the main one, each fed its own queue.
///
/// Why: `posix_spawn` returns only once the child has called `execve`, and under load that
/// child waits for a CPU like any new process. One thread starting a burst's tools one after
/// the other then spent ≈ 0.4 ms asleep per tool and capped the whole engine at ≈ 2,200
/// tools/s with CPUs idle (BENCHMARKS.md, issue 14's sixth pass); with one thread per CPU
/// the waits overlap.
struct Helpers {
    queues: Vec<mpsc::Sender<(usize, Slot)>>,
    done: mpsc::Receiver<(usize, Slot)>,
}

/// What starts one slot's tool ([`Slot::launch`]; a stand-in in tests).
type Launch<'a> = dyn Fn(&mut Slot) + Sync + 'a;

impl Helpers {
    fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        launch: &'scope Launch<'scope>,
        count: usize,
    ) -> Result<Helpers, ServeError> {
        let (finished, done) = mpsc::channel();
        let mut queues = Vec::with_capacity(count);
        for index in 0..count {
            let (queue, jobs) = mpsc::channel::<(usize, Slot)>();
            let finished = finished.clone();
            std::thread::Builder::new()
                .name(format!("launch-{}", index + 1))
                .spawn_scoped(scope, move || {
                    for (position, mut slot) in jobs {
                        // Every slot goes back, so the main thread never waits for one
                        // that a panic swallowed; its request is answered as failed.
                        let launched =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                launch(&mut slot)
                            }));
                        if launched.is_err() {
                            slot.fds.clear();
                            slot.outcome = Err(libc::EIO);
                        }
                        if finished.send((position, slot)).is_err() {
                            return;
                        }
                    }
                })
                .map_err(setup("start its launch threads"))?;
            queues.push(queue);
        }
        Ok(Helpers { queues, done })
    }

    /// Launches every slot of `batch`, spread over the helpers and this thread; the slots
    /// come back in their order.
    fn launch_all(&self, batch: &mut Vec<Slot>, launch: &Launch<'_>) {
        if batch.len() < 2 || self.queues.is_empty() {
            batch.iter_mut().for_each(launch);
            return;
        }
        let threads = self.queues.len() + 1;
        let mut placed: Vec<Option<Slot>> = Vec::with_capacity(batch.len());
        let mut ours = Vec::new();
        let mut given = 0;
        for (position, slot) in batch.drain(..).enumerate() {
            placed.push(None);
            match position % threads {
                0 => ours.push((position, slot)),
                helper => match self.queues[helper - 1].send((position, slot)) {
                    Ok(()) => given += 1,
                    // A helper that is gone leaves its share to this thread.
                    Err(mpsc::SendError(job)) => ours.push(job),
                },
            }
        }
        for (position, mut slot) in ours {
            launch(&mut slot);
            placed[position] = Some(slot);
        }
        for _ in 0..given {
            match self.done.recv() {
                Ok((position, slot)) => placed[position] = Some(slot),
                Err(_) => break,
            }
        }
        // Only a helper thread that is gone loses a slot: a stand-in whose outcome is EIO.
        batch.extend(placed.into_iter().map(|slot| {
            slot.unwrap_or_else(|| {
                let mut lost = Slot::new();
                lost.outcome = Err(libc::EIO);
                lost
            })
        }));
    }
}

struct Zygote<'a> {
    control: BorrowedFd<'a>,
    launch: &'a Launch<'a>,
    helpers: Helpers,
    /// Leaders started and not yet reaped: their groups die with the engine.
    live: HashSet<u32>,
    /// The requests taken since the spawner last woke, launched together.
    batch: Vec<Slot>,
    spare: Vec<Slot>,
    /// Replies not sent yet (sent before the spawner waits again).
    outgoing: Vec<Reply>,
}

/// What one attempt to take a request found.
enum Taken {
    Request,
    /// No request was queued (only when not waiting for one).
    Nothing,
    /// The engine is gone.
    Gone,
}

impl<'a> Zygote<'a> {
    fn new(control: BorrowedFd<'a>, launch: &'a Launch<'a>, helpers: Helpers) -> Zygote<'a> {
        Zygote {
            control,
            launch,
            helpers,
            live: HashSet::new(),
            batch: Vec::new(),
            spare: Vec::new(),
            outgoing: Vec::new(),
        }
    }

    /// Serves requests and reports exits until the engine is gone.
    fn serve(&mut self, wake: BorrowedFd<'_>) {
        loop {
            self.collect_exits();
            if !self.flush() {
                return;
            }
            let mut fds = [
                PollFd::new(self.control, PollFlags::POLLIN),
                PollFd::new(wake, PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return,
            }
            let control_ready = fds[0].any().unwrap_or(true);
            let woken = fds[1].any().unwrap_or(false);
            if woken {
                drain(wake);
            }
            if !control_ready {
                continue;
            }
            // The request poll announced, then the ones already queued behind it: they are
            // started together and their answers leave together at the top of the loop.
            let mut gone = matches!(self.take_request(true), Taken::Gone);
            while !gone && self.batch.len() < REPLIES_PER_MESSAGE {
                match self.take_request(false) {
                    Taken::Request => {}
                    Taken::Nothing => break,
                    Taken::Gone => gone = true,
                }
            }
            if gone {
                return; // what was taken is dropped unstarted: nobody would supervise it
            }
            self.launch_batch();
        }
    }

    /// Queues `Exited` for every child that ended.
    fn collect_exits(&mut self) {
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: waitpid writes the status into a valid int.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            let Ok(pid) = u32::try_from(pid) else {
                return; // -1: no child at all (ECHILD)
            };
            if pid == 0 {
                return;
            }
            if self.live.remove(&pid) {
                self.outgoing.push(Reply::Exited { pid, status });
            }
        }
    }

    /// Sends the queued replies, [`REPLIES_PER_MESSAGE`] to a message. False when the
    /// engine is gone.
    fn flush(&mut self) -> bool {
        let mut message = Vec::with_capacity(protocol::REPLY_BUFFER);
        for replies in self.outgoing.chunks(REPLIES_PER_MESSAGE) {
            message.clear();
            for reply in replies {
                reply.encode_into(&mut message);
            }
            if sys::send_with_fds(self.control, &message, &[], sys::SendMode::Wait).is_err() {
                return false;
            }
        }
        self.outgoing.clear();
        true
    }

    /// Receives one request (waiting for it when `wait`, else only one already queued) into
    /// the batch.
    fn take_request(&mut self, wait: bool) -> Taken {
        let mut slot = self.spare.pop().unwrap_or_else(Slot::new);
        slot.fds.clear();
        let received = if wait {
            sys::recv_with_fds(self.control, &mut slot.buffer, &mut slot.fds)
        } else {
            sys::recv_queued_with_fds(self.control, &mut slot.buffer, &mut slot.fds)
        };
        let taken = match received {
            Ok(received) if received.len > 0 => {
                slot.len = received.len;
                slot.truncated = received.truncated;
                Taken::Request
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Taken::Nothing,
            Ok(_) | Err(_) => Taken::Gone,
        };
        if matches!(taken, Taken::Request) && protocol::request_id(slot.message()).is_some() {
            self.batch.push(slot);
        } else {
            // Not a request of ours (nothing to answer), or nothing received.
            slot.fds.clear();
            self.spare.push(slot);
        }
        taken
    }

    /// Starts the batch's tools and queues their answers in request order.
    fn launch_batch(&mut self) {
        // Every slot in the batch holds a request with an id (see `take_request`).
        let ids: Vec<u64> = self
            .batch
            .iter()
            .filter_map(|slot| protocol::request_id(slot.message()))
            .collect();
        self.helpers.launch_all(&mut self.batch, self.launch);
        for (id, slot) in ids.into_iter().zip(self.batch.drain(..)) {
            self.outgoing.push(match slot.outcome {
                Ok(pid) => {
                    self.live.insert(pid);
                    Reply::Spawned { id, pid }
                }
                Err(errno) => Reply::Failed {
                    id,
                    errno,
                    step: slot.failed_step,
                },
            });
            self.spare.push(slot);
        }
    }

    fn send(&self, reply: Reply) -> bool {
        sys::send_with_fds(self.control, &reply.encode(), &[], sys::SendMode::Wait).is_ok()
    }

    fn kill_live_groups(&mut self) {
        for pid in self.live.drain() {
            if let Ok(pgid) = i32::try_from(pid) {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
    }
}

fn drain(wake: BorrowedFd<'_>) {
    let mut sink = [0u8; 64];
    // Bounded: the pipe holds at most its capacity, and it is non-blocking.
    for _ in 0..1024 {
        match nix::unistd::read(wake.as_raw_fd(), &mut sink) {
            Ok(n) if n == sink.len() => continue,
            _ => return,
        }
    }
}

/// Decodes one request and starts its tool (confined first when it asks for a sandbox); on
/// failure the errno and the sandbox step that failed (0: the start itself).
fn launch_request(
    launcher: &Launcher,
    dev_null: BorrowedFd<'_>,
    message: &[u8],
    fds: &mut Vec<OwnedFd>,
    spec_buffer: &mut Vec<u8>,
) -> Result<u32, (i32, u8)> {
    let plain = |errno: i32| (errno, 0);
    let (header, inline_spec) =
        protocol::decode_request(message).map_err(|_| plain(libc::EPROTO))?;
    if fds.len() != header.expected_fds() {
        return Err(plain(libc::EPROTO));
    }
    let spec_bytes = if header.spec_in_memfd {
        let memfd = fds.pop().ok_or(plain(libc::EPROTO))?;
        read_spec(memfd, spec_buffer).map_err(plain)?;
        &spec_buffer[..]
    } else {
        inline_spec
    };
    let spec = protocol::decode_spec(spec_bytes).map_err(|_| plain(libc::EPROTO))?;
    let (stdin, streams) = stdin_and_streams(&header, fds, dev_null).map_err(plain)?;
    match &spec.sandbox {
        Some(sandbox) => super::confined::launch(
            &spec,
            sandbox,
            &launcher.defaults,
            [stdin, streams[0], streams[1]],
        ),
        None => launcher
            .launch(&spec, stdin, streams[0], streams[1])
            .map_err(plain),
    }
}

fn stdin_and_streams(
    header: &RequestHeader,
    fds: &[OwnedFd],
    dev_null: BorrowedFd<'_>,
) -> Result<(i32, [i32; 2]), i32> {
    let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    match (header.stdin_pipe, raw.as_slice()) {
        (true, [stdin, stdout, stderr]) => Ok((*stdin, [*stdout, *stderr])),
        (false, [stdout, stderr]) => Ok((dev_null.as_raw_fd(), [*stdout, *stderr])),
        _ => Err(libc::EPROTO),
    }
}

/// Reads a memfd spec from offset 0 (the engine's writes moved the shared file offset).
fn read_spec(memfd: OwnedFd, buffer: &mut Vec<u8>) -> Result<(), i32> {
    let file = File::from(memfd);
    let errno = |e: io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let len = file.metadata().map_err(errno)?.len();
    let len = usize::try_from(len)
        .ok()
        .filter(|len| *len <= protocol::MEMFD_SPEC_MAX)
        .ok_or(libc::E2BIG)?;
    buffer.clear();
    buffer.resize(len, 0);
    file.read_exact_at(buffer, 0).map_err(errno)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    /// Requests already queued when the spawner wakes are answered in one message: the
    /// engine's reader then wakes once for them. (Programs that do not exist: each answer is
    /// `Failed`, and no child is started.)
    #[test]
    fn queued_requests_are_answered_in_one_message() {
        let (engine, spawner) = sys::control_socket_pair().unwrap();
        let queued = 3u64;
        for id in 0..queued {
            let spec = protocol::encode_spec(
                std::ffi::OsStr::new("/nonexistent/tool").as_bytes(),
                [b"tool".as_slice()].into_iter(),
                std::iter::empty(),
                b"/",
                None,
            );
            let header = RequestHeader {
                id,
                stdin_pipe: false,
                spec_in_memfd: false,
            };
            let (out_read, out_write) = sys::cloexec_pipe().unwrap();
            let (err_read, err_write) = sys::cloexec_pipe().unwrap();
            let message = protocol::encode_request(header, &spec);
            sys::send_with_fds(
                engine.as_fd(),
                &message,
                &[out_write.as_fd(), err_write.as_fd()],
                sys::SendMode::Wait,
            )
            .unwrap();
            drop((out_read, err_read));
        }
        let (wake_read, _wake_write) = sys::cloexec_pipe().unwrap();
        let serving = std::thread::spawn(move || {
            let launcher = Launcher::new(SigSet::empty()).unwrap();
            let dev_null = File::open("/dev/null").unwrap();
            let launch = |slot: &mut Slot| slot.launch(&launcher, dev_null.as_fd());
            std::thread::scope(|scope| {
                let helpers = Helpers::start(scope, &launch, 1).unwrap();
                let mut zygote = Zygote::new(spawner.as_fd(), &launch, helpers);
                zygote.serve(wake_read.as_fd());
            });
        });
        let mut buffer = [0u8; protocol::REPLY_BUFFER];
        let mut fds = Vec::new();
        let received = sys::recv_with_fds(engine.as_fd(), &mut buffer, &mut fds).unwrap();
        let replies = Reply::decode_all(&buffer[..received.len]).unwrap();
        let ids: Vec<u64> = replies
            .iter()
            .map(|reply| match reply {
                Reply::Failed { id, errno, .. } => {
                    assert_eq!(*errno, libc::ENOENT);
                    *id
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            ids,
            (0..queued).collect::<Vec<_>>(),
            "all in one message, in order"
        );
        drop(engine);
        serving.join().unwrap();
    }

    /// A burst's starts overlap: each stand-in launch waits until all of them are in flight,
    /// which only happens when they run on different threads at once (one after the other,
    /// the first would give up after its deadline).
    #[test]
    fn a_burst_is_started_on_several_threads_at_once() {
        use std::sync::{Condvar, Mutex};
        use std::time::Duration;
        const THREADS: usize = 3;
        let in_flight = (Mutex::new(0usize), Condvar::new());
        let launch = |slot: &mut Slot| {
            let (count, changed) = &in_flight;
            let mut count = count.lock().unwrap();
            *count += 1;
            changed.notify_all();
            let (_count, waited) = changed
                .wait_timeout_while(count, Duration::from_secs(10), |n| *n < THREADS)
                .unwrap();
            slot.outcome = if waited.timed_out() {
                Err(libc::ETIMEDOUT)
            } else {
                Ok(0)
            };
        };
        std::thread::scope(|scope| {
            let helpers = Helpers::start(scope, &launch, THREADS - 1).unwrap();
            let mut batch: Vec<Slot> = (0..THREADS).map(|_| Slot::new()).collect();
            batch[1].len = 7; // marks a slot, to check the order they come back in
            helpers.launch_all(&mut batch, &launch);
            let outcomes: Vec<_> = batch.iter().map(|slot| slot.outcome).collect();
            assert_eq!(outcomes, vec![Ok(0); THREADS], "all started at once");
            assert_eq!(batch[1].len, 7, "slots come back in their order");
        });
    }

    /// A launch that panics on a helper thread costs its request an `EIO` answer, not the
    /// spawner: the helper lives on (a scope whose thread panicked would panic on leaving).
    #[test]
    fn a_launch_that_panics_on_a_helper_is_answered_as_failed() {
        let launch = |slot: &mut Slot| {
            assert!(slot.len != 1, "a launch that panics");
            slot.outcome = Ok(7);
        };
        std::thread::scope(|scope| {
            let helpers = Helpers::start(scope, &launch, 1).unwrap();
            for _ in 0..2 {
                let mut batch: Vec<Slot> = (0..2).map(|_| Slot::new()).collect();
                batch[1].len = 1; // the helper's slot
                helpers.launch_all(&mut batch, &launch);
                let outcomes: Vec<_> = batch.iter().map(|slot| slot.outcome).collect();
                assert_eq!(outcomes, vec![Ok(7), Err(libc::EIO)]);
            }
        });
    }
}
