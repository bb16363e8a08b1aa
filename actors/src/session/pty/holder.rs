//! The holder: the detached process (one per PTY session) that owns the PTY, the program
//! in it, the output ring buffer, `output.log`, `input.log` (input written while the
//! terminal echoes; none at all when asked), `metadata.json`, and serves the protocol on its
//! Unix socket. The binary runs [`run_holder`] after re-executing itself
//! with a hidden subcommand; this module never forks or prints.
//!
//! Threads: the accept loop (caller's thread), one per connection, a PTY reader (portable-pty
//! reads block), and a waiter that records the exit, keeps serving the remaining buffer for a
//! grace period, then removes the socket and exits the process.
//!
//! `output.log` is the session's append-only log: `logged` counts the bytes written to it, so
//! a `tail` client (the `delta serve` worker) can resume from any byte offset after it
//! reconnects, independently of the consuming `read`/`follow` buffer.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::sys::termios::LocalFlags;
use nix::unistd::Pid;
use portable_pty::{native_pty_system, CommandBuilder, MasterPty, PtySize};

use super::buffer::{last_lines, OutputRing, RING_CAPACITY};
use super::protocol::{read_frame, write_frame, Request, Response};
use super::{write_pty_metadata, PtyMetadata, PtyStatus, TerminalSize, START_ERROR_FILE};
use crate::session::error::SessionError;
use crate::session::files::{append_private_file, now_rfc3339, write_private};

/// How long a finished session keeps answering `read` before the holder exits.
const GRACE_AFTER_EXIT: Duration = Duration::from_secs(10);
/// How long `end` waits after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// After the program exits, how long the waiter lets the reader drain the PTY.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// Everything the holder needs, passed on its command line by the CLI.
#[derive(Debug, Clone)]
pub struct HolderArgs {
    /// The session's id.
    pub session_id: String,
    /// The session's folder (metadata.json, output.log, input.log).
    pub session_dir: PathBuf,
    /// The Unix socket to listen on, in the private socket folder.
    pub socket_path: PathBuf,
    /// The program's working directory.
    pub work_dir: PathBuf,
    /// The PTY's size.
    pub size: TerminalSize,
    /// The program's argv.
    pub command: Vec<OsString>,
    /// Keep `input.log` (what was written to the program while its terminal echoed it).
    /// `delta serve` keeps none: what a person types stays off disk.
    pub input_log: bool,
}

struct State {
    ring: OutputRing,
    reader_done: bool,
    exited: bool,
    exit_code: Option<i32>,
    /// Bytes written to `output.log` so far (the end offset of the log).
    logged: u64,
    /// Requests being answered; the holder never exits in the middle of a reply.
    in_flight: usize,
}

struct Shared {
    args: HolderArgs,
    pid: Option<u32>,
    state: Mutex<State>,
    changed: Condvar,
    writer: Mutex<Box<dyn Write + Send>>,
    /// Kept for `resize`; it must stay open for the life of the holder anyway.
    master: Mutex<Box<dyn MasterPty + Send>>,
    input_log: Mutex<Option<File>>,
    /// What `metadata.json` says, and when it was last rewritten for `last_accessed_at`.
    metadata: Mutex<(PtyMetadata, Instant)>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Runs the holder until the program exits (plus grace) or `shutdown`; on a start failure
/// the reason is also written to `<session_dir>/start_error` for the waiting CLI.
pub fn run_holder(args: HolderArgs) -> Result<(), SessionError> {
    let _ = nix::unistd::setsid();
    crate::session::close_inherited_fds();
    match start(&args) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = write_private(
                &args.session_dir.join(START_ERROR_FILE),
                e.to_string().as_bytes(),
            );
            let _ = std::fs::remove_file(&args.socket_path);
            Err(e)
        }
    }
}

