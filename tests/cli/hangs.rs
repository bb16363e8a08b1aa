//! Inputs that used to hang `delta` (issue 11): a context file that is a FIFO, and a model
//! endpoint that accepts connections and never answers (or stalls mid-response). Each must
//! end the command promptly with an error naming the cause; every command is bounded by the
//! harness's timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use crate::harness::*;

/// Regression: a context source that is a FIFO blocked the run forever (no writer ever
/// came), and neither the timeout nor SIGTERM could end it. It now fails the run at once.
#[test]
fn run_with_a_fifo_context_file_fails_promptly_naming_the_source() {
    let case = Case::new("fifo", "", &json!({"steps": [{"answer": "never asked"}]}));
    let fifo = case.work_dir().join("notes.md");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!(
            "{CONTEXT_YAML}  - type: file\n    id: team_notes\n    path: '${{CWD}}/notes.md'\n"
        ),
    )
    .unwrap();
    let out = case.run("r-fifo", "read the notes", &[]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["status"], "FAILED");
    assert_eq!(result["error"]["type"], "context_error");
    let message = result["error"]["message"].as_str().unwrap();
    for phrase in [
        "'team_notes'",
        "notes.md",
        "FIFO",
        "not a regular file",
        "hint:",
    ] {
        assert!(message.contains(phrase), "{phrase}: {message}");
    }
    assert!(out.stderr.contains("FIFO"), "{}", out.stderr);
    assert_eq!(case.mock.stats()["requests_total"], 0);
}

