//! One exec: take the session lock, write the command to `command.sh` (0600), run a fresh
//! shell in its own process group with the static wrapper (the command is never spliced into
//! shell text), stdout/stderr straight into the session's `stdout.log`/`stderr.log`, kill the
//! group on timeout, commit the new state only if the shell saved it completely, and return
//! capped output. Must not hold the lock past the exec or print.

use crate::bounded_read::{self, Links};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::lock::SessionLock;
use super::{read_metadata, ExecOptions, ShellSession, ShellStatus};
use crate::session::error::SessionError;
use crate::session::files::{
    append_private_file, create_private_file, now_rfc3339, remove_if_present, write_private,
};

pub(crate) const STATE_FILE: &str = "env.sh";
pub(crate) const OPTIONS_FILE: &str = "options.sh";
pub(crate) const CWD_FILE: &str = "work_dir.txt";
const COMMAND_FILE: &str = "command.sh";
const STDOUT_FILE: &str = "stdout.log";
const STDERR_FILE: &str = "stderr.log";
pub(crate) const HISTORY_FILE: &str = "history.log";
/// Scratch files the bash wrapper lists variable and function names into.
const SCRATCH_FILES: [&str; 2] = ["names.vars", "names.fns"];
/// Written by the wrapper, committed in this order. They are created empty (0600) before the
/// shell starts (so its umask never widens them, and it only appends: no slow truncation).
/// `work_dir.next` is written last: when it is non-empty, the other two are complete.
const NEXT_FILES: [(&str, &str); 3] = [
    ("env.next", STATE_FILE),
    ("options.next", OPTIONS_FILE),
    ("work_dir.next", CWD_FILE),
];
/// Exit code reported for a timed-out command (GNU `timeout` convention).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// What an exec returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutcome {
    /// The command's stdout, at most `output_cap` bytes (cut at a UTF-8 boundary).
    pub stdout: String,
    /// The command's stderr, likewise capped.
    pub stderr: String,
    /// The exit code; 124 on timeout, 128 + N when killed by signal N.
    pub exit_code: i32,
    /// Wall time of the exec, in milliseconds.
    pub execution_time_ms: u64,
    /// The timeout killed it (the session's state is then left as it was before).
    pub timed_out: bool,
    /// True when either stream was cut at the cap; the full text is in the files below.
    pub truncated: bool,
    /// The full stdout (`stdout.log` in the session folder), when cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_file: Option<PathBuf>,
    /// The full stderr, when cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_file: Option<PathBuf>,
}

