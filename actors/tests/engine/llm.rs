//! End to end over loopback: the scripted-model HTTP server on 127.0.0.1:0 and the real
//! `HttpBackend` client (status mapping, Retry-After, strict history checks, retries,
//! in-flight statistics, routes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use delta_actors::llm::{
    parse_retry_after, scripted, ChatBackend, ChatMessage, ChatRequest, Endpoint, GateConfig,
    HttpBackend, LlmError, LlmGate, RequestMeta, RetryPolicy, Script, ScriptServer, ToolCall,
};
use serde_json::Value;

const LOOPBACK: ([u8; 4], u16) = ([127, 0, 0, 1], 0);

async fn start(yaml: &str) -> ScriptServer {
    let script = Arc::new(Script::from_yaml_str(yaml, "e2e.yaml").unwrap());
    scripted::serve(script, SocketAddr::from(LOOPBACK))
        .await
        .unwrap()
}

fn client(server: &ScriptServer) -> HttpBackend {
    HttpBackend::new(
        Endpoint::new(server.base_url(), Some("sk-test".into())),
        Duration::from_secs(30),
    )
    .unwrap()
}

/// A chat completion sent with a plain HTTP client, so a test sees the status and headers
/// exactly as the server wrote them.
async fn post_raw(server: &ScriptServer, task: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&request(task))
        .send()
        .await
        .unwrap()
}

fn request(task: &str) -> ChatRequest {
    ChatRequest {
        model: "delta-scripted".into(),
        messages: vec![ChatMessage::system("sys"), ChatMessage::user(task)].into(),
        tool_choice: Some("auto".into()),
        ..Default::default()
    }
}

fn fast_retries(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    }
}

