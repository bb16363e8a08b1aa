//! CLI test of issue 31 item 19: the defaults the documentation states are the binary's.
//! docs/agent.md said the request timeout default was 120 s (600 s everywhere else),
//! docs/scale-out.md gave the relay's request limit as 120 s, docs/llm-script.md said the
//! scripted endpoint answered `stream: true` with a 400 (it streams). Each default below is
//! written from the engine's own constant, in the words the page uses, and must be in the
//! page; a sentence that contradicted the binary must be gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use delta_actors::agent::{DEFAULT_CONTEXT_MAX_BYTES, DEFAULT_SOURCE_MAX_BYTES};
use delta_actors::llm::{DEFAULT_IDLE_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};
use delta_actors::plan::validate::DEFAULT_MAX_PARALLEL;
use delta_actors::tool::process::DEFAULT_TIMEOUT as TOOL_TIMEOUT;

use crate::harness::MockLlm;

fn page(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `600s`, as the reference tables write a duration.
fn secs(value: Duration) -> String {
    format!("{}s", value.as_secs())
}

/// `600 s`, as the prose writes one.
fn spaced(value: Duration) -> String {
    format!("{} s", value.as_secs())
}

#[test]
fn every_default_the_docs_state_is_the_binarys() {
    let request = DEFAULT_REQUEST_TIMEOUT;
    let idle = DEFAULT_IDLE_TIMEOUT;
    let stated: Vec<(&str, String)> = vec![
        (
            "docs/agent.md",
            format!(
                "| `llm.request_timeout` | duration, 100ms..24h | `{}` |",
                secs(request)
            ),
        ),
        (
            "docs/agent.md",
            format!(
                "| `llm.idle_timeout` | duration, 100ms..24h | `{}` |",
                secs(idle)
            ),
        ),
        (
            "docs/agent.md",
            format!(
                "| `tools[].timeout_ms` | 1..604800000 | {} (5 min) |",
                TOOL_TIMEOUT.as_millis()
            ),
        ),
        (
            "docs/agent.md",
            format!(
                "| `sources[].max_bytes` | 1..268435456 | {DEFAULT_SOURCE_MAX_BYTES} (1 MiB) |"
            ),
        ),
        (
            "docs/agent.md",
            format!("| `max_bytes` | 1..268435456 | {DEFAULT_CONTEXT_MAX_BYTES} (4 MiB) |"),
        ),
        (
            "docs/model-calls.md",
            format!("| `llm.request_timeout` | `{}` |", secs(request)),
        ),
        (
            "docs/model-calls.md",
            format!("| `llm.idle_timeout` | `{}` |", secs(idle)),
        ),
        (
            "docs/plan.md",
            format!("the agent's, else `{}`", secs(request)),
        ),
        (
            "docs/plan.md",
            format!("the agent's, else `{}`", secs(idle)),
        ),
        (
            "docs/plan.md",
            format!("| `max_parallel` | integer 1..=10000 | {DEFAULT_MAX_PARALLEL} |"),
        ),
        (
            "docs/scale-out.md",
            format!(
                "request limit in all ({},\n`llm.request_timeout`'s default",
                spaced(request)
            ),
        ),
        (
            "README.md",
            format!("`llm.request_timeout`, default {}", spaced(request)),
        ),
        (
            "README.md",
            format!("`llm.idle_timeout`, default {} of silence", spaced(idle)),
        ),
    ];
    let missing: Vec<String> = stated
        .iter()
        .filter(|(name, text)| !page(name).contains(text.as_str()))
        .map(|(name, text)| format!("{name}: {text:?}"))
        .collect();
    assert!(
        missing.is_empty(),
        "the docs do not state the binary's defaults:\n{}",
        missing.join("\n")
    );
    // What the pages said before, against the binary.
    assert!(!page("docs/agent.md").contains("| `120s` |"));
    assert!(!page("docs/scale-out.md").contains("default, 120 s"));
}

/// docs/llm-script.md said `stream: true` was answered with a 400; `delta mock-llm` streams.
#[test]
fn the_scripted_endpoint_streams_as_its_page_says() {
    let doc = page("docs/llm-script.md");
    assert!(
        !doc.contains("`stream: true` is a\n  400"),
        "the old sentence"
    );
    assert!(
        doc.contains("streamed when the request says\n  `stream: true`"),
        "docs/llm-script.md, \"The HTTP endpoint\""
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.yaml");
    std::fs::write(&script, "steps: [{ answer: streamed words }]\n").unwrap();
    let mock = MockLlm::start(&script);
    let authority = mock
        .base_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = TcpStream::connect(&authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{response}"
    );
    assert!(response.contains("data: [DONE]"), "{response}");
}
