//! The workspace's creation lock, `.delta/.creating.lock`, in hostile hands: a link or a FIFO
//! planted in its place (refused, never followed), and a process of the user that takes the
//! lock and keeps it (issue 31, item 3: every new run of the workspace hung, silently, and
//! the first Ctrl-C was ignored). The holder here is what a tool's daemon would be: `flock`
//! in its own session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::{case_with_a_run, fifo, link};
use crate::harness::*;

/// The workspace's creation lock (`.delta/.creating.lock`) replaced by a link to a file
/// elsewhere, or by a FIFO: a new run is refused (126) naming it, nothing is opened through
/// the link, and once it is removed the next run starts.
#[test]
fn a_link_or_fifo_planted_as_the_creation_lock_is_refused_and_not_followed() {
    let case = case_with_a_run("creation-lock");
    let lock = case.work_dir().join(".delta/.creating.lock");
    let outside = case.path().join("outside.txt");
    std::fs::write(&outside, "untouched\n").unwrap();
    let mode_before = std::fs::metadata(&outside).unwrap().permissions();

    link(&outside, &lock);
    let out = case.run("r2", "second", &[]);
    assert_eq!(out.code, 126, "{out:?}");
    assert!(
        out.stderr.contains(".creating.lock") && out.stderr.contains("symbolic link"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched\n");
    assert_eq!(
        std::fs::metadata(&outside).unwrap().permissions(),
        mode_before
    );
    assert!(!case.run_dir("r2").exists(), "the run started anyway");

    fifo(&lock);
    let out = case.run("r2", "second", &[]);
    assert_eq!(out.code, 126, "{out:?}");
    assert!(
        out.stderr.contains(".creating.lock") && out.stderr.contains("not a regular file"),
        "{}",
        out.stderr
    );

    std::fs::remove_file(&lock).unwrap();
    case.run("r2", "second", &[]).assert_code(0);
    assert!(lock.is_file(), "the lock is made again");
}

/// A daemon of the user holding the creation lock exclusively (`setsid flock -x`), holding
/// it when this returns; dropping it kills it (by its pid), which releases the lock (`-o`:
/// the command it runs does not inherit the lock), also when a test fails.
struct LockHolder(Child);

impl LockHolder {
    fn take(lock: &Path) -> LockHolder {
        let mut child = Command::new("setsid")
            .arg("flock")
            .args(["-x", "-o"])
            .arg(lock)
            .args(["-c", "echo held; exec cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "held\n", "the holder did not take the lock");
        LockHolder(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        // `cat` ends when its stdin (held by `self.0`) closes.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `delta run` of a new run `r2` in the background, stderr read line by line onto a channel.
fn run_in_background(case: &Case, env: &[(&str, &str)]) -> (Child, mpsc::Receiver<String>) {
    let mut cmd = case.spawn_cmd();
    cmd.envs(env.iter().copied())
        .args(case.run_args("r2", "second"))
        .args(["--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (child, received)
}

/// Waits (bounded) for a line of `lines` that contains `text`; every line read so far.
fn wait_for_line(lines: &mpsc::Receiver<String>, text: &str, limit: Duration) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(text);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(_) => break,
        }
    }
    panic!(
        "no line with {text:?} within {limit:?}; stderr so far:\n{}",
        seen.join("\n")
    );
}

/// Regression (issue 31, item 3): with another process holding the creation lock, `delta
/// run` printed nothing, ignored the first Ctrl-C and, at the second, named a run that was
/// never created. Now it says which file it waits for and which process holds it, the first
/// Ctrl-C ends the wait at once (exit 130), and no run is named or made.
#[test]
fn a_held_creation_lock_is_announced_and_the_first_ctrl_c_ends_the_wait_naming_no_run() {
    let case = case_with_a_run("lock-holder");
    let lock = case.work_dir().join(".delta/.creating.lock");
    let holder = LockHolder::take(&lock);
    let holder_pid = holder.pid();
    let (mut child, lines) = run_in_background(&case, &[]);
    let seen = wait_for_line(&lines, "waiting for", COMMAND_TIMEOUT);
    let waiting = seen.last().unwrap();
    assert!(
        waiting.contains(&lock.display().to_string())
            && waiting.contains(&format!("process {holder_pid} (flock)")),
        "{waiting}"
    );
    send_signal(child.id(), nix::sys::signal::Signal::SIGINT);
    // The wait is polled: the one Ctrl-C ends it (without the fix it never ended).
    let status = wait_child(&mut child, Duration::from_secs(10));
    drop(holder);
    let rest: Vec<String> = lines.iter().collect();
    let stderr = [seen, rest].concat().join("\n");
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("no run was created"), "{stderr}");
    for named in ["--run-id r2", "delta continue", "Resume with"] {
        assert!(
            !stderr.contains(named),
            "named a run that does not exist: {stderr}"
        );
    }
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert_eq!(stdout, "", "a RunResult of a run never created");
    assert!(!case.run_dir("r2").exists());
    // The holder gone, the run starts.
    case.run("r2", "second", &[]).assert_code(0);
}

/// A holder that never lets go: the run is refused at the end of its wait (126), naming
/// the file, the holder and what to do; nothing is created. A wait that is not a duration
/// is refused up front, naming the variable.
#[test]
fn a_creation_lock_held_past_the_wait_refuses_the_run_naming_file_and_holder() {
    let case = case_with_a_run("lock-deadline");
    let lock = case.work_dir().join(".delta/.creating.lock");
    let holder = LockHolder::take(&lock);
    let holder_pid = holder.pid();
    let (mut child, lines) = run_in_background(&case, &[("DELTA_CREATION_LOCK_WAIT", "2s")]);
    let status = wait_child(&mut child, COMMAND_TIMEOUT);
    drop(holder);
    let stderr: Vec<String> = lines.iter().collect();
    let stderr = stderr.join("\n");
    assert_eq!(status.code(), Some(126), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    for part in [
        lock.display().to_string(),
        format!("process {holder_pid} (flock)"),
        "stop that process".to_string(),
    ] {
        assert!(error.contains(&part), "{part:?} missing: {error}");
    }
    assert!(!case.run_dir("r2").exists());

    let out = case
        .cmd()
        .env("DELTA_CREATION_LOCK_WAIT", "forever")
        .args(case.run_args("r2", "second"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DELTA_CREATION_LOCK_WAIT='forever'"),
        "{stderr}"
    );
}
