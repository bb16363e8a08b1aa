//! Starting and stopping a worker's program, blocking (callers use `spawn_blocking`): a new
//! `delta-sessions-pty` holder whose program carries the `DELTA_SESSION_ID` /
//! `DELTA_WORKER_ID` markers in its environment (and not the server's token), and the stop
//! that ends the holder (SIGTERM to the group, then SIGKILL) and then sweeps every process
//! still carrying the markers (background jobs a shell moved to groups of their own), TERM
//! then KILL.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::serve::model::HolderRef;
use crate::serve::ServeError;
use crate::session::pty::{read_pty_metadata, PtySessions, PtyStatus, StartOptions, TerminalSize};

pub const SESSION_MARKER: &str = "DELTA_SESSION_ID";
pub const WORKER_MARKER: &str = "DELTA_WORKER_ID";
/// Variables of the server's environment no worker may inherit: with the server's token,
/// one prompt-injected agent could drive every other worker (and run terminals); with the
/// token file's path, read it.
pub const WITHHELD_FROM_WORKERS: &[&str] = &["DELTA_SERVE_TOKEN", "DELTA_SERVE_TOKEN_FILE"];
/// How long marked processes get between SIGTERM and SIGKILL.
const SWEEP_GRACE: Duration = Duration::from_secs(2);

pub struct Launched {
    pub holder: HolderRef,
    pub pid: Option<u32>,
}

pub fn launch(
    pty: &PtySessions,
    argv: &[String],
    location: &Path,
    size: TerminalSize,
    session_id: &str,
    worker_id: &str,
) -> Result<Launched, ServeError> {
    let env = [
        (SESSION_MARKER.to_string(), session_id.to_string()),
        (WORKER_MARKER.to_string(), worker_id.to_string()),
    ];
    let info = pty
        .start_with(
            argv,
            location,
            size,
            &StartOptions {
                env: &env,
                withheld: WITHHELD_FROM_WORKERS,
                // What a person types into a worker (a password, a key pasted into an agent
                // CLI) stays off disk: no input log at all.
                no_input_log: true,
            },
        )
        .map_err(|e| ServeError::Worker(e.to_string()))?;
    let dir = pty
        .session_dir(&info.session_id)
        .map_err(|e| ServeError::Worker(e.to_string()))?;
    let metadata = read_pty_metadata(&dir).map_err(|e| ServeError::Worker(e.to_string()))?;
    Ok(Launched {
        holder: HolderRef {
            pty_session_id: info.session_id,
            holder_pid: info.holder_pid,
            socket: metadata.socket,
        },
        pid: info.pid,
    })
}

/// What a holder's folder says about it now.
pub enum HolderState {
    /// It answers: re-attach to the socket its own metadata names.
    Alive { socket: PathBuf },
    /// Its program exited (normally): show the log, do not revive.
    Exited {
        exit_code: Option<i32>,
        log: PathBuf,
    },
    /// It does not answer and never recorded an exit: killed or rebooted.
    Lost,
}

pub fn holder_state(pty: &PtySessions, holder: &HolderRef) -> HolderState {
    let Ok(dir) = pty.session_dir(&holder.pty_session_id) else {
        return HolderState::Lost;
    };
    match pty.status(&holder.pty_session_id) {
        Ok(info) if info.alive => match read_pty_metadata(&dir) {
            Ok(metadata) => HolderState::Alive {
                socket: metadata.socket,
            },
            Err(_) => HolderState::Lost,
        },
        _ => match read_pty_metadata(&dir) {
            Ok(metadata) if metadata.status == PtyStatus::Dead => HolderState::Exited {
                exit_code: metadata.exit_code,
                log: dir.join("output.log"),
            },
            _ => HolderState::Lost,
        },
    }
}

/// The output log of a holder's folder, if it is still there.
pub fn holder_log(pty: &PtySessions, holder: &HolderRef) -> Option<PathBuf> {
    pty.session_dir(&holder.pty_session_id)
        .ok()
        .map(|dir| dir.join("output.log"))
}

/// Ends the holder and its program, removes its folder, then kills what still carries the
/// worker's markers.
pub fn terminate(pty: &PtySessions, holder: Option<&HolderRef>, session_id: &str, worker_id: &str) {
    if let Some(holder) = holder {
        let _ = pty.end(&holder.pty_session_id);
    }
    sweep_marked(session_id, worker_id);
}

/// Pids (other than ours) whose environment carries both markers.
pub fn marked_pids(session_id: &str, worker_id: &str) -> Vec<i32> {
    let session = format!("{SESSION_MARKER}={session_id}");
    let worker = format!("{WORKER_MARKER}={worker_id}");
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                return false;
            };
            let mut has_session = false;
            let mut has_worker = false;
            for var in environ.split(|b| *b == 0) {
                has_session |= var == session.as_bytes();
                has_worker |= var == worker.as_bytes();
            }
            has_session && has_worker
        })
        .collect()
}

fn sweep_marked(session_id: &str, worker_id: &str) {
    let pids = marked_pids(session_id, worker_id);
    if pids.is_empty() {
        return;
    }
    for pid in &pids {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + SWEEP_GRACE;
    while Instant::now() < deadline && !marked_pids(session_id, worker_id).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in marked_pids(session_id, worker_id) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Reads the end of an earlier epoch's log as the next epoch's prelude.
pub fn previous_output(log: Option<&Path>, limit: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Some(path) = log else {
        return String::new();
    };
    let Ok(mut file) = crate::bounded_read::open(path, crate::bounded_read::Links::Refuse) else {
        return String::new();
    };
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(length.saturating_sub(limit)));
    let mut bytes = Vec::new();
    let _ = file.take(limit).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}
