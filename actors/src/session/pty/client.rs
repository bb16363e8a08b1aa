//! The client side of PTY sessions, used by the `delta-sessions-pty` CLI and embedders:
//! start a holder and wait until it answers, then send it protocol requests. Liveness is
//! "the holder answers on its socket", never a PID guess. Owns no PTY and never prints.

use std::fs;
use std::io::{BufReader, ErrorKind};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::keys::key_bytes;
use super::protocol::{read_frame, write_frame, Request, Response};
use super::socket_dir::{ensure_private_dir, socket_path, verify_private_dir};
use super::{read_pty_metadata, PtyConfig, PtyMetadata, PtyStatus, TerminalSize, START_ERROR_FILE};
use crate::session::error::SessionError;
use crate::session::files::{
    check_session_id, create_private_dir, is_valid_session_id, new_session_id,
};
use crate::session::shell::CleanupReport;

/// How long `start` waits for a new holder to answer.
const START_TIMEOUT: Duration = Duration::from_secs(5);
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// Margin added to a read's own timeout before the client gives up on the holder.
const REPLY_MARGIN: Duration = Duration::from_secs(5);
/// `end` waits for SIGTERM (5 s) plus this.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(8);

/// Options of `read`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions {
    /// Wait up to this long for new output (0 or `None`: return what is buffered now).
    pub timeout_ms: Option<u64>,
    /// Wait without limit for new output.
    pub wait: bool,
    /// Return only the last N lines (the whole buffer is consumed).
    pub lines: Option<usize>,
}

/// What `start`, `status` and `list` report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PtySessionInfo {
    /// The session's id (`sess_` plus hex digits).
    pub session_id: String,
    /// What the holder last recorded.
    pub status: PtyStatus,
    /// The holder answered just now and its program has not exited (a recorded `running`
    /// whose holder is gone is not alive).
    pub alive: bool,
    /// The program's pid, once it started.
    pub pid: Option<u32>,
    /// The holder process's pid.
    pub holder_pid: u32,
    /// The program's argv.
    pub command: Vec<String>,
    /// When the session started (UTC, RFC 3339).
    pub created_at: String,
    /// The last request a client made to it.
    pub last_accessed_at: String,
    /// Seconds since `created_at`.
    pub uptime_seconds: u64,
    /// The program's exit code, once it exited by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// How [`PtySessions::start_with`] starts a session, beyond its command and size.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartOptions<'a> {
    /// Extra environment variables for the holder and so the program (`delta serve` marks
    /// its workers' processes this way).
    pub env: &'a [(String, String)],
    /// Variables of this process that neither the holder nor the program may inherit
    /// (`delta serve` withholds its token).
    pub withheld: &'a [&'a str],
    /// Keep no `input.log` at all (`delta serve`: what a person types stays off disk).
    /// Otherwise input written while the program's terminal does not echo (a password
    /// prompt) is left out of it.
    pub no_input_log: bool,
}

/// The PTY sessions of one folder.
#[derive(Debug, Clone)]
pub struct PtySessions {
    config: PtyConfig,
}

impl PtySessions {
    /// The sessions of `config.sessions_dir`.
    pub fn new(config: PtyConfig) -> Self {
        PtySessions { config }
    }

    /// Starts `command` (argv, passed verbatim) in a PTY of `size` under a new detached
    /// holder.
    pub fn start(
        &self,
        command: &[String],
        work_dir: &Path,
        size: TerminalSize,
    ) -> Result<PtySessionInfo, SessionError> {
        self.start_with(command, work_dir, size, &StartOptions::default())
    }

