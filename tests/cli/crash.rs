//! The kill -9 harness (issue 4): a scripted run with a slow model and slow tools is killed
//! with SIGKILL at many points (spread over its duration, and right after the journal
//! reaches k lines), then continued until COMPLETED. Every trial must leave a journal that
//! parses, strictly increasing seqs, exactly one ACTION_RESULT per tool call, and the
//! strict scripted model must never have seen an invalid history.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;

const RUN_ID: &str = "crash";
const FINAL_ANSWER: &str = "finished after the crash";
const TRIALS_IN_PARALLEL: usize = 4;
const TIME_KILLS: u32 = 32;
const LINE_KILLS: usize = 16;

const TOOLS: &str = r#"tools:
  - name: step
    description: a slow step
    shell: "sleep 0.05; echo step ${n}"
"#;

fn script() -> Value {
    json!({
        "strict": true,
        "default_latency": "20..50",
        "steps": [
            {"tool": "step", "args": {"n": "1"}},
            {"tools": [
                {"tool": "step", "args": {"n": "2a"}},
                {"tool": "step", "args": {"n": "2b"}}
            ], "content": "two at once"},
            {"tool": "step", "args": {"n": "3"}},
            {"tool": "step", "args": {"n": "4"}},
            {"answer": FINAL_ANSWER}
        ]
    })
}

#[derive(Debug, Clone, Copy)]
enum KillPoint {
    After(Duration),
    JournalLines(usize),
}

