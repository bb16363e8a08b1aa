//! The map-reduce example under `--executor slurm`: the same report.md and summary as the
//! local executor, its jobs visible in `squeue` while it runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::cluster::{cluster_or_skip, delta_in, queued_tasks, wait_until, Orchestration};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/plans/map-reduce")
}

/// The summary without what differs between two orchestrations (ids, times, paths).
fn comparable(summary: &Value) -> Value {
    let id = summary["orchestration_id"].as_str().unwrap();
    let stages: Vec<Value> = summary["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|stage| {
            let runs: Vec<Value> = stage["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|run| {
                    serde_json::json!({
                        "run": run["run_id"].as_str().unwrap().trim_start_matches(id),
                        "index": run["index"],
                        "status": run["status"],
                        "result": run["result"],
                        "attempts": run["attempts"],
                    })
                })
                .collect();
            serde_json::json!({
                "id": stage["id"], "status": stage["status"], "total": stage["total"],
                "completed": stage["completed"], "failed": stage["failed"], "runs": runs,
            })
        })
        .collect();
    serde_json::json!({ "status": summary["status"], "totals": summary["totals"], "stages": stages })
}

fn orchestrate(ws: &Path, extra: &[&str]) -> Orchestration {
    let mut command = delta_in(&example());
    command
        .args([
            "orchestrate",
            "plan.yaml",
            "--llm-script",
            "llm-script.yaml",
            "--format",
            "json",
            "-w",
        ])
        .arg(ws)
        .args(extra);
    Orchestration::spawn(command)
}

#[test]
fn slurm_map_reduce_gives_the_local_report_and_summary_with_its_jobs_in_squeue() {
    if !cluster_or_skip(
        "slurm_map_reduce_gives_the_local_report_and_summary_with_its_jobs_in_squeue",
    ) {
        return;
    }
    let local_ws = tempfile::tempdir().unwrap();
    let (code, local_out, stderr) =
        orchestrate(local_ws.path(), &[]).finish(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");

    let slurm_ws = tempfile::tempdir().unwrap();
    let mut slurm = orchestrate(
        slurm_ws.path(),
        &["--executor", "slurm", "--relay-listen", "127.0.0.1:0"],
    );
    let id = slurm.id();
    let mut seen = Vec::new();
    let visible = wait_until(Duration::from_secs(60), || {
        seen = queued_tasks(&id);
        !seen.is_empty() || !slurm.running()
    }) && !seen.is_empty();
    let (code, slurm_out, stderr) = slurm.finish(Duration::from_secs(180));
    super::cluster::cancel_orchestration_jobs(&id);
    assert!(visible, "no job of {id} was ever seen in squeue: {stderr}");
    assert!(
        seen.iter().any(|l| l.contains(&format!("|{id}-map|"))),
        "the array's job name carries the orchestration and stage: {seen:?}"
    );
    assert_eq!(code, Some(0), "{stderr}");

    let local: Value = serde_json::from_str(&local_out).unwrap();
    let slurm: Value = serde_json::from_str(&slurm_out).unwrap();
    assert_eq!(comparable(&slurm), comparable(&local));
    let report = |ws: &Path| std::fs::read_to_string(ws.join("report.md")).unwrap();
    assert_eq!(report(slurm_ws.path()), report(local_ws.path()));
    assert!(report(slurm_ws.path()).contains("Files: 20"));
    // Each item ran in exactly one job: one output file per array task.
    let logs = slurm_ws
        .path()
        .join(".delta/orchestrations")
        .join(&id)
        .join("slurm/logs");
    let map_logs = std::fs::read_dir(&logs)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("map-")
        })
        .count();
    assert_eq!(map_logs, 20);
}
