//! Acceptance tests of `delta list-runs` (issue 4): every filter and format, newest-first
//! order by time (not by name), the janitor turning a dead RUNNING run into INTERRUPTED,
//! the error for a folder that is not a workspace, and runs written by the original engine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::harness::*;

const TOOLS: &str = r#"tools:
  - name: hang
    description: sleep for a long time
    shell: "echo $$ > tool.pid.tmp; mv tool.pid.tmp tool.pid; sleep 60"
  - name: nap
    description: no-op
    exec: "true"
"#;

fn script() -> Value {
    json!({"rules": [
        {"task_contains": "complete", "steps": [{"answer": "completed"}]},
        {"task_contains": "fail", "steps": [{"tool": "nap"}, {"answer": "never"}]},
        {"task_contains": "ask", "steps": [{"tool": "ask_human", "args": {"prompt": "ok?"}}]},
        {"task_contains": "hang", "steps": [{"tool": "hang"}, {"answer": "woke"}]}
    ]})
}

fn list(case: &Case, extra: &[&str]) -> Outcome {
    let ws = case.work_dir().display().to_string();
    let mut args = vec!["list-runs", "-w", ws.as_str()];
    args.extend_from_slice(extra);
    case.delta(&args)
}

fn raw_ids(case: &Case, extra: &[&str]) -> Vec<String> {
    let out = list(case, &[extra, &["--format", "raw"]].concat());
    out.assert_code(0);
    out.stdout.lines().map(str::to_string).collect()
}

#[test]
fn every_filter_and_format_newest_first_with_the_janitor() {
    let case = Case::new("lister", TOOLS, &script());
    // Names deliberately not in time order: zeta is the oldest, then alpha, then mid.
    case.run("zeta", "please complete this", &[]).assert_code(0);
    case.run("alpha", "this will fail", &["--max-iterations", "1"])
        .assert_code(1);
    case.run("mid", "ask me something", &[]).assert_code(101);
    let mut live = case
        .spawn_cmd()
        .args(case.run_args("live", "hang around"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tool_pid = wait_for_pid_file(&case.work_dir().join("tool.pid"), Duration::from_secs(20));

    let json_out = list(&case, &["--format", "json"]);
    json_out.assert_code(0);
    let rows: Value = serde_json::from_str(&json_out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    let statuses: Vec<&str> = rows.iter().map(|r| r["status"].as_str().unwrap()).collect();
    let text = list(&case, &[]);
    let resumable = raw_ids(&case, &["--resumable"]);
    let failed = raw_ids(&case, &["--status", "FAILED"]);
    let first = raw_ids(&case, &["--first"]);
    let first_resumable = raw_ids(&case, &["--resumable", "--first"]);

    // Kill the live run: list-runs must now report it INTERRUPTED (janitor).
    send_signal(live.id(), Signal::SIGKILL);
    wait_child(&mut live, Duration::from_secs(10));
    kill_group(tool_pid);
    let after = list(&case, &["--status", "INTERRUPTED", "--format", "raw"]);
    let resumable_after = raw_ids(&case, &["--resumable"]);

    assert_eq!(ids, ["live", "mid", "alpha", "zeta"]);
    assert_eq!(
        statuses,
        ["RUNNING", "WAITING_FOR_INPUT", "FAILED", "COMPLETED"]
    );
    for row in rows {
        for key in ["created_at", "last_updated", "task_summary", "iterations"] {
            assert!(!row[key].is_null(), "{key} missing in {row}");
        }
    }
    assert_eq!(rows[2]["task_summary"], "this will fail");
    assert_eq!(rows[2]["iterations"], 1);

    text.assert_code(0);
    let all_lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(all_lines.len(), 5, "a header and 4 rows: {}", text.stdout);
    // Issue 24 item 23: a header row names the columns, like list-orchestrations'.
    let header = all_lines[0];
    assert!(
        header.starts_with("ID ") && header.contains("STATUS") && header.contains("TASK"),
        "{header}"
    );
    let lines = &all_lines[1..];
    assert_eq!(
        header.find("STATUS"),
        lines[0].find("RUNNING"),
        "{}",
        text.stdout
    );
    for (line, (id, status)) in lines.iter().zip(ids.iter().zip(&statuses)) {
        assert!(line.starts_with(id), "{line}");
        assert!(line.contains(status) && line.contains("ago"), "{line}");
    }
    let status_column: Vec<usize> = lines
        .iter()
        .zip(&statuses)
        .map(|(l, s)| l.find(s).unwrap())
        .collect();
    assert!(
        status_column.windows(2).all(|w| w[0] == w[1]),
        "aligned: {}",
        text.stdout
    );
    assert!(lines[1].contains("ask me something"), "{}", lines[1]);

    // Issue 24 item 23: `--resumable` listed the COMPLETED and FAILED runs too, which
    // `continue` only extends or retries with a new message; resumable means what
    // `continue` picks up where it stopped: WAITING_FOR_INPUT and INTERRUPTED.
    assert_eq!(resumable, ["mid"]);
    assert_eq!(failed, ["alpha"]);
    assert_eq!(first, ["live"]);
    assert_eq!(first_resumable, ["mid"]);

    after.assert_code(0);
    assert_eq!(after.stdout, "live\n");
    assert_eq!(resumable_after, ["live", "mid"]);
    assert!(after.stderr.contains("janitor"), "{}", after.stderr);
    assert_eq!(case.metadata("live")["status"], "INTERRUPTED");
}

#[test]
fn a_folder_without_runs_is_an_error_with_a_hint() {
    let case = Case::new("lister", TOOLS, &script());
    let out = list(&case, &[]);
    out.assert_code(126);
    assert!(out.stderr.contains(".delta"), "{}", out.stderr);
    assert!(out.stderr.to_lowercase().contains("hint"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}

#[test]
fn an_unknown_status_filter_is_a_usage_error() {
    let case = Case::new("lister", TOOLS, &script());
    case.run("one", "please complete", &[]).assert_code(0);
    let out = list(&case, &["--status", "DONE"]);
    out.assert_code(2);
    assert!(out.stderr.contains("DONE"), "{}", out.stderr);
}

#[test]
fn journals_of_the_original_engine_are_listed() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("actors/tests/engine/fixtures/original-engine/work");
    let case = Case::new(
        "legacy",
        "tools: []\n",
        &json!({"steps": [{"answer": "ok"}]}),
    );
    let copy = case.path().join("legacy-ws");
    copy_dir(&fixture, &copy);
    let out = case.delta(&[
        "list-runs",
        "-w",
        copy.to_str().unwrap(),
        "--format",
        "json",
    ]);
    out.assert_code(0);
    let runs: Value = serde_json::from_str(&out.stdout).unwrap();
    let ids: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"20261122_014234_915ade"), "{ids:?}");
    assert!(ids.contains(&"20261122_015010_0c4b1e"), "{ids:?}");
    for run in runs.as_array().unwrap() {
        assert!(
            run["status"].is_string() && run["task_summary"].is_string(),
            "{run}"
        );
    }
}

/// Regression (issue 11 item 8e): runs with a corrupt or missing metadata.json were silently
/// left out. They are rows with status UNREADABLE and the reason (text, json); raw output
/// keeps only ids `continue` can take and names them on stderr; filters leave them out.
#[test]
fn runs_with_corrupt_or_missing_metadata_are_listed_as_unreadable() {
    let case = Case::new("lister", TOOLS, &script());
    case.run("good", "please complete this", &[]).assert_code(0);
    let corrupt = case.work_dir().join(".delta/corrupt");
    std::fs::create_dir_all(&corrupt).unwrap();
    std::fs::write(corrupt.join("metadata.json"), "{not json").unwrap();
    std::fs::create_dir_all(case.work_dir().join(".delta/nometa")).unwrap();

    let text = list(&case, &[]);
    text.assert_code(0);
    let line = |id: &str| {
        text.stdout
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("no row for {id}: {}", text.stdout))
            .to_string()
    };
    assert!(line("good").contains("COMPLETED"));
    assert!(
        line("corrupt").contains("UNREADABLE"),
        "{}",
        line("corrupt")
    );
    assert!(
        line("corrupt").contains("not valid run metadata"),
        "{}",
        line("corrupt")
    );
    assert!(line("nometa").contains("UNREADABLE") && line("nometa").contains("not found"));

    let json = list(&case, &["--format", "json"]);
    json.assert_code(0);
    let rows: Value = serde_json::from_str(&json.stdout).unwrap();
    let row = |id: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == id)
            .unwrap_or_else(|| panic!("no row for {id}: {rows}"))
            .clone()
    };
    assert_eq!(row("corrupt")["status"], "UNREADABLE");
    assert!(row("corrupt")["error"]
        .as_str()
        .unwrap()
        .contains("metadata.json"));
    assert_eq!(row("nometa")["status"], "UNREADABLE");
    assert!(row("good")["error"].is_null());

    let raw = list(&case, &["--format", "raw"]);
    raw.assert_code(0);
    assert_eq!(raw.stdout, "good\n");
    assert!(
        raw.stderr.contains("corrupt") && raw.stderr.contains("UNREADABLE"),
        "{}",
        raw.stderr
    );
    assert_eq!(raw_ids(&case, &["--status", "COMPLETED"]), ["good"]);
}