fn start(args: &HolderArgs) -> Result<(), SessionError> {
    let start_failed = |reason: String| SessionError::StartFailed {
        id: args.session_id.clone(),
        command: args
            .command
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        reason,
    };
    let _ = std::fs::remove_file(&args.socket_path);
    let listener = UnixListener::bind(&args.socket_path)
        .map_err(|e| SessionError::io("cannot listen on", &args.socket_path, e))?;
    std::fs::set_permissions(&args.socket_path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| SessionError::io("cannot set mode 0600 on", &args.socket_path, e))?;

    let size = PtySize {
        rows: args.size.rows,
        cols: args.size.cols,
        pixel_width: 0,
        pixel_height: 0,
    };
    let pair = native_pty_system()
        .openpty(size)
        .map_err(|e| start_failed(format!("cannot open a PTY: {e}")))?;
    let mut command = CommandBuilder::from_argv(args.command.clone());
    command.cwd(&args.work_dir);
    command.env("TERM", "xterm-256color");
    command.env_remove(crate::session::shell::DELTA_API_KEY_VAR);
    let mut child = pair
        .slave
        .spawn_command(command)
        .map_err(|e| start_failed(e.to_string()))?;
    drop(pair.slave);
    let reader = pair
        .master
        .try_clone_reader()
        .map_err(|e| start_failed(e.to_string()))?;
    let writer = pair
        .master
        .take_writer()
        .map_err(|e| start_failed(e.to_string()))?;

    let pid = child.process_id();
    let now = now_rfc3339();
    let metadata = PtyMetadata {
        session_id: args.session_id.clone(),
        command: args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        pid,
        holder_pid: std::process::id(),
        created_at: now.clone(),
        last_accessed_at: now,
        status: PtyStatus::Running,
        exit_code: None,
        socket: args.socket_path.clone(),
        work_dir: args.work_dir.clone(),
    };
    write_pty_metadata(&args.session_dir, &metadata)?;

    let shared = Arc::new(Shared {
        args: args.clone(),
        pid,
        state: Mutex::new(State {
            ring: OutputRing::new(RING_CAPACITY),
            reader_done: false,
            exited: false,
            exit_code: None,
            logged: 0,
            in_flight: 0,
        }),
        changed: Condvar::new(),
        writer: Mutex::new(writer),
        master: Mutex::new(pair.master),
        input_log: Mutex::new(if args.input_log {
            append_private_file(&args.session_dir.join("input.log")).ok()
        } else {
            None
        }),
        metadata: Mutex::new((metadata, Instant::now())),
    });
    let output_log = append_private_file(&args.session_dir.join("output.log"))?;

    let reading = Arc::clone(&shared);
    std::thread::spawn(move || pump_output(&reading, reader, output_log));
    let waiting = Arc::clone(&shared);
    std::thread::spawn(move || {
        let status = child.wait();
        let code = status.map(|s| s.exit_code() as i32).ok();
        record_exit(&waiting, code);
    });

    // The loop below never returns normally (the process exits from `finish`).
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let serving = Arc::clone(&shared);
        std::thread::spawn(move || serve(&serving, stream));
    }
    Ok(())
}

fn pump_output(shared: &Shared, mut reader: Box<dyn Read + Send>, mut log: File) {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let logged = match log.write_all(&chunk[..n]) {
                    Ok(()) => None,
                    // A partial write: the file length is the truth for `tail` offsets.
                    Err(_) => log.metadata().ok().map(|m| m.len()),
                };
                let mut state = shared.lock();
                state.logged = logged.unwrap_or(state.logged + n as u64);
                state.ring.push(&chunk[..n]);
                drop(state);
                shared.changed.notify_all();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    shared.lock().reader_done = true;
    shared.changed.notify_all();
}

fn record_exit(shared: &Shared, code: Option<i32>) {
    let deadline = Instant::now() + DRAIN_AFTER_EXIT;
    let mut state = shared.lock();
    while !state.reader_done {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        state = wait_for(shared, state, Some(left));
    }
    state.exited = true;
    state.exit_code = code;
    drop(state);
    shared.changed.notify_all();
    {
        let mut guard = shared.metadata.lock().unwrap_or_else(|p| p.into_inner());
        let metadata = &mut guard.0;
        metadata.status = PtyStatus::Dead;
        metadata.exit_code = code;
        let _ = write_pty_metadata(&shared.args.session_dir, metadata);
    }

    let deadline = Instant::now() + GRACE_AFTER_EXIT;
    let mut state = shared.lock();
    while !state.ring.is_empty() || state.in_flight > 0 {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        state = wait_for(shared, state, Some(left));
    }
    drop(state);
    finish(shared);
}

fn wait_for<'a>(
    shared: &'a Shared,
    state: MutexGuard<'a, State>,
    limit: Option<Duration>,
) -> MutexGuard<'a, State> {
    match limit {
        Some(limit) => {
            shared
                .changed
                .wait_timeout(state, limit)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0
        }
        None => shared
            .changed
            .wait(state)
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    }
}

fn finish(shared: &Shared) -> ! {
    let _ = std::fs::remove_file(&shared.args.socket_path);
    std::process::exit(0)
}

