//! Orchestration scheduling through `Supervisor::orchestrate`: DAG order and overlap of
//! independent stages, retries, `on_failure` both ways, `isolate`, per-run timeouts, every
//! `foreach` form, expansion-time template errors and `output: json`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use delta_actors::plan::state::{OrchestrationState, OrchestrationStatus, StageStatus};
use delta_actors::workspace::RunPaths;
use delta_actors::RunStatus;

use super::*;

#[test]
fn stages_wait_for_their_needs_and_independent_stages_overlap() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, events) = run_plan(
        &p,
        "max_parallel: 8\ndefaults: { agent: ./agents/worker }\nstages:\n  - { id: first, message: one }\n  - { id: left, needs: [first], message: left }\n  - { id: right, needs: [first], message: right }\n  - { id: last, needs: [left, right], message: last }\n",
        "default_latency: 300\nsteps:\n  - answer: \"{{ task }}\"\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(summary.exit_code(), 0);

    // The orchestrator is one actor: its event order is its decision order.
    let first_done = position(&events, finished("first"));
    let left_start = position(&events, started("left"));
    let right_start = position(&events, started("right"));
    assert!(first_done < left_start && first_done < right_start);
    let left_done = position(&events, finished("left"));
    let right_done = position(&events, finished("right"));
    assert!(
        left_start < right_done && right_start < left_done,
        "left and right overlap"
    );
    let last_start = position(&events, started("last"));
    assert!(left_done < last_start && right_done < last_start);

    // And the runs' own journals agree in wall-clock time.
    let ws = p.ws();
    let first = interval(ws, "t-first-0");
    let left = interval(ws, "t-left-0");
    let right = interval(ws, "t-right-0");
    let last = interval(ws, "t-last-0");
    assert!(
        first.1 <= left.0 && first.1 <= right.0,
        "{first:?} {left:?} {right:?}"
    );
    assert!(
        left.0 < right.1 && right.0 < left.1,
        "not overlapping: {left:?} {right:?}"
    );
    assert!(
        left.1 <= last.0 && right.1 <= last.0,
        "{left:?} {right:?} {last:?}"
    );
}

#[test]
fn a_failed_run_is_continued_with_a_retry_message_and_completes() {
    let p = PlanDir::new();
    p.agent("worker", "");
    // fast_config retries a model call 3 times: 3 scripted 500s fail the first attempt.
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker, retries: 1 }\nstages:\n  - { id: solo, message: go }\n",
        "steps:\n  - fail: 500\n    times: 3\n    then: { answer: \"recovered after: {{ last_user }}\" }\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let row = &stage(&summary, "solo").runs[0];
    assert_eq!(row.status, RunStatus::Completed);
    assert_eq!(row.attempts, 2);
    assert!(
        row.result
            .as_deref()
            .unwrap()
            .contains("The previous attempt failed"),
        "{row:?}"
    );
    let journal = run_journal(p.ws(), "t-solo-0");
    assert_eq!(completed_ends(&journal), 1);
    let attempts =
        OrchestrationState::attempts_so_far(&OrchestrationState::dir_for(p.ws(), "t").unwrap());
    assert_eq!(attempts["t-solo-0"], 2);
}

#[test]
fn exhausted_retries_leave_a_failed_row_and_exit_code_1() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker, retries: 2 }\nstages:\n  - { id: solo, message: go }\n",
        "steps:\n  - fail: 500\n",
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed);
    assert_eq!(summary.exit_code(), 1);
    let solo = stage(&summary, "solo");
    assert_eq!(solo.status, StageStatus::Failed);
    assert_eq!(solo.counts.failed, 1);
    let row = &solo.runs[0];
    assert_eq!(row.status, RunStatus::Failed);
    assert_eq!(row.attempts, 3, "one attempt plus two retries");
    assert!(row.error.as_deref().unwrap().contains("500"), "{row:?}");
}

