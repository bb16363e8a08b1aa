//! The crash test of `delta orchestrate` (issue 6 acceptance): a 50-item map-reduce is
//! SIGKILLed at 10 different moments (before any run finished, at several points of the
//! map stage, between the stages, during the reduce), then finished with `--resume` (three
//! trials also kill that first resume a few runs in). Every trial must end COMPLETED with
//! exactly 50 completed map runs, each answering for its own item, and one reduce run that
//! saw all 50; no run may have completed twice (one COMPLETED ENGINE_END per journal).
//!
//! Kill moments are defined by progress the process itself reports (its scheduling
//! journal and its stderr), not by wall-clock guesses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use delta_actors::journal::{read_journal, Event};
use delta_actors::plan::state::OrchestrationState;
use delta_actors::workspace::RunPaths;
use delta_actors::RunStatus;

use crate::orchestrate::{delta_in, write_agent};

const ITEMS: usize = 50;
const TRIALS: usize = 10;
const AT_ONCE: usize = 3;

const PLAN: &str = "name: crash\nmax_parallel: 8\ndefaults:\n  max_iterations: 6\n  retries: 1\nstages:\n  - id: map\n    agent: ./agents/processor\n    foreach: { files: \"data/*.txt\" }\n    message: \"Count {{ item }}\"\n  - id: reduce\n    needs: [map]\n    agent: ./agents/aggregator\n    message: \"Combine {{ stages.map.results | length }} results: {{ stages.map.results | join(';') }}\"\n";

const SCRIPT: &str = "default_latency: \"20±5\"\nrules:\n  - agent: processor\n    steps:\n      - tool: count\n        args: { path: \"{{ task | replace('Count ', '') }}\" }\n      - answer: \"{{ task }}: {{ last_observation | replace('=== STDOUT ===', '') | replace('=== EXIT CODE: 0 ===', '') | trim }}\"\n  - agent: aggregator\n    latency: 300\n    steps:\n      - tool: report\n      - answer: \"{{ task }}\"\n";

/// A fresh copy of the map-reduce plan with `ITEMS` data files.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_agent(
        root,
        "processor",
        "  - name: count\n    exec: \"wc -w ${path}\"\n",
    );
    write_agent(
        root,
        "aggregator",
        "  - name: report\n    exec: \"touch report.md\"\n",
    );
    std::fs::create_dir_all(root.join("data")).unwrap();
    for i in 0..ITEMS {
        let words = vec!["word"; i + 1].join(" ");
        std::fs::write(root.join(format!("data/item-{i:02}.txt")), words).unwrap();
    }
    std::fs::write(root.join("plan.yaml"), PLAN).unwrap();
    std::fs::write(root.join("script.yaml"), SCRIPT).unwrap();
    dir
}

/// When to pull the plug.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// Right after the orchestration id is printed.
    AtStart,
    /// Once this many runs have finished (by the scheduling journal), plus a phase delay.
    AfterFinished(usize, Duration),
    /// Once the reduce stage has started (its one run has a 300 ms model latency).
    DuringReduce,
}

fn moment(trial: usize) -> Moment {
    match trial {
        0 => Moment::AtStart,
        9 => Moment::DuringReduce,
        8 => Moment::AfterFinished(ITEMS, Duration::ZERO),
        k => Moment::AfterFinished(k * 7 - 3, Duration::from_millis(k as u64 * 3)),
    }
}

fn finished_runs(journal: &Path) -> usize {
    std::fs::read_to_string(journal)
        .map(|t| t.matches("\"type\":\"RUN_FINISHED\"").count())
        .unwrap_or(0)
}

