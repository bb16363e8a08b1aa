//! Trace export from the engine's events (issue 33), without a collector: a plan with a
//! fan-out, a tool call and a retried model call gives one trace whose spans have the GenAI
//! names, parents and attributes; a sink that never answers neither slows nor fails the
//! plan, and what it lost is counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delta_actors::protocol::TraceSpan;
use delta_actors::request::ObserverHandle;
use delta_actors::telemetry::config::TraceConfig;
use delta_actors::telemetry::export::SpanSink;
use delta_actors::telemetry::Telemetry;
use delta_actors::{LlmTarget, Supervisor, SupervisorConfig};
use opentelemetry::trace::{SpanId, Status};
use opentelemetry_sdk::trace::SpanData;

use crate::harness::{fast_config, script};
use crate::orchestrate::PlanDir;

/// Keeps every batch it is sent.
struct Recording(Arc<Mutex<Vec<SpanData>>>);

impl SpanSink for Recording {
    fn send(&mut self, batch: Vec<SpanData>) -> Result<(), String> {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// Never answers until the test ends (a collector that accepts and hangs).
struct Hanging(mpsc::Receiver<()>);

impl SpanSink for Hanging {
    fn send(&mut self, _batch: Vec<SpanData>) -> Result<(), String> {
        let _ = self.0.recv();
        Err("hung".into())
    }
}

fn trace_config(extra: &[(&str, &str)]) -> TraceConfig {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert(
        "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
        "http://127.0.0.1:9".into(),
    );
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    TraceConfig::from_env(&env).unwrap().unwrap()
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

const TOOL: &str = "  - name: shout\n    exec: \"echo loud\"\n";
/// The first call of each run fails once with a 500, then the model asks for the tool, then
/// answers.
const SCRIPT: &str = "steps:\n  - fail: 500\n    times: 1\n    then: { tool: shout, args: {} }\n  - answer: \"done {{ last_user }}\"\n";
const PLAN: &str = "name: fanout\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n  - id: sum\n    needs: [work]\n    message: \"sum\"\n";

fn traced_plan(
    telemetry: &Arc<Telemetry>,
) -> (delta_actors::OrchestrationSummary, TraceSpan, Duration) {
    let p = PlanDir::new();
    p.agent("worker", TOOL);
    let plan = p.plan(PLAN);
    let config = SupervisorConfig {
        observer: Some(ObserverHandle(telemetry.clone())),
        ..fast_config()
    };
    let sup = Supervisor::start(config).unwrap();
    let root = telemetry.new_root(None).unwrap();
    let request = p
        .request(plan, "o", LlmTarget::Scripted(script(SCRIPT)), false)
        .with_trace(root.clone());
    let started = Instant::now();
    let summary = sup
        .orchestrate_blocking(request)
        .unwrap()
        .wait_blocking()
        .unwrap();
    (summary, root, started.elapsed())
}

#[test]
fn a_plan_exports_one_trace_with_the_genai_span_tree() {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let telemetry = Arc::new(
        Telemetry::new().with_trace_sink(trace_config(&[]), Box::new(Recording(spans.clone()))),
    );
    let (summary, root, _) = traced_plan(&telemetry);
    assert_eq!(summary.exit_code(), 0, "{summary:#?}");
    let report = telemetry.shutdown(Duration::from_secs(5)).unwrap();
    let spans = spans.lock().unwrap().clone();
    assert_eq!(report.exported, spans.len() as u64);
    assert_eq!(report.lost(), 0, "{report:?}");

    // One trace.
    assert!(spans
        .iter()
        .all(|s| s.span_context.trace_id().to_bytes() == root.trace_id));
    let by_id: HashMap<SpanId, &SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    let parent_name = |s: &SpanData| by_id.get(&s.parent_span_id).map(|p| p.name.to_string());
    let named = |prefix: &str| -> Vec<&SpanData> {
        spans
            .iter()
            .filter(|s| s.name.starts_with(prefix))
            .collect()
    };

    let workflow = named("invoke_workflow");
    assert_eq!(workflow.len(), 1);
    assert_eq!(workflow[0].name, "invoke_workflow fanout");
    assert_eq!(workflow[0].parent_span_id, SpanId::INVALID);
    assert_eq!(
        attr(workflow[0], "gen_ai.operation.name").as_deref(),
        Some("invoke_workflow")
    );
    assert_eq!(workflow[0].status, Status::Ok);

    let stages: Vec<_> = named("stage ")
        .iter()
        .map(|s| (s.name.to_string(), parent_name(s)))
        .collect();
    assert_eq!(stages.len(), 2, "{stages:?}");
    assert!(stages
        .iter()
        .all(|(_, p)| p.as_deref() == Some("invoke_workflow fanout")));

    let agents = named("invoke_agent ");
    assert_eq!(agents.len(), 3, "two items and the sum");
    for agent in &agents {
        assert_eq!(agent.name, "invoke_agent worker");
        assert!(parent_name(agent).is_some_and(|p| p.starts_with("stage ")));
        assert_eq!(attr(agent, "gen_ai.agent.name").as_deref(), Some("worker"));
        assert_eq!(
            attr(agent, "gen_ai.operation.name").as_deref(),
            Some("invoke_agent")
        );
    }

    let chats = named("chat ");
    assert_eq!(chats.len(), 6, "two model calls per run");
    for chat in &chats {
        assert_eq!(chat.name, "chat scripted");
        assert_eq!(parent_name(chat).as_deref(), Some("invoke_agent worker"));
        assert_eq!(
            attr(chat, "gen_ai.request.model").as_deref(),
            Some("scripted")
        );
        assert_eq!(
            attr(chat, "gen_ai.provider.name").as_deref(),
            Some("delta.scripted")
        );
        assert!(attr(chat, "gen_ai.usage.input_tokens").is_some());
        assert!(attr(chat, "gen_ai.usage.output_tokens").is_some());
        assert!(
            attr(chat, "gen_ai.input.messages").is_none(),
            "no content unless asked"
        );
    }
    // Each run's first call failed once with a 500: a retry event on the span, two attempts.
    let retried: Vec<_> = chats
        .iter()
        .filter(|c| !c.events.events.is_empty())
        .collect();
    assert_eq!(retried.len(), 3);
    for chat in retried {
        assert_eq!(attr(chat, "delta.model.attempts").as_deref(), Some("2"));
        assert_eq!(chat.events.events[0].name, "retry");
    }

    let tools = named("execute_tool ");
    assert_eq!(tools.len(), 3);
    for tool in &tools {
        assert_eq!(tool.name, "execute_tool shout");
        assert_eq!(parent_name(tool).as_deref(), Some("invoke_agent worker"));
        assert_eq!(attr(tool, "gen_ai.tool.name").as_deref(), Some("shout"));
        assert_eq!(attr(tool, "process.exit.code").as_deref(), Some("0"));
        assert!(attr(tool, "gen_ai.tool.call.id").is_some());
    }
}

#[test]
fn captured_content_goes_with_the_spans_only_when_asked() {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let config = trace_config(&[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")]);
    let telemetry =
        Arc::new(Telemetry::new().with_trace_sink(config, Box::new(Recording(spans.clone()))));
    assert!(telemetry.captures_content());
    let p = PlanDir::new();
    p.agent("worker", TOOL);
    let plan = p.plan("name: one\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: s\n    message: \"hello there\"\n");
    let config = SupervisorConfig {
        observer: Some(ObserverHandle(telemetry.clone())),
        capture_message_content: true,
        ..fast_config()
    };
    let sup = Supervisor::start(config).unwrap();
    let request = p
        .request(
            plan,
            "c",
            LlmTarget::Scripted(script("steps:\n  - answer: \"hi back\"\n")),
            false,
        )
        .with_trace(telemetry.new_root(None).unwrap());
    sup.orchestrate_blocking(request)
        .unwrap()
        .wait_blocking()
        .unwrap();
    telemetry.shutdown(Duration::from_secs(5));
    let spans = spans.lock().unwrap();
    let chat = spans.iter().find(|s| s.name.starts_with("chat ")).unwrap();
    assert!(attr(chat, "gen_ai.input.messages")
        .unwrap()
        .contains("hello there"));
    assert!(attr(chat, "gen_ai.output.messages")
        .unwrap()
        .contains("hi back"));
}

#[test]
fn a_collector_that_never_answers_neither_slows_nor_fails_the_plan_and_losses_are_counted() {
    // Baseline: nothing exported.
    let quiet = Arc::new(Telemetry::new().with_metrics());
    let p = PlanDir::new();
    p.agent("worker", TOOL);
    let plan = p.plan(PLAN);
    let sup = Supervisor::start(SupervisorConfig {
        observer: Some(ObserverHandle(quiet.clone())),
        ..fast_config()
    })
    .unwrap();
    let started = Instant::now();
    let request = p.request(plan, "b", LlmTarget::Scripted(script(SCRIPT)), false);
    let baseline = sup
        .orchestrate_blocking(request)
        .unwrap()
        .wait_blocking()
        .unwrap();
    let baseline_time = started.elapsed();
    drop(sup);

    // The same plan exporting to a sink that hangs on its first batch, with a queue of 4.
    let (release, hold) = mpsc::channel();
    let config = trace_config(&[
        ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2"),
        ("OTEL_BSP_SCHEDULE_DELAY", "1"),
    ]);
    let telemetry = Arc::new(Telemetry::new().with_trace_sink(config, Box::new(Hanging(hold))));
    let (summary, _, elapsed) = traced_plan(&telemetry);
    assert_eq!(summary.status, baseline.status);
    assert_eq!(summary.totals, baseline.totals);
    // Beyond noise would be seconds: the export is never waited for.
    assert!(
        elapsed < baseline_time + Duration::from_secs(2),
        "{elapsed:?} against {baseline_time:?}"
    );
    let exit = Instant::now();
    let report = telemetry.shutdown(Duration::from_millis(200)).unwrap();
    assert!(
        exit.elapsed() < Duration::from_secs(2),
        "the exit waited {:?}",
        exit.elapsed()
    );
    assert_eq!(report.exported, 0);
    assert!(report.dropped > 0, "{report:?}");
    // Every span of the plan is accounted for: 1 + 2 + 3 + 6 + 3.
    assert_eq!(report.dropped + report.failed, 15, "{report:?}");
    assert!(report.last_error.is_some());
    drop(release);
}