const FAILING_ITEM: &str = "rules:\n  - task_contains: \"item bad\"\n    steps: [{ fail: 400 }]\n  - steps:\n      - answer: \"{{ task }}\"\n";

#[test]
fn on_failure_stop_skips_dependants_and_fails_the_orchestration() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, events) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [good, bad] }\n    message: \"item {{ item }}\"\n  - id: combine\n    needs: [work]\n    message: \"{{ stages.work.results | tojson }}\"\n",
        FAILING_ITEM,
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    assert_eq!(summary.exit_code(), 1);
    assert_eq!(stage(&summary, "work").status, StageStatus::Failed);
    let combine = stage(&summary, "combine");
    assert_eq!(combine.status, StageStatus::Skipped);
    assert!(combine.runs.is_empty());
    assert!(!events.iter().any(started("combine")));
    assert!(!RunPaths::new(p.ws(), "t-combine-0").run_dir.exists());
}

#[test]
fn on_failure_continue_lets_dependants_see_the_failed_items() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    on_failure: continue\n    foreach: { items: [good, bad] }\n    message: \"item {{ item }}\"\n  - id: combine\n    needs: [work]\n    message: \"{% for r in stages.work.runs %}[{{ r.status }}]{% endfor %} {{ stages.work.results | tojson }}\"\n",
        FAILING_ITEM,
    );
    let work = stage(&summary, "work");
    assert_eq!(work.status, StageStatus::CompletedWithFailures);
    assert_eq!((work.counts.completed, work.counts.failed), (1, 1));
    let combine = stage(&summary, "combine");
    assert_eq!(combine.status, StageStatus::Completed);
    // The scripted model echoes its task: this is the message the aggregator received.
    assert_eq!(
        results(&summary, "combine"),
        vec!["[COMPLETED][FAILED] [\"item good\",null]".to_string()]
    );
}

#[test]
fn isolated_stages_give_each_run_its_own_sub_workspace() {
    let p = PlanDir::new();
    p.agent("worker", "  - name: mark\n    exec: \"touch marker.txt\"\n");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: iso\n    isolate: true\n    foreach: { items: [a, b, c] }\n    message: \"item {{ item }}\"\n  - id: shared\n    needs: []\n    message: shared\n",
        "steps:\n  - tool: mark\n  - answer: done\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    for index in 0..3 {
        let dir = p.ws().join("iso").join(index.to_string());
        assert!(dir.join("marker.txt").is_file(), "{}", dir.display());
        let run_id = format!("t-iso-{index}");
        assert!(RunPaths::new(&dir, &run_id).metadata.is_file());
        assert!(!RunPaths::new(p.ws(), &run_id).run_dir.exists());
    }
    assert!(p.ws().join("marker.txt").is_file(), "the shared stage");
    assert!(RunPaths::new(p.ws(), "t-shared-0").metadata.is_file());
}

#[test]
fn a_run_over_its_timeout_is_interrupted_and_counted_as_failed() {
    let p = PlanDir::new();
    p.agent("worker", "  - name: nap\n    exec: \"sleep 30\"\n");
    let began = Instant::now();
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker, timeout: 300ms }\nstages:\n  - { id: slow, message: go }\n",
        "steps:\n  - tool: nap\n  - answer: never\n",
    );
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "the tool was not killed"
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    assert_eq!(summary.exit_code(), 1);
    let slow = stage(&summary, "slow");
    assert_eq!(slow.status, StageStatus::Failed);
    assert_eq!(slow.runs[0].status, RunStatus::Interrupted);
    assert!(
        slow.runs[0].error.as_deref().unwrap().contains("timeout"),
        "{:?}",
        slow.runs[0]
    );
}

