//! `delta continue` on run folders the original engine (or its tests) wrote: its journals and
//! metadata, hand-written event types delta does not know, a run folder without a journal,
//! and a live run that was never locked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;

use serde_json::{json, Value};

use crate::harness::*;

/// A copy of the original engine's workspace fixture whose runs point at `agent_dir`.
fn original_engine_workspace(case: &Case) -> std::path::PathBuf {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("actors/tests/engine/fixtures/original-engine/work");
    let copy = case.path().join("legacy-ws");
    copy_dir(&fixture, &copy);
    for run in std::fs::read_dir(copy.join(".delta")).unwrap() {
        let meta_path = run.unwrap().path().join("metadata.json");
        if meta_path.is_file() {
            let mut meta = read_json(&meta_path);
            meta["agent_ref"] = json!(case.agent_dir().display().to_string());
            std::fs::write(&meta_path, serde_json::to_vec_pretty(&meta).unwrap()).unwrap();
        }
    }
    copy
}

#[test]
fn runs_of_the_original_engine_can_be_continued() {
    let script = json!({"rules": [
        {"task_contains": "List the files", "steps": [
            {"answer": "unused"}, {"answer": "unused"},
            {"answer": "continued: {{ last_user }}"}
        ]},
        {"task_contains": "Delete", "steps": [
            {"answer": "unused"}, {"answer": "unused"},
            {"answer": "answered: {{ last_observation }}"}
        ]}
    ]});
    let case = Case::new("file-helper", "tools: []\n", &script);
    let ws = original_engine_workspace(&case);
    let ws_arg = ws.display().to_string();
    let cont = |run_id: &str, message: &str| {
        case.delta(&[
            "continue", "--run-id", run_id, "-w", &ws_arg, "-m", message, "--format", "json",
        ])
    };

    let completed = cont("20261122_014234_915ade", "now count them");
    completed.assert_code(0);
    assert_eq!(completed.json()["result"], "continued: now count them");
    let waiting = cont("20261122_015010_0c4b1e", "yes");
    waiting.assert_code(0);
    assert!(
        waiting.json()["result"].as_str().unwrap().contains("yes"),
        "{}",
        waiting.stdout
    );
    assert_eq!(case.mock.stats()["rejected_invalid"], 0);
    let waiting_dir = ws.join(".delta/20261122_015010_0c4b1e");
    assert!(!waiting_dir.join("interaction/request.json").exists());
    let journal = read_journal(&waiting_dir.join("journal.jsonl"));
    assert_eq!(events_of(&journal, "HUMAN_INPUT_RECEIVED").len(), 1);

    for run_id in ["20261122_014234_915ade", "20261122_015010_0c4b1e"] {
        let journal = read_journal(&ws.join(".delta").join(run_id).join("journal.jsonl"));
        assert_seq_strictly_increasing(&journal);
        assert_eq!(journal.last().unwrap()["status"], "COMPLETED", "{run_id}");
    }
    let listed = case.delta(&["list-runs", "-w", &ws_arg, "--format", "json"]);
    listed.assert_code(0);
    let rows: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "COMPLETED"),
        "{rows}"
    );
}

