//! Unit tests of the scripted model: script loading errors, rule matching, step selection by
//! assistant-turn count, templating, `times:` failures and the in-process backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::llm::types::{ChatMessage, ChatRequest, ToolCall};

fn script(yaml: &str) -> Script {
    Script::from_yaml_str(yaml, "test.yaml").unwrap()
}

fn load_err(yaml: &str) -> String {
    Script::from_yaml_str(yaml, "bad.yaml")
        .unwrap_err()
        .to_string()
}

fn req(messages: Vec<ChatMessage>) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: messages.into(),
        ..Default::default()
    }
}

fn meta(agent: &str, run: &str) -> RequestMeta {
    RequestMeta::new(agent, run)
}

fn completion(reply: ScriptedReply) -> ChatMessage {
    match reply {
        ScriptedReply::Completion { completion, .. } => completion.message,
        other => panic!("expected a completion, got {other:?}"),
    }
}

fn failure_status(reply: &ScriptedReply) -> u16 {
    match reply {
        ScriptedReply::Failure { status, .. } => *status,
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// Plays the conversation forward by answering every tool call with `observation`.
fn advance(history: &mut Vec<ChatMessage>, reply: ChatMessage, observation: &str) {
    let ids: Vec<String> = reply.tool_calls().iter().map(|c| c.id.clone()).collect();
    history.push(reply);
    for id in ids {
        history.push(ChatMessage::tool(id, observation));
    }
}

const HELLO: &str = r#"
rules:
  - name: greeter
    agent: hello-world
    task_contains: greet
    steps:
      - tool: print_message
        args: { message: "Hello {{ task }}", count: 2, nested: { list: ["{{ agent }}", 1] } }
      - tools:
          - { tool: create_file, args: { filename: a.txt } }
          - { tool: list_files }
        content: "two at once"
      - answer: "Done: {{ last_observation }} (step {{ step }})"
  - steps:
      - answer: "fallback for {{ task }}"
"#;

#[test]
fn steps_follow_the_assistant_turn_count() {
    let s = script(HELLO);
    let m = meta("hello-world", "r1");
    let mut history = vec![
        ChatMessage::system("sys"),
        ChatMessage::user("please greet"),
    ];

    let first = completion(s.respond(&req(history.clone()), &m));
    assert_eq!(first.content, None);
    let call = &first.tool_calls()[0];
    assert_eq!(call.id, "call_0_0");
    assert_eq!(call.function.name, "print_message");
    let args: Value = serde_json::from_str(&call.function.arguments).unwrap();
    assert_eq!(
        args,
        json!({"message": "Hello please greet", "count": 2, "nested": {"list": ["hello-world", 1]}})
    );
    advance(&mut history, first, "printed");

    let second = completion(s.respond(&req(history.clone()), &m));
    assert_eq!(second.content.as_deref(), Some("two at once"));
    let names: Vec<_> = second
        .tool_calls()
        .iter()
        .map(|c| c.function.name.as_str())
        .collect();
    assert_eq!(names, ["create_file", "list_files"]);
    assert_eq!(second.tool_calls()[1].id, "call_1_1");
    assert_eq!(second.tool_calls()[1].function.arguments, "{}");
    advance(&mut history, second, "a.txt");

    // Replaying the same history (a resumed run) gives the same step.
    let third = completion(s.respond(&req(history.clone()), &m));
    assert_eq!(third.content.as_deref(), Some("Done: a.txt (step 2)"));
    assert_eq!(completion(s.respond(&req(history.clone()), &m)), third);
    advance(&mut history, third, "");

    history.push(ChatMessage::user("more?"));
    let fourth = completion(s.respond(&req(history), &m));
    assert_eq!(fourth.content.as_deref(), Some(EXHAUSTED_ANSWER));
}

#[test]
fn rules_match_on_agent_and_task_in_order() {
    let s = script(HELLO);
    let hist = vec![ChatMessage::user("greet me")];
    let other_agent = completion(s.respond(&req(hist.clone()), &meta("other", "")));
    assert_eq!(
        other_agent.content.as_deref(),
        Some("fallback for greet me")
    );
    let other_task = completion(s.respond(
        &req(vec![ChatMessage::user("bye")]),
        &meta("hello-world", ""),
    ));
    assert_eq!(other_task.content.as_deref(), Some("fallback for bye"));
    // Only the FIRST user message is the task.
    let mut later = vec![
        ChatMessage::user("bye"),
        ChatMessage::assistant(Some("x".into()), vec![]),
    ];
    later.push(ChatMessage::user("greet"));
    let reply = completion(s.respond(&req(later), &meta("hello-world", "")));
    assert_eq!(reply.content.as_deref(), Some(EXHAUSTED_ANSWER));
}

#[test]
fn unmatched_request_is_a_clear_400() {
    let s = script("rules: [{agent: a, steps: [{answer: x}]}]");
    let reply = s.respond(&req(vec![ChatMessage::user("t")]), &meta("b", ""));
    assert_eq!(failure_status(&reply), 400);
    let ScriptedReply::Failure { message, .. } = reply else {
        unreachable!()
    };
    assert!(
        message.contains("no rule") && message.contains("\"b\""),
        "{message}"
    );
}

const FLAKY: &str = r#"
steps:
  - fail: 429
    times: 2
    retry_after: 1.5
    message: "slow down {{ agent }}"
    then: { answer: "ok" }
  - fail: 503
"#;

#[test]
fn failures_repeat_times_then_fall_through_per_run() {
    let s = script(FLAKY);
    let history = vec![ChatMessage::user("t")];
    for _ in 0..2 {
        match s.respond(&req(history.clone()), &meta("ag", "run-a")) {
            ScriptedReply::Failure {
                status,
                message,
                retry_after,
                ..
            } => {
                assert_eq!(status, 429);
                assert_eq!(message, "slow down ag");
                assert_eq!(retry_after, Some(Duration::from_millis(1500)));
            }
            other => panic!("{other:?}"),
        }
    }
    let ok = completion(s.respond(&req(history.clone()), &meta("ag", "run-a")));
    assert_eq!(ok.content.as_deref(), Some("ok"));
    // Another run has its own counter.
    assert_eq!(
        failure_status(&s.respond(&req(history.clone()), &meta("ag", "run-b"))),
        429
    );
    // A step without `times` fails forever; 5xx without retry_after carries none.
    let mut next = history;
    next.push(ok);
    next.push(ChatMessage::user("again"));
    for _ in 0..3 {
        let reply = s.respond(&req(next.clone()), &meta("ag", "run-a"));
        assert_eq!(failure_status(&reply), 503);
        assert!(matches!(
            reply,
            ScriptedReply::Failure {
                retry_after: None,
                ..
            }
        ));
    }
}

#[test]
fn strict_mode_rejects_invalid_history_and_lenient_mode_does_not() {
    let bad = vec![
        ChatMessage::user("t"),
        ChatMessage::assistant(None, vec![ToolCall::function("c", "f", "{}")]),
    ];
    let strict = script("steps: [{answer: a}]");
    assert!(strict.strict());
    assert_eq!(
        failure_status(&strict.respond(&req(bad.clone()), &meta("", ""))),
        400
    );
    let lenient = script("strict: false\nsteps: [{answer: a}, {answer: b}]");
    assert_eq!(
        completion(lenient.respond(&req(bad), &meta("", "")))
            .content
            .as_deref(),
        Some("b")
    );
}

#[test]
fn raw_args_are_sent_verbatim() {
    let s = script(r#"steps: [{tool: t, raw_args: "{not json {{ step }}"}]"#);
    let reply = completion(s.respond(&req(vec![ChatMessage::user("x")]), &meta("", "")));
    assert_eq!(reply.tool_calls()[0].function.arguments, "{not json 0");
}

#[test]
fn usage_and_finish_reason_are_filled() {
    let s = script("model: my-model\nsteps: [{tool: t}, {answer: done}]");
    let ScriptedReply::Completion { completion, .. } = s.respond(
        &req(vec![ChatMessage::user("x".repeat(400))]),
        &meta("", ""),
    ) else {
        panic!()
    };
    assert_eq!(completion.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(completion.model.as_deref(), Some("my-model"));
    let usage = completion.usage.unwrap();
    assert_eq!(usage.prompt_tokens, 100);
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
    assert_eq!(completion.raw["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn a_step_may_report_its_own_finish_reason() {
    let s = script("steps: [{answer: \"\", finish_reason: length}]");
    let ScriptedReply::Completion { completion, .. } =
        s.respond(&req(vec![ChatMessage::user("x")]), &meta("", ""))
    else {
        panic!()
    };
    assert_eq!(completion.finish_reason.as_deref(), Some("length"));
    assert_eq!(completion.raw["choices"][0]["finish_reason"], "length");
    let err = load_err("steps: [{fail: 500, finish_reason: length}]");
    assert!(err.contains("steps[0].finish_reason"), "{err}");
}

#[test]
fn latencies_layer_step_over_rule_over_default() {
    let s = script(
        r#"
default_latency_ms: 5
rules:
  - latency: "20ms"
    steps: [{tool: a, latency: "1s"}, {tool: b}]
"#,
    );
    let first = s.respond(&req(vec![ChatMessage::user("x")]), &meta("", ""));
    assert_eq!(first.latency(), Duration::from_secs(1));
    let mut h = vec![ChatMessage::user("x")];
    advance(&mut h, completion(first), "o");
    assert_eq!(
        s.respond(&req(h), &meta("", "")).latency(),
        Duration::from_millis(20)
    );
    let d = script("default_latency: 100..200\nsteps: []");
    for _ in 0..50 {
        let l = d
            .respond(&req(vec![ChatMessage::user("x")]), &meta("", ""))
            .latency();
        assert!(l >= Duration::from_millis(100) && l <= Duration::from_millis(200));
    }
}

#[test]
fn latency_forms_parse() {
    let ms = Duration::from_millis;
    let l = parse_latency("200±50").unwrap();
    assert_eq!((l.min, l.max), (ms(150), ms(250)));
    let l = parse_latency("200+-300").unwrap();
    assert_eq!((l.min, l.max), (ms(0), ms(500)));
    assert_eq!(parse_latency("1.5s").unwrap().min, ms(1500));
    assert_eq!(parse_latency("7").unwrap().max, ms(7));
    assert!(parse_latency("300..100").is_none());
    assert!(parse_latency("fast").is_none());
    // Regression (issue 11 item 4b): huge values panicked (float conversion, addition).
    assert!(parse_latency("1e300s").is_none());
    // Latencies are capped at one hour: beyond it a value is refused, not saturated.
    assert!(parse_latency("18000000000000000000s±18000000000000000000s").is_none());
    assert!(parse_latency("3601s").is_none());
}

#[test]
fn a_huge_retry_after_is_a_load_error_not_a_panic() {
    let err = load_err("steps:\n  - fail: 429\n    retry_after: 1e300\n");
    assert!(err.contains("retry_after"), "{err}");
}

#[test]
fn load_errors_name_the_file_and_key() {
    let cases = [
        (
            "rules: [{steps: [{tool: a, answer: b}]}]",
            "rules[0].steps[0]",
            "exactly one",
        ),
        (
            "rules: [{steps: [{answer: a, times: 2}]}]",
            "rules[0].steps[0].times",
            "fail",
        ),
        (
            "rules: [{steps: [{fail: 429, times: 2}]}]",
            "rules[0].steps[0].then",
            "then",
        ),
        (
            "rules: [{steps: [{fail: 200}]}]",
            "rules[0].steps[0].fail",
            "400-599",
        ),
        (
            "steps: [{answer: \"{{ tsk }}\"}]",
            "rules[0].steps[0].answer",
            "task, last_observation",
        ),
        (
            "steps: [{answer: \"{{ task \"}]",
            "rules[0].steps[0].answer",
            "compile",
        ),
        (
            "steps: [{tool: t, args: [1]}]",
            "rules[0].steps[0].args",
            "mapping",
        ),
        ("steps: [{tools: []}]", "rules[0].steps[0].tools", "empty"),
        (
            "steps: [{answer: a, latency: soon}]",
            "rules[0].steps[0].latency",
            "milliseconds",
        ),
        (
            "steps: [{fail: 500, times: 1, then: {fail: 500}}]",
            "rules[0].steps[0].then",
            "not another",
        ),
        ("model: x", "rules", "no `rules`"),
        ("", "rules", "no `rules`"),
        ("rules: []", "rules", "is empty"),
        ("- a\n- b", "(top level)", "a mapping"),
    ];
    for (yaml, key, fragment) in cases {
        let err = load_err(yaml);
        assert!(err.contains("bad.yaml"), "{yaml}: {err}");
        assert!(err.contains(&format!("`{key}`")), "{yaml}: {err}");
        assert!(err.contains(fragment), "{yaml}: {err}");
    }
    // Typos in keys are caught by the parser, which reports where.
    let err = load_err("rules:\n  - steps:\n      - tol: x\n");
    assert!(err.contains("bad.yaml") && err.contains("tol"), "{err}");
}

#[test]
fn load_reads_files_and_reports_missing_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    std::fs::write(
        &path,
        r#"{"rules": [{"steps": [{"answer": "from json"}]}]}"#,
    )
    .unwrap();
    let s = Script::load(&path).unwrap();
    let reply = completion(s.respond(&req(vec![ChatMessage::user("x")]), &meta("", "")));
    assert_eq!(reply.content.as_deref(), Some("from json"));
    let err = Script::load(&dir.path().join("missing.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing.yaml") && err.contains("DELTA_LLM_SCRIPT"),
        "{err}"
    );
}

#[tokio::test]
async fn scripted_backend_maps_failures_to_http_errors() {
    let backend = ScriptedBackend::new(Arc::new(script(FLAKY)));
    let r = req(vec![ChatMessage::user("t")]);
    let err = backend
        .complete(r.clone(), meta("a", "r"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(429));
    assert_eq!(err.retry_after(), Some(Duration::from_millis(1500)));
    assert!(err.is_retryable());
    // The script fails twice, then answers: the retry loop itself lives in `LlmGate`.
    let again = backend.complete(r.clone(), meta("a", "r")).await;
    assert_eq!(again.unwrap_err().status(), Some(429));
    let done = backend.complete(r, meta("a", "r")).await.unwrap();
    assert_eq!(done.message.content.as_deref(), Some("ok"));
    let stats = backend.stats().snapshot();
    assert_eq!(
        (stats.requests_total, stats.failures, stats.completions),
        (3, 2, 1)
    );
    assert_eq!(stats.in_flight, 0);
}

#[tokio::test]
async fn scripted_backend_counts_in_flight_and_rejections() {
    let backend = ScriptedBackend::new(Arc::new(script(
        "default_latency_ms: 50\nsteps: [{answer: a}]",
    )));
    let pending: Vec<_> = (0..5)
        .map(|i| {
            backend.complete(
                req(vec![ChatMessage::user(format!("t{i}"))]),
                meta("a", "r"),
            )
        })
        .collect();
    // Requests count as in flight from the call until their future completes or drops.
    assert_eq!(backend.stats().in_flight(), 5);
    for p in pending {
        p.await.unwrap();
    }
    assert_eq!(backend.stats().max_in_flight(), 5);
    assert_eq!(backend.stats().in_flight(), 0);
    let bad = req(vec![ChatMessage::assistant(Some("x".into()), vec![])]);
    let err = backend.complete(bad, meta("a", "r")).await.unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert_eq!(backend.stats().rejected_invalid(), 1);
}

#[test]
fn every_yaml_example_in_the_docs_loads() {
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/llm-script.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    let blocks: Vec<&str> = text
        .split("```yaml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert!(
        blocks.len() >= 2,
        "no yaml examples found in {}",
        doc.display()
    );
    for block in blocks {
        let s = Script::from_yaml_str(block, "docs/llm-script.md").unwrap();
        // Every example answers its first request somehow.
        let reply = s.respond(
            &req(vec![ChatMessage::user("a report")]),
            &meta("file-bot", "r"),
        );
        assert!(
            matches!(reply, ScriptedReply::Completion { .. }),
            "{reply:?}"
        );
    }
}

#[test]
fn hostile_scripts_are_refused_quickly_with_the_key() {
    let deep = format!(
        "steps: [{{answer: {}1{}}}]\n",
        "[".repeat(100),
        "]".repeat(100)
    );
    let nested = "steps:\n  - answer: \"{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}\"\n";
    let started = std::time::Instant::now();
    for (yaml, expected) in [
        (deep.as_str(), "nested more than 64 levels"),
        (nested, "too much work"),
        (
            "steps:\n  - fail: 429\n    retry_after: 1e300\n",
            "retry_after",
        ),
        (
            "default_latency: \"1e300s\"\nsteps: [{answer: hi}]\n",
            "at most one hour",
        ),
        (
            "default_latency: 99999999999\nsteps: [{answer: hi}]\n",
            "at most one hour",
        ),
    ] {
        let error = load_err(yaml);
        assert!(error.contains(expected), "{expected}: {error}");
    }
    assert!(started.elapsed() < Duration::from_secs(20));
}