/// A loopback "model endpoint" that reads each request, sends `head` (maybe nothing) and then
/// holds the connection open without another byte. Counts the connections it accepted for
/// requests, and apart from them delta's question whether it speaks HTTP/2 (a connection
/// that opens with the HTTP/2 preface: delta asks an http:// endpoint once per process).
struct StallingEndpoint {
    base_url: String,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    prefaces: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl StallingEndpoint {
    fn start(head: &'static [u8]) -> StallingEndpoint {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let prefaces = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        let preface_counter = prefaces.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            // Bounded: a test makes a handful of attempts; the thread ends with the process.
            for stream in listener.incoming().take(32) {
                let Ok(mut stream) = stream else { continue };
                let mut request = [0u8; 8192];
                let _ = stream.read(&mut request);
                if request.starts_with(b"PRI * HTTP/2.0") {
                    preface_counter.fetch_add(1, Ordering::SeqCst);
                } else {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                let _ = stream.write_all(head);
                held.push(stream);
            }
        });
        StallingEndpoint {
            base_url,
            accepted,
            prefaces,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn prefaces(&self) -> usize {
        self.prefaces.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Regression: an endpoint that accepted the connection and never answered held each of
/// the 5 attempts for 600 s (50 minutes). `--llm-timeout` bounds each attempt; the attempts
/// are retried, then the run fails with `llm_timeout` naming the endpoint and the limit.
#[test]
fn llm_endpoint_that_never_answers_fails_the_run_after_each_attempt_times_out() {
    let case = Case::new("silent", "", &json!({"steps": [{"answer": "unused"}]}));
    let silent = StallingEndpoint::start(b"");
    let out = case
        .cmd()
        .env("DELTA_BASE_URL", &silent.base_url)
        .args(case.run_args("r-silent", "hello"))
        .args(["--format", "json", "--llm-timeout", "300ms"])
        .output()
        .unwrap();
    let code = out.status.code();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code, Some(1), "{stdout}");
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["status"], "FAILED");
    assert_eq!(result["error"]["type"], "llm_timeout");
    let message = result["error"]["message"].as_str().unwrap();
    for phrase in [
        "after 5 attempt(s)",
        &format!("POST {}/chat/completions", silent.base_url),
        "300 ms (llm.request_timeout)",
        "--llm-timeout",
    ] {
        assert!(message.contains(phrase), "{phrase}: {message}");
    }
    assert_eq!(silent.accepted(), 5, "one connection per attempt");
    // Asked once whether it speaks HTTP/2; its silence answered within the attempt's limit.
    assert_eq!(silent.prefaces(), 1);
}

/// The idle limit (agent.yaml `llm.idle_timeout`) ends an attempt whose response stalls
/// after its headers, long before the whole-request limit.
#[test]
fn llm_endpoint_that_stalls_after_its_headers_fails_at_the_idle_limit() {
    let case = Case::new("stalls", "", &json!({"steps": [{"answer": "unused"}]}));
    std::fs::write(
        case.agent_dir().join("agent.yaml"),
        "name: stalls\nllm:\n  model: scripted\n  request_timeout: 10m\n  idle_timeout: 200ms\n",
    )
    .unwrap();
    let stalling = StallingEndpoint::start(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 400\r\n\r\n{\"id\":",
    );
    let out = case
        .cmd()
        .env("DELTA_BASE_URL", &stalling.base_url)
        .args(case.run_args("r-stall", "hello"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["error"]["type"], "llm_timeout");
    let message = result["error"]["message"].as_str().unwrap();
    assert!(message.contains("after 5 attempt(s)"), "{message}");
    assert!(
        message.contains("stalled for 200 ms (llm.idle_timeout)"),
        "{message}"
    );
    assert_eq!(stalling.accepted(), 5);
    assert_eq!(stalling.prefaces(), 1);
}

#[test]
fn llm_timeout_flag_is_validated_with_a_hint() {
    let case = Case::new("flags", "", &json!({"steps": [{"answer": "unused"}]}));
    for (value, phrase) in [
        ("90", "has no unit"),
        ("5ms", "outside the accepted range"),
        ("soon", "not a duration"),
    ] {
        let out = case.run("r-flag", "t", &["--llm-timeout", value]);
        out.assert_code(2);
        assert!(out.stderr.contains("--llm-timeout"), "{}", out.stderr);
        assert!(out.stderr.contains(phrase), "{value}: {}", out.stderr);
    }
}

/// `delta orchestrate --llm-timeout` bounds every attempt of every run of the plan, over the
/// agents' own limit.
#[test]
fn orchestrate_llm_timeout_flag_bounds_every_run() {
    let root = tempfile::tempdir().unwrap();
    crate::orchestrate::write_agent(root.path(), "patient", "");
    std::fs::write(
        root.path().join("agents/patient/agent.yaml"),
        "name: patient\nllm:\n  model: m\n  request_timeout: 10m\ntools: []\n",
    )
    .unwrap();
    std::fs::write(
        root.path().join("plan.yaml"),
        "defaults: { agent: ./agents/patient }\nstages:\n  - { id: ask, message: hello, foreach: { items: [1, 2] } }\n",
    )
    .unwrap();
    let silent = StallingEndpoint::start(b"");
    let out = crate::orchestrate::delta_in(root.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", root.path())
        .env("DELTA_BASE_URL", &silent.base_url)
        .env("DELTA_API_KEY", "sk-test")
        .env("DELTA_RETRY_BASE_MS", "5")
        .args(["orchestrate", "plan.yaml", "-w", "ws", "--format", "json"])
        .args(["--llm-timeout", "250ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = summary["stages"][0]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{summary}");
    for run in runs {
        let error = run["error"].as_str().unwrap_or_default();
        assert!(error.contains("llm_timeout"), "{error}");
        assert!(error.contains("250 ms (llm.request_timeout)"), "{error}");
    }
    assert_eq!(silent.accepted(), 10, "5 attempts for each of the 2 runs");
    assert_eq!(silent.prefaces(), 1, "one question for the whole batch");
}

/// The first SIGTERM ends a run whose context build is waiting (here on a slow generator):
/// the run is INTERRUPTED and the process exits 130 promptly.
#[test]
fn first_sigterm_during_a_slow_context_build_exits_130() {
    let case = Case::new("slowctx", "", &json!({"steps": [{"answer": "never"}]}));
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!("{CONTEXT_YAML}  - type: computed_file\n    id: slow\n    generator:\n      command: [sh, -c, 'echo $$ > gen.pid; exec sleep 30']\n      timeout_ms: 60000\n    output_path: '${{CWD}}/slow.md'\n"),
    )
    .unwrap();
    let child = case.spawn_json_run(case.spawn_cmd(), "r-term", "t");
    let generator = wait_for_pid_file(
        &case.work_dir().join("gen.pid"),
        std::time::Duration::from_secs(20),
    );
    send_signal(child.id(), nix::sys::signal::Signal::SIGTERM);
    let out = wait_output(child, std::time::Duration::from_secs(10));
    out.assert_code(130);
    assert_eq!(out.json()["status"], "INTERRUPTED");
    assert!(
        wait_until(std::time::Duration::from_secs(5), || !process_alive(
            generator
        )),
        "the generator {generator} was not killed"
    );
}
