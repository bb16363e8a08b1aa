//! The context budget end to end (issue 32), through the real HTTP client against
//! `delta mock-llm`: the 30-page agent of the issue (one tool, `read_page`, printing a 1.8 KB
//! page; `max_iterations: 40`, `max_tokens: 200`), and what a run that fits its window sends.
//!
//! The scripted model counts a request's prompt tokens as a quarter of its characters, so
//! these figures are the issue's own: 59 tokens for the first call, 14,402 for the last,
//! 224,087 over the 31 calls of a run that keeps its whole history.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::harness::*;

/// The issue's total for the 30-page run without a window: every call carries every page.
const TODAYS_PROMPT_TOKENS: u64 = 224_087;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/context")
}

/// The 30-page agent: `read_page` prints `Page N of 30` and 1.8 KB of text.
/// `extra_llm` and `extra` are YAML lines added under `llm:` and at the top level.
fn thirty_pages(extra_llm: &str, extra: &str) -> Case {
    let steps: Vec<Value> = (1..=30)
        .map(|page| json!({"tool": "read_page", "args": {"page": page.to_string()}}))
        .chain([json!({"answer": "The book is about a fox and a dog."})])
        .collect();
    let body = format!(
        "  max_tokens: 200\n{extra_llm}max_iterations: 40\nask_human: false\ntools:\n  - name: read_page\n    description: Read one page of the book\n    exec: \"sh ${{AGENT_HOME}}/page.sh ${{page}}\"\n    parameters:\n      - name: page\n        description: The page number, 1 to 30\n{extra}"
    );
    let case = Case::new(
        "reader",
        &body,
        &json!({"default_latency": 0, "steps": steps}),
    );
    for file in ["page.sh", "book.txt", "system_prompt.md"] {
        std::fs::copy(
            fixtures().join("thirty-pages").join(file),
            case.agent_dir().join(file),
        )
        .unwrap();
    }
    case
}

const THIRTY_PAGES_TASK: &str = "Read the book and summarize it.";

/// The answered model calls of a run, in order: each io/invocations record without an error.
fn answered_records(run_dir: &Path) -> Vec<PathBuf> {
    let mut records: Vec<PathBuf> = files_under(&run_dir.join("io/invocations"))
        .into_iter()
        .filter(|p| {
            let record = read_json(p);
            record.get("error").is_none() && record.get("attempt").is_none()
        })
        .collect();
    records.sort();
    records
}

/// Each answered call's `prompt_tokens`, as the scripted model counted them.
fn prompt_tokens(run_dir: &Path) -> Vec<u64> {
    answered_records(run_dir)
        .iter()
        .map(|p| {
            read_json(p)["response"]["usage"]["prompt_tokens"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// The request bodies of a run's answered calls, exactly as sent (the record embeds the
/// wire bytes as they are).
fn request_bodies(run_dir: &Path) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Record<'a> {
        #[serde(borrow)]
        request: &'a serde_json::value::RawValue,
    }
    answered_records(run_dir)
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let record: Record<'_> = serde_json::from_str(&text).unwrap();
            record.request.get().to_owned()
        })
        .collect()
}