/// Issue 31 item 14: with `max_in_flight: 1` (the README's advice for a local server), a
/// stage's `timeout` cut four of five runs that waited behind one another for the model.
/// The limit counts each run's own time: five runs of ~1 s each under a 1.6 s limit all
/// complete (~5 s of wall time in all), and a run whose own model call takes 3 s is still
/// cut at its limit.
#[test]
fn a_stage_timeout_counts_each_runs_own_time_not_its_wait_behind_max_in_flight() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let began = Instant::now();
    let (summary, _) = run_plan(
        &p,
        "max_parallel: 5\nllm: { max_in_flight: 1 }\ndefaults: { agent: ./agents/worker, timeout: 1600ms, on_failure: continue }\nstages:\n  - id: queued\n    foreach: { items: [a, b, c, d, e] }\n    message: \"item {{ item }}\"\n  - { id: slow, needs: [queued], message: slow task }\n",
        "rules:\n  - task_contains: slow\n    steps:\n      - answer: too late\n        latency: 3000\n  - steps:\n      - answer: \"done {{ task }}\"\n        latency: 1000\n",
    );
    let queued = stage(&summary, "queued");
    let statuses: Vec<RunStatus> = queued.runs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [RunStatus::Completed; 5], "{summary:#?}");
    assert_eq!(queued.status, StageStatus::Completed);
    assert!(
        began.elapsed() >= Duration::from_millis(5000),
        "one model call at a time: {:?}",
        began.elapsed()
    );
    let slow = stage(&summary, "slow");
    assert_eq!(slow.runs[0].status, RunStatus::Interrupted, "{slow:#?}");
    let error = slow.runs[0].error.as_deref().unwrap_or_default();
    assert!(
        error.contains("timeout") && error.contains("1.6 s"),
        "{error}"
    );
}

#[test]
fn every_foreach_form_expands_in_item_order() {
    let p = PlanDir::new();
    p.agent("worker", "")
        .file("data/b.txt", "b")
        .file("data/a.txt", "a")
        .file("data/c.txt", "c")
        .file("data/skip.md", "not matched")
        .file("list.txt", "first\n\nsecond\nthird\n");
    let (summary, _) = run_plan(
        &p,
        "vars: { names: [x, y] }\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: tpl\n    foreach: \"{{ vars.names }}\"\n    message: \"tpl {{ index }} {{ item }}\"\n  - id: items\n    needs: []\n    foreach: { items: [{ n: 1 }, { n: 2 }] }\n    message: \"items {{ index }} {{ item.n }}\"\n  - id: files\n    needs: []\n    foreach: { files: \"data/*.txt\" }\n    message: \"{{ item }}\"\n  - id: lines\n    needs: []\n    foreach: { lines: list.txt }\n    message: \"lines {{ item }}\"\n",
        ECHO_TASK,
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(results(&summary, "tpl"), ["tpl 0 x", "tpl 1 y"]);
    assert_eq!(results(&summary, "items"), ["items 0 1", "items 1 2"]);
    let data = p.path().join("data");
    let expected: Vec<String> = ["a.txt", "b.txt", "c.txt"]
        .iter()
        .map(|f| data.join(f).to_string_lossy().into_owned())
        .collect();
    let files: Vec<String> = results(&summary, "files")
        .iter()
        .map(|f| PathBuf::from(f).to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, expected);
    assert_eq!(
        results(&summary, "lines"),
        ["lines first", "lines second", "lines third"]
    );
}

#[test]
fn a_template_error_at_expansion_names_the_stage_and_expression() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, events) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: planner, output: json, message: plan }\n  - id: work\n    needs: [planner]\n    foreach: \"{{ stages.planner.output.steps }}\"\n    message: \"do {{ item }}\"\n",
        "steps:\n  - answer: '{\"tasks\": [1, 2]}'\n",
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    assert_eq!(summary.exit_code(), 1);
    assert_eq!(stage(&summary, "planner").status, StageStatus::Completed);
    assert_eq!(stage(&summary, "work").status, StageStatus::Failed);
    let error = summary.error.as_deref().unwrap();
    assert!(error.contains("stages.work.foreach"), "{error}");
    assert!(error.contains("stages.planner.output.steps"), "{error}");
    assert!(!events.iter().any(started("work")));
}