    /// [`PtySessions::start`] with [`StartOptions`] (how `delta serve` starts its workers).
    pub fn start_with(
        &self,
        command: &[String],
        work_dir: &Path,
        size: TerminalSize,
        options: &StartOptions<'_>,
    ) -> Result<PtySessionInfo, SessionError> {
        let id = new_session_id();
        let start_failed = |reason: String| SessionError::StartFailed {
            id: id.clone(),
            command: command.join(" "),
            reason,
        };
        if command.is_empty() {
            return Err(start_failed(
                "no command given; e.g. `start bash -i`".into(),
            ));
        }
        create_private_dir(&self.config.sessions_dir)?;
        ensure_private_dir(&self.config.runtime_dir)?;
        let dir = self.config.sessions_dir.join(&id);
        create_private_dir(&dir)?;
        let socket = socket_path(&self.config.runtime_dir, &id)?;
        let mut launcher = Command::new(&self.config.holder_exe);
        for name in options.withheld {
            launcher.env_remove(name);
        }
        launcher
            .arg("__holder")
            .arg(&id)
            .arg(&dir)
            .arg(&socket)
            .arg(work_dir)
            .arg("--cols")
            .arg(size.cols.to_string())
            .arg("--rows")
            .arg(size.rows.to_string());
        if options.no_input_log {
            launcher.arg("--no-input-log");
        }
        let mut holder = launcher
            .arg("--")
            .args(command)
            .envs(options.env.iter().map(|(key, value)| (key, value)))
            .current_dir(work_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                start_failed(format!(
                    "cannot run {}: {e}",
                    self.config.holder_exe.display()
                ))
            })?;

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(_)) = holder.try_wait() {
                // A program that finished at once (and left nothing to read) is a started
                // session that is already dead, not a failed start.
                let started = !dir.join(START_ERROR_FILE).exists();
                if let (true, Ok(metadata)) = (started, read_pty_metadata(&dir)) {
                    let exit_code = metadata.exit_code;
                    return Ok(info(metadata, false, exit_code));
                }
                let reason = crate::bounded_read::read_to_string(
                    &dir.join(START_ERROR_FILE),
                    crate::bounded_read::MARKER,
                    crate::bounded_read::Links::Refuse,
                )
                .unwrap_or_else(|_| "the holder exited before it was ready".into());
                let _ = fs::remove_dir_all(&dir);
                return Err(start_failed(reason));
            }
            if let Ok(info) = self.status(&id) {
                // Reap the holder if this process outlives it (embedders); the CLI just exits.
                std::thread::spawn(move || holder.wait());
                return Ok(info);
            }
            if Instant::now() >= deadline {
                let _ = holder.kill();
                let _ = holder.wait();
                let _ = fs::remove_dir_all(&dir);
                return Err(start_failed("the holder did not answer within 5 s".into()));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Sends raw bytes (already escape-parsed) to the program. Returns the byte count.
    pub fn write(&self, id: &str, data: &[u8]) -> Result<usize, SessionError> {
        let request = Request::Write {
            data: data.to_vec(),
        };
        match self.request(id, &request, Some(REPLY_MARGIN))? {
            Response::Written { bytes } => Ok(bytes),
            other => Err(unexpected(id, other)),
        }
    }

    /// Sends the bytes of a named key.
    pub fn write_key(&self, id: &str, key: &str) -> Result<usize, SessionError> {
        let bytes = key_bytes(key).ok_or_else(|| SessionError::InvalidKey {
            key: key.to_string(),
        })?;
        self.write(id, &bytes)
    }

    /// Takes the buffered output (see [`ReadOptions`]).
    pub fn read(&self, id: &str, options: ReadOptions) -> Result<String, SessionError> {
        let request = Request::Read {
            timeout_ms: options.timeout_ms,
            wait: options.wait,
            lines: options.lines,
        };
        let limit = if options.wait {
            None
        } else {
            Some(
                Duration::from_millis(options.timeout_ms.unwrap_or(0)).saturating_add(REPLY_MARGIN),
            )
        };
        match self.request(id, &request, limit)? {
            Response::Output { data } => Ok(data),
            other => Err(unexpected(id, other)),
        }
    }

    /// Streams output to `on_chunk` until the program exits and its output is drained.
    pub fn follow(
        &self,
        id: &str,
        on_chunk: &mut dyn FnMut(&str) -> std::io::Result<()>,
    ) -> Result<(), SessionError> {
        let (_, mut stream) = self.connect(id)?;
        write_frame(&mut stream, &Request::Follow).map_err(|e| protocol(id, e))?;
        let mut input = BufReader::new(stream);
        loop {
            match read_frame::<Response>(&mut input).map_err(|e| protocol(id, e))? {
                Some(Response::Output { data }) => on_chunk(&data).map_err(|e| protocol(id, e))?,
                Some(Response::End) | None => return Ok(()),
                Some(other) => return Err(unexpected(id, other)),
            }
        }
    }

    /// Stops the program (SIGTERM, up to 5 s, SIGKILL) and its holder, removes the folder.
    pub fn end(&self, id: &str) -> Result<(), SessionError> {
        let dir = self.session_dir(id)?;
        if let Ok((metadata, mut stream)) = self.connect(id) {
            if send(&mut stream, &Request::Shutdown, Some(SHUTDOWN_TIMEOUT)).is_ok() {
                wait_until_closed(&mut stream);
            }
            let _ = fs::remove_file(&metadata.socket);
        }
        fs::remove_dir_all(&dir).map_err(|e| SessionError::io("cannot remove", &dir, e))
    }

    /// Metadata reconciled with what the holder says right now.
    pub fn status(&self, id: &str) -> Result<PtySessionInfo, SessionError> {
        let dir = self.session_dir(id)?;
        let metadata = read_pty_metadata(&dir)?;
        let pong = match self.connect(id) {
            Ok((_, mut stream)) => send(&mut stream, &Request::Ping, Some(PING_TIMEOUT)).ok(),
            Err(unsafe_dir @ SessionError::UnsafeSocketDir { .. }) => return Err(unsafe_dir),
            Err(_) => None,
        };
        let (alive, exit_code) = match pong {
            Some(Response::Pong {
                alive, exit_code, ..
            }) => (alive, exit_code.or(metadata.exit_code)),
            _ => (false, metadata.exit_code),
        };
        Ok(info(metadata, alive, exit_code))
    }

    /// Every session of the folder with readable metadata, oldest first.
    pub fn list(&self) -> Result<Vec<PtySessionInfo>, SessionError> {
        let mut sessions: Vec<PtySessionInfo> = self
            .session_ids()?
            .iter()
            .filter_map(|id| self.status(id).ok())
            .collect();
        sessions.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(sessions)
    }

    /// Removes sessions whose program is dead; running ones are left alone.
    pub fn cleanup(&self) -> Result<CleanupReport, SessionError> {
        let mut report = CleanupReport::default();
        for id in self.session_ids()? {
            let dead = match self.status(&id) {
                Ok(info) => !info.alive,
                // Unreadable metadata while a holder starts up: not ours to judge yet.
                Err(_) => false,
            };
            if dead {
                self.end(&id)?;
                report.cleaned.push(id);
            } else {
                report.remaining.push(id);
            }
        }
        Ok(report)
    }

    /// The folder of session `id` (`metadata.json`, `output.log`, `input.log`).
    pub fn session_dir(&self, id: &str) -> Result<PathBuf, SessionError> {
        check_session_id(id)?;
        let dir = self.config.sessions_dir.join(id);
        if !dir.is_dir() {
            return Err(SessionError::NotFound {
                id: id.to_string(),
                dir: self.config.sessions_dir.clone(),
            });
        }
        Ok(dir)
    }

    fn session_ids(&self) -> Result<Vec<String>, SessionError> {
        let root = &self.config.sessions_dir;
        let entries = match fs::read_dir(root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SessionError::io("cannot list", root, e)),
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|id| is_valid_session_id(id))
            .collect();
        ids.sort();
        Ok(ids)
    }

    fn connect(&self, id: &str) -> Result<(PtyMetadata, UnixStream), SessionError> {
        let dir = self.session_dir(id)?;
        let metadata = read_pty_metadata(&dir)?;
        if let Some(socket_dir) = metadata.socket.parent() {
            verify_private_dir(socket_dir)?;
        }
        let stream = UnixStream::connect(&metadata.socket)
            .map_err(|_| SessionError::Dead { id: id.to_string() })?;
        Ok((metadata, stream))
    }

    fn request(
        &self,
        id: &str,
        request: &Request,
        limit: Option<Duration>,
    ) -> Result<Response, SessionError> {
        let (_, mut stream) = self.connect(id)?;
        let response = send(&mut stream, request, limit).map_err(|e| match e.kind() {
            // The holder exited between connect and reply: its program is gone.
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof => {
                SessionError::Dead { id: id.to_string() }
            }
            _ => protocol(id, e),
        })?;
        match response {
            Response::Dead => Err(SessionError::Dead { id: id.to_string() }),
            Response::Error { message } => Err(SessionError::Protocol {
                id: id.to_string(),
                reason: message,
            }),
            response => Ok(response),
        }
    }
}

