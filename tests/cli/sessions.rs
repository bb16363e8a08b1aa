//! `delta-sessions` end to end: state across separate invocations, heredocs, timeouts,
//! concurrency across processes, hostile input, cleanup and error contract.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

fn cli(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("delta-sessions").unwrap();
    cmd.current_dir(dir)
        .env_remove("DELTA_SESSIONS_DIR")
        .env("DELTA_API_KEY", "sk-never-stored")
        .timeout(LIMIT);
    cmd
}

fn json_of(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)))
}

fn start(dir: &Path) -> String {
    let output = cli(dir).arg("start").output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let value = json_of(&output);
    assert_eq!(value["status"], "active");
    assert_eq!(value["command"], "bash");
    value["session_id"].as_str().unwrap().to_string()
}

fn exec(dir: &Path, id: &str, command: &str) -> Value {
    let output = cli(dir)
        .args(["exec", id])
        .write_stdin(command)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    json_of(&output)
}

#[test]
fn cwd_variables_functions_and_aliases_survive_separate_invocations() {
    let tmp = tempfile::tempdir().unwrap();
    let id = start(tmp.path());
    let out = cli(tmp.path())
        .args([
            "exec",
            &id,
            "cd /tmp; export A=1; B=2; f() { echo fn-$1; }; alias hi='echo alias-hi'",
        ])
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["exit_code"], 0);
    let out = exec(tmp.path(), &id, "pwd; echo $A $B; f x; hi\n");
    assert_eq!(out["stdout"], "/tmp\n1 2\nfn-x\nalias-hi\n");
    assert!(tmp
        .path()
        .join(".sessions")
        .join(&id)
        .join("history.log")
        .is_file());
}

#[test]
fn heredocs_with_any_delimiter_run_verbatim() {
    let tmp = tempfile::tempdir().unwrap();
    let id = start(tmp.path());
    let script = "cat <<'EOF'\nDELTA_CMD_EOF\nEOF_x\n'\"$(x)\nEOF\nfor i in 1 2 3; do\n  echo \"Number: $i\"\ndone\n";
    let out = exec(tmp.path(), &id, script);
    assert_eq!(
        out["stdout"],
        "DELTA_CMD_EOF\nEOF_x\n'\"$(x)\nNumber: 1\nNumber: 2\nNumber: 3\n"
    );
}

#[test]
fn a_hostile_command_cannot_escape_into_the_wrapper() {
    let tmp = tempfile::tempdir().unwrap();
    let id = start(tmp.path());
    // Each attempt is plain text to the shell: it either fails as a command or prints.
    let attempts = [
        "'; echo ESCAPED; '",
        "\"; echo ESCAPED; \"",
        "DELTA_CMD_EOF\necho ESCAPED_AFTER_DELIMITER >&2; exit 0",
        "exit 7; echo ESCAPED",
    ];
    for attempt in attempts {
        let out = exec(tmp.path(), &id, attempt);
        let all = format!("{}{}", out["stdout"], out["stderr"]);
        assert!(
            !all.contains("ESCAPED\\n") && !all.contains("ESCAPED\n"),
            "{attempt}: {all}"
        );
    }
    let out = exec(tmp.path(), &id, "exit 7; echo ESCAPED");
    assert_eq!(out["exit_code"], 7);
    // The session is still healthy.
    assert_eq!(exec(tmp.path(), &id, "echo ok")["stdout"], "ok\n");
}

#[test]
fn a_timeout_returns_partial_output_and_the_session_stays_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let id = start(tmp.path());
    let out = cli(tmp.path())
        .args(["exec", &id, "--timeout", "300", "echo partial; sleep 30"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let value = json_of(&out);
    assert_eq!(value["timed_out"], true);
    assert_eq!(value["stdout"], "partial\n");
    assert_eq!(exec(tmp.path(), &id, "echo next")["stdout"], "next\n");
}

#[test]
fn twenty_parallel_processes_on_one_session_serialise_with_outputs_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let id = start(tmp.path());
    exec(tmp.path(), &id, "N=0");
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let dir = tmp.path().to_path_buf();
            let id = id.clone();
            std::thread::spawn(move || {
                let command = format!(
                    "echo start {i} >> trace; N=$((N+1)); for j in $(seq 100); do echo {i}-$j; done; echo end {i} >> trace"
                );
                (i, exec(&dir, &id, &command))
            })
        })
        .collect();
    for handle in handles {
        let (i, out) = handle.join().unwrap();
        let expected: String = (1..=100).map(|j| format!("{i}-{j}\n")).collect();
        assert_eq!(out["stdout"], expected.as_str());
    }
    let trace = std::fs::read_to_string(tmp.path().join("trace")).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    assert_eq!(lines.len(), 40);
    for pair in lines.chunks(2) {
        let started = pair[0].strip_prefix("start ").unwrap();
        assert_eq!(pair[1], format!("end {started}"), "{trace}");
    }
    assert_eq!(exec(tmp.path(), &id, "echo $N")["stdout"], "20\n");
}