#[test]
fn a_foreach_that_is_not_a_list_fails_its_stage_with_the_key() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: planner, output: json, message: plan }\n  - id: work\n    needs: [planner]\n    foreach: \"{{ stages.planner.output.steps }}\"\n    message: \"do {{ item }}\"\n  - { id: other, needs: [], message: independent }\n",
        "rules:\n  - task_contains: plan\n    steps: [{ answer: '{\"steps\": \"not a list\"}' }]\n  - steps: [{ answer: ok }]\n",
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    assert_eq!(stage(&summary, "work").status, StageStatus::Failed);
    let error = summary.error.as_deref().unwrap();
    assert!(error.contains("stages.work.foreach"), "{error}");
    assert!(error.contains("hint"), "{error}");
    // A stage that does not depend on it still runs to the end.
    assert_eq!(stage(&summary, "other").status, StageStatus::Completed);
}

#[test]
fn json_output_feeds_later_stages_and_non_json_is_retried_then_failed() {
    let p = PlanDir::new();
    p.agent("planner", "").agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "stages:\n  - { id: plan, agent: ./agents/planner, output: json, message: plan }\n  - id: work\n    agent: ./agents/worker\n    needs: [plan]\n    foreach: \"{{ stages.plan.output.steps }}\"\n    message: \"do {{ item }}\"\n",
        "rules:\n  - agent: planner\n    steps:\n      - answer: \"```json\\n{\\\"steps\\\": [\\\"x\\\", \\\"y\\\"]}\\n```\"\n  - steps:\n      - answer: \"{{ task }}\"\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(results(&summary, "work"), ["do x", "do y"]);

    let p = PlanDir::new();
    p.agent("planner", "");
    let (summary, _) = run_plan(
        &p,
        "stages:\n  - { id: plan, agent: ./agents/planner, output: json, retries: 1, message: plan }\n",
        "steps:\n  - answer: \"no json here\"\n",
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    let row = &stage(&summary, "plan").runs[0];
    assert_eq!(row.status, RunStatus::Failed);
    assert_eq!(row.attempts, 2);
    assert!(
        row.error.as_deref().unwrap().contains("not valid JSON"),
        "{row:?}"
    );
}

/// Issue 11 item 8c: a run whose setup failed before it wrote its metadata (too many open
/// files, a full disk; here its run folder's name is taken by a file) was retried as a
/// continue, which failed with "not found" and hid the real cause. It is started afresh,
/// and the row keeps the real cause.
#[test]
fn a_run_that_never_started_is_retried_fresh_and_keeps_its_real_cause() {
    let p = PlanDir::new();
    p.agent("worker", "");
    std::fs::create_dir_all(p.ws().join(".delta")).unwrap();
    std::fs::write(p.ws().join(".delta/t-solo-0"), "in the way").unwrap();
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker, retries: 1 }\nstages:\n  - { id: solo, message: go }\n",
        ECHO_TASK,
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    let row = &stage(&summary, "solo").runs[0];
    assert_eq!(row.attempts, 2, "{row:#?}");
    let error = row.error.as_deref().unwrap();
    assert!(error.contains("already exists"), "{error}");
    assert!(
        !error.contains("not found"),
        "the real cause was replaced: {error}"
    );
    let journal = std::fs::read_to_string(
        OrchestrationState::dir_for(p.ws(), "t")
            .unwrap()
            .join("journal.jsonl"),
    )
    .unwrap();
    let retried_as: Vec<bool> = journal
        .lines()
        .filter(|l| l.contains("\"RUN_SUBMITTED\""))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["resume"] == true)
        .collect();
    assert_eq!(
        retried_as,
        [false, false],
        "both attempts start the run afresh"
    );
}