/// Issue 11 item 19: scripts written for the original engine read `start_time`, `task` and
/// `iterations_completed` from `list-runs --format json`.
#[test]
fn json_rows_carry_the_original_engines_field_names() {
    let case = Case::new("lister", TOOLS, &script());
    case.run("one", "please complete this\nwith a second line", &[])
        .assert_code(0);
    let out = list(&case, &["--format", "json"]);
    out.assert_code(0);
    let rows: Value = serde_json::from_str(&out.stdout).unwrap();
    let row = &rows[0];
    assert_eq!(row["start_time"], row["created_at"]);
    assert_eq!(row["task"], "please complete this\nwith a second line");
    assert_eq!(row["task_summary"], "please complete this");
    assert_eq!(row["iterations_completed"], row["iterations"]);
    assert!(row["end_time"].is_string(), "{row}");
}

/// Issue 24 item 23: a tab in a task shifted the columns after it.
#[test]
fn a_tab_in_a_task_does_not_shift_the_columns() {
    let case = Case::new("lister", TOOLS, &script());
    case.run("tabbed", "please\tcomplete\tthis", &[])
        .assert_code(0);
    case.run("plain", "please complete", &[]).assert_code(0);
    let text = list(&case, &[]);
    text.assert_code(0);
    assert!(!text.stdout.contains('\t'), "{:?}", text.stdout);
    let lines: Vec<&str> = text.stdout.lines().collect();
    let updated = lines[0].find("UPDATED").unwrap();
    for line in &lines[1..] {
        // The last column (`3s ago`) starts after the last double space.
        let age = line.rfind("  ").unwrap() + 2;
        assert_eq!(
            line[..age].chars().count(),
            lines[0][..updated].chars().count(),
            "{}",
            text.stdout
        );
    }
    assert!(
        text.stdout.contains("\"please complete this\""),
        "{}",
        text.stdout
    );
}