pub(crate) async fn exec(
    session: &ShellSession,
    command: &str,
    options: ExecOptions,
) -> Result<ExecOutcome, SessionError> {
    if command.trim().is_empty() {
        return Err(SessionError::EmptyCommand {
            id: session.id.clone(),
        });
    }
    let dir = session.dir.as_path();
    let _lock = SessionLock::acquire(dir).await?;
    let metadata = read_metadata(dir)?;
    if metadata.status == ShellStatus::Terminated {
        return Err(SessionError::Terminated {
            id: session.id.clone(),
        });
    }
    // A complete state left by an exec that died before committing it is rolled forward.
    commit_state(dir)?;
    for (next, _) in NEXT_FILES {
        write_private(&dir.join(next), b"")?;
    }
    for scratch in SCRATCH_FILES {
        write_private(&dir.join(scratch), b"")?;
    }
    write_private(&dir.join(COMMAND_FILE), command.as_bytes())?;
    let (cwd, cwd_warning) = working_dir(dir, &metadata.work_dir);

    let stdout_path = dir.join(STDOUT_FILE);
    let stderr_path = dir.join(STDERR_FILE);
    // Fresh files, not truncated ones: a background job of an earlier exec may still hold
    // the old file open, and its writes must not land (after a hole) in this exec's output.
    for path in [&stdout_path, &stderr_path] {
        remove_if_present(path)?;
    }
    let mut shell = tokio::process::Command::new(&metadata.shell_path);
    shell
        .args(metadata.flavor.startup_flags())
        .arg("-c")
        .arg(metadata.flavor.wrapper())
        .arg(&metadata.command)
        .arg(dir)
        .arg(session.config.secret_vars.join(" "))
        .env_clear()
        .env("PWD", &cwd)
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(create_private_file(&stdout_path)?)
        .stderr(create_private_file(&stderr_path)?)
        .process_group(0)
        .kill_on_drop(true);

    let started = Instant::now();
    let mut child = shell.spawn().map_err(|e| SessionError::Spawn {
        id: session.id.clone(),
        reason: format!("{}: {e}", metadata.shell_path.display()),
    })?;
    let (status, timed_out) = match tokio::time::timeout(options.timeout, child.wait()).await {
        Ok(waited) => (waited, false),
        Err(_) => {
            if let Some(pid) = child.id() {
                let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            (child.wait().await, true)
        }
    };
    let execution_time_ms = started.elapsed().as_millis() as u64;
    let status = status.map_err(|e| SessionError::Spawn {
        id: session.id.clone(),
        reason: e.to_string(),
    })?;
    let exit_code = if timed_out {
        TIMEOUT_EXIT_CODE
    } else {
        exit_code_of(status)
    };
    if !timed_out {
        commit_state(dir)?;
    }
    for scratch in SCRATCH_FILES {
        remove_if_present(&dir.join(scratch))?;
    }

    let (stdout, stdout_cut) = read_capped(&stdout_path, options.output_cap)?;
    let (mut stderr, stderr_cut) = read_capped(&stderr_path, options.output_cap)?;
    if let Some(warning) = cwd_warning {
        stderr.insert_str(0, &warning);
    }
    if timed_out {
        stderr.push_str(&format!(
            "\n[delta-sessions] command timed out after {} ms; its process group was killed. \
             The session keeps the state it had before this command.\n",
            options.timeout.as_millis()
        ));
    }

    // `metadata.json` is not rewritten per exec: the count, the last time and the cwd are
    // read back from `history.log` and `work_dir.txt` (see `describe`).
    append_history(dir, command, exit_code, execution_time_ms, timed_out)?;

    let truncated = stdout_cut || stderr_cut;
    Ok(ExecOutcome {
        stdout,
        stderr,
        exit_code,
        execution_time_ms,
        timed_out,
        truncated,
        stdout_file: truncated.then_some(stdout_path),
        stderr_file: truncated.then_some(stderr_path),
    })
}

/// The saved cwd, or a fallback (with a note for stderr) when it no longer exists.
fn working_dir(dir: &Path, start_dir: &Path) -> (PathBuf, Option<String>) {
    let saved = bounded_read::read(&dir.join(CWD_FILE), bounded_read::MARKER, Links::Refuse)
        .map(|bytes| PathBuf::from(cwd_from_bytes(&bytes)))
        .unwrap_or_else(|_| start_dir.to_path_buf());
    if saved.is_dir() {
        return (saved, None);
    }
    let fallback = PathBuf::from("/");
    let warning = format!(
        "[delta-sessions] working directory {} no longer exists; running in /\n",
        saved.display()
    );
    (fallback, Some(warning))
}

pub(crate) fn cwd_from_bytes(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

/// A signal death is reported as 128 + signal, like a shell does (never as success).
fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1)
}

/// Commits `*.next` only when the wrapper finished writing all of them; otherwise (the
/// command `exec`'d away, replaced the EXIT trap, or was killed) the old state stays.
fn commit_state(dir: &Path) -> Result<(), SessionError> {
    let complete = fs::metadata(dir.join("work_dir.next")).is_ok_and(|m| m.len() > 0);
    if !complete {
        return Ok(());
    }
    // Unlink, then rename: renaming over an existing file costs milliseconds on ext4
    // (auto_da_alloc). A crash in between is repaired by the roll-forward at the next exec,
    // because `work_dir.next` is committed last.
    for (next, current) in NEXT_FILES {
        let from = dir.join(next);
        if !from.exists() {
            continue;
        }
        let to = dir.join(current);
        remove_if_present(&to)?;
        fs::rename(&from, &to)
            .map_err(|e| SessionError::io("cannot commit session state", &from, e))?;
    }
    Ok(())
}