fn serve(shared: &Shared, stream: UnixStream) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut input = BufReader::new(read_half);
    let mut output = stream;
    while let Ok(Some(request)) = read_frame::<Request>(&mut input) {
        shared.lock().in_flight += 1;
        let answered = answer(shared, request, &mut output);
        shared.lock().in_flight -= 1;
        shared.changed.notify_all();
        if !answered {
            return;
        }
    }
}

/// Handles one request; `false` when the connection is done.
fn answer(shared: &Shared, request: Request, output: &mut UnixStream) -> bool {
    if !matches!(request, Request::Ping) {
        touch(shared);
    }
    let response = match request {
        Request::Ping => pong(shared),
        Request::Write { data } => write_input(shared, &data),
        Request::Read {
            timeout_ms,
            wait,
            lines,
        } => read_output(shared, timeout_ms, wait, lines),
        Request::Follow => {
            follow(shared, output);
            return false;
        }
        Request::Resize { cols, rows } => resize(shared, cols, rows),
        Request::Tail { from, at_most } => {
            tail(shared, from, at_most, output);
            return false;
        }
        Request::Shutdown => {
            terminate_program(shared);
            // The client removes the session folder once it has this answer, so nothing may
            // be created in it afterwards: `record_exit` and `touch` write metadata.json
            // (a temporary file, then a rename) only under this lock, which is held to exit.
            let _quiet = shared.metadata.lock().unwrap_or_else(|p| p.into_inner());
            let _ = std::fs::remove_file(&shared.args.socket_path);
            let _ = write_frame(output, &Response::Ok);
            std::process::exit(0)
        }
    };
    write_frame(output, &response).is_ok()
}

/// Refreshes `last_accessed_at` in `metadata.json`, at most once a second.
fn touch(shared: &Shared) {
    let mut guard = shared.metadata.lock().unwrap_or_else(|p| p.into_inner());
    if guard.1.elapsed() < Duration::from_secs(1) {
        return;
    }
    guard.1 = Instant::now();
    guard.0.last_accessed_at = now_rfc3339();
    let _ = write_pty_metadata(&shared.args.session_dir, &guard.0);
}

fn pong(shared: &Shared) -> Response {
    let state = shared.lock();
    Response::Pong {
        session_id: shared.args.session_id.clone(),
        alive: !state.exited,
        pid: shared.pid,
        exit_code: state.exit_code,
    }
}

fn write_input(shared: &Shared, data: &[u8]) -> Response {
    if shared.lock().exited {
        return Response::Dead;
    }
    let written = {
        let mut writer = shared.writer.lock().unwrap_or_else(|p| p.into_inner());
        writer.write_all(data).and_then(|()| writer.flush())
    };
    if let Err(e) = written {
        return Response::Error {
            message: format!("cannot write to the PTY: {e}"),
        };
    }
    let mut input_log = shared.input_log.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(log) = input_log.as_mut() {
        if echo_is_on(shared) {
            let _ = log.write_all(data);
        }
    }
    Response::Written { bytes: data.len() }
}

/// Whether the program's terminal echoes what is typed. Input written while it does not is
/// what a `getpass`, `read -s`, `sudo` or `ssh` prompt reads (a password): it is not logged.
/// Unknown counts as off.
fn echo_is_on(shared: &Shared) -> bool {
    let master = shared.master.lock().unwrap_or_else(|p| p.into_inner());
    master
        .get_termios()
        .is_some_and(|termios| termios.local_flags.contains(LocalFlags::ECHO))
}

/// When a read stops waiting: `(deadline, wait without limit)`. A timeout too large for
/// the clock means no limit at all rather than an overflow panic.
fn read_deadline(timeout_ms: Option<u64>, wait: bool, now: Instant) -> (Option<Instant>, bool) {
    match timeout_ms.filter(|ms| *ms > 0) {
        None => (None, wait),
        Some(ms) => match now.checked_add(Duration::from_millis(ms)) {
            Some(deadline) => (Some(deadline), wait),
            None => (None, true),
        },
    }
}

