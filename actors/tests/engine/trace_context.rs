//! W3C trace context through the engine (issue 33): a traced run hands each tool its own
//! span as `TRACEPARENT`, sends a `traceparent` header with each model call, tells an
//! observer every event losslessly (its model calls as `ModelCallFinished`), records its
//! span so that a continuation links to it; an orchestration parents each run under its
//! stage's span.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use delta_actors::llm::Endpoint;
use delta_actors::metadata::read_metadata;
use delta_actors::protocol::TraceSpan;
use delta_actors::request::{EngineObserver, ObservedOrchestration, ObserverHandle};
use delta_actors::{
    LlmTarget, OrchestrationEvent, RunEvent, RunStatus, Supervisor, SupervisorConfig, TokenUsage,
};

use crate::harness::*;
use crate::orchestrate::PlanDir;

/// Keeps every event it is told, in order.
#[derive(Default)]
struct Recorder {
    runs: Mutex<Vec<RunEvent>>,
    orchestrations: Mutex<Vec<(String, Option<TraceSpan>, OrchestrationEvent)>>,
}

impl EngineObserver for Recorder {
    fn run_event(&self, event: &RunEvent) {
        self.runs.lock().unwrap().push(event.clone());
    }
    fn orchestration_event(&self, o: ObservedOrchestration<'_>, event: &OrchestrationEvent) {
        self.orchestrations.lock().unwrap().push((
            o.id.to_string(),
            o.trace.cloned(),
            event.clone(),
        ));
    }
}

fn observed(recorder: &Arc<Recorder>) -> SupervisorConfig {
    SupervisorConfig {
        observer: Some(ObserverHandle(recorder.clone())),
        ..fast_config()
    }
}

const PRINT_TRACEPARENT: &str = "  - name: show_trace\n    shell: \"printenv TRACEPARENT; printenv OTEL_EXPORTER_OTLP_HEADERS || echo no-collector-headers\"\n";

#[test]
fn a_traced_run_gives_each_tool_its_own_span_and_reports_its_model_calls() {
    let agent = TestAgent::new("tracer", "", PRINT_TRACEPARENT);
    let ws = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder::default());
    let sup = Supervisor::start(observed(&recorder)).unwrap();
    let s = script("steps:\n  - tool: show_trace\n    args: {}\n  - answer: done\n");
    let run_span = TraceSpan::root([9; 24], true);
    let mut env = (*test_env()).clone();
    // An inherited context is replaced, not passed on beside the run's own.
    env.insert(
        "TRACEPARENT".into(),
        "00-11111111111111111111111111111111-2222222222222222-01".into(),
    );
    // The collector's credentials are the engine's, like its model key.
    env.insert(
        "OTEL_EXPORTER_OTLP_HEADERS".into(),
        "authorization=sk-collector-secret".into(),
    );
    let request = new_run(agent.load(), ws.path(), s, "trace me")
        .with_env(Arc::new(env))
        .with_trace(run_span.clone());
    let result = drive(&sup, request);
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");

    let events = recorder.runs.lock().unwrap().clone();
    let Some(RunEvent::RunStarted { trace, .. }) = events.first() else {
        panic!("first event {:?}", events.first());
    };
    assert_eq!(trace.as_ref(), Some(&run_span));
    let action_id = events
        .iter()
        .find_map(|e| match e {
            RunEvent::ToolStarted { action_id, .. } => Some(action_id.clone()),
            _ => None,
        })
        .unwrap();
    let tool_span = run_span.child("tool", &action_id);
    let preview = events
        .iter()
        .find_map(|e| match e {
            RunEvent::ToolFinished { preview, .. } => Some(preview.clone()),
            _ => None,
        })
        .unwrap();
    assert!(preview.contains(&tool_span.traceparent()), "{preview}");
    assert!(!preview.contains("1111111111"), "{preview}");
    assert!(preview.contains("no-collector-headers"), "{preview}");
    assert!(!preview.contains("sk-collector-secret"), "{preview}");

    let calls: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ModelCallFinished {
                iteration,
                provider,
                attempts,
                error_type,
                cost_usd,
                content,
                ..
            } => Some((
                *iteration,
                provider.clone(),
                *attempts,
                error_type.clone(),
                *cost_usd,
                content.is_some(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (1, "delta.scripted".to_string(), 1, None, None, false),
            (2, "delta.scripted".to_string(), 1, None, None, false)
        ]
    );
    assert!(matches!(events.last(), Some(RunEvent::RunFinished { .. })));
    // The span is the run's record: a continuation links to it.
    let meta = read_metadata(&run_dir(&result)).unwrap();
    assert_eq!(meta.trace.as_ref(), Some(&run_span));
}