#[tokio::test]
async fn http_backend_completes_against_the_scripted_server() {
    let server = start(
        r#"
rules:
  - agent: writer
    steps:
      - tool: create_file
        args: { filename: "{{ run_id }}.txt" }
      - answer: "wrote {{ last_observation }}"
  - steps: [{answer: "wrong rule"}]
"#,
    )
    .await;
    let backend = client(&server);
    let meta = RequestMeta::new("writer", "run-7");
    let first = backend
        .complete(request("write"), meta.clone())
        .await
        .unwrap();
    let call = &first.message.tool_calls()[0];
    assert_eq!(call.function.name, "create_file");
    assert_eq!(call.function.arguments, r#"{"filename":"run-7.txt"}"#);
    assert_eq!(first.message.content, None);
    assert!(first.usage.unwrap().prompt_tokens > 0);
    assert_eq!(first.raw["object"], "chat.completion");

    let mut next = request("write");
    next.messages.push(first.message.clone());
    next.messages
        .push(ChatMessage::tool(call.id.clone(), "ok.txt"));
    let second = backend.complete(next, meta).await.unwrap();
    assert_eq!(second.message.content.as_deref(), Some("wrote ok.txt"));
    assert_eq!(second.finish_reason.as_deref(), Some("stop"));
    assert_eq!(server.stats().completions(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn rate_limited_reply_carries_retry_after() {
    let server = start("steps: [{fail: 429, retry_after: 2, message: \"too many\"}]").await;
    // Raw HTTP first: the header itself is what parse_retry_after reads.
    let raw = post_raw(&server, "t").await;
    assert_eq!(raw.status(), 429);
    assert_eq!(raw.headers()["retry-after"], "2");
    assert_eq!(
        parse_retry_after(raw.headers()),
        Some(Duration::from_secs(2))
    );
    let body: Value = raw.json().await.unwrap();
    assert_eq!(body["error"]["message"], "too many");
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let err = client(&server)
        .complete(request("t"), RequestMeta::default())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LlmError::Http {
            status: 429,
            message: "too many".into(),
            retry_after: Some(Duration::from_secs(2)),
        }
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn fractional_retry_after_is_rounded_up_and_exact_in_ms() {
    let server = start("steps: [{fail: 503, retry_after: 1.5}]").await;
    let raw = post_raw(&server, "t").await;
    assert_eq!(raw.status(), 503);
    assert_eq!(raw.headers()["retry-after"], "2");
    assert_eq!(raw.headers()["retry-after-ms"], "1500");
    assert_eq!(
        parse_retry_after(raw.headers()),
        Some(Duration::from_millis(1500))
    );
    let body: Value = raw.json().await.unwrap();
    assert_eq!(body["error"]["type"], "server_error");
}

#[tokio::test]
async fn invalid_history_is_rejected_with_400() {
    let server = start("steps: [{answer: a}, {answer: b}]").await;
    let mut bad = request("t");
    bad.messages.push(ChatMessage::assistant(
        None,
        vec![ToolCall::function("c1", "ls", "{}")],
    ));
    bad.messages.push(ChatMessage::user("interrupting"));
    let err = client(&server)
        .complete(bad, RequestMeta::default())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert!(
        err.to_string().contains("\"c1\" has no tool result"),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(server.stats().rejected_invalid(), 1);

    // The string "null" as assistant content is refused too (reference §19 item 2a).
    let mut string_null = request("t");
    string_null
        .messages
        .push(ChatMessage::assistant(Some("null".into()), vec![]));
    string_null.messages.push(ChatMessage::user("go on"));
    let err = client(&server)
        .complete(string_null, RequestMeta::default())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert_eq!(server.stats().rejected_invalid(), 2);
}

#[tokio::test]
async fn retries_transient_failures_and_not_client_errors() {
    let server = start(
        r#"
rules:
  - task_contains: flaky
    steps: [{fail: 503, times: 2, then: {answer: "recovered"}}]
  - task_contains: broken
    steps: [{fail: 400, message: "bad parameter"}]
"#,
    )
    .await;
    let gate = |server: &ScriptServer, attempts| {
        gate_over_http(
            server,
            GateConfig {
                retry: fast_retries(attempts),
                ..GateConfig::default()
            },
        )
    };
    let flaky_gate = gate(&server, 5);
    let mut notices = Vec::new();
    let done = flaky_gate
        .complete(request("flaky"), RequestMeta::new("a", "r1"), |n| {
            notices.push(n.clone())
        })
        .await
        .unwrap();
    assert_eq!(
        done.completion.message.content.as_deref(),
        Some("recovered")
    );
    assert_eq!(done.attempts, 3);
    assert_eq!(notices.len(), 2);
    assert_eq!(notices[1].failed_attempt, 2);
    assert_eq!(notices[0].error.status(), Some(503));
    assert_eq!(server.stats().requests_total(), 3);

    let err = flaky_gate
        .complete(request("broken"), RequestMeta::new("a", "r2"), |_| {
            panic!("a 400 must not be retried")
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("bad parameter"), "{err}");
    assert_eq!(server.stats().requests_total(), 4);

    // Attempts are bounded: a permanent 503 gives up after max_attempts.
    let permanent = start("steps: [{fail: 503}]").await;
    let err = gate(&permanent, 3)
        .complete(request("t"), RequestMeta::default(), |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert_eq!(permanent.stats().requests_total(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_max_in_flight_under_concurrency() {
    // The latency keeps every request open until all 20 have arrived.
    let server = start("default_latency_ms: 1500\nsteps: [{answer: done}]").await;
    let backend = client(&server);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let backend = backend.clone();
        tasks.spawn(async move {
            backend
                .complete(
                    request(&format!("task {i}")),
                    RequestMeta::new("a", format!("r{i}")),
                )
                .await
        });
    }
    let mut answered = 0;
    while let Some(result) = tasks.join_next().await {
        assert_eq!(
            result.unwrap().unwrap().message.content.as_deref(),
            Some("done")
        );
        answered += 1;
    }
    assert_eq!(answered, 20);
    let stats = server.stats().snapshot();
    assert_eq!(stats.requests_total, 20);
    assert_eq!(stats.max_in_flight, 20);
    assert_eq!(stats.in_flight, 0);
    assert_eq!(stats.max_requests_per_minute, 20);
    assert_eq!(
        server
            .stats()
            .max_requests_in_window(Duration::from_secs(60)),
        20
    );
}

#[tokio::test]
async fn models_stats_and_unknown_routes() {
    let server = start("model: scripted-x\nsteps: [{answer: a}]").await;
    let http = reqwest::Client::new();
    let base = server.base_url();
    let models: Value = http
        .get(format!("{base}/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "scripted-x");

    client(&server)
        .complete(request("t"), RequestMeta::default())
        .await
        .unwrap();
    let stats: Value = http
        .get(format!("{base}/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["requests_total"], 1);
    assert_eq!(stats["completions"], 1);
    // The fields docs/llm-script.md promises.
    let mut keys: Vec<&str> = stats
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "completions",
            "connections",
            "failures",
            "http2_requests",
            "in_flight",
            "max_in_flight",
            "max_requests_per_minute",
            "min_interval_ms",
            "rejected_invalid",
            "requests_total",
            "streams",
            "streams_cancelled",
            "uptime_ms"
        ]
    );

    let missing = http.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/v1/chat/completions"));

    let not_json = http
        .post(format!("{base}/chat/completions"))
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), 400);
    let message = |body: Value| body["error"]["message"].as_str().unwrap().to_owned();
    let not_json = message(not_json.json().await.unwrap());
    assert!(not_json.contains("not JSON"), "{not_json}");
    // A request may stream (docs/llm-script.md, "Streaming"); `stream` must be a boolean.
    let streaming = http
        .post(format!("{base}/chat/completions"))
        .json(&serde_json::json!({"model": "m", "stream": "yes", "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(streaming.status(), 400);
    let streaming = message(streaming.json().await.unwrap());
    assert!(
        streaming.contains("`stream` must be true or false"),
        "{streaming}"
    );
    let wrong_shape = http
        .post(format!("{base}/chat/completions"))
        .json(&serde_json::json!({"model": "m", "messages": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_shape.status(), 400);
    let wrong_shape = message(wrong_shape.json().await.unwrap());
    assert!(
        wrong_shape.contains("not a chat completions request"),
        "{wrong_shape}"
    );
}

#[tokio::test]
async fn server_binds_loopback_only_and_stops_on_shutdown() {
    let server = start("steps: [{answer: a}]").await;
    assert!(server.addr.ip().is_loopback());
    let backend = client(&server);
    backend
        .complete(request("t"), RequestMeta::default())
        .await
        .unwrap();
    server.shutdown().await;
    // New connections are refused once the listener is gone.
    let fresh = HttpBackend::new(
        Endpoint::new(
            format!(
                "http://{}/v1",
                SocketAddr::from(([127, 0, 0, 1], backend_port(&backend)))
            ),
            None,
        ),
        Duration::from_secs(5),
    )
    .unwrap();
    let err = fresh
        .complete(request("t"), RequestMeta::default())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Transport(_)), "{err:?}");
}

fn backend_port(backend: &HttpBackend) -> u16 {
    let url = reqwest::Url::parse(&backend.endpoint().base_url).unwrap();
    url.port().unwrap()
}

#[tokio::test]
async fn agent_names_with_unusual_characters_reach_the_rules() {
    let server = start("rules: [{agent: \"agent é/1\", steps: [{answer: \"{{ agent }}\"}]}]").await;
    let reply = client(&server)
        .complete(request("t"), RequestMeta::new("agent é/1", "r"))
        .await
        .unwrap();
    assert_eq!(reply.message.content.as_deref(), Some("agent é/1"));
}

fn gate_over_http(server: &ScriptServer, config: GateConfig) -> Arc<LlmGate> {
    Arc::new(LlmGate::new(Arc::new(client(server)), config))
}

async fn run_concurrently(gate: &Arc<LlmGate>, calls: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..calls {
        let gate = Arc::clone(gate);
        tasks.spawn(async move {
            gate.complete(
                request("t"),
                RequestMeta::new("a", format!("run-{i}")),
                |_| {},
            )
            .await
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_caps_requests_in_flight_at_the_endpoint() {
    let server = start("default_latency_ms: 300\nsteps: [{answer: done}]").await;
    let gate = gate_over_http(
        &server,
        GateConfig {
            max_in_flight: 3,
            ..GateConfig::default()
        },
    );
    run_concurrently(&gate, 12).await;
    assert_eq!(server.stats().requests_total(), 12);
    assert_eq!(server.stats().max_in_flight(), 3);
    assert_eq!(gate.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_gate_holds_requests_per_minute_across_runs() {
    let server = start("steps: [{answer: done}]").await;
    // 200 per minute = one request every 300 ms, whichever run sends it.
    let gate = gate_over_http(
        &server,
        GateConfig {
            requests_per_minute: Some(200),
            ..GateConfig::default()
        },
    );
    run_concurrently(&gate, 4).await;
    let stats = server.stats();
    assert_eq!(stats.requests_total(), 4);
    assert_eq!(stats.max_requests_in_window(Duration::from_millis(150)), 1);
    assert_eq!(stats.max_requests_in_window(Duration::from_secs(60)), 4);
}

#[test]
fn blocking_entry_point_serves_until_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.yaml");
    std::fs::write(&path, "steps: [{answer: \"blocking ok\"}]").unwrap();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server_thread = std::thread::spawn(move || {
        scripted::run_server_until(
            &path,
            0,
            move |addr| addr_tx.send(addr).unwrap(),
            async move {
                let _ = stop_rx.await;
            },
        )
    });
    let addr = addr_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(addr.ip().is_loopback());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reply = runtime.block_on(async {
        let backend = HttpBackend::new(
            Endpoint::new(format!("http://{addr}/v1"), None),
            Duration::from_secs(10),
        )
        .unwrap();
        backend
            .complete(request("t"), RequestMeta::default())
            .await
            .unwrap()
    });
    assert_eq!(reply.message.content.as_deref(), Some("blocking ok"));
    stop_tx.send(()).unwrap();
    server_thread.join().unwrap().unwrap();
}

#[test]
fn blocking_entry_point_reports_a_bad_script_path() {
    let err = scripted::run_server_until(
        std::path::Path::new("/nonexistent/script.yaml"),
        0,
        |_| panic!("must not start"),
        async {},
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/script.yaml"),
        "{err}"
    );
}

#[tokio::test]
async fn required_api_key_is_checked_over_http() {
    let server = start("require_api_key: sk-test\nsteps: [{answer: authorised}]").await;
    let reply = client(&server)
        .complete(request("t"), RequestMeta::default())
        .await
        .unwrap();
    assert_eq!(reply.message.content.as_deref(), Some("authorised"));
    for key in [None, Some("sk-wrong".to_owned())] {
        let backend = HttpBackend::new(
            Endpoint::new(server.base_url(), key),
            Duration::from_secs(10),
        )
        .unwrap();
        let err = backend
            .complete(request("t"), RequestMeta::default())
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(401));
        assert!(err.to_string().contains("DELTA_API_KEY"), "{err}");
        assert!(!err.to_string().contains("sk-test"));
    }
}
