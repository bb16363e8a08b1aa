//! Tests of window learning: the refusal phrasings of real servers, and the probe against a
//! loopback stand-in for each server kind (canned answers, nothing else).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

#[test]
fn refusals_of_each_server_give_their_window_and_prompt_tokens() {
    let cases: [(&str, Option<u64>, Option<u64>); 8] = [
        // llama-cpp-python (the issue's server) and vLLM before 0.8.
        (
            "This model's maximum context length is 4096 tokens. However, you requested 4296 tokens (4096 in the messages, 200 in the completion). Please reduce the length of the messages or completion.",
            Some(4096),
            Some(4096),
        ),
        // OpenAI.
        (
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.",
            Some(128_000),
            Some(130_532),
        ),
        // vLLM 0.8 and later.
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 200. This model's maximum context length is 4096 tokens and your request has 4000 input tokens (200 > 4096 - 4000).",
            Some(4096),
            Some(4000),
        ),
        // Anthropic, both phrasings.
        (
            "prompt is too long: 210000 tokens > 200000 maximum",
            Some(200_000),
            Some(210_000),
        ),
        (
            "input length and `max_tokens` exceed context limit: 197451 + 8192 > 200000, decrease input length or `max_tokens` and try again",
            Some(200_000),
            Some(197_451),
        ),
        // llama.cpp's llama-server: no numbers in the words.
        (
            "the request exceeds the available context size, try increasing it",
            None,
            None,
        ),
        // Mistral, Gemini.
        (
            "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
            Some(32_768),
            Some(40_000),
        ),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            Some(1_048_576),
            Some(1_200_000),
        ),
    ];
    for (message, window, prompt) in cases {
        let facts = refusal_facts(&format!(
            "model call failed after 1 attempt(s): the LLM endpoint answered HTTP 400: {message}"
        ))
        .unwrap_or_else(|| panic!("not taken for a refusal: {message}"));
        assert_eq!(facts.window, window, "{message}");
        assert_eq!(facts.prompt_tokens, prompt, "{message}");
    }
    let coded = refusal_facts(r#"{"error":{"code":"context_length_exceeded"}}"#).unwrap();
    assert_eq!(coded, RefusalFacts::default());
}

#[test]
fn other_errors_are_not_refusals() {
    for message in [
        "the LLM endpoint answered HTTP 429: Rate limit reached for requests",
        "the LLM endpoint answered HTTP 401: Incorrect API key provided",
        "the LLM endpoint answered HTTP 400: 'messages' must contain the word 'json'",
        "could not reach the LLM endpoint: connection refused",
    ] {
        assert_eq!(refusal_facts(message), None, "{message}");
    }
}

/// A loopback HTTP/1.1 server answering `"<METHOD> <path>"` with canned JSON, 404 otherwise.
async fn canned_server(routes: HashMap<&'static str, Value>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let routes = Arc::new(routes);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let routes = Arc::clone(&routes);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                    if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                let _ = socket.read_exact(&mut body).await;
                let mut words = head.split_whitespace();
                let key = format!(
                    "{} {}",
                    words.next().unwrap_or(""),
                    words.next().unwrap_or("")
                );
                let (status, text) = match routes.get(key.as_str()) {
                    Some(value) => ("200 OK", value.to_string()),
                    None => ("404 Not Found", r#"{"error":"not found"}"#.to_string()),
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    format!("http://{address}/v1")
}

async fn probe_with(routes: HashMap<&'static str, Value>, model: &str) -> Option<ContextWindow> {
    let base = canned_server(routes).await;
    probe(&reqwest::Client::new(), &base, model).await
}

#[tokio::test]
async fn vllm_and_openrouter_say_it_in_their_model_list() {
    let vllm = HashMap::from([(
        "GET /v1/models",
        serde_json::json!({"data": [{"id": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 8192}]}),
    )]);
    let window = probe_with(vllm, "meta-llama/Llama-3.1-8B-Instruct")
        .await
        .unwrap();
    assert_eq!(window.tokens, 8192);
    assert_eq!(window.source, "server");
    assert_eq!(window.detail.as_deref(), Some("GET /models max_model_len"));
    let openrouter = HashMap::from([(
        "GET /v1/models",
        serde_json::json!({"data": [
            {"id": "openai/gpt-4o", "context_length": 128000},
            {"id": "anthropic/claude-3.5-sonnet", "context_length": 200000, "top_provider": {"context_length": 200000}}
        ]}),
    )]);
    let window = probe_with(openrouter, "anthropic/claude-3.5-sonnet")
        .await
        .unwrap();
    assert_eq!(window.tokens, 200_000);
}

#[tokio::test]
async fn llama_cpp_says_it_at_props() {
    let routes = HashMap::from([
        (
            "GET /v1/models",
            serde_json::json!({"data": [{"id": "smollm2", "meta": {"n_ctx_train": 8192}}]}),
        ),
        (
            "GET /props",
            serde_json::json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}),
        ),
    ]);
    let window = probe_with(routes, "anything").await.unwrap();
    assert_eq!(window.tokens, 4096);
    assert_eq!(
        window.describe(),
        "4096 tokens (server: GET /props default_generation_settings.n_ctx)"
    );
}

