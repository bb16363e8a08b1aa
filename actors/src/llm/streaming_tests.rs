//! Streamed model calls end to end: the scripted model served over HTTP, delta's HTTP client
//! and an endpoint's gate, on a runtime whose clock is paused (so a reply that takes minutes
//! to generate takes no wall time: the clock jumps whenever everything waits on a timer).
//! The time limits are the defaults, as a user who set nothing has them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use super::scripted::{serve, Script, ScriptServer};
use super::timeouts::TimeoutPhase;
use super::{
    ChatBackend, ChatMessage, ChatRequest, Endpoint, GateConfig, HttpBackend, LlmError, LlmGate,
    RequestMeta, RetryPolicy, DEFAULT_TIMEOUT,
};

async fn scripted(yaml: &str) -> ScriptServer {
    let script = Arc::new(Script::from_yaml_str(yaml, "streaming.yaml").unwrap());
    serve(script, "127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// The gate of an endpoint on `server`, streaming unless `stream` says otherwise, with the
/// default retry policy's attempts but short waits.
fn gate(server: &ScriptServer, stream: Option<bool>) -> (LlmGate, HttpBackend) {
    let endpoint = Endpoint::new(server.base_url(), None).with_dialect(super::Dialect {
        stream,
        ..super::Dialect::default()
    });
    let backend = HttpBackend::new(endpoint, DEFAULT_TIMEOUT).unwrap();
    let gate = LlmGate::new(
        Arc::new(backend.clone()),
        GateConfig {
            retry: RetryPolicy {
                base_delay: Duration::from_millis(10),
                ..RetryPolicy::default()
            },
            ..GateConfig::default()
        },
    );
    (gate, backend)
}

fn task(text: &str) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![ChatMessage::user(text)].into(),
        ..Default::default()
    }
}

fn meta(backend: &HttpBackend) -> RequestMeta {
    RequestMeta {
        wire: backend.wire_options("m"),
        ..RequestMeta::new("agent", "run-1")
    }
}

/// A reply that takes three minutes to generate, streamed in 20 pieces, completes under
/// the default limits (60 s of silence, 600 s in all): the chunks keep it alive.
#[tokio::test(start_paused = true)]
async fn a_three_minute_streamed_reply_completes_with_the_default_limits() {
    let server =
        scripted("steps: [{answer: 'a long, slow answer', latency: 180s, chunks: 20}]").await;
    let (gate, backend) = gate(&server, None);
    let started = tokio::time::Instant::now();
    let out = gate
        .complete(task("t"), meta(&backend), |n| panic!("no retry: {n:?}"))
        .await
        .unwrap();
    assert_eq!(
        out.completion.message.content.as_deref(),
        Some("a long, slow answer")
    );
    assert!(out.wire.stream);
    assert!(started.elapsed() >= Duration::from_secs(180));
    assert_eq!(server.stats().streams(), 1);
}

/// The same three-minute reply not streamed: the server is silent until it is done, and
/// the idle limit does not cut it.
#[tokio::test(start_paused = true)]
async fn a_three_minute_reply_without_streaming_is_not_cut_by_the_idle_limit() {
    let server = scripted("steps: [{answer: 'a long, slow answer', latency: 180s}]").await;
    let (gate, backend) = gate(&server, Some(false));
    let out = gate
        .complete(task("t"), meta(&backend), |n| panic!("no retry: {n:?}"))
        .await
        .unwrap();
    assert_eq!(
        out.completion.message.content.as_deref(),
        Some("a long, slow answer")
    );
    assert!(!out.wire.stream);
    assert_eq!(server.stats().streams(), 0);
}

/// A stream that goes silent for longer than the idle limit (90 s > 60 s) is cut, the
/// stream closed (the server sees its client go), and the call retried; the retry is
/// answered.
#[tokio::test(start_paused = true)]
async fn a_stream_that_goes_silent_is_cut_and_retried() {
    let server = scripted(
        "steps: [{answer: 'after the stall', latency: 2s, chunks: 4, stall: 90s, stall_times: 1}]",
    )
    .await;
    let (gate, backend) = gate(&server, None);
    let mut failures = Vec::new();
    let out = gate
        .complete(task("t"), meta(&backend), |n| {
            failures.push(n.error.clone())
        })
        .await
        .unwrap();
    assert_eq!(
        out.completion.message.content.as_deref(),
        Some("after the stall")
    );
    assert_eq!(out.attempts, 2);
    assert!(
        matches!(
            failures.as_slice(),
            [LlmError::Timeout {
                phase: TimeoutPhase::Body,
                ..
            }]
        ),
        "{failures:?}"
    );
    // The cut stream's sender found its client gone once it had something to send.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(server.stats().streams_cancelled(), 1);
}

/// Usage comes in the stream's last chunk when asked for (`stream_options`), and the
/// streamed completion is the one a non-streamed call returns.
#[tokio::test(start_paused = true)]
async fn a_streamed_completion_equals_the_unstreamed_one() {
    let yaml = "steps: [{tool: ls, args: {dir: '.'}, content: 'looking first'}]";
    let streamed_server = scripted(yaml).await;
    let plain_server = scripted(yaml).await;
    let (streamed_gate, streamed_backend) = gate(&streamed_server, None);
    let (plain_gate, plain_backend) = gate(&plain_server, Some(false));
    let streamed = streamed_gate
        .complete(task("t"), meta(&streamed_backend), |_| {})
        .await
        .unwrap()
        .completion;
    let plain = plain_gate
        .complete(task("t"), meta(&plain_backend), |_| {})
        .await
        .unwrap()
        .completion;
    assert_eq!(streamed.message, plain.message);
    assert_eq!(streamed.usage, plain.usage);
    assert!(streamed.usage.is_some());
    assert_eq!(streamed.finish_reason, plain.finish_reason);
    assert_eq!(streamed.raw["object"], "chat.completion");
}

/// A call abandoned while its reply streams (a run stopped, Ctrl-C) closes the stream, so
/// the server stops generating.
#[tokio::test(start_paused = true)]
async fn abandoning_a_call_closes_its_stream() {
    let server =
        scripted("steps: [{answer: 'never read to the end', latency: 60s, chunks: 30}]").await;
    let (gate, backend) = gate(&server, None);
    let call = gate.complete(task("t"), meta(&backend), |_| {});
    let abandoned = tokio::time::timeout(Duration::from_secs(10), call).await;
    assert!(abandoned.is_err(), "the reply takes a minute");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(server.stats().streams_cancelled(), 1);
    assert_eq!(server.stats().in_flight(), 0);
}