#[test]
fn twenty_sessions_run_in_parallel() {
    let tmp = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..20).map(|_| start(tmp.path())).collect();
    let started = std::time::Instant::now();
    let handles: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let dir = tmp.path().to_path_buf();
            let id = id.clone();
            std::thread::spawn(move || {
                exec(&dir, &id, &format!("sleep 1; V={i}"));
                exec(&dir, &id, "echo $V")
            })
        })
        .collect();
    for (i, handle) in handles.into_iter().enumerate() {
        assert_eq!(handle.join().unwrap()["stdout"], format!("{i}\n"));
    }
    // Serialised, twenty one-second sleeps would take 20 s.
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn cleanup_leaves_running_and_active_sessions_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let ended = start(tmp.path());
    let active = start(tmp.path());
    let busy = start(tmp.path());
    let out = cli(tmp.path()).args(["end", &ended]).output().unwrap();
    assert_eq!(json_of(&out)["status"], "terminated");
    let dir = tmp.path().to_path_buf();
    let busy_id = busy.clone();
    let running = std::thread::spawn(move || exec(&dir, &busy_id, "touch started; sleep 1"));
    let mut waited = 0;
    while !tmp.path().join("started").exists() && waited < 500 {
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
    }
    let out = cli(tmp.path()).args(["status", &busy]).output().unwrap();
    assert_eq!(json_of(&out)["busy"], true);
    let out = cli(tmp.path()).arg("cleanup").output().unwrap();
    let report = json_of(&out);
    assert_eq!(report["cleaned"], serde_json::json!([ended]));
    assert_eq!(report["remaining"].as_array().unwrap().len(), 2);
    running.join().unwrap();
    let list = json_of(&cli(tmp.path()).arg("list").output().unwrap());
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&active.as_str()) && ids.contains(&busy.as_str()) && ids.len() == 2);
}

#[test]
fn errors_are_json_on_stdout_with_exit_1_and_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let out = cli(tmp.path())
        .args(["exec", "sess_0123abcd", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(json_of(&out)["error"]
        .as_str()
        .unwrap()
        .contains("not found"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sess_0123abcd"));
    let out = cli(tmp.path()).args(["start", "python3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(json_of(&out)["error"]
        .as_str()
        .unwrap()
        .contains("delta-sessions-pty"));
    let id = start(tmp.path());
    let out = cli(tmp.path())
        .args(["exec", &id])
        .write_stdin("  \n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = cli(tmp.path())
        .args(["exec", &id, "echo", "-n", "several", "words"])
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["stdout"], "several words");
    let out = exec(tmp.path(), &id, "echo failing >&2; false");
    assert_eq!(out["exit_code"], 1);
    assert_eq!(out["stderr"], "failing\n");
}

#[test]
fn the_sessions_dir_comes_from_the_flag_or_the_environment_and_keys_stay_out() {
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    let out = cli(tmp.path())
        .env("DELTA_SESSIONS_DIR", &elsewhere)
        .env("DELTA_SESSIONS_SECRET_VARS", "AGENT_KEY")
        .env("AGENT_KEY", "ak-never-stored")
        .arg("start")
        .output()
        .unwrap();
    let id = json_of(&out)["session_id"].as_str().unwrap().to_string();
    let session_dir = elsewhere.join(&id);
    assert!(session_dir.is_dir());
    let out = cli(tmp.path())
        .args([
            "--sessions-dir",
            elsewhere.to_str().unwrap(),
            "exec",
            &id,
            "echo ${DELTA_API_KEY-none} ${AGENT_KEY-none}",
        ])
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["stdout"], "none none\n");
    for entry in std::fs::read_dir(&session_dir).unwrap() {
        let text = std::fs::read(entry.unwrap().path()).unwrap();
        let text = String::from_utf8_lossy(&text);
        assert!(!text.contains("never-stored"));
    }
}

#[test]
fn a_background_job_does_not_keep_pipes_the_caller_leaked() {
    use nix::poll::{poll, PollFd, PollFlags};
    use std::os::fd::AsFd;
    let tmp = tempfile::tempdir().unwrap();
    let id = start(tmp.path());
    // pipe() (not pipe2) leaves both ends inheritable, like a careless tool runner would.
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    let out = cli(tmp.path())
        .args(["exec", &id, "sleep 30 & echo $! > bg.pid"])
        .output()
        .unwrap();
    drop(write_end);
    assert!(out.status.success());
    let mut fds = [PollFd::new(read_end.as_fd(), PollFlags::POLLIN)];
    let ready = poll(&mut fds, 10_000u16).unwrap();
    exec(tmp.path(), &id, "kill $(cat bg.pid)");
    assert_eq!(ready, 1, "the background job holds the caller's pipe");
    assert!(fds[0].revents().unwrap().contains(PollFlags::POLLHUP));
}

/// Issue 11 item 20: agents written for the original engine expect `exec` to print the
/// command's output as is and exit with its code; `--raw` gives them that.
#[test]
fn exec_raw_prints_the_output_as_is_and_exits_with_the_commands_code() {
    let tmp = tempfile::tempdir().unwrap();
    let id = start(tmp.path());
    let out = cli(tmp.path())
        .args(["exec", "--raw", &id, "echo out; echo err >&2; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    let out = cli(tmp.path())
        .args(["exec", "--raw", &id])
        .write_stdin("pwd >/dev/null && echo fine\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fine\n");
}

/// Regression (issue 11 item 17): usage errors were exit 1 with JSON on stdout; they are
/// clap's text on stderr with exit 2, and `--help` teaches with examples.
#[test]
fn usage_errors_are_text_on_stderr_with_exit_2_and_help_has_examples() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        &["bogus"][..],
        &[][..],
        &["exec"][..],
        &["exec", "x", "--timeout", "0", "ls"][..],
    ] {
        let out = cli(tmp.path()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
    let help = cli(tmp.path()).arg("--help").output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Examples:") && help.contains("exec --raw"),
        "{help}"
    );
}

/// Regression (issue 24 item 5): an existing shared `.sessions` folder was chmod-ed to 0700.
/// It is now refused, with the fix named, and left as it was.
#[test]
fn a_shared_sessions_folder_is_refused_and_left_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join(".sessions");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = cli(tmp.path()).arg("start").output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(".sessions") && stderr.contains("chmod 700"),
        "{stderr}"
    );
    let mode = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o1777);
}
