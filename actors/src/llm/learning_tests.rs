//! What an endpoint's refusals teach, end to end: hostile refusals (a content filter, a
//! value that is too large, a message that mentions a stream) sent by a server on 127.0.0.1
//! through delta's HTTP client and an endpoint's gate with the default number of attempts;
//! a refusal of both forms of a detail; lessons kept across processes in the endpoint
//! memory; and a stream cut by the whole-request limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::client::tests::{
    answering_endpoint, completion_json, event, hello, json_answer, limits, streamed,
    with_tool_turn, SSE_HEAD,
};
use super::timeouts::TimeoutPhase;
use super::{
    ChatBackend, EndpointMemory, GateConfig, HttpBackend, LlmError, LlmGate, MaxTokensField,
    RequestMeta, RetryPolicy, ToolCallContent, DEFAULT_TIMEOUT,
};

/// The endpoint's gate with the default number of attempts (5), and short waits.
fn gate(backend: &HttpBackend) -> LlmGate {
    LlmGate::new(
        Arc::new(backend.clone()),
        GateConfig {
            retry: RetryPolicy {
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(10),
                ..RetryPolicy::default()
            },
            ..GateConfig::default()
        },
    )
}

fn meta_for(backend: &HttpBackend, meta: RequestMeta) -> RequestMeta {
    RequestMeta {
        wire: backend.wire_options("m"),
        ..meta
    }
}

/// Azure OpenAI's content filter, as it answers.
fn azure_content_filter() -> Value {
    json!({"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
        "type": null, "param": "prompt", "code": "content_filter", "status": 400,
        "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
            "hate": {"filtered": false, "severity": "safe"},
            "violence": {"filtered": true, "severity": "medium"}}}}})
}

/// Regression: Azure's content-filter 400 made delta flip `content` between null and ""
/// five times, without backoff. It is sent once: a 400 that names no field is final.
#[tokio::test]
async fn a_content_filter_refusal_is_final_after_one_attempt() {
    let (backend, bodies) =
        answering_endpoint(|_| vec![(Duration::ZERO, json_answer(400, &azure_content_filter()))])
            .await;
    let gate = gate(&backend);
    let err = gate
        .complete(
            with_tool_turn(),
            meta_for(&backend, limits(5_000, 1_000)),
            |n| panic!("no second attempt: {n:?}"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Http { status: 400, .. }), "{err:?}");
    assert!(
        err.to_string().contains("content management policy"),
        "{err}"
    );
    assert_eq!(bodies.lock().unwrap().len(), 1);
    assert_eq!(
        backend.wire_options("m").tool_call_content,
        ToolCallContent::JsonNull,
        "nothing learned"
    );
    assert!(backend.take_adaptations().is_empty());
}

/// A server that refuses both forms of `content` on a tool-call turn gets each form once,
/// and the second refusal is final: never a flip back.
#[tokio::test]
async fn a_server_refusing_both_content_forms_gets_each_once() {
    let (backend, bodies) = answering_endpoint(|body| {
        let message = if body["messages"][1]["content"].is_null() {
            "'content' field must be a string or an array of objects"
        } else {
            "messages.1.content: must not be empty"
        };
        vec![(
            Duration::ZERO,
            json_answer(400, &json!({"error": {"message": message}})),
        )]
    })
    .await;
    let gate = gate(&backend);
    let mut retries = Vec::new();
    let err = gate
        .complete(
            with_tool_turn(),
            meta_for(&backend, limits(5_000, 1_000)),
            |n| retries.push(n.error.clone()),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Http { status: 400, .. }), "{err:?}");
    let sent = bodies.lock().unwrap();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0]["messages"][1]["content"], Value::Null);
    assert_eq!(sent[1]["messages"][1]["content"], "");
    assert!(
        matches!(
            retries.as_slice(),
            [LlmError::Adjusted {
                learned_now: true,
                ..
            }]
        ),
        "{retries:?}"
    );
}

/// Regression: a `max_tokens` value error switched every later request to
/// `max_completion_tokens`. It is the request's value, final, and nothing is learned. (vLLM's
/// words name both fields.)
#[tokio::test]
async fn a_max_tokens_value_error_changes_nothing() {
    let (backend, bodies) = answering_endpoint(|_| {
        vec![(
            Duration::ZERO,
            json_answer(
                400,
                &json!({"object": "error", "type": "BadRequestError", "code": 400,
                    "message": "'max_tokens' or 'max_completion_tokens' is too large: 20480. This model's maximum context length is 4096 tokens and your request has 35 input tokens (20480 > 4096 - 35). None"}),
            ),
        )]
    })
    .await;
    let request = super::ChatRequest {
        max_tokens: Some(20_480),
        ..hello()
    };
    let err = gate(&backend)
        .complete(request, meta_for(&backend, limits(5_000, 1_000)), |n| {
            panic!("no second attempt: {n:?}")
        })
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Http { status: 400, .. }), "{err:?}");
    assert_eq!(bodies.lock().unwrap().len(), 1);
    assert_eq!(
        backend.wire_options("m").max_tokens_field,
        MaxTokensField::MaxTokens
    );
}

