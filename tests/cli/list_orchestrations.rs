//! CLI tests of `delta list-orchestrations` (issue 11 item 12): a workspace without
//! orchestrations, finished ones with their status and counts (text and JSON), a running
//! one (its lock is held: a second process may not resume it) that shows INTERRUPTED once
//! its process is killed, and damaged folders listed as UNREADABLE with the reason instead
//! of being hidden.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::orchestrate::{delta_in, write_agent};

fn list(root: &Path, format: &str) -> Output {
    delta_in(root)
        .args(["list-orchestrations", "-w", "ws", "--format", format])
        .output()
        .unwrap()
}

fn listed(root: &Path) -> Vec<Value> {
    let out = list(root, "json");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn text(root: &Path) -> String {
    let out = list(root, "text");
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8(out.stdout).unwrap()
}

/// Pids of live processes running `sleep <duration>`.
fn sleepers(duration: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{duration}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            (std::fs::read(e.path().join("cmdline")).ok()? == wanted.as_bytes()).then_some(pid)
        })
        .collect()
}

fn plan_dir(plan: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_agent(
        dir.path(),
        "worker",
        "  - name: nap\n    shell: \"touch napping && sleep 29.563\"\n",
    );
    std::fs::write(dir.path().join("plan.yaml"), plan).unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "rules:\n  - task_contains: nap\n    steps: [{ tool: nap }, { answer: rested }]\n  - task_contains: bad\n    steps: [{ fail: 400 }]\n  - steps: [{ answer: \"done {{ task }}\" }]\n",
    )
    .unwrap();
    dir
}

