//! What the original engine's tests check. Error texts, matched case-insensitively (issue
//! 24 item 26): a duplicate run id suggests "a different id"; a live RUNNING run is "still
//! active" and "Cannot continue"; a run from another host names both hosts; a context
//! generator that times out says "timeout", one that writes nothing says "output file not
//! found"; a missing context file says "File not found". Each is reached the way those tests
//! reach it. And a run has all three `io/` folders from its start (item 25).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;

use serde_json::json;

use crate::harness::*;

/// True when `text` holds each of `phrases` in this order, ignoring case.
fn says_in_order(text: &str, phrases: &[&str]) -> bool {
    let text = text.to_lowercase();
    let mut rest = text.as_str();
    for phrase in phrases {
        match rest.find(&phrase.to_lowercase()) {
            Some(at) => rest = &rest[at + phrase.len()..],
            None => return false,
        }
    }
    true
}

/// A run folder as the original engine's tests write it: metadata only, RUNNING, no lock.
fn running_record(case: &Case, run_id: &str, pid: u32, hostname: &str, process: &str) {
    let run_dir = case.run_dir(run_id);
    std::fs::create_dir_all(&run_dir).unwrap();
    let meta = json!({
        "run_id": run_id,
        "start_time": "2026-11-22T01:42:34.918Z",
        "agent_ref": case.agent_dir().display().to_string(),
        "task": "still going",
        "status": "RUNNING",
        "iterations_completed": 1,
        "pid": pid,
        "hostname": hostname,
        "process_name": process,
    });
    std::fs::write(run_dir.join("metadata.json"), meta.to_string()).unwrap();
}

/// This host's name as delta records it.
fn recorded_hostname(case: &Case) -> String {
    case.run("ours", "task", &[]).assert_code(0);
    case.metadata("ours")["hostname"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_duplicate_run_id_suggests_a_different_id() {
    let case = Case::new("dup", "tools: []\n", &json!({"steps": [{"answer": "x"}]}));
    case.run("taken", "first", &[]).assert_code(0);
    let again = case.run("taken", "second", &[]);
    again.assert_code(126);
    assert!(
        says_in_order(&again.stderr, &["taken", "a different id"]),
        "{}",
        again.stderr
    );
}

#[test]
fn a_live_running_run_is_still_active_and_cannot_be_continued() {
    let case = Case::new("live", "tools: []\n", &json!({"steps": [{"answer": "x"}]}));
    let hostname = recorded_hostname(&case);
    let mut owner = std::process::Command::new("sleep")
        .arg("30")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Until execve is done the child is still named like this test's thread.
    let comm = format!("/proc/{}/comm", owner.id());
    assert!(
        wait_until(std::time::Duration::from_secs(20), || {
            std::fs::read_to_string(&comm).unwrap_or_default().trim() == "sleep"
        }),
        "sleep never started"
    );
    running_record(&case, "busy", owner.id(), &hostname, "sleep");
    let out = case.continue_run("busy", &["-m", "more"]);
    let _ = owner.kill();
    let _ = owner.wait();
    out.assert_code(126);
    assert!(
        says_in_order(&out.stderr, &["still active", "cannot continue"]),
        "{}",
        out.stderr
    );
}

#[test]
fn a_run_from_another_host_names_both_hosts() {
    let case = Case::new("away", "tools: []\n", &json!({"steps": [{"answer": "x"}]}));
    let here = recorded_hostname(&case);
    running_record(&case, "away", 4242, "build-node-17.example", "node");
    let out = case.continue_run("away", &["-m", "more"]);
    out.assert_code(126);
    assert!(
        out.stderr.contains("'build-node-17.example'"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(&format!("'{here}'")), "{}", out.stderr);
    assert!(out.stderr.contains("--force"), "{}", out.stderr);
}

/// `delta run` of an agent whose context.yaml adds `source`: the FAILED run's error message.
fn context_error_of(name: &str, source: &str) -> String {
    let case = Case::new(name, "", &json!({"steps": [{"answer": "never asked"}]}));
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!("{CONTEXT_YAML}{source}"),
    )
    .unwrap();
    let out = case.run("r", "task", &[]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["error"]["type"], "context_error", "{result}");
    assert_eq!(case.mock.stats()["requests_total"], 0);
    result["error"]["message"].as_str().unwrap().to_owned()
}

#[test]
fn a_generator_timeout_says_timeout() {
    let message = context_error_of(
        "gen-timeout",
        "  - type: computed_file\n    id: slow\n    generator:\n      command: [sleep, '30']\n      timeout_ms: 200\n    output_path: '${CWD}/slow.md'\n",
    );
    assert!(
        says_in_order(&message, &["'slow'", "timeout", "200 ms"]),
        "{message}"
    );
}

#[test]
fn a_generator_without_output_says_output_file_not_found() {
    let message = context_error_of(
        "gen-nothing",
        "  - type: computed_file\n    id: quiet\n    generator:\n      command: ['true']\n    output_path: '${CWD}/never.md'\n",
    );
    assert!(
        says_in_order(&message, &["'quiet'", "output file not found", "never.md"]),
        "{message}"
    );
}

#[test]
fn a_missing_context_file_says_file_not_found() {
    let message = context_error_of(
        "ctx-missing",
        "  - type: file\n    id: notes\n    path: '${CWD}/absent.md'\n",
    );
    assert!(
        says_in_order(&message, &["'notes'", "File not found", "absent.md"]),
        "{message}"
    );
}

/// Regression (issue 24 item 25): `io/tool_executions/` and `io/hooks/` appeared only with
/// their first record, and the original engine's tests look for all three folders of a run
/// without tools or hooks.
#[test]
fn a_run_without_tools_or_hooks_has_its_three_io_folders() {
    let case = Case::new("plain", "tools: []\n", &json!({"steps": [{"answer": "x"}]}));
    case.run("plain", "task", &[]).assert_code(0);
    let io = case.run_dir("plain").join("io");
    for folder in ["invocations", "tool_executions", "hooks"] {
        let dir = io.join(folder);
        assert!(dir.is_dir(), "{dir:?}");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&dir).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o700, "{dir:?}");
    }
    assert_eq!(
        std::fs::read_dir(io.join("tool_executions"))
            .unwrap()
            .count(),
        0
    );
}
