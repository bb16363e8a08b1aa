//! Faults under `--executor slurm`: an array task cancelled with `scancel` is retried and
//! completes; the orchestrating process SIGKILLed at five moments and resumed each time
//! completes with every item run to completion exactly once, its running jobs adopted.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::cluster::{
    cancel_orchestration_jobs, cluster_or_skip, delta_in, engine_ends, queued_tasks, wait_until,
    Orchestration,
};

/// Two pauses: a SIGTERM that kills the first pause's process leaves the run a second one
/// to be interrupted in, so a cancelled job never completes its run by a race.
const SCRIPT: &str = "steps:\n  - tool: pause\n  - tool: pause\n  - answer: \"done {{ task }}\"\n";

/// A plan folder: `items` items of a worker whose one tool sleeps `pause` seconds, then a
/// reduce run; retries 1; polls every 300 ms.
fn plan(items: usize, pause: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    crate::orchestrate::write_agent(
        dir.path(),
        "worker",
        &format!("  - name: pause\n    shell: \"sleep {pause}\"\n"),
    );
    let items: Vec<String> = (0..items).map(|i| format!("i{i}")).collect();
    std::fs::write(
        dir.path().join("plan.yaml"),
        format!(
            "name: faults\nmax_parallel: 8\nexecutor: {{ type: slurm, poll_interval: 300ms }}\ndefaults: {{ agent: ./agents/worker, retries: 1 }}\nstages:\n  - id: map\n    foreach: {{ items: [{}] }}\n    message: \"item {{{{ item }}}}\"\n  - id: reduce\n    needs: [map]\n    message: \"reduce {{{{ stages.map.results | length }}}}\"\n",
            items.join(", ")
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
    dir
}

fn orchestrate(dir: &Path, resume: Option<&str>) -> Orchestration {
    let mut command = delta_in(dir);
    command.args([
        "orchestrate",
        "plan.yaml",
        "-w",
        "ws",
        "--llm-script",
        "script.yaml",
        "--format",
        "json",
        "--relay-listen",
        "127.0.0.1:0",
    ]);
    if let Some(id) = resume {
        command.args(["--resume", id]);
    }
    Orchestration::spawn(command)
}

/// Every run of the plan ended COMPLETED exactly once in its journal.
fn every_item_completed_once(ws: &Path, id: &str, items: usize) {
    let mut runs: Vec<String> = (0..items).map(|i| format!("{id}-map-{i}")).collect();
    runs.push(format!("{id}-reduce-0"));
    for run in runs {
        let ends = engine_ends(ws, &run);
        let completed = ends.iter().filter(|s| *s == "COMPLETED").count();
        assert_eq!(completed, 1, "{run}: ENGINE_END statuses {ends:?}");
    }
}

#[test]
fn slurm_scancel_of_one_array_task_is_retried_and_completes() {
    if !cluster_or_skip("slurm_scancel_of_one_array_task_is_retried_and_completes") {
        return;
    }
    let dir = plan(4, "4");
    let mut run = orchestrate(dir.path(), None);
    let id = run.id();
    let ws = dir.path().join("ws");
    let victim = format!("{id}-map-2");
    let started = wait_until(Duration::from_secs(60), || {
        ws.join(".delta")
            .join(&victim)
            .join("journal.jsonl")
            .exists()
    });
    let mut task = None;
    let mut queue = Vec::new();
    let found = started
        && wait_until(Duration::from_secs(30), || {
            queue = queued_tasks(&id);
            task = queue
                .iter()
                .find(|l| {
                    l.ends_with("|RUNNING")
                        && l.split('|').next().is_some_and(|j| j.ends_with("_2"))
                })
                .and_then(|l| l.split('|').next().map(str::to_owned));
            task.is_some()
        });
    let Some(task) = task.filter(|_| found) else {
        cancel_orchestration_jobs(&id);
        panic!(
            "item 2's job was never seen running: {queue:?}\n{}",
            run.stderr()
        );
    };
    assert!(Command::new("scancel")
        .arg(&task)
        .status()
        .unwrap()
        .success());
    let (code, stdout, stderr) = run.finish(Duration::from_secs(180));
    cancel_orchestration_jobs(&id);
    assert_eq!(code, Some(0), "{stderr}\n{stdout}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    let map = summary["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "map")
        .unwrap();
    let retried = &map["runs"][2];
    assert_eq!(retried["status"], "COMPLETED", "{map:#}");
    assert_eq!(retried["attempts"], 2, "{map:#}");
    every_item_completed_once(&ws, &id, 4);
}

#[test]
fn slurm_sigkill_at_five_moments_then_resume_completes_each_item_once() {
    if !cluster_or_skip("slurm_sigkill_at_five_moments_then_resume_completes_each_item_once") {
        return;
    }
    let items = 6;
    let dir = plan(items, "2");
    let ws = dir.path().join("ws");
    let mut run = orchestrate(dir.path(), None);
    let id = run.id();
    let orchestration = ws.join(".delta/orchestrations").join(&id);
    let metadata = |run: &str| {
        std::fs::read_to_string(ws.join(".delta").join(run).join("metadata.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
    };
    let completed = |n: usize| {
        (0..items)
            .filter(|i| {
                metadata(&format!("{id}-map-{i}")).is_some_and(|m| m["status"] == "COMPLETED")
            })
            .count()
            >= n
    };
    // The moments: submissions just made, jobs queued or running, some items done, the
    // reduce job submitted, and a resume killed right after it started.
    let moments: Vec<Box<dyn Fn() -> bool>> = vec![
        Box::new(|| orchestration.join("slurm/runs/map").exists()),
        Box::new(|| !queued_tasks(&id).is_empty()),
        Box::new(|| completed(1)),
        Box::new(|| completed(items)),
        Box::new(|| orchestration.join("slurm/runs/reduce/0.json").exists()),
    ];
    let mut kills = 0;
    for (n, moment) in moments.iter().enumerate() {
        let reached = wait_until(Duration::from_secs(90), || moment() || !run.running());
        if !reached || !run.running() {
            break;
        }
        run.sigkill();
        kills += 1;
        run = orchestrate(dir.path(), Some(&id));
        if n == moments.len() - 1 {
            std::thread::sleep(Duration::from_millis(300));
            run.sigkill();
            kills += 1;
            run = orchestrate(dir.path(), Some(&id));
        }
    }
    let (code, stdout, stderr) = run.finish(Duration::from_secs(240));
    cancel_orchestration_jobs(&id);
    assert!(
        kills >= 5,
        "only {kills} kills happened before the plan finished: {stderr}"
    );
    assert_eq!(code, Some(0), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["status"], "COMPLETED", "{summary:#}");
    every_item_completed_once(&ws, &id, items);
    // Adopted, not duplicated: each item ran in exactly one Slurm job.
    let logs: Vec<String> = std::fs::read_dir(orchestration.join("slurm/logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        logs.iter().filter(|l| l.starts_with("map-")).count(),
        items,
        "{logs:?}"
    );
}

#[test]
fn slurm_sigint_cancels_the_jobs_then_resume_finishes() {
    if !cluster_or_skip("slurm_sigint_cancels_the_jobs_then_resume_finishes") {
        return;
    }
    // Each pause sleeps until the test creates `fast` beside the workspace.
    let dir = plan(3, "20");
    std::fs::write(
        dir.path().join("agents/worker/wait.sh"),
        "i=0; while [ ! -e ../fast ] && [ $i -lt 100 ]; do sleep 0.2; i=$((i+1)); done\n",
    )
    .unwrap();
    crate::orchestrate::write_agent(
        dir.path(),
        "worker",
        "  - name: pause\n    exec: \"sh ${AGENT_HOME}/wait.sh\"\n",
    );
    let ws = dir.path().join("ws");
    let mut run = orchestrate(dir.path(), None);
    let id = run.id();
    let all_started = wait_until(Duration::from_secs(60), || {
        (0..3).all(|i| {
            ws.join(".delta")
                .join(format!("{id}-map-{i}"))
                .join("journal.jsonl")
                .exists()
        })
    });
    if !all_started {
        cancel_orchestration_jobs(&id);
        panic!("the runs never started: {}", run.stderr());
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let (code, stdout, stderr) = run.finish(Duration::from_secs(90));
    let gone = wait_until(Duration::from_secs(30), || queued_tasks(&id).is_empty());
    cancel_orchestration_jobs(&id);
    assert_eq!(code, Some(130), "{stderr}\n{stdout}");
    assert!(gone, "the jobs were not cancelled: {:?}", queued_tasks(&id));
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["status"], "INTERRUPTED", "{summary:#}");

    std::fs::write(dir.path().join("fast"), "").unwrap();
    let (code, stdout, stderr) =
        orchestrate(dir.path(), Some(&id)).finish(Duration::from_secs(120));
    cancel_orchestration_jobs(&id);
    assert_eq!(code, Some(0), "{stderr}\n{stdout}");
    every_item_completed_once(&ws, &id, 3);
}