fn orchestrate(root: &Path, plan: &str) -> Value {
    let out = delta_in(root)
        .args([
            "orchestrate",
            plan,
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ])
        .args(["--format", "json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    })
}

#[test]
fn an_empty_workspace_lists_nothing_and_a_missing_one_is_an_error() {
    let dir = plan_dir("stages: []\n");
    std::fs::create_dir_all(dir.path().join("ws")).unwrap();
    assert!(text(dir.path()).starts_with("No orchestrations in ws/.delta/orchestrations"));
    assert!(listed(dir.path()).is_empty());
    let out = delta_in(dir.path())
        .args(["list-orchestrations", "-w", "missing"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("missing") && stderr.contains("hint"),
        "{stderr}"
    );
}

#[test]
fn finished_running_killed_and_damaged_orchestrations_are_all_listed() {
    let dir = plan_dir(
        "name: good\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n",
    );
    let root = dir.path();
    std::fs::write(
        root.join("bad.yaml"),
        "name: bad\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [ok, bad] }\n    message: \"item {{ item }}\"\n",
    )
    .unwrap();
    std::fs::write(
        root.join("nap.yaml"),
        "name: nap\ndefaults: { agent: ./agents/worker }\nstages:\n  - { id: work, message: nap }\n",
    )
    .unwrap();
    let good = orchestrate(root, "plan.yaml");
    let bad = orchestrate(root, "bad.yaml");
    let orchestrations = root.join("ws/.delta/orchestrations");
    std::fs::create_dir_all(orchestrations.join("no-journal")).unwrap();
    std::fs::create_dir_all(orchestrations.join("garbled")).unwrap();
    std::fs::write(orchestrations.join("garbled/journal.jsonl"), "not json\n").unwrap();

    // One more, still running while it is listed.
    let mut child = delta_in(root)
        .args([
            "orchestrate",
            "nap.yaml",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sleepers("29.563").is_empty() {
        assert!(Instant::now() < deadline, "the nap never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let rows = listed(root);
    let status = |rows: &[Value], prefix: &str| -> Value {
        rows.iter()
            .find(|r| r["orchestration_id"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {rows:#?}"))
            .clone()
    };
    let running = status(&rows, "nap-");
    assert_eq!(running["status"], "RUNNING", "{rows:#?}");
    // One process drives an orchestration at a time.
    let second = delta_in(root)
        .args([
            "orchestrate",
            "--resume",
            running["orchestration_id"].as_str().unwrap(),
        ])
        .args(["-w", "ws", "--llm-script", "script.yaml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(126), "{stderr}");
    assert!(stderr.contains("driven by another process"), "{stderr}");

    // Killed without a chance to finish: no longer RUNNING.
    child.kill().unwrap();
    child.wait().unwrap();
    for pid in sleepers("29.563") {
        crate::harness::kill_pid(pid);
    }
    let rows = listed(root);
    assert_eq!(rows.len(), 5, "{rows:#?}");
    let nap = status(&rows, "nap-");
    assert_eq!(nap["status"], "INTERRUPTED");
    assert!(
        nap["error"]
            .as_str()
            .unwrap()
            .contains("stopped without finishing"),
        "{nap:#}"
    );
    let good_row = status(&rows, "good-");
    assert_eq!(good_row["orchestration_id"], good["orchestration_id"]);
    assert_eq!(good_row["status"], "COMPLETED");
    assert_eq!(
        good_row["counts"],
        good["totals"]
            .as_object()
            .map(|t| {
                let mut c = t.clone();
                c.remove("input_tokens");
                c.remove("output_tokens");
                // Issue 33: the totals carry the cost beside the counts.
                c.remove("total_cost_usd");
                c.remove("unpriced_model");
                Value::Object(c)
            })
            .unwrap()
    );
    // Issue 25 item 5: the listing shows the tokens of every attempt, as the summary does.
    let good_tokens = (
        good["totals"]["input_tokens"].as_u64().unwrap(),
        good["totals"]["output_tokens"].as_u64().unwrap(),
    );
    assert!(good_tokens.0 > 0, "{good:#}");
    assert_eq!(
        (
            good_row["usage"]["input_tokens"].as_u64().unwrap(),
            good_row["usage"]["output_tokens"].as_u64().unwrap()
        ),
        good_tokens
    );
    assert!(good_row["plan"].as_str().unwrap().ends_with("plan.yaml"));
    assert!(good_row["age_seconds"].as_i64().unwrap() >= 0);
    let bad_row = status(&rows, "bad-");
    assert_eq!(bad_row["status"], "FAILED");
    assert_eq!(bad_row["orchestration_id"], bad["orchestration_id"]);
    assert_eq!(bad_row["counts"]["failed"], 1);
    for (id, reason) in [
        ("no-journal", "cannot read"),
        ("garbled", "line 1 is not a scheduling record"),
    ] {
        let row = status(&rows, id);
        assert_eq!(row["status"], "UNREADABLE", "{row:#}");
        assert!(row["error"].as_str().unwrap().contains(reason), "{row:#}");
    }

    let table = text(root);
    let line = |prefix: &str| -> String {
        table
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} line in\n{table}"))
            .to_owned()
    };
    assert!(table.starts_with("ID "), "{table}");
    assert!(table.lines().next().unwrap().contains("TOKENS"), "{table}");
    assert!(
        line("good-").contains(&format!("{} in / {} out", good_tokens.0, good_tokens.1)),
        "{table}"
    );
    assert!(line("good-").contains("COMPLETED"), "{table}");
    assert!(
        line("good-").contains("2 completed, 0 failed of 2"),
        "{table}"
    );
    assert!(
        line("bad-").contains("1 completed, 1 failed of 2"),
        "{table}"
    );
    assert!(line("garbled").contains("UNREADABLE"), "{table}");
    assert!(
        line("garbled").contains("not a scheduling record"),
        "{table}"
    );
}

/// Issue 24 item 17: an orchestration whose process died (`timeout` signalling twice used to
/// make it exit at once; here a kill) listed its started runs as "not started", and its
/// hint said `--resume <id> -w <workspace>` without the `--llm-script` it needs. Started
/// runs count as interrupted, and the hint is the exact command, which resumes it as
/// printed from another folder.
#[test]
fn a_killed_orchestration_counts_started_runs_as_interrupted_and_prints_the_exact_resume_command() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_agent(
        root,
        "worker",
        "  - name: nap\n    shell: \"sleep 29.571\"\n",
    );
    std::fs::write(
        root.join("plan.yaml"),
        "name: cut\nmax_parallel: 2\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [nap-a, nap-b, later] }\n    message: \"item {{ item }}\"\n",
    )
    .unwrap();
    std::fs::write(
        root.join("script.yaml"),
        "rules:\n  - task_contains: nap\n    steps: [{ tool: nap }, { answer: rested }]\n  - steps: [{ answer: \"done {{ task }}\" }]\n",
    )
    .unwrap();
    let mut child = delta_in(root)
        .args([
            "orchestrate",
            "plan.yaml",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
            "--budget-tokens",
            "1000000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sleepers("29.571").len() < 2 {
        assert!(Instant::now() < deadline, "the naps never started");
        assert!(child.try_wait().unwrap().is_none(), "delta exited early");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    for pid in sleepers("29.571") {
        crate::harness::kill_pid(pid);
    }

    let rows = listed(root);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    assert_eq!(row["status"], "INTERRUPTED", "{row:#}");
    let counts = &row["counts"];
    assert_eq!(
        (
            &counts["total"],
            &counts["completed"],
            &counts["interrupted"],
            &counts["not_started"]
        ),
        (
            &Value::from(3),
            &Value::from(0),
            &Value::from(2),
            &Value::from(1)
        ),
        "{row:#}"
    );
    let command = row["resume_command"].as_str().unwrap();
    let root = root.canonicalize().unwrap();
    let id = row["orchestration_id"].as_str().unwrap();
    for part in [
        format!("--resume {id}"),
        format!("-w {}", root.join("ws").display()),
        format!("--llm-script {}", root.join("script.yaml").display()),
        // A cap given as a flag is kept: a resume must not run without it.
        "--budget-tokens 1000000".to_string(),
    ] {
        assert!(command.contains(&part), "`{part}` missing from {command}");
    }
    assert!(!command.contains('<'), "a placeholder in {command}");
    let table = text(&root);
    assert!(table.contains(command), "{table}");

    // As printed, from another folder.
    let elsewhere = tempfile::tempdir().unwrap();
    let resumed = std::process::Command::new("sh")
        .args(["-c", command])
        .current_dir(elsewhere.path())
        .env_remove("DELTA_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let rows = listed(&root);
    assert_eq!(rows[0]["status"], "COMPLETED", "{rows:#?}");
    assert_eq!(rows[0]["counts"]["completed"], 3, "{rows:#?}");
}