fn send(
    stream: &mut UnixStream,
    request: &Request,
    limit: Option<Duration>,
) -> std::io::Result<Response> {
    stream.set_read_timeout(limit)?;
    write_frame(stream, request)?;
    let mut input = BufReader::new(stream);
    read_frame::<Response>(&mut input)?.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the holder closed the connection",
        )
    })
}

/// Returns once the holder has closed `stream`, which it does only by exiting (or after the
/// read timeout `send` set). Until then a thread of it may still be writing in the session
/// folder, and removing the folder under it fails with "Directory not empty".
fn wait_until_closed(stream: &mut UnixStream) {
    let mut scratch = [0u8; 64];
    loop {
        match std::io::Read::read(stream, &mut scratch) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    }
}

fn info(metadata: PtyMetadata, alive: bool, exit_code: Option<i32>) -> PtySessionInfo {
    let uptime_seconds = chrono::DateTime::parse_from_rfc3339(&metadata.created_at)
        .map(|created| (chrono::Utc::now() - created.to_utc()).num_seconds().max(0) as u64)
        .unwrap_or(0);
    PtySessionInfo {
        session_id: metadata.session_id,
        status: if alive {
            PtyStatus::Running
        } else {
            PtyStatus::Dead
        },
        alive,
        pid: metadata.pid,
        holder_pid: metadata.holder_pid,
        command: metadata.command,
        created_at: metadata.created_at,
        last_accessed_at: metadata.last_accessed_at,
        uptime_seconds,
        exit_code,
    }
}

