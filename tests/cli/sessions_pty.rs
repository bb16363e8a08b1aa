//! `delta-sessions-pty` end to end with real programs: bash, python3, a raw-mode menu,
//! signals, dead-session detection, streaming, the private socket folder and cleanup.
//! Every command has a timeout and every test ends the sessions it started (guard on drop).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

struct Pty {
    tmp: tempfile::TempDir,
    started: Vec<String>,
}

impl Pty {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("xdg")).unwrap();
        Pty {
            tmp,
            started: Vec::new(),
        }
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::cargo_bin("delta-sessions-pty").unwrap();
        cmd.current_dir(self.tmp.path())
            .env("XDG_RUNTIME_DIR", self.tmp.path().join("xdg"))
            .env_remove("DELTA_SESSIONS_PTY_DIR")
            .timeout(LIMIT);
        cmd
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn start(&mut self, argv: &[&str]) -> String {
        let mut args = vec!["start"];
        args.extend_from_slice(argv);
        let value = self.json(&args);
        let id = value["session_id"].as_str().unwrap().to_string();
        self.started.push(id.clone());
        id
    }

    fn write(&self, id: &str, text: &str) {
        let out = self
            .cmd()
            .args(["write", id])
            .write_stdin(text)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    fn key(&self, id: &str, key: &str) {
        let value = self.json(&["write-key", id, key]);
        assert_eq!(value["status"], "sent");
    }

    /// Reads (500 ms per attempt, at most 40 attempts) until `needle` shows up.
    fn read_until(&self, id: &str, needle: &str) -> String {
        let mut seen = String::new();
        for _ in 0..40 {
            let out = self
                .cmd()
                .args(["read", id, "--timeout", "500"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?} after {seen:?}");
            seen.push_str(&String::from_utf8_lossy(&out.stdout));
            if seen.contains(needle) {
                return seen;
            }
        }
        panic!("never saw {needle:?} in {seen:?}");
    }

    /// `read --wait` returns "not running" once the program has exited and been drained.
    fn wait_until_dead(&self, id: &str) {
        for _ in 0..40 {
            let out = self.cmd().args(["read", id, "--wait"]).output().unwrap();
            if !out.status.success() {
                let err: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert!(
                    err["error"].as_str().unwrap().contains("not running"),
                    "{err}"
                );
                return;
            }
        }
        panic!("{id} never died");
    }

    fn socket_dir(&self) -> PathBuf {
        self.tmp.path().join("xdg/delta")
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        for id in &self.started {
            let _ = self.cmd().args(["end", id]).output();
            // If `end` failed, stop what this test started by its recorded pids.
            let metadata = self
                .tmp
                .path()
                .join(".sessions-pty")
                .join(id)
                .join("metadata.json");
            if let Ok(text) = std::fs::read_to_string(metadata) {
                let value: Value = serde_json::from_str(&text).unwrap_or_default();
                for key in ["pid", "holder_pid"] {
                    if let Some(pid) = value[key].as_i64() {
                        let pid = nix::unistd::Pid::from_raw(pid as i32);
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    }
                }
            }
        }
    }
}

#[test]
fn bash_round_trip() {
    let mut pty = Pty::new();
    let id = pty.start(&["bash", "--norc", "--noprofile", "-i"]);
    pty.write(&id, "echo $((40+2))\\n");
    pty.read_until(&id, "42");
    let value = pty.json(&["end", &id]);
    assert_eq!(value["status"], "terminated");
    assert!(!pty.tmp.path().join(".sessions-pty").join(&id).exists());
}

#[test]
fn python_repl_keeps_its_variables_between_turns() {
    let mut pty = Pty::new();
    let id = pty.start(&["python3", "-i", "-q"]);
    pty.read_until(&id, ">>>");
    pty.write(&id, "x = 40\\n");
    pty.read_until(&id, ">>>");
    pty.write(&id, "print(x + 2)\\n");
    pty.read_until(&id, "42");
}

#[test]
fn a_menu_is_driven_with_arrow_keys_and_enter() {
    let mut pty = Pty::new();
    let menu = pty.tmp.path().join("menu.sh");
    std::fs::write(
        &menu,
        r#"items=(one two three); sel=0
draw() { for i in "${!items[@]}"; do if ((i == sel)); then echo "> ${items[i]}"; else echo "  ${items[i]}"; fi; done; }
echo MENU-READY; draw
while IFS= read -rsn1 key; do
  if [[ $key == $'\x1b' ]]; then
    read -rsn2 rest
    [[ $rest == '[B' ]] && sel=$(( (sel + 1) % 3 ))
    [[ $rest == '[A' ]] && sel=$(( (sel + 2) % 3 ))
    draw
  elif [[ -z $key || $key == $'\r' ]]; then
    echo "selected: ${items[sel]}"; exit 0
  fi
done
"#,
    )
    .unwrap();
    let id = pty.start(&["bash", "--norc", menu.to_str().unwrap()]);
    pty.read_until(&id, "MENU-READY");
    pty.key(&id, "arrow_down");
    pty.read_until(&id, "> two");
    pty.key(&id, "enter");
    pty.read_until(&id, "selected: two");
}

#[test]
fn ctrl_c_interrupts_a_long_sleep() {
    let mut pty = Pty::new();
    let id = pty.start(&["bash", "--norc", "--noprofile", "-i"]);
    // The marker comes from the process that becomes `sleep`, so it is in the foreground
    // process group by the time ctrl+c is sent.
    pty.write(&id, "sh -c 'echo sleeping-$((2+3)); exec sleep 100'\\n");
    pty.read_until(&id, "sleeping-5");
    pty.key(&id, "ctrl+c");
    pty.write(&id, "echo done-$((1+1))\\n");
    pty.read_until(&id, "done-2");
}

#[test]
fn a_killed_program_shows_dead_in_status_and_list() {
    let mut pty = Pty::new();
    let id = pty.start(&["sleep", "100"]);
    let status = pty.json(&["status", &id]);
    assert_eq!(status["alive"], true);
    assert_eq!(status["status"], "running");
    let pid = status["pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    pty.wait_until_dead(&id);
    let status = pty.json(&["status", &id]);
    assert_eq!(status["status"], "dead");
    assert_eq!(status["alive"], false);
    let list = pty.json(&["list"]);
    assert_eq!(list[0]["session_id"], id.as_str());
    assert_eq!(list[0]["status"], "dead");
    let out = pty
        .cmd()
        .args(["write", &id])
        .write_stdin("x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn follow_streams_until_the_program_ends() {
    let mut pty = Pty::new();
    let id = pty.start(&[
        "bash",
        "--norc",
        "-c",
        "for i in 1 2 3 4 5; do echo n$i; sleep 0.05; done",
    ]);
    let out = pty.cmd().args(["read", &id, "--follow"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let positions: Vec<usize> = (1..=5)
        .map(|i| text.find(&format!("n{i}")).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
}

#[test]
fn the_started_command_keeps_its_own_flags() {
    let mut pty = Pty::new();
    let id = pty.start(&[
        "python3",
        "-c",
        "import sys; print(sys.argv[1:])",
        "--flag",
        "-x",
    ]);
    let out = pty.cmd().args(["read", &id, "--follow"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("['--flag', '-x']"),
        "{out:?}"
    );
}

#[test]
fn the_socket_folder_is_private_and_an_open_one_is_refused() {
    let mut pty = Pty::new();
    let id = pty.start(&["sleep", "100"]);
    let mode = std::fs::metadata(pty.socket_dir())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
    std::fs::set_permissions(pty.socket_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let status = pty.cmd().args(["status", &id]).output().unwrap();
    let start = pty.cmd().args(["start", "sleep", "1"]).output().unwrap();
    // Restore before asserting so the guard can end the session.
    std::fs::set_permissions(pty.socket_dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(status.status.code(), Some(1));
    assert_eq!(start.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&start.stderr).contains("unsafe"),
        "{start:?}"
    );
}

#[test]
fn cleanup_removes_only_dead_sessions() {
    let mut pty = Pty::new();
    let alive = pty.start(&["sleep", "100"]);
    let dead = pty.start(&["true"]);
    pty.wait_until_dead(&dead);
    let report = pty.json(&["cleanup"]);
    assert_eq!(report["cleaned"], serde_json::json!([dead]));
    assert_eq!(report["remaining"], serde_json::json!([alive]));
    assert_eq!(pty.json(&["status", &alive])["alive"], true);
}

#[test]
fn shell_and_pty_sessions_never_see_each_other() {
    let mut pty = Pty::new();
    let pty_id = pty.start(&["sleep", "100"]);
    let mut shell = Command::cargo_bin("delta-sessions").unwrap();
    let out = shell
        .current_dir(pty.tmp.path())
        .env_remove("DELTA_SESSIONS_DIR")
        .arg("start")
        .timeout(LIMIT)
        .output()
        .unwrap();
    let shell_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let list = pty.json(&["list"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["session_id"], pty_id.as_str());
    let mut shell = Command::cargo_bin("delta-sessions").unwrap();
    let out = shell
        .current_dir(pty.tmp.path())
        .env_remove("DELTA_SESSIONS_DIR")
        .arg("list")
        .timeout(LIMIT)
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["session_id"], shell_id.as_str());
    pty.json(&["cleanup"]);
    assert!(pty.tmp.path().join(".sessions").join(&shell_id).exists());
}

#[test]
fn bad_keys_and_unknown_sessions_are_errors_with_hints() {
    let mut pty = Pty::new();
    let id = pty.start(&["sleep", "100"]);
    let out = pty
        .cmd()
        .args(["write-key", &id, "ctrl+1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(err["error"].as_str().unwrap().contains("arrow_up"), "{err}");
    let out = pty.cmd().args(["read", "sess_0000ffff"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = pty
        .cmd()
        .args(["start", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(pty.json(&["list"]).as_array().unwrap().len() == 1);
}

#[test]
fn escapes_are_parsed_and_lines_trims_a_read() {
    let mut pty = Pty::new();
    let cat = pty.start(&["cat"]);
    pty.write(&cat, "\\x41\\u0042\\\\n\\n");
    // cat's terminal echoes the line and cat prints it again.
    let seen = pty.read_until(&cat, "AB\\n\r\nAB\\n\r\n");
    assert!(seen.starts_with("AB\\n"), "{seen:?}");
    // The program exits after printing, so once it is gone its whole output is buffered:
    // a read taken while the lines were still arriving would see only some of them.
    let id = pty.start(&[
        "python3",
        "-c",
        "import sys; sys.stdout.write('l1\\nl2\\nl3\\n'); sys.stdout.flush()",
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while pty.json(&["status", &id])["alive"] != false {
        assert!(
            std::time::Instant::now() < deadline,
            "the program did not exit"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = pty
        .cmd()
        .args(["read", &id, "--lines", "2"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "l2\r\nl3\r\n");
    // cat is still running and printed nothing since: what read_until took is gone.
    let out = pty.cmd().args(["read", &cat]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "a read consumes the buffer"
    );
}

#[test]
fn large_writes_cross_the_socket_intact() {
    let mut pty = Pty::new();
    let id = pty.start(&["bash", "--norc", "-c", "stty -echo; echo READY; wc -c"]);
    pty.read_until(&id, "READY");
    let line = format!("{}\n", "x".repeat(99));
    let payload = line.repeat(3_000);
    let out = pty
        .cmd()
        .args(["write", &id, "--raw"])
        .write_stdin(payload)
        .output()
        .unwrap();
    let sent: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sent["bytes"], 300_000);
    pty.key(&id, "ctrl+d");
    pty.read_until(&id, "300000");
}

#[test]
fn the_holder_does_not_keep_pipes_its_starter_leaked() {
    use nix::poll::{poll, PollFd, PollFlags};
    use std::os::fd::AsFd;
    let mut pty = Pty::new();
    // pipe() (not pipe2) leaves both ends inheritable, like a careless tool runner would.
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    let out = pty.cmd().args(["start", "sleep", "100"]).output().unwrap();
    drop(write_end);
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    pty.started.push(id);
    let mut fds = [PollFd::new(read_end.as_fd(), PollFlags::POLLIN)];
    let ready = poll(&mut fds, 10_000u16).unwrap();
    assert_eq!(ready, 1, "the write end is still held open by the holder");
    assert!(fds[0].revents().unwrap().contains(PollFlags::POLLHUP));
}

#[test]
fn even_in_one_shared_folder_neither_cleanup_deletes_the_others_sessions() {
    let mut pty = Pty::new();
    let shared = pty.tmp.path().join("shared");
    let shared_arg = shared.to_str().unwrap().to_string();
    let shell = |args: &[&str]| {
        let out = Command::cargo_bin("delta-sessions")
            .unwrap()
            .current_dir(pty.tmp.path())
            .arg("--sessions-dir")
            .arg(&shared_arg)
            .args(args)
            .timeout(LIMIT)
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let shell_id = shell(&["start"])["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    shell(&["end", &shell_id]);
    let dead_pty = pty.json(&["--sessions-dir", &shared_arg, "start", "true"])["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    pty.started.push(dead_pty.clone());
    let dead = (0..40).any(|_| {
        let out = pty
            .cmd()
            .args(["--sessions-dir", &shared_arg, "read", &dead_pty, "--wait"])
            .output()
            .unwrap();
        !out.status.success()
    });
    assert!(dead, "`true` never finished");
    // The shell tool cleans its terminated session and leaves the (dead) PTY session alone.
    assert_eq!(
        shell(&["cleanup"])["cleaned"],
        serde_json::json!([shell_id])
    );
    assert!(shared.join(&dead_pty).exists());
    let other_shell = shell(&["start"])["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    shell(&["end", &other_shell]);
    // The PTY tool cleans its dead session and leaves the shell session alone.
    let report = pty.json(&["--sessions-dir", &shared_arg, "cleanup"]);
    assert_eq!(report["cleaned"], serde_json::json!([dead_pty]));
    assert!(shared.join(&other_shell).exists());
}

#[test]
fn start_sets_the_terminal_size_the_program_sees() {
    let mut pty = Pty::new();
    let sized = pty.start(&[
        "--cols",
        "100",
        "--rows",
        "40",
        "sh",
        "-c",
        "stty size; sleep 5",
    ]);
    pty.read_until(&sized, "40 100");
    let default = pty.start(&["sh", "-c", "stty size; sleep 5"]);
    pty.read_until(&default, "30 120");
}

#[test]
fn an_out_of_range_terminal_size_is_refused_before_anything_starts() {
    let pty = Pty::new();
    let out = pty
        .cmd()
        .args(["start", "--cols", "1", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error: {out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--cols"),
        "{out:?}"
    );
    assert!(!pty.tmp.path().join(".sessions-pty").exists());
}

/// Regression (issue 11 item 17): usage errors were exit 1 with JSON on stdout plus text on
/// stderr; they are clap's text on stderr only, with exit 2, and `--help` has examples.
#[test]
fn usage_errors_are_text_on_stderr_with_exit_2_and_help_has_examples() {
    let pty = Pty::new();
    for args in [
        &["bogus"][..],
        &[][..],
        &["read"][..],
        &["start", "--cols", "1", "sh"][..],
    ] {
        let out = pty.cmd().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let help = pty.cmd().arg("--help").output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Examples:") && help.contains("write-key"),
        "{help}"
    );
}

/// Regression (issue 24 item 5): the sessions folder was chmod-ed to 0700 even when it was an
/// existing shared folder or a symlink to one. Both are now refused and left as they were.
#[test]
fn a_shared_or_symlinked_sessions_folder_is_refused_and_left_as_it_was() {
    let pty = Pty::new();
    let target = pty.tmp.path().join("shared");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&target, pty.tmp.path().join(".sessions-pty")).unwrap();
    let out = pty.cmd().args(["start", "bash"]).output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(".sessions-pty") && stderr.contains("symlink"),
        "{stderr}"
    );
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing started there"
    );
}

/// Regression (issue 24 item 12): a password written to a program that reads it with the
/// terminal's echo off (getpass, `read -s`, sudo, ssh) stayed in clear in `input.log`. Input
/// written while echo is off is no longer logged; input written while it is on still is.
#[test]
fn input_written_while_the_terminal_does_not_echo_is_not_logged() {
    let mut pty = Pty::new();
    let script =
        "stty -echo; printf 'Password: '; read -r pw; stty echo; echo; echo \"got ${#pw}\"; \
                  read -r line; echo \"line=$line\"; exec cat";
    let id = pty.start(&["bash", "--norc", "--noprofile", "-c", script]);
    pty.read_until(&id, "Password: ");
    pty.write(&id, "hunter2-secret\\n");
    pty.read_until(&id, "got 14");
    pty.write(&id, "visible-typed\\n");
    pty.read_until(&id, "line=visible-typed");
    let log = pty
        .tmp
        .path()
        .join(".sessions-pty")
        .join(&id)
        .join("input.log");
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("visible-typed"), "{log:?}");
    assert!(!log.contains("hunter2"), "{log:?}");
}