/// Regression: any 400 containing "stream" turned streaming off for the endpoint.
#[tokio::test]
async fn a_refusal_that_mentions_a_stream_keeps_streaming_on() {
    let (backend, bodies) = answering_endpoint(|_| {
        vec![(
            Duration::ZERO,
            json_answer(
                400,
                &json!({"error": {"message": "Invalid request: the upstream provider closed the stream unexpectedly", "type": "invalid_request_error"}}),
            ),
        )]
    })
    .await;
    let err = gate(&backend)
        .complete(
            hello(),
            meta_for(&backend, streamed(limits(5_000, 1_000))),
            |n| panic!("no second attempt: {n:?}"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Http { status: 400, .. }), "{err:?}");
    assert_eq!(bodies.lock().unwrap()[0]["stream"], true);
    assert!(backend.wire_options("m").stream, "still streamed");
}

/// What one process learned, the next knows from its first call: the endpoint memory.
#[tokio::test]
async fn the_next_process_starts_from_what_the_first_learned() {
    let refusal = json!({"error": {"message": "1 validation error:\n  {'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}", "type": "internal_server_error"}});
    let (plain, bodies) = answering_endpoint(move |body| {
        if body["messages"][1]["content"].is_string() {
            vec![(Duration::ZERO, json_answer(200, &completion_json("ok")))]
        } else {
            vec![(Duration::ZERO, json_answer(500, &refusal))]
        }
    })
    .await;
    let root = tempfile::tempdir().unwrap();
    let memory = EndpointMemory::new(root.path().join("delta/endpoints.json"));
    let first = HttpBackend::with_memory(
        plain.endpoint().clone(),
        DEFAULT_TIMEOUT,
        Some(memory.clone()),
    )
    .unwrap();
    let out = gate(&first)
        .complete(
            with_tool_turn(),
            meta_for(&first, limits(5_000, 1_000)),
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.attempts, 2);
    // It refused `content: null`, and answered a streamed request in one body.
    let news = first.take_adaptations();
    assert_eq!(news.len(), 2, "{news:?}");
    assert!(news.iter().all(|n| n.remembered_in.is_some()));

    let second =
        HttpBackend::with_memory(plain.endpoint().clone(), DEFAULT_TIMEOUT, Some(memory)).unwrap();
    let out = gate(&second)
        .complete(
            with_tool_turn(),
            meta_for(&second, limits(5_000, 1_000)),
            |n| panic!("the second process knows: {n:?}"),
        )
        .await
        .unwrap();
    assert_eq!(out.attempts, 1);
    assert!(!out.wire.stream, "not streamed from its first call");
    assert!(
        second.take_adaptations().is_empty(),
        "nothing new to announce"
    );
    let sent = bodies.lock().unwrap();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[2]["messages"][1]["content"], "");
}

/// Regression: a stream cut by the whole-request limit failed as a broken connection
/// ("operation timed out"); it is a timeout that names `llm.request_timeout`.
#[tokio::test]
async fn a_stream_cut_by_the_request_limit_is_a_timeout_naming_it() {
    let (backend, _) = answering_endpoint(|_| {
        let mut pieces = vec![(Duration::ZERO, SSE_HEAD.to_vec())];
        for _ in 0..40 {
            pieces.push((
                Duration::from_millis(50),
                event(r#"{"choices":[{"index":0,"delta":{"content":"word "}}]}"#),
            ));
        }
        pieces
    })
    .await;
    let err = backend
        .send(&hello(), &streamed(limits(400, 5_000)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::Timeout {
                phase: TimeoutPhase::Request,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("400 ms (llm.request_timeout)"), "{text}");
}

/// FastAPI's own answer to an invalid body (HTTP 422, `detail` a list of pydantic errors,
/// as llama-cpp-python sends when its handler does not turn it into a 500) names `content`
/// by its location: the other form is learned, once.
#[tokio::test]
async fn a_fastapi_422_naming_content_is_learned() {
    let (backend, bodies) = answering_endpoint(|body| {
        if body["messages"][1]["content"].is_string() {
            return vec![(Duration::ZERO, json_answer(200, &completion_json("ok")))];
        }
        let refusal = json!({"detail": [{"type": "string_type",
            "loc": ["body", "messages", 1, "ChatCompletionRequestAssistantMessage", "content"],
            "msg": "Input should be a valid string", "input": null}]});
        vec![(Duration::ZERO, json_answer(422, &refusal))]
    })
    .await;
    let out = gate(&backend)
        .complete(
            with_tool_turn(),
            meta_for(&backend, limits(5_000, 1_000)),
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.attempts, 2);
    assert_eq!(bodies.lock().unwrap()[1]["messages"][1]["content"], "");
}