/// Waits (bounded) until the process reached `moment`, then SIGKILLs it. Returns the id.
/// `resume`: the id of an orchestration to resume instead of starting one.
fn start_and_kill(root: &Path, ws: &Path, moment: Moment, resume: Option<&str>) -> String {
    let mut command = delta_in(root);
    command
        .args([
            "orchestrate",
            "plan.yaml",
            "--llm-script",
            "script.yaml",
            "-w",
        ])
        .arg(ws);
    if let Some(id) = resume {
        command.args(["--resume", id]);
    }
    let mut child: Child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let wait_line = |pred: &dyn Fn(&str) -> bool| -> String {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines
                .recv_timeout(left)
                .expect("the orchestration ended or stalled before the kill moment");
            if pred(&line) {
                return line;
            }
        }
    };
    let id_line = wait_line(&|l| l.starts_with("orchestration "));
    let id = id_line["orchestration ".len()..].trim().to_string();
    match moment {
        Moment::AtStart => {}
        Moment::DuringReduce => {
            wait_line(&|l| l.starts_with("stage reduce: 1 run"));
        }
        Moment::AfterFinished(count, phase) => {
            let journal = OrchestrationState::dir_for(ws, &id)
                .unwrap()
                .join("journal.jsonl");
            while finished_runs(&journal) < count {
                assert!(
                    Instant::now() < deadline,
                    "only {} runs finished",
                    finished_runs(&journal)
                );
                assert!(child.try_wait().unwrap().is_none(), "exited before {count}");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(phase);
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop(lines);
    reader.join().unwrap();
    id
}

/// `--resume` until the orchestration is no longer INTERRUPTED (bounded); the JSON summary.
fn resume(root: &Path, ws: &Path, id: &str) -> serde_json::Value {
    for _ in 0..4 {
        let output = delta_in(root)
            .args(["orchestrate", "plan.yaml", "--llm-script", "script.yaml"])
            .args(["--format", "json", "--resume", id, "-w"])
            .arg(ws)
            .output()
            .unwrap();
        let code = output.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if code == 130 {
            continue;
        }
        assert_eq!(code, 0, "resume of {id} failed:\n{stderr}");
        return serde_json::from_slice(&output.stdout).unwrap();
    }
    panic!("{id}: still INTERRUPTED after 4 resumes");
}

fn check_trial(trial: usize) {
    let dir = fixture();
    let root = dir.path();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let moment = moment(trial);
    let id = start_and_kill(root, &ws, moment, None);
    // Some trials also kill the first resume, a few runs later.
    let resume_kill = matches!(trial, 2 | 4 | 5).then(|| {
        let journal = OrchestrationState::dir_for(&ws, &id)
            .unwrap()
            .join("journal.jsonl");
        let at = Moment::AfterFinished(finished_runs(&journal) + 3, Duration::ZERO);
        start_and_kill(root, &ws, at, Some(&id));
        at
    });
    let summary = resume(root, &ws, &id);
    let context = format!("trial {trial} ({moment:?}, then {resume_kill:?}), orchestration {id}");
    assert_eq!(summary["status"], "COMPLETED", "{context}: {summary:#}");
    let stage = |name: &str| {
        summary["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == name)
            .unwrap_or_else(|| panic!("{context}: no stage {name}"))
            .clone()
    };
    let map = stage("map");
    let reduce = stage("reduce");
    assert_eq!(map["completed"], ITEMS, "{context}: {map:#}");
    assert_eq!(map["runs"].as_array().unwrap().len(), ITEMS, "{context}");
    assert_eq!(reduce["completed"], 1, "{context}: {reduce:#}");
    let reduce_result = reduce["runs"][0]["result"].as_str().unwrap();
    assert!(
        reduce_result.starts_with(&format!("Combine {ITEMS} results")),
        "{context}: {reduce_result}"
    );

    // Each result names its own item (a crash mid-tool may change what was observed, as
    // the continued run is told its call was interrupted, never which item it works on).
    for (index, row) in map["runs"].as_array().unwrap().iter().enumerate() {
        let item = root.join(format!("data/item-{index:02}.txt"));
        let prefix = format!("Count {}: ", item.display());
        let result = row["result"].as_str().unwrap();
        assert!(result.starts_with(&prefix), "{context}: {row:#}");
    }
    let mut run_ids: Vec<String> = map["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect();
    run_ids.push(reduce["runs"][0]["run_id"].as_str().unwrap().to_string());
    for run_id in &run_ids {
        let events = read_journal(&RunPaths::new(&ws, run_id).journal).unwrap();
        let completions = events
            .iter()
            .filter(|e| {
                matches!(
                    e.event,
                    Event::EngineEnd {
                        status: RunStatus::Completed,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(
            completions, 1,
            "{context}: {run_id} completed {completions} times"
        );
    }
    // No stray runs: the workspace holds exactly the planned ones.
    let mut on_disk: Vec<PathBuf> = std::fs::read_dir(ws.join(".delta"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&id))
        })
        .collect();
    on_disk.sort();
    assert_eq!(on_disk.len(), ITEMS + 1, "{context}: {on_disk:?}");
}

#[test]
fn kill_9_at_ten_moments_then_resume_completes_every_item_exactly_once() {
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                scope.spawn(|| loop {
                    let trial = next.fetch_add(1, Ordering::SeqCst);
                    if trial >= TRIALS {
                        break;
                    }
                    check_trial(trial);
                })
            })
            .collect();
        for worker in workers {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}