#[tokio::test]
async fn lm_studio_and_ollama_say_it_at_their_own_addresses() {
    let lm_studio = HashMap::from([(
        "GET /api/v0/models/qwen2.5-7b-instruct",
        serde_json::json!({"id": "qwen2.5-7b-instruct", "loaded_context_length": 16384, "max_context_length": 32768}),
    )]);
    let window = probe_with(lm_studio, "qwen2.5-7b-instruct").await.unwrap();
    assert_eq!(window.tokens, 16_384);
    let ollama = HashMap::from([(
        "POST /api/show",
        serde_json::json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx 8192", "model_info": {"qwen2.context_length": 32768}}),
    )]);
    let window = probe_with(ollama, "qwen2.5:7b").await.unwrap();
    assert_eq!(
        (window.tokens, window.detail.as_deref()),
        (8192, Some("Ollama /api/show num_ctx"))
    );
    let default_ctx = HashMap::from([(
        "POST /api/show",
        serde_json::json!({"parameters": "", "model_info": {"llama.context_length": 131072}}),
    )]);
    let window = probe_with(default_ctx, "llama3.1").await.unwrap();
    assert_eq!(window.tokens, OLLAMA_DEFAULT_NUM_CTX);
}

#[tokio::test]
async fn a_server_that_says_nothing_teaches_nothing() {
    let scripted = HashMap::from([(
        "GET /v1/models",
        serde_json::json!({"object": "list", "data": [{"id": "delta-scripted", "object": "model"}]}),
    )]);
    assert_eq!(probe_with(scripted, "delta-scripted").await, None);
    assert_eq!(probe_with(HashMap::new(), "m").await, None);
}

#[test]
fn only_servers_of_this_machine_or_network_are_asked_at_their_own_addresses() {
    for local in [
        "http://127.0.0.1:8080/v1",
        "http://localhost:11434/v1",
        "http://192.168.1.20:1234/v1",
        "http://[::1]:8000/v1",
    ] {
        assert!(is_local(local), "{local}");
    }
    for remote in [
        "https://models.example.com/v1",
        "https://203.0.113.7/api/v1",
    ] {
        assert!(!is_local(remote), "{remote}");
    }
    assert_eq!(path_segment("qwen2.5:7b/x y"), "qwen2.5%3A7b%2Fx%20y");
}

/// A server that accepts but never answers costs one request's time limit, and is not asked
/// again at its other addresses.
#[tokio::test]
async fn a_server_that_does_not_answer_is_asked_once() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(stream);
        }
    });
    let started = std::time::Instant::now();
    let found = probe(
        &reqwest::Client::new(),
        &format!("http://{address}/v1"),
        "m",
    )
    .await;
    assert_eq!(found, None);
    assert!(
        started.elapsed() < PROBE_TIMEOUT * 2,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}
