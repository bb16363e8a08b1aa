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
