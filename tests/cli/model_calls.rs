//! Model calls as a user sees them, against `delta mock-llm` imitating the servers people
//! run: llama-cpp-python's ways (`quirks:` — it refuses `content: null` with pydantic's
//! text, sends no usage in its streams, cannot stream a tool call), Azure's content filter,
//! a stream cut by `llm.request_timeout`, a tool call cut at the output limit, and the
//! waiting line of a silent call on a terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{events_of, files_under, read_json, Case, Outcome};

/// All three together are llama-cpp-python's server.
const LLAMA_CPP_PYTHON: [&str; 3] = [
    "refuse_null_tool_content",
    "no_stream_usage",
    "no_streamed_tools",
];

const GREETER: &str = "tools:\n  - name: greet\n    description: Greets someone\n    exec: \"echo hi ${name}\"\n    parameters:\n      - name: name\n        description: who\n";

fn attempt_records(case: &Case, run_id: &str) -> Vec<Value> {
    files_under(&case.run_dir(run_id).join("io/invocations"))
        .iter()
        .map(|p| read_json(p))
        .filter(|r| r.get("attempt").is_some())
        .collect()
}

fn memory_file(case: &Case) -> std::path::PathBuf {
    case.path().join("home/.cache/delta/endpoints.json")
}

/// The acceptance of issue 31 item 12 against a server that behaves like llama-cpp-python:
/// the first run announces each lesson once, in one calm line, with no failed-attempt line;
/// the second run (a new process) starts from what the first learned: no failed attempt at
/// all, and exact tokens. The lessons are kept in a private file without the key.
#[test]
fn a_second_run_against_a_llama_cpp_python_like_server_pays_nothing() {
    let script = json!({
        "quirks": LLAMA_CPP_PYTHON,
        "steps": [{"tool": "greet", "args": {"name": "ann"}}, {"answer": "done"}],
    });
    let case = Case::new("greeter", GREETER, &script);
    let first = case.run("first", "greet ann", &[]);
    first.assert_code(0);
    assert!(!first.stderr.contains('↻'), "{}", first.stderr);
    let adapted: Vec<&str> = first
        .stderr
        .lines()
        .filter(|l| l.trim_start().starts_with('·'))
        .collect();
    assert_eq!(adapted.len(), 2, "{}", first.stderr);
    assert!(
        adapted[0].contains("ended its stream before the first chunk")
            && adapted[0].contains("llm.stream: false"),
        "{}",
        adapted[0]
    );
    assert!(
        adapted[1].contains("refused `content: null` on a tool-call turn (HTTP 500)")
            && adapted[1].contains("llm.tool_call_content: empty_string")
            && adapted[1].contains("remembered in"),
        "{}",
        adapted[1]
    );
    assert!(
        !first.stderr.contains("validation error"),
        "no wall of pydantic text: {}",
        first.stderr
    );
    // The refused attempts are still recorded for whoever looks.
    assert_eq!(attempt_records(&case, "first").len(), 2);

    let memory = memory_file(&case);
    let mode = std::fs::metadata(&memory).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&memory).unwrap();
    assert!(!text.contains("sk-cli-test"), "{text}");
    assert!(
        text.contains("\"tool_call_content\": \"empty_string\""),
        "{text}"
    );

    let second = case.run("second", "greet ann", &[]);
    second.assert_code(0);
    assert!(
        !second.stderr.contains('↻') && !second.stderr.contains('·'),
        "{}",
        second.stderr
    );
    assert!(attempt_records(&case, "second").is_empty());
    let result = second.json();
    let usage = &result["metrics"]["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert!(usage.get("estimated").is_none(), "exact tokens: {usage}");
    for thought in events_of(&case.journal("second"), "THOUGHT") {
        assert!(thought["usage"]["input_tokens"].as_u64().unwrap() > 0);
        assert!(thought["usage"].get("estimated").is_none(), "{thought}");
    }
}

