//! Shared limits counted where they matter, at a scripted HTTP endpoint on 127.0.0.1:0:
//! `max_parallel`, the plan's `llm:` limits and Retry-After across the runs of a plan.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delta_actors::llm::{scripted, Endpoint, Script, ScriptServer};
use delta_actors::plan::state::OrchestrationStatus;
use delta_actors::{LlmTarget, Supervisor};

use super::*;

/// Serves `yaml` on 127.0.0.1:0 on `rt` and returns the server with an `LlmTarget` for it.
fn http_model(rt: &tokio::runtime::Runtime, yaml: &str) -> (ScriptServer, LlmTarget) {
    let script = Arc::new(Script::from_yaml_str(yaml, "served.yaml").unwrap());
    let server = rt
        .block_on(scripted::serve(
            script,
            SocketAddr::from(([127, 0, 0, 1], 0)),
        ))
        .unwrap();
    let target = LlmTarget::Http(Endpoint::new(server.base_url(), Some("sk-test".into())));
    (server, target)
}

fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn max_parallel_caps_runs_in_flight_at_the_endpoint() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let rt = server_runtime();
    // One model call per run: a run is in flight at the endpoint for nearly all its life,
    // so four concurrent runs show up as four concurrent requests.
    let (server, llm) = http_model(
        &rt,
        "default_latency: 50\nsteps:\n  - answer: \"{{ task }}\"\n",
    );
    let plan = p.plan(
        "max_parallel: 4\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: \"{{ range(30) | list }}\"\n    message: \"item {{ item }}\"\n",
    );
    // The engine-wide caps are far above 4: only the plan's max_parallel can hold it there.
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let (summary, _) = orchestrate(&supervisor, p.request(plan, "t", llm, false));
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(stage(&summary, "work").counts.completed, 30);
    let stats = server.stats();
    assert_eq!(stats.requests_total(), 30);
    assert!(
        stats.max_in_flight() <= 4,
        "{} in flight",
        stats.max_in_flight()
    );
    assert_eq!(stats.max_in_flight(), 4, "the limit was never reached");
}

#[test]
fn requests_per_minute_is_shared_by_every_run_of_the_endpoint() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let rt = server_runtime();
    let (server, llm) = http_model(&rt, ECHO_TASK);
    let plan = p.plan(
        "max_parallel: 8\nllm: { requests_per_minute: 120 }\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c, d, e] }\n    message: \"item {{ item }}\"\n",
    );
    // No engine-wide limit: the plan's `llm:` alone applies to its endpoint.
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let began = Instant::now();
    let (summary, _) = orchestrate(&supervisor, p.request(plan, "t", llm, false));
    let elapsed = began.elapsed();
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let stats = server.stats();
    assert_eq!(stats.requests_total(), 5);
    // 120/min = one slot every 500 ms, no burst: five requests span at least 2 s.
    assert!(elapsed >= Duration::from_millis(1950), "{elapsed:?}");
    // Two slots fit in a 1 s window; a third only through arrival jitter at the server.
    let per_second = stats.max_requests_in_window(Duration::from_secs(1));
    assert!(per_second <= 3, "{per_second} requests within 1 s");
}

/// A 429 with Retry-After seen by one run holds back every run of the endpoint.
#[test]
fn retry_after_from_one_run_holds_back_the_others() {
    let p = PlanDir::new();
    p.agent("worker", "  - name: echo\n    exec: \"echo ${text}\"\n");
    let plan = p.plan(
        "max_parallel: 2\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n",
    );
    let model = script(
        "rules:\n  - task_contains: \"item a\"\n    steps:\n      - fail: 429\n        times: 1\n        retry_after: 1\n        then: { answer: \"a done\" }\n  - steps:\n      - tool: echo\n        args: { text: x }\n        latency: 200\n      - answer: \"b done\"\n",
    );
    // Retry-After is honoured up to the retry policy's max_delay: make room for 1 s.
    let mut config = fast_config();
    config.retry.max_delay = Duration::from_secs(2);
    let supervisor = Supervisor::start(config).unwrap();
    let (summary, _) = orchestrate(
        &supervisor,
        p.request(plan, "t", LlmTarget::Scripted(model), false),
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let rows = &stage(&summary, "work").runs;
    assert!(rows[0].duration_ms >= 950, "{:?}", rows[0]);
    // Run b alone needs ~200 ms; its second model call waited for a's Retry-After.
    assert!(rows[1].duration_ms >= 750, "{:?}", rows[1]);
}

#[test]
fn the_plans_llm_max_in_flight_caps_requests_below_max_parallel() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let rt = server_runtime();
    let (server, llm) = http_model(&rt, "default_latency: 50\nsteps:\n  - answer: done\n");
    let plan = p.plan(
        "max_parallel: 8\nllm: { max_in_flight: 2 }\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: \"{{ range(8) | list }}\"\n    message: \"item {{ item }}\"\n",
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let (summary, _) = orchestrate(&supervisor, p.request(plan, "t", llm, false));
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let stats = server.stats();
    assert_eq!(stats.requests_total(), 8);
    assert_eq!(
        stats.max_in_flight(),
        2,
        "eight runs, two requests at a time"
    );
}