fn protocol(id: &str, error: std::io::Error) -> SessionError {
    SessionError::Protocol {
        id: id.to_string(),
        reason: error.to_string(),
    }
}

fn unexpected(id: &str, response: Response) -> SessionError {
    SessionError::Protocol {
        id: id.to_string(),
        reason: format!("unexpected reply {response:?}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::DirBuilderExt;
    use std::os::unix::net::UnixListener;

    use super::*;

    /// A holder that answers `Shutdown`, then writes one more file in the session folder
    /// before it closes the connection, as the real holder's exit recorder may.
    fn fake_holder_writing_after_its_answer(
        listener: UnixListener,
        late_file: PathBuf,
    ) -> std::thread::JoinHandle<std::io::Result<()>> {
        std::thread::spawn(move || {
            let (stream, _) = listener.accept()?;
            let mut input = BufReader::new(stream.try_clone()?);
            let request: Option<Request> = read_frame(&mut input)?;
            assert!(matches!(request, Some(Request::Shutdown)), "{request:?}");
            let mut output = stream;
            write_frame(&mut output, &Response::Ok)?;
            // A client that does not wait for the close drops the connection right after
            // removing the folder: the read ends at once and the late write fails. One
            // that waits leaves the read to time out, and the file lands before removal.
            output.set_read_timeout(Some(Duration::from_millis(300)))?;
            let _ = output.read(&mut [0u8; 8]);
            fs::write(&late_file, b"exit recorded")
        })
    }

    #[test]
    fn end_removes_the_folder_only_after_the_holder_has_closed_its_connection() {
        let tmp = tempfile::tempdir().unwrap();
        let sessions_dir = tmp.path().join("sessions");
        let runtime_dir = tmp.path().join("run");
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&runtime_dir)
            .unwrap();
        let id = "sess_0123456789ab";
        let dir = sessions_dir.join(id);
        fs::create_dir_all(&dir).unwrap();
        let socket = socket_path(&runtime_dir, id).unwrap();
        let metadata = PtyMetadata {
            session_id: id.into(),
            command: vec!["bash".into()],
            pid: None,
            holder_pid: std::process::id(),
            created_at: "2026-01-01T00:00:00Z".into(),
            last_accessed_at: "2026-01-01T00:00:00Z".into(),
            status: PtyStatus::Running,
            exit_code: None,
            socket: socket.clone(),
            work_dir: tmp.path().into(),
        };
        fs::write(
            dir.join(super::super::METADATA_FILE),
            serde_json::to_vec(&metadata).unwrap(),
        )
        .unwrap();
        let holder = fake_holder_writing_after_its_answer(
            UnixListener::bind(&socket).unwrap(),
            dir.join("late"),
        );

        let sessions = PtySessions::new(PtyConfig {
            sessions_dir,
            runtime_dir,
            holder_exe: PathBuf::from("/nonexistent"),
        });
        let ended = sessions.end(id);
        let late_write = holder.join().unwrap();

        assert!(
            late_write.is_ok(),
            "the folder was removed under the holder: {late_write:?}"
        );
        ended.unwrap();
        assert!(!dir.exists());
    }
}