fn run_command(case: &Case, work_dir: &Path) -> std::process::Command {
    let mut cmd = case.spawn_cmd();
    cmd.args(["run", "--agent"])
        .arg(case.agent_dir())
        .arg("-w")
        .arg(work_dir)
        .args([
            "--run-id",
            RUN_ID,
            "-m",
            "survive crashes",
            "--format",
            "json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

fn journal_lines(path: &Path) -> usize {
    std::fs::read(path)
        .map(|bytes| bytes.iter().filter(|b| **b == b'\n').count())
        .unwrap_or(0)
}

fn status_of(work_dir: &Path) -> Option<String> {
    let text =
        std::fs::read_to_string(work_dir.join(".delta").join(RUN_ID).join("metadata.json")).ok()?;
    let meta: Value = serde_json::from_str(&text).ok()?;
    meta["status"].as_str().map(str::to_string)
}

/// What one trial ended with: the final journal and how many commands it took after the kill.
struct TrialOutcome {
    journal: Vec<Value>,
    recoveries: usize,
}

/// One trial: start, SIGKILL at `point`, continue until COMPLETED.
fn trial(case: &Case, work_dir: &Path, point: KillPoint) -> Result<TrialOutcome, String> {
    std::fs::create_dir_all(work_dir).unwrap();
    let journal_path = work_dir.join(".delta").join(RUN_ID).join("journal.jsonl");
    let mut child = run_command(case, work_dir).spawn().unwrap();
    match point {
        // The delay is the experiment's parameter (where to kill), not a synchronisation.
        KillPoint::After(delay) => std::thread::sleep(delay),
        KillPoint::JournalLines(k) => {
            let deadline = Instant::now() + Duration::from_secs(20);
            while journal_lines(&journal_path) < k
                && child.try_wait().unwrap().is_none()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();

    let mut log = Vec::new();
    for recoveries in 0..6 {
        let status = status_of(work_dir);
        log.push(format!("status {status:?}"));
        if status.as_deref() == Some("COMPLETED") {
            let journal = read_journal(&journal_path);
            return Ok(TrialOutcome {
                journal,
                recoveries,
            });
        }
        let run_dir = work_dir.join(".delta").join(RUN_ID);
        let output = if run_dir.join("metadata.json").exists() {
            case.cmd()
                .args(["continue", "--run-id", RUN_ID, "-w"])
                .arg(work_dir)
                .args(["--format", "json"])
                .output()
                .unwrap()
        } else {
            // Killed before metadata.json (written last at creation): the run never started,
            // and `delta run` with the same id reclaims the folder.
            let mut cmd = run_command(case, work_dir);
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            let child = cmd.spawn().unwrap();
            child.wait_with_output().unwrap()
        };
        log.push(format!(
            "exit {:?}: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .filter(|l| l.contains("error") || l.contains("janitor"))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
        match output.status.code() {
            Some(0) | Some(130) => {}
            _ => return Err(format!("{point:?}: {}", log.join("\n  "))),
        }
    }
    Err(format!("{point:?}: never COMPLETED: {}", log.join("\n  ")))
}

fn check_journal(point: KillPoint, journal: &[Value]) -> Result<(), String> {
    let seqs: Vec<u64> = journal
        .iter()
        .map(|e| e["seq"].as_u64().unwrap_or(0))
        .collect();
    if seqs.windows(2).any(|w| w[1] <= w[0]) {
        return Err(format!("{point:?}: seq not strictly increasing: {seqs:?}"));
    }
    let mut results: BTreeMap<String, usize> = BTreeMap::new();
    for event in events_of(journal, "ACTION_RESULT") {
        *results
            .entry(event["action_id"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    let mut calls = Vec::new();
    for thought in events_of(journal, "THOUGHT") {
        for call in thought["tool_calls"].as_array().into_iter().flatten() {
            calls.push(call["id"].as_str().unwrap_or("?").to_string());
        }
    }
    for id in &calls {
        if results.get(id) != Some(&1) {
            return Err(format!(
                "{point:?}: tool call {id} has {:?} results; journal types {:?}",
                results.get(id),
                types(journal)
            ));
        }
    }
    if results.len() != calls.len() {
        return Err(format!(
            "{point:?}: results {results:?} for calls {calls:?}"
        ));
    }
    let end = journal.last().unwrap();
    if end["type"] != "ENGINE_END" || end["status"] != "COMPLETED" || end["result"] != FINAL_ANSWER
    {
        return Err(format!("{point:?}: last event {end}"));
    }
    Ok(())
}

#[test]
fn sigkill_at_many_points_then_continue_always_completes_cleanly() {
    let started = Instant::now();
    let case = Case::new("crashy", TOOLS, &script());

    // Baseline: an uninterrupted run tells how long the kill window is and how many
    // journal lines there are to kill after.
    let baseline_dir = case.path().join("baseline");
    std::fs::create_dir_all(&baseline_dir).unwrap();
    let t0 = Instant::now();
    let status = run_command(&case, &baseline_dir).status().unwrap();
    let total = t0.elapsed();
    assert_eq!(status.code(), Some(0));
    let baseline = read_journal(
        &baseline_dir
            .join(".delta")
            .join(RUN_ID)
            .join("journal.jsonl"),
    );
    check_journal(KillPoint::After(total), &baseline).unwrap();
    let lines = baseline.len();

    let mut points: Vec<KillPoint> = (0..TIME_KILLS)
        .map(|i| KillPoint::After(total * i / TIME_KILLS))
        .collect();
    points.extend(
        (1..=LINE_KILLS)
            .map(|k| KillPoint::JournalLines(1 + (k - 1) * lines.saturating_sub(1) / LINE_KILLS)),
    );

    let trial_dirs: Vec<PathBuf> = (0..points.len())
        .map(|i| case.path().join(format!("trial-{i:02}")))
        .collect();
    let mut failures = Vec::new();
    let mut recovered_trials = 0;
    for (batch_points, batch_dirs) in points
        .chunks(TRIALS_IN_PARALLEL)
        .zip(trial_dirs.chunks(TRIALS_IN_PARALLEL))
    {
        let outcomes: Vec<Result<TrialOutcome, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = batch_points
                .iter()
                .zip(batch_dirs)
                .map(|(point, dir)| {
                    let case = &case;
                    scope.spawn(move || {
                        trial(case, dir, *point)
                            .and_then(|t| check_journal(*point, &t.journal).map(|_| t))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for outcome in outcomes {
            match outcome {
                Ok(outcome) => recovered_trials += usize::from(outcome.recoveries > 0),
                Err(e) => failures.push(e),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} trial(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let stats = case.mock.stats();
    assert_eq!(
        stats["rejected_invalid"], 0,
        "the model saw an invalid history: {stats}"
    );
    assert!(points.len() >= 30);
    // At least 30 kills must land inside the run (the others prove that kills before the
    // run folder exists or after the end are harmless).
    assert!(
        recovered_trials >= 30,
        "only {recovered_trials} of {} kills interrupted the run",
        points.len()
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "crash harness took {:?}",
        started.elapsed()
    );
}
