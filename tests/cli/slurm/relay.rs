//! The relay under `--executor slurm`: one `requests_per_minute` for every job together
//! (arrivals counted at a scripted HTTP endpoint), and the provider key (a canary) in no
//! file of the workspace, of Slurm's state and spool, nor in `scontrol show job`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::cluster::{
    cancel_orchestration_jobs, cluster_or_skip, delta_in, files_under, queued_tasks, wait_until,
    Orchestration,
};
use crate::harness::MockLlm;

/// `scontrol show config` value of `key` (a folder of Slurm's).
fn slurm_dir(key: &str) -> Option<PathBuf> {
    let out = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| PathBuf::from(v.trim()))
    })
}

/// Files under `dirs` whose bytes contain `needle`.
fn files_containing(dirs: &[PathBuf], needle: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in dirs {
        files_under(dir, &mut files);
    }
    files
        .into_iter()
        .filter(|f| {
            std::fs::read(f)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

/// What Slurm says about the orchestration's jobs: `scontrol show job -dd` and the batch
/// script of each.
fn scontrol_views(id: &str) -> String {
    let mut text = String::new();
    for line in queued_tasks(id) {
        let Some(job) = line.split('|').next() else {
            continue;
        };
        for args in [
            vec!["show", "job", "-dd", job],
            vec!["write", "batch_script", job, "-"],
        ] {
            if let Ok(out) = Command::new("scontrol")
                .args(&args)
                .stdin(Stdio::null())
                .output()
            {
                text.push_str(&String::from_utf8_lossy(&out.stdout));
            }
        }
    }
    text
}

#[test]
fn slurm_relay_spaces_every_jobs_calls_and_the_key_stays_on_the_submitting_host() {
    if !cluster_or_skip(
        "slurm_relay_spaces_every_jobs_calls_and_the_key_stays_on_the_submitting_host",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    crate::orchestrate::write_agent(root, "worker", "  - name: noop\n    exec: \"true\"\n");
    std::fs::write(
        root.join("script.yaml"),
        "steps:\n  - tool: noop\n  - answer: \"done {{ task }}\"\n",
    )
    .unwrap();
    std::fs::write(
        root.join("plan.yaml"),
        "name: relay\nmax_parallel: 8\nllm: { requests_per_minute: 120 }\nexecutor: { type: slurm, poll_interval: 300ms }\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c, d] }\n    message: \"item {{ item }}\"\n",
    )
    .unwrap();
    let mock = MockLlm::start(&root.join("script.yaml"));
    let canary = format!("sk-canary-{}", uuid::Uuid::new_v4().simple());
    let mut command = delta_in(root);
    command
        .args(["orchestrate", "plan.yaml", "-w", "ws", "--format", "json"])
        .args(["--relay-listen", "127.0.0.1:0"])
        .env("DELTA_BASE_URL", &mock.base_url)
        .env("DELTA_API_KEY", &canary);
    let mut run = Orchestration::spawn(command);
    let id = run.id();
    let spool: Vec<PathBuf> = ["StateSaveLocation", "SlurmdSpoolDir"]
        .iter()
        .filter_map(|k| slurm_dir(k))
        .collect();
    // While the jobs are queued or running: Slurm's own copies of their scripts and
    // environments exist only then.
    let mut views = String::new();
    let mut leaked_while_running = Vec::new();
    wait_until(Duration::from_secs(60), || {
        if queued_tasks(&id).is_empty() {
            return !run.running();
        }
        views.push_str(&scontrol_views(&id));
        leaked_while_running.extend(files_containing(&spool, &canary));
        true
    });
    let (code, stdout, stderr) = run.finish(Duration::from_secs(180));
    cancel_orchestration_jobs(&id);
    assert_eq!(code, Some(0), "{stderr}\n{stdout}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["totals"]["completed"], 4, "{summary:#}");

    let stats = mock.stats();
    assert_eq!(stats["requests_total"], 8, "{stats}");
    let gap = stats["min_interval_ms"].as_u64().unwrap();
    assert!(
        gap >= 400,
        "requests_per_minute 120 spaces calls 500 ms apart across jobs: {stats}"
    );

    assert!(!views.is_empty(), "scontrol showed no job of {id}");
    assert!(views.contains("exec-planned"), "{views}");
    assert!(
        !views.contains(&canary),
        "the key is in scontrol's view of a job"
    );
    assert!(
        !views.contains("item a"),
        "the task text is in a job: {views}"
    );
    assert_eq!(
        leaked_while_running,
        Vec::<PathBuf>::new(),
        "the key is in Slurm's spool"
    );
    let mut dirs = spool;
    dirs.push(root.join("ws"));
    assert_eq!(files_containing(&dirs, &canary), Vec::<PathBuf>::new());
}