/// Regression (item 12): hello-world against a server that streams without usage recorded
/// `input_tokens 0, output_tokens 0`. The call's tokens are estimated and marked so in the
/// RunResult, metadata.json and the journal; the next run is not streamed, and exact.
#[test]
fn a_stream_without_usage_records_estimated_tokens_then_exact_ones() {
    let script = json!({"quirks": ["no_stream_usage"], "steps": [{"answer": "Hello, world!"}]});
    let case = Case::new("hello", "tools: []\nask_human: false\n", &script);
    let first = case.run("first", "say hello", &[]);
    first.assert_code(0);
    let result = first.json();
    let usage = &result["metrics"]["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert!(usage["output_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(usage["estimated"], true, "{usage}");
    assert_eq!(result["metrics"]["cumulative_usage"]["estimated"], true);
    assert_eq!(case.metadata("first")["usage"]["estimated"], true);
    let thoughts = case.journal("first");
    let thought = events_of(&thoughts, "THOUGHT")[0];
    assert_eq!(thought["usage"]["estimated"], true, "{thought}");
    assert!(
        first.stderr.contains("sent no token usage in its stream"),
        "{}",
        first.stderr
    );

    let second = case.run("second", "say hello", &[]);
    second.assert_code(0);
    let usage = &second.json()["metrics"]["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert!(usage.get("estimated").is_none(), "{usage}");
    assert!(!second.stderr.contains('·'), "{}", second.stderr);
}

/// `DELTA_ENDPOINT_MEMORY=off`: the memory is neither read nor written, and the process
/// learns again; a relative path is refused up front (exit 126).
#[test]
fn the_endpoint_memory_can_be_turned_off() {
    let script = json!({"quirks": ["no_stream_usage"], "steps": [{"answer": "hi"}]});
    let case = Case::new("hello", "tools: []\nask_human: false\n", &script);
    let run = |run_id: &str, memory: Option<&str>| {
        let mut cmd = case.cmd();
        if let Some(memory) = memory {
            cmd.env("DELTA_ENDPOINT_MEMORY", memory);
        }
        outcome(
            cmd.args(case.run_args(run_id, "say hi"))
                .args(["--format", "json"])
                .output()
                .unwrap(),
        )
    };
    let off = run("a", Some("off"));
    off.assert_code(0);
    assert!(off.stderr.contains('·'), "{}", off.stderr);
    assert!(!memory_file(&case).exists(), "nothing written");
    let on = run("b", None);
    assert!(
        on.stderr.contains('·'),
        "learned and written: {}",
        on.stderr
    );
    assert!(memory_file(&case).exists());
    let off_again = run("c", Some("off"));
    assert!(
        off_again.stderr.contains('·'),
        "not read: learned again: {}",
        off_again.stderr
    );
    let remembered = run("d", None);
    assert!(!remembered.stderr.contains('·'), "{}", remembered.stderr);
    let bad = run("e", Some("relative.json"));
    bad.assert_code(126);
    assert!(
        bad.stderr.contains("DELTA_ENDPOINT_MEMORY") && bad.stderr.contains("absolute"),
        "{}",
        bad.stderr
    );
}

fn outcome(output: std::process::Output) -> Outcome {
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Regression (item 5): Azure's content-filter 400 made delta flip `content` between null
/// and "" five times without backoff. It fails once, with the provider's words.
#[test]
fn a_content_filter_refusal_fails_at_once_without_flipping() {
    let script = json!({"steps": [
        {"tool": "greet", "args": {"name": "ann"}},
        {"fail": 400, "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766"},
    ]});
    let case = Case::new("greeter", GREETER, &script);
    let out = case.run("filtered", "greet ann", &[]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["error"]["type"], "llm_error");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("content management policy"),
        "{result}"
    );
    assert_eq!(
        case.mock.stats()["requests_total"],
        2,
        "one call per iteration"
    );
    // The memory holds what delta asked the endpoint (its HTTP version, for every model),
    // and nothing about the model's requests.
    let memory: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(memory_file(&case)).unwrap()).unwrap();
    let endpoint = &memory["endpoints"][case.mock.base_url.trim_end_matches('/')];
    let entries: Vec<&String> = endpoint.as_object().unwrap().keys().collect();
    assert_eq!(entries, vec!["*"], "nothing learned: {memory}");
}

/// Regression (item 11): a stream cut by `llm.request_timeout` failed as `llm_error`
/// "operation timed out". It is `llm_timeout`, naming the limit.
#[test]
fn a_stream_cut_by_the_request_timeout_is_an_llm_timeout_naming_it() {
    let script = json!({"steps": [{"answer": "a long streamed answer that takes its time to arrive in full", "latency": "4s", "chunks": 40}]});
    let case = Case::new("slow", "tools: []\nask_human: false\n", &script);
    let out = case.run("cut", "talk", &["--llm-timeout", "300ms"]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["error"]["type"], "llm_timeout", "{result}");
    let message = result["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("300 ms (llm.request_timeout)"),
        "{message}"
    );
    assert!(case.mock.stats()["streams"].as_u64().unwrap() >= 1);
}

/// Regression (item 10): a tool call cut at `finish_reason: length` was reported as invalid
/// JSON and the model asked to "call it again" until max_iterations. It is `truncated`,
/// naming `llm.max_tokens`, after one call.
#[test]
fn a_tool_call_cut_at_the_output_limit_is_truncated() {
    let script = json!({"steps": [
        {"tool": "greet", "raw_args": "{\"name\": \"an", "finish_reason": "length"},
        {"answer": "never asked"},
    ]});
    let case = Case::new("greeter", &format!("  max_tokens: 16\n{GREETER}"), &script);
    let out = case.run("cut", "greet ann", &[]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["error"]["type"], "truncated", "{result}");
    let message = result["error"]["message"].as_str().unwrap();
    assert!(message.contains("llm.max_tokens"), "{message}");
    assert_eq!(case.mock.stats()["requests_total"], 1);
}

/// `delta run` with stderr on a pseudo-terminal, stdout piped; returns (stdout, what the
/// terminal showed) once the run ends, or panics after `limit`.
fn run_on_a_terminal(
    case: &Case,
    run_id: &str,
    extra: &[&str],
    limit: Duration,
) -> (String, String) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut child = case
        .spawn_cmd()
        .env("DELTA_LLM_STREAM", "0")
        .args(case.run_args(run_id, "take your time"))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(pty.slave))
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    // Read on a thread (a read blocks until the terminal has something, or its last writer
    // is gone); what it read arrives on a channel.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit;
    let mut shown = Vec::new();
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("delta run did not end within {limit:?}");
        }
        if let Ok(piece) = rx.recv_timeout(Duration::from_millis(20)) {
            shown.extend(piece);
        }
    }
    // What it wrote before it exited, then the writers are gone.
    while let Ok(piece) = rx.recv_timeout(Duration::from_millis(500)) {
        shown.extend(piece);
    }
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    (stdout, String::from_utf8_lossy(&shown).into_owned())
}