/// Regression (issue 11 item 20): a RUNNING run of the original engine (no lock file) whose
/// process is alive was refused with "its lock is held", which it does not have.
#[test]
fn a_live_run_without_a_lock_file_is_not_said_to_hold_its_lock() {
    let case = Case::new(
        "unlocked",
        "tools: []\n",
        &json!({"steps": [{"answer": "x"}]}),
    );
    case.run("ours", "task", &[]).assert_code(0);
    let hostname = case.metadata("ours")["hostname"]
        .as_str()
        .unwrap()
        .to_string();
    let mut owner = std::process::Command::new("sleep")
        .arg("30")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // spawn() can return while the child is still inside execve, its name still this test
    // thread's: the janitor would rightly judge that a different program.
    let comm = format!("/proc/{}/comm", owner.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
        assert!(std::time::Instant::now() < deadline, "sleep never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let run_dir = case.run_dir("legacy");
    std::fs::create_dir_all(&run_dir).unwrap();
    let meta = json!({
        "run_id": "legacy",
        "start_time": "2026-11-22T01:42:34.918Z",
        "agent_ref": case.agent_dir().display().to_string(),
        "task": "still going",
        "status": "RUNNING",
        "iterations_completed": 1,
        "pid": owner.id(),
        "hostname": hostname,
        "process_name": "sleep",
    });
    std::fs::write(run_dir.join("metadata.json"), meta.to_string()).unwrap();
    let out = case.continue_run("legacy", &["-m", "more"]);
    let _ = owner.kill();
    let _ = owner.wait();
    out.assert_code(126);
    assert!(!out.stderr.contains("is held"), "{}", out.stderr);
    assert!(out.stderr.contains("no lock file"), "{}", out.stderr);
    assert!(
        out.stderr.contains(&owner.id().to_string()),
        "{}",
        out.stderr
    );
    assert!(
        !run_dir.join("lock").exists(),
        "a never-locked run stays unlocked"
    );
}

/// Regression (issue 11 item 18): a journal holding event types delta does not know (the
/// original engine's tests hand-write `task_start`) was refused. The lines are skipped with
/// one WARNING each (not repeated by the next continue) and the conversation goes on.
#[test]
fn unknown_event_types_are_skipped_with_a_warning_and_the_run_continues() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/journals/unknown-event-types/journal.jsonl");
    let script = json!({"steps": [
        {"answer": "unused"},
        {"answer": "history: {{ last_user }}"},
        {"answer": "again: {{ last_user }}"}
    ]});
    let case = Case::new("poet", "tools: []\n", &script);
    case.run("legacy", "Write a haiku", &[]).assert_code(0);
    let journal_path = case.run_dir("legacy").join("journal.jsonl");
    std::fs::copy(&fixture, &journal_path).unwrap();

    let out = case.continue_run("legacy", &["-m", "another one"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "history: another one");
    let warned = |journal: &[Value]| -> Vec<String> {
        events_of(journal, "WARNING")
            .iter()
            .map(|w| w["message"].as_str().unwrap().to_string())
            .filter(|m| m.contains("does not know"))
            .collect()
    };
    let journal = case.journal("legacy");
    let warnings = warned(&journal);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("line 1") && warnings[0].contains("'task_start'"));
    assert!(warnings[1].contains("'progress_note'"));
    assert_seq_strictly_increasing(&journal[1..]);
    assert_eq!(case.mock.stats()["rejected_invalid"], 0);

    let again = case.continue_run("legacy", &["-m", "one more"]);
    again.assert_code(0);
    assert_eq!(
        warned(&case.journal("legacy")).len(),
        2,
        "warned once per line"
    );
}

/// Regression (issue 11 item 18): `continue` on a run folder with metadata but no journal
/// failed; like the original engine it starts a fresh journal, with a WARNING, and the
/// model gets the task from the metadata.
#[test]
fn a_run_without_a_journal_continues_in_a_fresh_one_with_a_warning() {
    // The scripted model picks its step by the assistant turns it is shown: a fresh journal
    // has none, so the continuation is answered by the first step again.
    let script = json!({"steps": [{"answer": "task was: {{ task }}"}]});
    let case = Case::new("lost", "tools: []\n", &script);
    case.run("r1", "count the stars", &[]).assert_code(0);
    std::fs::remove_file(case.run_dir("r1").join("journal.jsonl")).unwrap();
    let out = case.continue_run("r1", &["-m", "once more"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "task was: count the stars");
    let journal = case.journal("r1");
    assert_eq!(journal[0]["type"], "WARNING");
    assert!(journal[0]["message"]
        .as_str()
        .unwrap()
        .contains("no journal"));
    let users: Vec<&str> = events_of(&journal, "USER_MESSAGE")
        .iter()
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["count the stars", "once more"]);

    // A folder the original engine's tests write by hand: metadata alone.
    let bare = case.run_dir("bare");
    std::fs::create_dir_all(&bare).unwrap();
    let meta = json!({
        "run_id": "bare",
        "start_time": "2026-11-22T01:42:34.918Z",
        "agent_ref": case.agent_dir().display().to_string(),
        "task": "hand made",
        "status": "INTERRUPTED",
        "iterations_completed": 0,
    });
    std::fs::write(bare.join("metadata.json"), meta.to_string()).unwrap();
    let out = case.continue_run("bare", &[]);
    out.assert_code(0);
    assert_eq!(case.metadata("bare")["status"], "COMPLETED");
    assert_eq!(case.journal("bare")[0]["type"], "WARNING");
}
