//! The run lock on one descriptor (issue 14): a run this version creates is locked through
//! its journal's descriptor, with `lock` a second name of the journal. Older versions lock
//! `lock` with flock, so both directions must keep working: a run an older version drives
//! (its own plain `lock` file) is honoured, and an older version cannot take a run this
//! version drives. Racing processes and kill -9 then continue are in `continue_run.rs` and
//! `crash.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;

use crate::harness::*;

const HANG_TOOL: &str = r#"tools:
  - name: hang
    description: sleep for a long time
    shell: "echo $$ > tool.pid.tmp; mv tool.pid.tmp tool.pid; sleep 60"
"#;

/// What an older delta does to own a run: open `<run_dir>/lock` (read-write, create) and
/// flock it. The child prints `locked` or `busy`, then holds what it got until its stdin
/// closes.
fn older_version_locking(run_dir: &std::path::Path) -> (Child, String) {
    let script = "import fcntl, os, sys\n\
                  fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n\
                  try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('locked', flush=True)\n\
                  except BlockingIOError:\n    print('busy', flush=True)\n\
                  sys.stdin.read()\n";
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(run_dir.join("lock"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 is needed by the test suite");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().to_string())
}

fn release(mut child: Child) {
    child.stdin.take().unwrap().write_all(b"bye").unwrap();
    wait_child(&mut child, Duration::from_secs(10));
}

#[test]
fn an_older_version_cannot_take_a_run_this_version_drives() {
    let case = Case::new("locker", HANG_TOOL, &json!({"steps": [{"tool": "hang"}]}));
    let mut engine = case
        .spawn_cmd()
        .args(case.run_args("r1", "the task"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tool_pid = wait_for_pid_file(&case.work_dir().join("tool.pid"), Duration::from_secs(20));
    let run_dir = case.run_dir("r1");
    let inode = |name: &str| std::fs::metadata(run_dir.join(name)).unwrap().ino();
    let same_inode = inode("lock") == inode("journal.jsonl");
    let (older, verdict) = older_version_locking(&run_dir);
    send_signal(engine.id(), Signal::SIGKILL);
    wait_child(&mut engine, Duration::from_secs(10));
    kill_group(tool_pid);
    release(older);
    assert!(same_inode, "`lock` is a second name of the journal");
    assert_eq!(
        verdict, "busy",
        "an older version took a run this one drives"
    );
}

#[test]
fn a_run_an_older_version_drives_through_its_lock_file_is_honoured() {
    let script = json!({"steps": [{"answer": "first"}, {"answer": "resumed: {{ last_user }}"}]});
    let case = Case::new("locker", "", &script);
    case.run("r1", "the task", &[]).assert_code(0);
    // The folder as an older version leaves it: a plain `lock` file of its own, held by
    // its process, and metadata saying RUNNING under that process.
    let run_dir = case.run_dir("r1");
    std::fs::remove_file(run_dir.join("lock")).unwrap();
    std::fs::write(run_dir.join("lock"), "").unwrap();
    let (older, verdict) = older_version_locking(&run_dir);
    assert_eq!(verdict, "locked");
    let meta_path = run_dir.join("metadata.json");
    let mut meta = read_json(&meta_path);
    meta["status"] = json!("RUNNING");
    meta["pid"] = json!(older.id());
    std::fs::write(&meta_path, serde_json::to_vec_pretty(&meta).unwrap()).unwrap();

    let refused = case.continue_run("r1", &["-m", "again"]);
    let journal_before = case.journal("r1").len();
    release(older);
    refused.assert_code(126);
    assert!(refused.stderr.contains("is held"), "{}", refused.stderr);
    assert_eq!(
        case.journal("r1").len(),
        journal_before,
        "refused runs are untouched"
    );

    // Its process gone, the run is taken over through the same `lock` file.
    let out = case.continue_run("r1", &["-m", "again"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "resumed: again");
    assert!(out.stderr.contains("janitor"), "{}", out.stderr);
}