/// Regression (item 13): a call that is not streamed was silent for minutes. On a
/// terminal, a line updated in place says the model call is still going, with its limit;
/// never on stdout, and not with `--format json`.
#[test]
fn a_silent_model_call_shows_a_waiting_line_on_a_terminal_only() {
    let script = json!({"steps": [{"answer": "finally", "latency": "5s"}]});
    let case = Case::new("slow", "tools: []\nask_human: false\n", &script);
    let (stdout, terminal) = run_on_a_terminal(
        &case,
        "text",
        &["--llm-timeout", "2m"],
        Duration::from_secs(30),
    );
    // Drawn once a second from the third, over itself: twice in a five-second call.
    let draws = terminal
        .matches("\r\x1b[2K  … waiting for the model ")
        .count();
    assert!(draws >= 2, "{terminal:?}");
    assert!(terminal.contains(", limit 2m"), "{terminal:?}");
    assert!(!stdout.contains("waiting"), "{stdout}");
    assert!(stdout.contains("finally"), "{stdout}");
    let (stdout, terminal) = run_on_a_terminal(
        &case,
        "json",
        &["--format", "json"],
        Duration::from_secs(30),
    );
    assert!(!terminal.contains("waiting"), "{terminal:?}");
    assert!(!stdout.contains("waiting"), "{stdout}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).unwrap()["status"],
        "COMPLETED"
    );
}
