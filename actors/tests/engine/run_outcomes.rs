//! How a run ends and what it reports, against the scripted model: empty final answers
//! (`empty_answer: warn | fail`), the built-in ask_human turned off, `llm.response_format`,
//! and token usage kept across continuations (issue 25 items 5, 6, 7, 8).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use delta_actors::journal::Event;
use delta_actors::{RunStatus, Supervisor, TokenUsage};
use serde_json::Value;

use crate::harness::*;

const ECHO: &str = "  - name: echo\n    exec: \"echo ${text}\"\n";

/// Every io/invocations record of a run, oldest first.
fn invocation_records(run_dir: &Path) -> Vec<Value> {
    let mut paths: Vec<_> = std::fs::read_dir(run_dir.join("io/invocations"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

/// The sum of the `usage` of every response recorded in a run's io/invocations.
pub fn recorded_usage(run_dir: &Path) -> TokenUsage {
    let mut total = TokenUsage::default();
    for record in invocation_records(run_dir) {
        let usage = &record["response"]["usage"];
        total.add(TokenUsage {
            input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
            output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
            total_tokens: usage["total_tokens"].as_u64().unwrap_or(0),
            estimated: false,
        });
    }
    total
}

fn warnings(result: &delta_actors::RunResult) -> Vec<String> {
    journal(result)
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Warning { message } => Some(message),
            _ => None,
        })
        .collect()
}

/// Issue 25 item 7: an empty final answer ended COMPLETED with `result: ""` and no warning.
#[test]
fn an_empty_final_answer_completes_with_a_warning_and_is_flagged() {
    let agent = TestAgent::new("quiet", "", ECHO);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script("steps:\n  - tool: echo\n    args: { text: hi }\n  - answer: \"\"\n");
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "say nothing"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert_eq!(result.result.as_deref(), Some(""));
    assert!(result.empty_answer, "{result:?}");
    assert_eq!(serde_json::to_value(&result).unwrap()["empty_answer"], true);
    let warnings = warnings(&result);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("final answer is empty") && w.contains("empty_answer: fail")),
        "{warnings:?}"
    );

    // A run with an answer is not flagged, and the flag is absent from its JSON.
    let s = script("steps:\n  - answer: \"done\"\n");
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "say something"));
    assert!(!result.empty_answer);
    assert!(serde_json::to_value(&result).unwrap()["empty_answer"].is_null());
    assert!(warnings_of_kind(&result).is_empty());
}

fn warnings_of_kind(result: &delta_actors::RunResult) -> Vec<String> {
    warnings(result)
        .into_iter()
        .filter(|w| w.contains("final answer is empty"))
        .collect()
}

/// Issue 25 item 7: `empty_answer: fail` makes an empty (or blank) final answer a failure.
#[test]
fn an_empty_final_answer_fails_the_run_when_the_agent_says_empty_answer_fail() {
    let agent = TestAgent::new("strict", "empty_answer: fail\n", ECHO);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script("steps:\n  - answer: \"  \\n \"\n");
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "say nothing"));
    assert_eq!(result.status, RunStatus::Failed, "{result:?}");
    let error = result.error.unwrap();
    assert_eq!(error.kind, "empty_answer");
    assert!(error.message.contains("`empty_answer: fail`"), "{error:?}");
    assert!(error.message.contains("delta continue"), "{error:?}");
    assert_eq!(
        metadata_of(&result.metadata.run_dir).error.unwrap().kind,
        "empty_answer"
    );
}

fn metadata_of(run_dir: &str) -> delta_actors::metadata::RunMetadata {
    delta_actors::metadata::read_metadata(Path::new(run_dir)).unwrap()
}

