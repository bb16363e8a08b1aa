//! A run folder that cannot be written (issue 11): metadata.json that cannot be replaced
//! (simulated by a directory where its spare `.metadata.json.next` goes, which fails even
//! for root). The user must read that cause, nothing may be journaled twice, and once the
//! cause is fixed `continue` must work and send its message once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{json, Value};

use crate::harness::*;

/// A tool that replaces the run's metadata spare with a directory: every later write of
/// metadata.json fails with "Is a directory".
const BREAK_RECORD_TOOL: &str = r#"tools:
  - name: break_record
    description: Make the run's record unwritable
    shell: "rm -f \"$DELTA_RUN_DIR/.metadata.json.next\" && mkdir \"$DELTA_RUN_DIR/.metadata.json.next\""
"#;

fn spare(case: &Case, run_id: &str) -> std::path::PathBuf {
    case.run_dir(run_id).join(".metadata.json.next")
}

fn break_record(case: &Case, run_id: &str) {
    let spare = spare(case, run_id);
    let _ = std::fs::remove_file(&spare);
    std::fs::create_dir(&spare).unwrap();
}

fn user_messages(journal: &[Value], text: &str) -> usize {
    events_of(journal, "USER_MESSAGE")
        .iter()
        .filter(|e| e["content"] == text)
        .count()
}

/// The user messages of the last model request, as recorded in io/invocations.
fn last_request_user_messages(run_dir: &Path, text: &str) -> usize {
    let mut records: Vec<_> = files_under(&run_dir.join("io/invocations"));
    records.sort();
    let last = read_json(records.last().unwrap());
    last["request"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == text)
        .count()
}

/// Regression: the final metadata write failed silently, the run stayed RUNNING on disk,
/// and every `continue` blamed a lock "held" by a dead process while appending another
/// INTERRUPTED event. Now the run's result names the real cause, `continue` repeats it
/// without touching the journal, and once fixed the run continues with its message once.
#[test]
fn unwritable_metadata_reports_the_cause_and_continue_recovers_once_fixed() {
    let case = Case::new(
        "recorder",
        BREAK_RECORD_TOOL,
        &json!({"steps": [
            {"tool": "break_record", "args": {}},
            {"answer": "done"},
            {"answer": "continued: {{ last_user }}"}
        ]}),
    );
    let out = case.run("r-record", "go", &[]);
    out.assert_code(0);
    let result = out.json();
    assert_eq!(result["status"], "COMPLETED");
    assert_eq!(result["result"], "done");
    assert_eq!(result["error"]["type"], "metadata_error");
    let message = result["error"]["message"].as_str().unwrap();
    for phrase in [
        ".metadata.json.next",
        "Is a directory",
        "still says RUNNING",
    ] {
        assert!(message.contains(phrase), "{phrase}: {message}");
        assert!(out.stderr.contains(phrase), "{phrase}: {}", out.stderr);
    }
    assert_eq!(case.metadata("r-record")["status"], "RUNNING");
    let journal_after_run = case.journal("r-record");

    for _ in 0..2 {
        let out = case.continue_run("r-record", &["-m", "next step"]);
        out.assert_code(1);
        assert!(
            out.stderr.contains("not driven by any process"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains("Is a directory"), "{}", out.stderr);
        assert!(!out.stderr.contains("is held"), "{}", out.stderr);
        assert_eq!(
            case.journal("r-record"),
            journal_after_run,
            "journal untouched"
        );
    }

    std::fs::remove_dir(spare(&case, "r-record")).unwrap();
    let out = case.continue_run("r-record", &["-m", "next step"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "continued: next step");
    let journal = case.journal("r-record");
    assert_eq!(user_messages(&journal, "next step"), 1);
    assert!(events_of(&journal, "INTERRUPTED").is_empty());
    assert_eq!(
        last_request_user_messages(&case.run_dir("r-record"), "next step"),
        1
    );
    assert_eq!(case.metadata("r-record")["status"], "COMPLETED");
}

/// Regression: a `continue` that failed before its loop started (metadata.json could not be
/// written) left its `-m` message in the journal, so the next `continue` sent it twice.
#[test]
fn failed_continue_leaves_no_message_behind_and_the_retry_sends_it_once() {
    let case = Case::new(
        "retrier",
        "",
        &json!({"steps": [
            {"answer": "first"},
            {"answer": "second: {{ last_user }}"}
        ]}),
    );
    case.run("r-retry", "go", &[]).assert_code(0);
    let journal_before = case.journal("r-retry");
    break_record(&case, "r-retry");

    let out = case.continue_run("r-retry", &["-m", "again"]);
    out.assert_code(1);
    for phrase in [".metadata.json.next", "Is a directory"] {
        assert!(out.stderr.contains(phrase), "{phrase}: {}", out.stderr);
    }
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert_eq!(case.journal("r-retry"), journal_before);
    assert_eq!(case.metadata("r-retry")["status"], "COMPLETED");

    std::fs::remove_dir(spare(&case, "r-retry")).unwrap();
    let out = case.continue_run("r-retry", &["-m", "again"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "second: again");
    assert_eq!(user_messages(&case.journal("r-retry"), "again"), 1);
    assert_eq!(
        last_request_user_messages(&case.run_dir("r-retry"), "again"),
        1
    );
}
