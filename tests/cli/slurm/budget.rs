//! One spending cap across a Slurm batch (issue 33 item 2): the plan's budget is the
//! relay's ledger, which every job's model calls go through. Past it the relay refuses,
//! the job's run ends INTERRUPTED `budget_exhausted`, and the orchestration starts no more
//! jobs; resumed with a bigger budget, every run completes. A stage's `budget:` caps that
//! stage's jobs the same way: their requests come on the stage's own routes of the relay.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::cluster::{cluster_or_skip, delta_in, Orchestration};
use crate::budget::{fixture, interrupted_run, plan};

fn orchestrate(root: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut command = delta_in(root);
    command
        .args([
            "orchestrate",
            "plan.yaml",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
            "--format",
            "json",
            "--executor",
            "slurm",
            "--relay-listen",
            "127.0.0.1:0",
        ])
        .args(extra);
    let (code, stdout, stderr) = Orchestration::spawn(command).finish(Duration::from_secs(300));
    let summary = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    (code, summary, stderr)
}

fn statuses(summary: &Value) -> Vec<String> {
    summary["stages"][0]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

/// Of the six map runs, some completed, one was stopped by the cap with an error starting
/// with `refusal`, and no job started after that.
fn assert_some_ran_and_the_rest_were_refused(summary: &Value, refusal: &str) {
    let done = statuses(summary);
    assert!(done.iter().any(|s| s == "COMPLETED"), "{done:?}");
    assert!(done.iter().any(|s| s == "INTERRUPTED"), "{done:?}");
    assert!(
        done.len() < 6,
        "no job started after the cap ran out: {done:?}"
    );
    let refused = interrupted_run(summary);
    assert!(
        refused["error"].as_str().unwrap().starts_with(refusal),
        "{refused:#}"
    );
}

#[test]
fn slurm_one_budget_caps_the_whole_batch_through_its_relay() {
    if !cluster_or_skip("slurm_one_budget_caps_the_whole_batch_through_its_relay") {
        return;
    }
    // A map run bills about 5,500 tokens: about two of the six fit.
    let dir = fixture(&plan(1, 6), "");
    let root = dir.path();
    let (code, summary, stderr) = orchestrate(root, &["--budget-tokens", "12000"]);
    assert_eq!(code, Some(130), "{summary:#}\n{stderr}");
    assert!(
        summary["error"]
            .as_str()
            .unwrap()
            .starts_with("budget exhausted (spent "),
        "{summary:#}"
    );
    assert_some_ran_and_the_rest_were_refused(
        &summary,
        "budget_exhausted: budget exhausted (spent ",
    );

    let id = summary["orchestration_id"].as_str().unwrap().to_string();
    let (code, resumed, stderr) =
        orchestrate(root, &["--resume", &id, "--budget-tokens", "10000000"]);
    assert_eq!(code, Some(0), "{resumed:#}\n{stderr}");
    assert!(statuses(&resumed).iter().all(|s| s == "COMPLETED"));
    assert_eq!(statuses(&resumed).len(), 6);
}

#[test]
fn slurm_a_stage_budget_caps_that_stages_jobs_through_the_relay() {
    if !cluster_or_skip("slurm_a_stage_budget_caps_that_stages_jobs_through_the_relay") {
        return;
    }
    let capped = |tokens: u64| {
        plan(1, 6).replace(
            "    message: \"item",
            &format!("    budget: {{ tokens: {tokens} }}\n    message: \"item"),
        )
    };
    // A map run bills about 5,500 tokens: about two of the six fit the stage's cap; the
    // plan itself has none.
    let dir = fixture(&capped(12_000), "");
    let root = dir.path();
    let (code, summary, stderr) = orchestrate(root, &[]);
    assert_eq!(code, Some(130), "{summary:#}\n{stderr}");
    assert!(
        summary["error"]
            .as_str()
            .unwrap()
            .contains("budget exhausted (spent "),
        "{summary:#}"
    );
    assert_some_ran_and_the_rest_were_refused(
        &summary,
        "budget_exhausted: stage map: budget exhausted (spent ",
    );

    // Stage caps are raised in plan.yaml.
    std::fs::write(root.join("plan.yaml"), capped(10_000_000)).unwrap();
    let id = summary["orchestration_id"].as_str().unwrap().to_string();
    let (code, resumed, stderr) = orchestrate(root, &["--resume", &id]);
    assert_eq!(code, Some(0), "{resumed:#}\n{stderr}");
    assert!(statuses(&resumed).iter().all(|s| s == "COMPLETED"));
    assert_eq!(statuses(&resumed).len(), 6);
}