/// Issue 25 item 8: a `tools: []` agent still sent `tools` (ask_human) and `tool_choice`,
/// which changes generation on some servers, and nothing could turn it off.
#[test]
fn ask_human_false_with_no_tools_sends_neither_tools_nor_tool_choice() {
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script("steps:\n  - answer: \"plain\"\n");

    let off = TestAgent::new("bare", "ask_human: false\n", "  []\n");
    let result = drive(&sup, new_run(off.load(), ws.path(), s.clone(), "hello"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let request = &invocation_records(&run_dir(&result))[0]["request"];
    assert!(request.get("tools").is_none(), "{request}");
    assert!(request.get("tool_choice").is_none(), "{request}");

    // The default still offers the built-in tool, with `tool_choice`.
    let on = TestAgent::new("bare-default", "", "  []\n");
    let result = drive(&sup, new_run(on.load(), ws.path(), s, "hello"));
    let request = &invocation_records(&run_dir(&result))[0]["request"];
    assert_eq!(request["tools"][0]["function"]["name"], "ask_human");
    assert_eq!(request["tool_choice"], "auto");
}

/// Issue 25 item 8: with `ask_human: false`, the tool is neither offered beside the
/// agent's own nor answered as a question when the model calls it anyway.
#[test]
fn ask_human_false_leaves_the_agents_tools_and_refuses_a_call_to_ask_human() {
    let agent = TestAgent::new("no-human", "ask_human: false\n", ECHO);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script(
        "steps:\n  - tool: ask_human\n    args: { prompt: \"may I?\" }\n  - answer: \"went on\"\n",
    );
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "go"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let request = &invocation_records(&run_dir(&result))[0]["request"];
    let names: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo"]);
    assert_eq!(request["tool_choice"], "auto");
    assert_eq!(
        observations(&journal(&result)),
        ["Error: unknown tool 'ask_human'. Available tools: echo."]
    );
}

/// Issue 25 item 6: `llm.response_format: json_object` is sent as OpenAI's JSON mode, and
/// nothing is sent when it is not set.
#[test]
fn response_format_json_object_is_sent_only_when_set() {
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script("steps:\n  - answer: \"{}\"\n");
    let json = TestAgent::new("json", "", ECHO);
    let yaml = std::fs::read_to_string(json.path().join("agent.yaml")).unwrap();
    std::fs::write(
        json.path().join("agent.yaml"),
        yaml.replace(
            "model: scripted\n",
            "model: scripted\n  response_format: json_object\n",
        ),
    )
    .unwrap();
    let result = drive(
        &sup,
        new_run(json.load(), ws.path(), s.clone(), "json please"),
    );
    let request = &invocation_records(&run_dir(&result))[0]["request"];
    assert_eq!(
        request["response_format"],
        serde_json::json!({"type": "json_object"})
    );

    let plain = TestAgent::new("plain", "", ECHO);
    let result = drive(&sup, new_run(plain.load(), ws.path(), s, "anything"));
    let request = &invocation_records(&run_dir(&result))[0]["request"];
    assert!(request.get("response_format").is_none(), "{request}");
}

/// Issue 25 item 5: a continuation started its usage from zero, and metadata.json kept only
/// the last start's figure: tokens billed before it vanished.
#[test]
fn a_continued_run_keeps_the_tokens_of_its_earlier_starts() {
    let agent = TestAgent::new("counter", "", ECHO);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let s = script(
        "steps:\n  - tool: echo\n    args: { text: one }\n  - answer: \"first\"\n  - answer: \"second\"\n",
    );
    let request = new_run(agent.load(), ws.path(), s, "count");
    let first = drive(&sup, request.clone());
    assert_eq!(first.status, RunStatus::Completed, "{first:?}");
    let first_usage = first.metrics.cumulative_usage;
    assert_eq!(first_usage, recorded_usage(&run_dir(&first)));
    assert_eq!(first.metrics.usage.input_tokens, first_usage.input_tokens);

    let second = drive(&sup, continue_run(&request, &first.run_id, Some("again")));
    assert_eq!(second.status, RunStatus::Completed, "{second:?}");
    let everything = recorded_usage(&run_dir(&second));
    assert!(everything.input_tokens > first_usage.input_tokens);
    assert_eq!(second.metrics.cumulative_usage, everything);
    // This driving's own figure is the last call alone.
    assert_eq!(
        second.metrics.usage.input_tokens,
        everything.input_tokens - first_usage.input_tokens
    );
    let meta = metadata(&second);
    assert_eq!(meta.cumulative_usage, everything);
    assert_eq!(meta.usage.input_tokens, second.metrics.usage.input_tokens);
    assert!(meta.duration_ms.is_some());
}