/// FNV-1a, 64 bits: a stable fingerprint of a request body for the golden file.
fn fingerprint(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// `<label> <call> <bytes> <fingerprint>` for each request of a run.
fn golden_lines(label: &str, bodies: &[String]) -> Vec<String> {
    bodies
        .iter()
        .enumerate()
        .map(|(i, body)| format!("{label} {i} {} {}", body.len(), fingerprint(body)))
        .collect()
}

/// Reproduces the issue's measurement before anything else: without a window, the 30-page
/// run sends every page at every call, 224,087 prompt tokens in all (59 → … → 14,402).
#[test]
fn thirty_pages_without_a_window_cost_the_issues_224087_prompt_tokens() {
    let case = thirty_pages("", "");
    let out = case.run("pages", THIRTY_PAGES_TASK, &["-y"]);
    out.assert_code(0);
    let result = out.json();
    assert_eq!(result["status"], "COMPLETED", "{result}");
    let tokens = prompt_tokens(&case.run_dir("pages"));
    assert_eq!(tokens.len(), 31, "{tokens:?}");
    assert_eq!((tokens[0], tokens[30]), (59, 14_402), "{tokens:?}");
    assert_eq!(tokens.iter().sum::<u64>(), TODAYS_PROMPT_TOKENS);
    assert_eq!(
        result["metrics"]["usage"]["input_tokens"].as_u64(),
        Some(TODAYS_PROMPT_TOKENS)
    );
}

const FIVE_TOOLS: &str = r#"parallel_tool_calls: true
tools:
  - name: say
    description: Print a message
    exec: "echo ${message}"
  - name: write_file
    description: Write content to a file
    exec: "tee ${filename}"
    stdin: content
  - name: count_words
    description: Count words
    exec: "wc -w"
    stdin: text
  - name: list
    description: List a directory
    exec: "ls ${dir}"
"#;

/// The default recipe of `delta init`: system prompt, the workspace's DELTA.md, the journal.
const GUIDED_CONTEXT_YAML: &str = "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: file\n    id: workspace_guide\n    path: '${CWD}/DELTA.md'\n    on_missing: skip\n  - type: journal\n    id: conversation_history\n";

fn five_tools() -> Case {
    let script = json!({
        "default_latency": 0,
        "steps": [
            {"tool": "say", "args": {"message": "hello {{ task }}"}, "content": "Greeting first."},
            {"tools": [
                {"tool": "write_file", "args": {"filename": "notes.txt", "content": "one two three\n"}},
                {"tool": "count_words", "args": {"text": "alpha beta gamma delta"}}
            ]},
            {"tool": "nope", "args": {}},
            {"tool": "list", "args": {"dir": "."}},
            {"answer": "All done. {{ last_observation }}"},
            {"tool": "say", "args": {"message": "again: {{ last_user }}"}},
            {"answer": "Done again."}
        ]
    });
    let case = Case::new("five", FIVE_TOOLS, &script);
    std::fs::write(case.agent_dir().join("context.yaml"), GUIDED_CONTEXT_YAML).unwrap();
    std::fs::write(
        case.work_dir().join("DELTA.md"),
        "# Guide\nKeep notes in notes.txt.\n",
    )
    .unwrap();
    case
}

/// The golden file: every request the two fixture runs sent before the context budget
/// existed (recorded with the engine of commit aca9163), as length and fingerprint.
fn todays_requests() -> Vec<String> {
    std::fs::read_to_string(fixtures().join("requests-today.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The requests of the two fixture runs (30 pages; five tools with a guide, parallel calls,
/// an unknown tool and a `delta continue -m`), as golden lines.
fn fixture_requests(extra_llm: &str) -> Vec<String> {
    let pages = thirty_pages(extra_llm, "");
    pages
        .run("pages", THIRTY_PAGES_TASK, &["-y"])
        .assert_code(0);
    let mut lines = golden_lines("pages", &request_bodies(&pages.run_dir("pages")));
    let five = five_tools();
    if !extra_llm.is_empty() {
        let agent = five.agent_dir().join("agent.yaml");
        let text = std::fs::read_to_string(&agent).unwrap();
        std::fs::write(
            &agent,
            text.replace(
                "  model: scripted\n",
                &format!("  model: scripted\n{extra_llm}"),
            ),
        )
        .unwrap();
    }
    five.run("five", "the task", &["-y"]).assert_code(0);
    five.continue_run("five", &["-m", "more please"])
        .assert_code(0);
    lines.extend(golden_lines("five", &request_bodies(&five.run_dir("five"))));
    lines
}

/// A run that fits sends exactly today's requests: the same bytes, call for call.
#[test]
fn runs_that_fit_send_todays_requests_byte_for_byte() {
    let expected = todays_requests();
    let sent = fixture_requests("");
    assert!(
        sent == expected,
        "requests differ from today's; sent:\n{}",
        sent.join("\n")
    );
}

/// The budget of the 30-page agent with a 4,096-token window and `max_tokens: 200`: every
/// request must stay at or under 4,096 − 200 prompt tokens.
const WINDOW_LESS_REPLY: u64 = 4096 - 200;

fn compactions(journal: &[Value]) -> Vec<&Value> {
    events_of(journal, "CONTEXT_COMPACTED")
}

/// The issue's acceptance on the scripted model: with `llm.context_window: 4096`, every
/// request fits the window less the reply, the run completes, and the default strategy
/// (mask) sends at most half of the 224,087 prompt tokens of today's run. The progress
/// line, the RunResult and the metadata say what happened.
#[test]
fn thirty_pages_in_a_4096_token_window_fit_and_cost_less_than_half() {
    let case = thirty_pages("  context_window: 4096\n", "");
    let out = case.run("pages", THIRTY_PAGES_TASK, &["-y"]);
    out.assert_code(0);
    let result = out.json();
    assert_eq!(result["status"], "COMPLETED", "{result}");
    let tokens = prompt_tokens(&case.run_dir("pages"));
    assert_eq!(tokens.len(), 31, "{tokens:?}");
    assert!(
        tokens.iter().all(|t| *t <= WINDOW_LESS_REPLY),
        "a request over {WINDOW_LESS_REPLY} tokens: {tokens:?}"
    );
    let total: u64 = tokens.iter().sum();
    assert!(
        total * 2 <= TODAYS_PROMPT_TOKENS,
        "{total} prompt tokens, more than half of {TODAYS_PROMPT_TOKENS}: {tokens:?}"
    );
    assert_eq!(
        result["metrics"]["usage"]["input_tokens"].as_u64(),
        Some(total)
    );
    let journal = case.journal("pages");
    let compacted = compactions(&journal);
    assert!(!compacted.is_empty());
    for event in &compacted {
        assert_eq!(event["strategy"], "mask", "{event}");
        assert_eq!(event["reason"], "budget", "{event}");
        assert!(
            event["masked"].as_array().is_some_and(|m| !m.is_empty()),
            "{event}"
        );
        assert!(event["tokens_after"].as_u64() < event["tokens_before"].as_u64());
        assert_eq!(event["window"]["tokens"], 4096);
    }
    assert_eq!(
        result["metrics"]["compactions"].as_u64(),
        Some(compacted.len() as u64)
    );
    let saved = result["metrics"]["tokens_saved"].as_u64().unwrap_or(0);
    assert!(saved > 0, "{result}");
    assert!(
        out.stderr.contains("compacted context: ") && out.stderr.contains(" tokens (mask)"),
        "{}",
        out.stderr
    );
    let window = &case.metadata("pages")["context_window"];
    assert_eq!(window["tokens"], 4096, "{window}");
    assert_eq!(window["source"], "agent.yaml", "{window}");
    // The journal keeps every page whole; only the requests were compacted.
    let observations = observations(&journal);
    assert_eq!(observations.len(), 30);
    assert!(observations.iter().all(|o| o.contains("Page ")));
    // Each THOUGHT records what its request held and what the model counted.
    for thought in events_of(&journal, "THOUGHT") {
        let prompt = &thought["prompt"];
        assert!(prompt["bytes"].as_u64().unwrap() > 0, "{thought}");
        assert!(prompt["tokens"].as_u64().is_some(), "{thought}");
    }
}

/// A run whose window is known but that fits it sends exactly today's requests, whether the
/// window comes from agent.yaml or from `DELTA_CONTEXT_WINDOW`.
#[test]
fn runs_that_fit_a_known_window_send_todays_requests_byte_for_byte() {
    let expected = todays_requests();
    let sent = fixture_requests("  context_window: 1000000\n");
    assert!(
        sent == expected,
        "requests differ from today's; sent:\n{}",
        sent.join("\n")
    );
}

/// A script whose call number `refused` (0-based) is refused once with llama-cpp-python's
/// context-length words, the rest as [`thirty_pages`] plays them.
fn refusing_script(refused: usize) -> Value {
    let mut steps: Vec<Value> = (1..=30)
        .map(|page| json!({"tool": "read_page", "args": {"page": page.to_string()}}))
        .chain([json!({"answer": "The book is about a fox and a dog."})])
        .collect();
    let then = steps[refused].clone();
    steps[refused] = json!({
        "fail": 400,
        "times": 1,
        "message": "This model's maximum context length is 4096 tokens. However, you requested 4296 tokens (4096 in the messages, 200 in the completion). Please reduce the length of the messages or completion.",
        "then": then,
    });
    json!({"default_latency": 0, "steps": steps})
}

/// A context-length refusal is not the end of the run: the words teach the window, the
/// request is compacted and sent again, and the run goes on (window unknown beforehand, as
/// with llama-cpp-python's server). The window the refusal taught is the run's from then on.
#[test]
fn a_context_length_refusal_compacts_and_sends_again() {
    let case = thirty_pages("", "");
    std::fs::write(
        case.path().join("script.json"),
        serde_json::to_vec(&refusing_script(12)).unwrap(),
    )
    .unwrap();
    let mock = MockLlm::start(&case.path().join("script.json"));
    let out = case
        .cmd()
        .env("DELTA_BASE_URL", &mock.base_url)
        .args(case.run_args("pages", THIRTY_PAGES_TASK))
        .args(["--format", "json", "-y"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(result["status"], "COMPLETED", "{result}\n{stderr}");
    let journal = case.journal("pages");
    let compacted = compactions(&journal);
    let first = compacted
        .first()
        .unwrap_or_else(|| panic!("no compaction: {stderr}"));
    assert_eq!(first["reason"], "refusal", "{first}");
    assert_eq!(first["iteration"], 13, "{first}");
    assert_eq!(first["window"]["tokens"], 4096, "{first}");
    assert_eq!(first["window"]["source"], "refusal", "{first}");
    assert_eq!(first["refused"]["tokens"], 4096, "{first}");
    // Once taught, the window holds every later request under it.
    let tokens = prompt_tokens(&case.run_dir("pages"));
    assert!(
        tokens[12..].iter().all(|t| *t <= WINDOW_LESS_REPLY),
        "{tokens:?}"
    );
    assert_eq!(
        case.metadata("pages")["context_window"]["source"],
        "refusal"
    );
    assert!(
        stderr.contains("after the server refused the request as too long"),
        "{stderr}"
    );
}

/// The issue's dead end, on the scripted model: a run that outgrew the window (it failed at
/// its iteration cap with every page in its history) is continued, the server refuses the
/// first request of the continuation as too long, and the continuation still finishes.
#[test]
fn the_continuation_of_a_run_that_outgrew_the_window_completes() {
    let case = thirty_pages("", "");
    case.run(
        "pages",
        THIRTY_PAGES_TASK,
        &["-y", "--max-iterations", "20"],
    )
    .assert_code(1);
    std::fs::write(
        case.path().join("refusing.json"),
        serde_json::to_vec(&refusing_script(20)).unwrap(),
    )
    .unwrap();
    let mock = MockLlm::start(&case.path().join("refusing.json"));
    let out = case
        .cmd()
        .env("DELTA_BASE_URL", &mock.base_url)
        .args(case.continue_args("pages"))
        .args([
            "-m",
            "Go on reading, then write the summary.",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        result["status"],
        "COMPLETED",
        "{result}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let journal = case.journal("pages");
    assert!(compactions(&journal)
        .iter()
        .any(|c| c["reason"] == "refusal"));
}

/// `io/tool_executions/<time>_<tool>.json` names differ between two runs made at different
/// times; everything else of a request is the same.
fn without_record_times(body: &str) -> String {
    let marker = "io/tool_executions/";
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = rest.find(marker) {
        out.push_str(&rest[..at + marker.len()]);
        rest = &rest[at + marker.len()..];
        let end = rest.find(".json").unwrap_or(0);
        out.push_str("<record>");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A compacted run killed with SIGKILL while it waits for the model, then continued, sends
/// exactly the requests an uninterrupted run sends (record names aside): the compaction is
/// in the journal, and the calibration of each decision too.
#[test]
fn a_compacted_run_killed_and_continued_sends_what_an_uninterrupted_run_sends() {
    let window = "  context_window: 4096\n";
    let straight = thirty_pages(window, "");
    straight
        .run("pages", THIRTY_PAGES_TASK, &["-y"])
        .assert_code(0);
    let journal = straight.journal("pages");
    let first = compactions(&journal)[0]["iteration"].as_u64().unwrap() as usize;
    let expected: Vec<String> = request_bodies(&straight.run_dir("pages"))
        .iter()
        .map(|b| without_record_times(b))
        .collect();

    // The same run, whose model call right after the first compaction takes a minute.
    let killed = thirty_pages(window, "");
    let mut slow: Value =
        serde_json::from_slice(&std::fs::read(killed.path().join("script.json")).unwrap()).unwrap();
    slow["steps"][first - 1]["latency"] = json!("60s");
    std::fs::write(killed.path().join("slow.json"), slow.to_string()).unwrap();
    let slow_mock = MockLlm::start(&killed.path().join("slow.json"));
    let mut cmd = killed.spawn_cmd();
    cmd.env("DELTA_BASE_URL", &slow_mock.base_url)
        .args(killed.run_args("pages", THIRTY_PAGES_TASK))
        .args(["-y"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let journal_path = killed.run_dir("pages").join("journal.jsonl");
    let waiting = wait_until(std::time::Duration::from_secs(60), || {
        let compacted = std::fs::read_to_string(&journal_path)
            .is_ok_and(|text| text.contains("\"CONTEXT_COMPACTED\""));
        compacted && slow_mock.stats()["in_flight"].as_u64() == Some(1)
    });
    assert!(waiting, "the run never sent its compacted request");
    child.kill().unwrap();
    child.wait().unwrap();

    let continued = killed.continue_run("pages", &[]);
    continued.assert_code(0);
    let sent: Vec<String> = request_bodies(&killed.run_dir("pages"))
        .iter()
        .map(|b| without_record_times(b))
        .collect();
    // The killed call left no record: the continuation's calls are the records from it on.
    assert_eq!(sent.len(), expected.len(), "calls");
    assert!(
        sent == expected,
        "the continued run sent other requests than the uninterrupted one"
    );
}

/// An agent whose one tool, `next_page`, reads the next page of the book (the scripted model
/// replays steps after a summary replaces iterations, so the page number is the tool's), in a
/// 4,096-token window, with the journal's `compaction` set to `compaction`.
fn next_pages(compaction: &str, summarizer: Value) -> Case {
    let steps: Vec<Value> = (0..14)
        .map(|_| json!({"tool": "next_page"}))
        .chain([json!({"answer": "The book is about a fox and a dog."})])
        .collect();
    let script = json!({
        "default_latency": 0,
        "rules": [
            {"model": "summarizer", "steps": [summarizer]},
            {"steps": steps},
        ],
    });
    let body = "  max_tokens: 200\n  context_window: 4096\nmax_iterations: 15\nask_human: false\ntools:\n  - name: next_page\n    description: Read the next page of the book\n    exec: \"sh ${AGENT_HOME}/next_page.sh\"\n";
    let case = Case::new("reader", body, &script);
    for file in ["next_page.sh", "book.txt", "system_prompt.md"] {
        std::fs::copy(
            fixtures().join("thirty-pages").join(file),
            case.agent_dir().join(file),
        )
        .unwrap();
    }
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!("sources:\n  - type: file\n    id: system_prompt\n    path: '${{AGENT_HOME}}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n    compaction: {compaction}\n"),
    )
    .unwrap();
    case
}

/// The io/invocations records of a run's summary calls.
fn summary_records(run_dir: &Path) -> Vec<Value> {
    files_under(&run_dir.join("io/invocations"))
        .iter()
        .map(|p| read_json(p))
        .filter(|r| r["purpose"] == "context_summary")
        .collect()
}

/// `summarize`: the summary model writes a summary of the older iterations, the journal
/// records it, and the next request carries it (after the system prompt, before the task)
/// instead of those iterations; every request stays within the window.
#[test]
fn summarize_replaces_older_iterations_with_the_summary_models_summary() {
    let case = next_pages(
        "{strategy: summarize, summary_model: summarizer, summary_max_tokens: 120}",
        json!({"answer": "SUMMARY: pages 1 to 7 tell of a quick brown fox and a lazy dog."}),
    );
    let out = case.run("pages", THIRTY_PAGES_TASK, &["-y"]);
    let result = out.json();
    assert!(
        result["status"] == "COMPLETED" || result["error"]["type"] == "max_iterations",
        "{result}\n{}",
        out.stderr
    );
    let run_dir = case.run_dir("pages");
    let journal = case.journal("pages");
    let compacted = compactions(&journal);
    let first = compacted
        .first()
        .unwrap_or_else(|| panic!("{}", out.stderr));
    assert_eq!(first["strategy"], "summarize", "{first}");
    assert!(first["summary"]
        .as_str()
        .unwrap()
        .starts_with("SUMMARY: pages 1 to 7"));
    assert!(first["dropped_through"].as_u64().is_some(), "{first}");
    let records = summary_records(&run_dir);
    assert_eq!(records.len(), compacted.len());
    assert_eq!(records[0]["request"]["model"], "summarizer");
    assert_eq!(records[0]["request"]["max_tokens"], 120);
    let transcript = records[0]["request"]["messages"][1]["content"]
        .as_str()
        .unwrap();
    assert!(
        transcript.contains("## The task\n\nRead the book"),
        "{transcript}"
    );
    assert!(
        transcript.contains("Agent called next_page"),
        "{transcript}"
    );
    // The request after the compaction: the system prompt with the summary after it (in the
    // same system message: some templates repeat the tool list in each one), the task, the rest.
    let after = first["iteration"].as_u64().unwrap();
    let record = answered_records(&run_dir)
        .into_iter()
        .map(|p| read_json(&p))
        .find(|r| r["iteration"].as_u64() == Some(after) && r["purpose"].is_null())
        .unwrap();
    let messages = record["request"]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("# Context Block: system_prompt"),
        "{system}"
    );
    assert!(system.contains("SUMMARY: pages 1 to 7"), "{system}");
    assert_eq!(messages[1]["role"], "user");
    assert_eq!(messages[1]["content"], THIRTY_PAGES_TASK);
    assert!(prompt_tokens(&run_dir)
        .iter()
        .all(|t| *t <= WINDOW_LESS_REPLY));
    // The summary call's tokens are the run's.
    let summarizer = &result["metrics"]["usage"]["model_usage"]["summarizer"];
    assert!(
        summarizer["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{result}"
    );
}

/// A summary call that fails does not fail the run: the iterations are left out with a note,
/// and a WARNING says why.
#[test]
fn a_failed_summary_leaves_the_iterations_out_with_a_note() {
    let case = next_pages(
        "{strategy: summarize, summary_model: summarizer}",
        json!({"fail": 400, "message": "summaries are off today"}),
    );
    let out = case.run("pages", THIRTY_PAGES_TASK, &["-y"]);
    let result = out.json();
    assert!(
        result["status"] == "COMPLETED" || result["error"]["type"] == "max_iterations",
        "{result}\n{}",
        out.stderr
    );
    let journal = case.journal("pages");
    let compacted = compactions(&journal);
    let first = compacted
        .first()
        .unwrap_or_else(|| panic!("{}", out.stderr));
    assert!(first.get("summary").is_none(), "{first}");
    assert!(first["dropped_through"].as_u64().is_some(), "{first}");
    let warnings = events_of(&journal, "WARNING");
    assert!(
        warnings.iter().any(|w| w["message"]
            .as_str()
            .unwrap()
            .contains("the context summary failed")),
        "{warnings:?}"
    );
}

/// A refused request that has nothing left to compact (its task alone is too long) fails at
/// once with the server's words and a hint, instead of being sent again to the same refusal.
#[test]
fn a_refused_request_with_nothing_to_compact_fails_at_once_saying_so() {
    let case = Case::new(
        "talker",
        "ask_human: false\n",
        &json!({"default_latency": 0, "steps": [{
            "fail": 400,
            "message": "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens (8800 in the messages, 200 in the completion).",
        }]}),
    );
    let out = case.run("long", &"word ".repeat(6000), &["-y"]);
    out.assert_code(1);
    let message = out.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("maximum context length is 4096 tokens"),
        "{message}"
    );
    assert!(
        message.contains("nothing of the conversation is left to compact"),
        "{message}"
    );
    let records = files_under(&case.run_dir("long").join("io/invocations"));
    assert_eq!(records.len(), 1, "sent once: {records:?}");
}

/// A server that refuses again after the compaction (its template leaves tool results out of
/// the prompt, so masking them freed nothing it counts): the second compaction of the
/// iteration leaves out every iteration but the last two, and the run goes on.
#[test]
fn a_second_refusal_leaves_out_the_older_iterations() {
    let case = thirty_pages("", "");
    let mut script = refusing_script(12);
    script["steps"][12]["times"] = json!(2);
    std::fs::write(
        case.path().join("twice.json"),
        serde_json::to_vec(&script).unwrap(),
    )
    .unwrap();
    let mock = MockLlm::start(&case.path().join("twice.json"));
    let out = case
        .cmd()
        .env("DELTA_BASE_URL", &mock.base_url)
        .args(case.run_args("pages", THIRTY_PAGES_TASK))
        .args(["--format", "json", "-y"])
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_ne!(result["error"]["type"], "llm_error", "{result}");
    let journal = case.journal("pages");
    let refusals: Vec<&Value> = compactions(&journal)
        .into_iter()
        .filter(|c| c["reason"] == "refusal")
        .collect();
    assert!(refusals.len() >= 2, "{refusals:?}");
    assert_eq!(refusals[0]["iteration"], refusals[1]["iteration"]);
    assert!(refusals[0]["masked"]
        .as_array()
        .is_some_and(|m| !m.is_empty()));
    assert!(refusals[1].get("masked").is_none(), "{}", refusals[1]);
    // Iteration 13's reply is the 11th kept from: iterations 1..=10 left out.
    assert!(
        refusals[1]["dropped_through"].as_u64().is_some(),
        "{}",
        refusals[1]
    );
}
