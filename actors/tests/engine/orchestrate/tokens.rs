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
    let (summary, _) = run_plan(&p, RETRIED_PLAN, RETRIED_SCRIPT);
    assert_totals_are_every_responses_usage(&p, &summary);
}

/// The same plan against the scripted model over HTTP, its replies streamed: the usage
/// comes in each stream's last chunk, and every one is counted.
#[test]
fn token_totals_of_a_streamed_plan_with_retried_runs_equal_every_responses_usage() {
    let p = PlanDir::new();
    p.agent("worker", "  - name: echo\n    exec: \"echo ${text}\"\n");
    let server = ScriptOverHttp::start(RETRIED_SCRIPT);
    let plan = p.plan(RETRIED_PLAN);
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let endpoint = delta_actors::llm::Endpoint::new(server.base_url.clone(), None);
    let request = p.request(plan, "t", LlmTarget::Http(endpoint), false);
    let (summary, _) = orchestrate(&supervisor, request);
    assert_totals_are_every_responses_usage(&p, &summary);
    for run_id in ["t-plan-0", "t-work-0"] {
        let run_dir = RunPaths::new(p.ws(), run_id).run_dir;
        let streamed = std::fs::read_dir(run_dir.join("io/invocations"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .filter(|text| text.contains("\"stream\": true"))
            .count();
        assert!(streamed >= 2, "{run_id}: its calls were streamed");
    }
}

/// The scripted model served over HTTP on a thread of its own, until dropped.
struct ScriptOverHttp {
    base_url: String,
    _stop: std::sync::mpsc::Sender<()>,
}

impl ScriptOverHttp {
    fn start(yaml: &str) -> ScriptOverHttp {
        let script = std::sync::Arc::new(
            delta_actors::llm::Script::from_yaml_str(yaml, "tokens.yaml").unwrap(),
        );
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let server = delta_actors::llm::scripted::serve(
                    script,
                    std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                )
                .await
                .unwrap();
                ready_tx.send(server.base_url()).unwrap();
                let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                server.shutdown().await;
            });
        });
        ScriptOverHttp {
            base_url: ready_rx.recv().unwrap(),
            _stop: stop_tx,
        }
    }
}

const RETRIED_PLAN: &str = "defaults: { agent: ./agents/worker, retries: 1 }\nstages:\n  - { id: plan, output: json, message: \"make a plan\" }\n  - { id: work, needs: [plan], max_iterations: 1, message: \"do the work\" }\n";

const RETRIED_SCRIPT: &str = "rules:\n  - task_contains: plan\n    steps:\n      - tool: echo\n        args: { text: thinking }\n      - answer: \"Sure! The plan is one step.\"\n      - answer: \"{\\\"steps\\\": 1}\"\n  - steps:\n      - tool: echo\n        args: { text: working }\n      - answer: \"done\"\n";

/// A planner whose first answer is not JSON and a worker that hits its iteration cap were
/// both retried: each row, stage and the plan's totals equal the sum of every response's
/// usage in the runs' io/invocations.
fn assert_totals_are_every_responses_usage(p: &PlanDir, summary: &OrchestrationSummary) {
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let mut plan_total = TokenUsage::default();
    for (stage_id, run_id) in [("plan", "t-plan-0"), ("work", "t-work-0")] {
        let stage = stage(summary, stage_id);
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
