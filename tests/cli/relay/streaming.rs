//! Issue 25: `delta relay` passes a `stream: true` request through and relays the SSE answer
//! chunk by chunk as it comes (counting the final usage chunk), streams the scripted model
//! when asked, and passes an endpoint's JSON error object through unchanged with its status
//! and Retry-After.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::upstream::{chunk_event, json_response, usage_event, Behaviour, Latch, Seen, Upstream};
use super::{chat_body, parse_answer, send, write_head, RelayProcess, KEY, TOKEN};

const LIMIT: Duration = Duration::from_secs(20);

fn relay_in_front_of(upstream: &Upstream, extra: &[&str]) -> RelayProcess {
    RelayProcess::start(
        extra,
        &[
            ("DELTA_BASE_URL", upstream.base_url.as_str()),
            ("DELTA_API_KEY", KEY),
            ("DELTA_RELAY_TOKEN", TOKEN),
        ],
    )
}

/// Acceptance of issue 25: the endpoint streams a chunk, then waits; the client must have
/// that chunk before the endpoint produces the rest.
#[test]
fn relay_streams_chunks_as_they_come_and_counts_the_final_usage() {
    let latch = Latch::default();
    let upstream_latch = latch.clone();
    let upstream = Upstream::start(move |_| Behaviour::Stream {
        events: vec![
            chunk_event("first-chunk"),
            chunk_event("second-chunk"),
            usage_event(11, 7),
            "data: [DONE]\n\n".to_owned(),
        ],
        pause_before: 1,
        latch: upstream_latch.clone(),
    });
    let relay = relay_in_front_of(&upstream, &[]);
    let authority = relay.authority();
    let body = chat_body("stream please", true);
    let mut client = TcpStream::connect(&authority).unwrap();
    client.set_read_timeout(Some(LIMIT)).unwrap();
    write_head(
        &mut client,
        &authority,
        "POST",
        "/v1/chat/completions",
        Some(TOKEN),
        Some(body.len()),
    );
    client.write_all(&body).unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&received).contains("first-chunk") {
        let n = client.read(&mut buf).unwrap_or_else(|e| {
            panic!(
                "the first chunk did not come through before the rest was produced ({e}); got {:?}",
                String::from_utf8_lossy(&received)
            )
        });
        assert!(
            n > 0,
            "closed early: {:?}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&received).contains("second-chunk"));
    latch.open();
    client.read_to_end(&mut received).unwrap();
    let answer = parse_answer(&received);
    assert_eq!(answer.status, 200, "{}", answer.head);
    assert_eq!(
        answer.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let text = answer.text();
    assert!(
        text.contains("second-chunk") && text.contains("\"completion_tokens\":7"),
        "{text}"
    );
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    // The request went as it came, with the provider key instead of the relay's token.
    let Some(Seen::Request { head, body: sent }) = upstream.next(LIMIT) else {
        panic!("the endpoint saw no request");
    };
    assert_eq!(sent.as_bytes(), &body[..]);
    assert!(
        head.contains(&format!("authorization: bearer {}", KEY.to_lowercase())),
        "{head}"
    );
    assert!(!head.contains(&TOKEN.to_lowercase()), "{head}");
    let stderr = relay.stop();
    assert!(
        stderr.contains("1 requests answered (1 streamed)")
            && stderr.contains("11 tokens in, 7 out"),
        "{stderr}"
    );
}

/// Issue 25 §9: OpenAI SDKs branch on `error.code`; the relay used to rewrite the object.
#[test]
fn relay_passes_the_endpoints_error_object_through_with_its_status_and_retry_after() {
    let overflow = serde_json::json!({"error": {
        "message": "This model's maximum context length is 4096 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded"
    }})
    .to_string();
    let busy = serde_json::json!({"error": {
        "message": "Rate limit reached", "type": "requests", "param": null, "code": "rate_limit_exceeded"
    }})
    .to_string();
    let (overflow_body, busy_body) = (overflow.clone(), busy.clone());
    let upstream = Upstream::start(move |body| {
        if body.contains("overflow") {
            Behaviour::Respond(json_response(
                400,
                "x-request-id: req-42\r\n",
                &overflow_body,
            ))
        } else if body.contains("busy") {
            Behaviour::Respond(json_response(429, "retry-after: 7\r\n", &busy_body))
        } else {
            Behaviour::Respond(
                b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: 25\r\nconnection: close\r\n\r\n<html>proxy error</html>\n"
                    .to_vec(),
            )
        }
    });
    let relay = relay_in_front_of(&upstream, &[]);
    let authority = relay.authority();
    let path = "/v1/chat/completions";

    let answer = send(
        &authority,
        "POST",
        path,
        Some(TOKEN),
        &chat_body("overflow", false),
    );
    assert_eq!(answer.status, 400);
    assert_eq!(answer.body, overflow.as_bytes(), "{}", answer.text());
    assert_eq!(answer.header("x-request-id").as_deref(), Some("req-42"));

    let answer = send(
        &authority,
        "POST",
        path,
        Some(TOKEN),
        &chat_body("html", false),
    );
    assert_eq!(answer.status, 502);
    let error = answer.json();
    assert_eq!(error["error"]["message"], "<html>proxy error</html>");
    assert_eq!(error["error"]["code"], 502);

    let answer = send(
        &authority,
        "POST",
        path,
        Some(TOKEN),
        &chat_body("busy", false),
    );
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-after").as_deref(), Some("7"));
    assert_eq!(answer.json()["error"]["code"], "rate_limit_exceeded");
}

/// `--llm-script` answers a `stream: true` request as an OpenAI stream.
#[test]
fn relay_streams_the_scripted_model_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let script = super::script_file(dir.path());
    let relay = RelayProcess::start(
        &["--llm-script", script.to_str().unwrap()],
        &[("DELTA_RELAY_TOKEN", TOKEN)],
    );
    let answer = send(
        &relay.authority(),
        "POST",
        "/v1/chat/completions",
        Some(TOKEN),
        &chat_body("hi", true),
    );
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let text = answer.text();
    let events: Vec<serde_json::Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let content: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "relayed hi");
    assert!(events.last().unwrap()["usage"].is_object(), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
    let stderr = relay.stop();
    assert!(stderr.contains("(1 streamed)"), "{stderr}");
}

/// A caller that stops reading a stream and leaves: the relay closes the endpoint's stream
/// (which stops the generation on servers that notice) and counts the caller as gone.
#[test]
fn relay_closes_the_endpoints_stream_when_the_caller_leaves_mid_stream() {
    let upstream = Upstream::start(|_| Behaviour::Stream {
        events: vec![chunk_event("first-chunk"), chunk_event("never-sent")],
        pause_before: 1,
        latch: Latch::default(),
    });
    let relay = relay_in_front_of(&upstream, &[]);
    let authority = relay.authority();
    let body = chat_body("stream then leave", true);
    let mut client = TcpStream::connect(&authority).unwrap();
    client.set_read_timeout(Some(LIMIT)).unwrap();
    write_head(
        &mut client,
        &authority,
        "POST",
        "/v1/chat/completions",
        Some(TOKEN),
        Some(body.len()),
    );
    client.write_all(&body).unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&received).contains("first-chunk") {
        let n = client.read(&mut buf).unwrap();
        assert!(n > 0);
        received.extend_from_slice(&buf[..n]);
    }
    assert!(matches!(upstream.next(LIMIT), Some(Seen::Request { .. })));
    drop(client);
    match upstream.next(LIMIT) {
        Some(Seen::Closed { body }) => assert!(body.contains("stream then leave")),
        other => panic!("the endpoint's stream was not closed: {other:?}"),
    }
    let stderr = relay.stop();
    assert!(
        stderr.contains("0 requests answered (0 streamed), 1 callers left before their answer"),
        "{stderr}"
    );
}