/// Reads at most `cap` bytes, cut back to a UTF-8 boundary; `true` when the file is longer.
fn read_capped(path: &Path, cap: usize) -> Result<(String, bool), SessionError> {
    let file = bounded_read::open(path, Links::Refuse)
        .map_err(|e| SessionError::io("cannot read", path, e.into()))?;
    let mut bytes = Vec::new();
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SessionError::io("cannot read", path, e))?;
    let truncated = bytes.len() > cap;
    if truncated {
        bytes.truncate(cap);
        if let Err(e) = std::str::from_utf8(&bytes) {
            if e.error_len().is_none() {
                bytes.truncate(e.valid_up_to());
            }
        }
    }
    Ok((String::from_utf8_lossy(&bytes).into_owned(), truncated))
}

fn append_history(
    dir: &Path,
    command: &str,
    exit_code: i32,
    duration_ms: u64,
    timed_out: bool,
) -> Result<(), SessionError> {
    let path = dir.join(HISTORY_FILE);
    let mut line = serde_json::json!({
        "timestamp": now_rfc3339(),
        "command": command,
        "exit_code": exit_code,
        "duration_ms": duration_ms,
        "timed_out": timed_out,
    })
    .to_string();
    line.push('\n');
    append_private_file(&path)?
        .write_all(line.as_bytes())
        .map_err(|e| SessionError::io("cannot append to", &path, e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn capped_reads_cut_on_a_character_boundary() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out");
        fs::write(&path, "aé".repeat(10)).unwrap();
        let (text, cut) = read_capped(&path, 4).unwrap();
        assert!(cut);
        assert_eq!(text, "aéa");
        let (text, cut) = read_capped(&path, 1000).unwrap();
        assert!(!cut);
        assert_eq!(text, "aé".repeat(10));
    }

    #[test]
    fn a_commit_cut_short_by_a_crash_is_rolled_forward() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        // The crash hit after env.sh was committed and options.sh unlinked.
        fs::write(dir.join(STATE_FILE), "new state").unwrap();
        fs::write(dir.join("options.next"), "new options").unwrap();
        fs::write(dir.join("work_dir.next"), "/new\n").unwrap();
        fs::write(dir.join(CWD_FILE), "/old\n").unwrap();
        commit_state(dir).unwrap();
        assert_eq!(
            fs::read_to_string(dir.join(STATE_FILE)).unwrap(),
            "new state"
        );
        assert_eq!(
            fs::read_to_string(dir.join(OPTIONS_FILE)).unwrap(),
            "new options"
        );
        assert_eq!(fs::read_to_string(dir.join(CWD_FILE)).unwrap(), "/new\n");
        assert!(!dir.join("work_dir.next").exists());
    }

    #[test]
    fn state_is_committed_only_when_complete() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        fs::write(dir.join(STATE_FILE), "old").unwrap();
        fs::write(dir.join("env.next"), "new").unwrap();
        commit_state(dir).unwrap();
        assert_eq!(fs::read_to_string(dir.join(STATE_FILE)).unwrap(), "old");
        fs::write(dir.join("options.next"), "o").unwrap();
        fs::write(dir.join("work_dir.next"), "").unwrap();
        commit_state(dir).unwrap();
        assert_eq!(fs::read_to_string(dir.join(STATE_FILE)).unwrap(), "old");
        fs::write(dir.join("work_dir.next"), "/tmp\n").unwrap();
        commit_state(dir).unwrap();
        assert_eq!(fs::read_to_string(dir.join(STATE_FILE)).unwrap(), "new");
        assert_eq!(
            cwd_from_bytes(&fs::read(dir.join(CWD_FILE)).unwrap()),
            "/tmp"
        );
    }
}