#[test]
fn a_continued_run_links_to_the_span_of_its_earlier_start() {
    let agent = TestAgent::new("again", "", "");
    let ws = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder::default());
    let sup = Supervisor::start(observed(&recorder)).unwrap();
    let s = script("steps:\n  - answer: first\n  - answer: second\n");
    let first_span = TraceSpan::root([1; 24], true);
    let first = new_run(agent.load(), ws.path(), s, "once").with_trace(first_span.clone());
    let result = drive(&sup, first.clone());
    let second_span = TraceSpan::root([2; 24], true);
    let again = continue_run(&first, &result.run_id, Some("more")).with_trace(second_span.clone());
    let again = drive(&sup, again);
    assert_eq!(again.status, RunStatus::Completed, "{again:?}");
    let starts: Vec<_> = recorder
        .runs
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            RunEvent::RunStarted {
                trace,
                previous_trace,
                ..
            } => Some((trace.clone(), previous_trace.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            (Some(first_span.clone()), None),
            (Some(second_span.clone()), Some(first_span))
        ]
    );
    let meta = read_metadata(&run_dir(&again)).unwrap();
    assert_eq!(meta.trace, Some(second_span));
}

/// A one-connection-at-a-time HTTP endpoint on loopback that answers every chat request
/// with a fixed completion and keeps each request's `traceparent` header.
fn header_keeping_endpoint() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut traceparent, mut preface) = (0usize, None, false);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if line.starts_with("PRI * HTTP/2.0") {
                    // delta asking whether the endpoint speaks HTTP/2: it does not (closed).
                    preface = true;
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("traceparent:") {
                    traceparent = Some(line["traceparent:".len()..].trim().to_string());
                }
            }
            if preface {
                continue;
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            kept.lock().unwrap().push(traceparent);
            let reply = r#"{"id":"c1","model":"m-served","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (url, seen)
}

#[test]
fn a_traced_model_call_sends_its_span_as_traceparent_and_reports_the_server() {
    let (url, seen) = header_keeping_endpoint();
    let agent = TestAgent::new("http", "", "");
    let ws = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder::default());
    let sup = Supervisor::start(observed(&recorder)).unwrap();
    let run_span = TraceSpan::root([5; 24], true);
    let start = delta_actors::RunStart::New { task: "hi".into() };
    let request = delta_actors::RunRequest::new(
        agent.load(),
        ws.path(),
        start,
        LlmTarget::Http(Endpoint::new(url.clone(), None)),
    )
    .with_env(test_env())
    .with_trace(run_span.clone());
    let result = drive(&sup, request);
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![Some(run_span.child("chat", "1").traceparent())]
    );
    let port: u16 = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/v1")
        .parse()
        .unwrap();
    let call = recorder
        .runs
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            RunEvent::ModelCallFinished {
                provider,
                server_address,
                server_port,
                response_model,
                usage,
                finish_reason,
                ..
            } => Some((
                provider.clone(),
                server_address.clone(),
                *server_port,
                response_model.clone(),
                *usage,
                finish_reason.clone(),
            )),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        call,
        (
            "openai".to_string(),
            Some("127.0.0.1".to_string()),
            Some(port),
            Some("m-served".to_string()),
            TokenUsage {
                input_tokens: 5,
                output_tokens: 2,
                total_tokens: 7,
                estimated: false,
            },
            Some("stop".to_string())
        )
    );
}

#[test]
fn an_orchestrations_runs_are_spans_under_their_stages_span() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "name: fan\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c] }\n    message: \"item {{ item }}\"\n",
    );
    let recorder = Arc::new(Recorder::default());
    let sup = Supervisor::start(observed(&recorder)).unwrap();
    let root = TraceSpan::root([3; 24], true);
    let request = p
        .request(
            plan,
            "o",
            LlmTarget::Scripted(script("steps:\n  - answer: ok\n")),
            false,
        )
        .with_trace(root.clone());
    let summary = sup
        .orchestrate_blocking(request)
        .unwrap()
        .wait_blocking()
        .unwrap();
    assert_eq!(summary.exit_code(), 0, "{summary:#?}");
    let stage_span = root.child("stage", "work");
    let run_spans: Vec<TraceSpan> = recorder
        .runs
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            RunEvent::RunStarted { trace, .. } => trace.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(run_spans.len(), 3);
    for span in &run_spans {
        assert_eq!(span.trace_id, root.trace_id);
        assert_eq!(span.parent_span_id, Some(stage_span.span_id));
    }
    let mut ids: Vec<_> = run_spans.iter().map(|s| s.span_id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "every run is a span of its own");
    let orchestration = recorder.orchestrations.lock().unwrap();
    assert!(orchestration
        .iter()
        .all(|(id, trace, _)| id == "o" && trace.as_ref() == Some(&root)));
    assert!(matches!(
        orchestration.last().map(|o| &o.2),
        Some(OrchestrationEvent::Finished { .. })
    ));
}