/// An endpoint on this machine (llama.cpp, Ollama...) needs no key, for the relay as for
/// `delta run`: it starts without DELTA_API_KEY and sends no `Authorization` upstream; a
/// remote endpoint without a key is still refused.
#[test]
fn relay_forwards_to_a_loopback_endpoint_without_a_key_and_refuses_a_remote_one() {
    let upstream = Upstream::start(|_| {
        Behaviour::Respond(json_response(
            200,
            "",
            r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#,
        ))
    });
    let relay = RelayProcess::start(
        &[],
        &[
            ("DELTA_BASE_URL", upstream.base_url.as_str()),
            ("DELTA_RELAY_TOKEN", TOKEN),
        ],
    );
    let answer = send(
        &relay.authority(),
        "POST",
        "/v1/chat/completions",
        Some(TOKEN),
        &chat_body("hi", false),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    let Some(Seen::Request { head, .. }) = upstream.next(LIMIT) else {
        panic!("the endpoint saw no request");
    };
    assert!(
        !head.to_ascii_lowercase().contains("authorization:"),
        "no key, no Authorization header: {head}"
    );
    relay.stop();

    let refused = RelayProcess::try_start(
        &[],
        &[
            ("DELTA_BASE_URL", "https://llm.example.invalid/v1"),
            ("DELTA_RELAY_TOKEN", TOKEN),
        ],
    )
    .err()
    .expect("a remote endpoint without a key is refused");
    assert!(refused.contains("DELTA_API_KEY"), "{refused}");
}