fn read_output(
    shared: &Shared,
    timeout_ms: Option<u64>,
    wait: bool,
    lines: Option<usize>,
) -> Response {
    let mut state = shared.lock();
    let (deadline, wait) = read_deadline(timeout_ms, wait, Instant::now());
    if wait || deadline.is_some() {
        // Output that arrived before this read counts: waiting only while nothing is
        // buffered means a fast echo is returned at once instead of after the timeout.
        while state.ring.is_empty() && !state.exited {
            let limit = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) => Some(left),
                    None => break,
                },
                None => None,
            };
            state = wait_for(shared, state, limit);
        }
    }
    if state.exited && state.ring.is_empty() {
        return Response::Dead;
    }
    let exited = state.exited;
    let text = state.ring.take(exited);
    drop(state);
    shared.changed.notify_all();
    let data = match lines {
        Some(n) => last_lines(&text, n),
        None => text,
    };
    Response::Output { data }
}

fn follow(shared: &Shared, output: &mut UnixStream) {
    loop {
        let mut state = shared.lock();
        while state.ring.is_empty() && !state.exited {
            state = wait_for(shared, state, Some(Duration::from_millis(500)));
        }
        let done = state.exited;
        let text = state.ring.take(done);
        drop(state);
        shared.changed.notify_all();
        if !text.is_empty() && write_frame(output, &Response::Output { data: text }).is_err() {
            return;
        }
        if done {
            let _ = write_frame(output, &Response::End);
            return;
        }
    }
}

fn resize(shared: &Shared, cols: u16, rows: u16) -> Response {
    let size = PtySize {
        rows,
        cols,
        pixel_width: 0,
        pixel_height: 0,
    };
    let master = shared.master.lock().unwrap_or_else(|p| p.into_inner());
    match master.resize(size) {
        Ok(()) => Response::Ok,
        Err(e) => Response::Error {
            message: format!("cannot resize the PTY to {cols}x{rows}: {e}"),
        },
    }
}

/// Streams `output.log` from an offset as raw bytes until the program has exited and the
/// log is fully sent, or the client goes away. A slow client only slows this thread.
fn tail(shared: &Shared, from: u64, at_most: Option<u64>, output: &mut UnixStream) {
    let logged = shared.lock().logged;
    if from > logged {
        let message = format!("offset {from} is past the end of the log ({logged} bytes)");
        let _ = write_frame(output, &Response::Error { message });
        return;
    }
    let mut position = match at_most {
        Some(limit) => from.max(logged.saturating_sub(limit)),
        None => from,
    };
    let path = shared.args.session_dir.join("output.log");
    let Ok(mut log) = crate::bounded_read::open(&path, crate::bounded_read::Links::Refuse) else {
        let message = format!("cannot open {}", path.display());
        let _ = write_frame(output, &Response::Error { message });
        return;
    };
    let started = Response::Tailing {
        from: position,
        logged,
    };
    if write_frame(output, &started).is_err()
        || std::io::Seek::seek(&mut log, std::io::SeekFrom::Start(position)).is_err()
    {
        return;
    }
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let (end, done) = {
            let mut state = shared.lock();
            while state.logged <= position && !state.reader_done {
                state = wait_for(shared, state, Some(Duration::from_millis(500)));
            }
            (state.logged, state.reader_done)
        };
        while position < end {
            let want = chunk.len().min((end - position) as usize);
            let read = match log.read(&mut chunk[..want]) {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            if output.write_all(&chunk[..read]).is_err() {
                return;
            }
            position += read as u64;
        }
        if done && position >= shared.lock().logged {
            let _ = output.flush();
            return;
        }
    }
}

/// SIGTERM to the program's process group, up to 5 s, then SIGKILL.
fn terminate_program(shared: &Shared) {
    let Some(pid) = shared.pid else { return };
    let group = Pid::from_raw(pid as i32);
    if shared.lock().exited {
        return;
    }
    let _ = killpg(group, Signal::SIGTERM);
    let _ = nix::sys::signal::kill(group, Signal::SIGHUP);
    let deadline = Instant::now() + TERM_GRACE;
    let mut state = shared.lock();
    while !state.exited {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        state = wait_for(shared, state, Some(left));
    }
    if !state.exited {
        let _ = killpg(group, Signal::SIGKILL);
    }
}

#[cfg(test)]
mod read_deadline_tests {
    use super::*;

    #[test]
    fn a_huge_read_timeout_never_panics() {
        let now = Instant::now();
        let (deadline, wait) = read_deadline(Some(u64::MAX), false, now);
        assert!(wait || deadline.is_some_and(|d| d > now + Duration::from_secs(86_400)));
        assert_eq!(
            read_deadline(Some(1500), false, now),
            (Some(now + Duration::from_millis(1500)), false)
        );
        assert_eq!(read_deadline(Some(0), false, now), (None, false));
        assert_eq!(read_deadline(None, true, now), (None, true));
    }
}
