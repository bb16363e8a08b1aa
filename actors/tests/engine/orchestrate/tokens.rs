//! Token accounting of a plan (issue 25 item 5): every attempt of every run is counted, in
//! the run's row, its stage and the plan's totals, whatever made the run retry. Also the
//! plan's `llm.response_format` reaching its runs' requests (item 6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use delta_actors::metadata::read_metadata;
use delta_actors::plan::state::{list_orchestrations, OrchestrationStatus};
use delta_actors::workspace::RunPaths;
use delta_actors::{RunStatus, TokenUsage};

use super::*;
use crate::run_outcomes::recorded_usage;

/// Issue 25 item 5 acceptance: "tokens 0 in / 0 out" after real calls: the tokens of an
/// attempt before a plan retry vanished from metadata and the summary. A planner whose
/// first answer is not JSON and a worker that hits its iteration cap are both retried (a
/// retry continues the run); the totals equal the sum of every response's usage in the
/// runs' io/invocations.
#[test]
fn token_totals_of_a_plan_with_retried_runs_equal_every_responses_usage() {
    let p = PlanDir::new();
    p.agent("worker", "  - name: echo\n    exec: \"echo ${text}\"\n");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker, retries: 1 }\nstages:\n  - { id: plan, output: json, message: \"make a plan\" }\n  - { id: work, needs: [plan], max_iterations: 1, message: \"do the work\" }\n",
        "rules:\n  - task_contains: plan\n    steps:\n      - tool: echo\n        args: { text: thinking }\n      - answer: \"Sure! The plan is one step.\"\n      - answer: \"{\\\"steps\\\": 1}\"\n  - steps:\n      - tool: echo\n        args: { text: working }\n      - answer: \"done\"\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let mut plan_total = TokenUsage::default();
    for (stage_id, run_id) in [("plan", "t-plan-0"), ("work", "t-work-0")] {
        let stage = stage(&summary, stage_id);
        let row = &stage.runs[0];
        assert_eq!(row.status, RunStatus::Completed, "{row:?}");
        assert_eq!(row.attempts, 2, "{row:?}");
        let run_dir = RunPaths::new(p.ws(), run_id).run_dir;
        let billed = recorded_usage(&run_dir);
        assert!(billed.input_tokens > 0 && billed.output_tokens > 0);
        assert_eq!(
            (row.usage.input_tokens, row.usage.output_tokens),
            (billed.input_tokens, billed.output_tokens),
            "{stage_id}: the row counts every attempt"
        );
        assert_eq!(
            (stage.usage.input_tokens, stage.usage.output_tokens),
            (billed.input_tokens, billed.output_tokens)
        );
        let meta = read_metadata(&run_dir).unwrap();
        assert_eq!(meta.cumulative_usage, billed);
        assert!(
            meta.usage.input_tokens < billed.input_tokens,
            "the per-start figure is the last attempt's alone"
        );
        plan_total.add(billed);
    }
    assert_eq!(
        (summary.totals.input_tokens, summary.totals.output_tokens),
        (plan_total.input_tokens, plan_total.output_tokens)
    );
    let listed = list_orchestrations(p.ws()).unwrap();
    assert_eq!(
        (listed[0].usage.input_tokens, listed[0].usage.output_tokens),
        (plan_total.input_tokens, plan_total.output_tokens)
    );
}

/// Issue 25 item 6: a plan's `llm.response_format: json_object` is sent by every run of the
/// plan, over its agents' own setting.
#[test]
fn a_plans_response_format_reaches_its_runs_requests() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "llm: { response_format: json_object }\ndefaults: { agent: ./agents/worker }\nstages:\n  - { id: solo, output: json, message: go }\n",
        "steps:\n  - answer: \"{\\\"ok\\\": true}\"\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let dir = RunPaths::new(p.ws(), "t-solo-0")
        .run_dir
        .join("io/invocations");
    let record = std::fs::read_dir(dir).unwrap().next().unwrap().unwrap();
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(record.path()).unwrap()).unwrap();
    assert_eq!(
        record["request"]["response_format"],
        serde_json::json!({"type": "json_object"})
    );
}
