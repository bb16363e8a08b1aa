//! Tests of the run inspector's trace, on journals the engine wrote (an interrupted run
//! continued twice, with a sensitive question).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::serve::run_files::InspectError;
use crate::workspace::live_reply::partial_reply_path;

/// A run interrupted in a tool call (Ctrl-C), continued, paused on a sensitive question,
/// answered with `delta continue`, then completed: the journal as the engine wrote it.
const INTERRUPTED_THEN_ANSWERED: &[&str] = &[
    r#"{"seq":1,"timestamp":"2026-11-26T17:39:09.220Z","type":"ENGINE_START","run_id":"R1","agent_home":"/t/agent","work_dir":"/t/ws","agent_name":"sleeper","task":"do the thing"}"#,
    r#"{"seq":2,"timestamp":"2026-11-26T17:39:09.220Z","type":"USER_MESSAGE","content":"do the thing"}"#,
    r#"{"seq":3,"timestamp":"2026-11-26T17:39:09.228Z","type":"THOUGHT","iteration":1,"tool_calls":[{"id":"call_0_0","name":"nap","arguments":"{}"}],"llm_invocation_ref":"io/invocations/20261126T173909.228Z_1.json","finish_reason":"tool_calls"}"#,
    r#"{"seq":4,"timestamp":"2026-11-26T17:39:09.228Z","type":"ACTION_REQUEST","iteration":1,"action_id":"call_0_0","tool_name":"nap","tool_args":{},"resolved_command":"sleep 3"}"#,
    r#"{"seq":5,"timestamp":"2026-11-26T17:39:10.737Z","type":"ACTION_RESULT","iteration":1,"action_id":"call_0_0","tool_name":"nap","status":"FAILED","observation_content":"(no output)\n=== CANCELLED (process group killed) ===","execution_ref":"io/tool_executions/20261126T173909.228Z_nap.json"}"#,
    r#"{"seq":6,"timestamp":"2026-11-26T17:39:10.737Z","type":"INTERRUPTED","reason":"interrupted by SIGINT (Ctrl-C)"}"#,
    r#"{"seq":7,"timestamp":"2026-11-26T17:39:10.737Z","type":"ERROR","error_type":"interrupted","error_message":"interrupted by SIGINT (Ctrl-C)"}"#,
    r#"{"seq":8,"timestamp":"2026-11-26T17:39:10.737Z","type":"ENGINE_END","run_id":"R1","status":"INTERRUPTED","final_iteration":1,"error":"interrupted by SIGINT (Ctrl-C)"}"#,
    r#"{"seq":9,"timestamp":"2026-11-26T17:39:10.775Z","type":"THOUGHT","iteration":2,"tool_calls":[{"id":"call_1_0","name":"ask_human","arguments":"{\"prompt\":\"Your password?\",\"sensitive\":true}"}],"llm_invocation_ref":"io/invocations/20261126T173910.775Z_2.json","finish_reason":"tool_calls"}"#,
    r#"{"seq":10,"timestamp":"2026-11-26T17:39:10.775Z","type":"ACTION_REQUEST","iteration":2,"action_id":"call_1_0","tool_name":"ask_human","tool_args":{"prompt":"Your password?","sensitive":true},"resolved_command":"ask_human \"Your password?\""}"#,
    r#"{"seq":11,"timestamp":"2026-11-26T17:39:10.775Z","type":"HUMAN_INPUT_REQUEST","iteration":2,"action_id":"call_1_0","prompt":"Your password?","input_type":"text","sensitive":true}"#,
    r#"{"seq":12,"timestamp":"2026-11-26T17:39:10.775Z","type":"ENGINE_END","run_id":"R1","status":"WAITING_FOR_INPUT","final_iteration":2}"#,
    r#"{"seq":13,"timestamp":"2026-11-26T17:39:13.544Z","type":"HUMAN_INPUT_RECEIVED","iteration":2,"action_id":"call_1_0","response":"[REDACTED: sensitive answer kept in secrets/call_1_0]","redacted":true}"#,
    r#"{"seq":14,"timestamp":"2026-11-26T17:39:13.544Z","type":"ACTION_RESULT","iteration":2,"action_id":"call_1_0","tool_name":"ask_human","status":"SUCCESS","observation_content":"[REDACTED: sensitive answer kept in secrets/call_1_0]","exit_code":0}"#,
    r#"{"seq":15,"timestamp":"2026-11-26T17:39:13.548Z","type":"THOUGHT","iteration":3,"content":"all done","tool_calls":[],"llm_invocation_ref":"io/invocations/20261126T173913.548Z_3.json","finish_reason":"stop"}"#,
    r#"{"seq":16,"timestamp":"2026-11-26T17:39:13.548Z","type":"ENGINE_END","run_id":"R1","status":"COMPLETED","final_iteration":3,"result":"all done"}"#,
];

fn workspace_with(run_id: &str, lines: &[&str], metadata: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".delta").join(run_id);
    std::fs::create_dir_all(dir.join("io")).unwrap();
    std::fs::write(dir.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("metadata.json"), metadata).unwrap();
    tmp
}

const COMPLETED: &str = r#"{"status":"COMPLETED","agent_name":"sleeper","initial_message":"do the thing","created_at":"2026-11-26T17:39:09.220Z","iterations":3,"usage":{"input_tokens":5,"output_tokens":2,"total_tokens":7}}"#;

fn kinds_and_titles(trace: &RunTrace) -> Vec<(&'static str, String)> {
    trace
        .entries
        .iter()
        .map(|e| (e.kind, e.title.clone()))
        .collect()
}

/// Regression (issue 27): one Ctrl-C showed `Interrupted`, `Error: interrupted` and `Run
/// ended: INTERRUPTED`; the task and the final answer each appeared twice; there was no
/// "resumed" marker where a continuation began.
#[test]
fn one_entry_per_event_and_a_resumed_marker_where_each_continuation_begins() {
    let tmp = workspace_with("R1", INTERRUPTED_THEN_ANSWERED, COMPLETED);
    let trace = run_trace(tmp.path(), "R1").unwrap();
    assert_eq!(
        kinds_and_titles(&trace),
        [
            ("start", "Run started: agent sleeper".to_string()),
            ("reply", "Model reply 1: calls nap".to_string()),
            ("tool", "Tool nap → FAILED".to_string()),
            ("end", "Interrupted".to_string()),
            (
                "resumed",
                "Resumed where it stopped (delta continue)".to_string()
            ),
            ("reply", "Model reply 2: calls ask_human".to_string()),
            ("question", "Asks a human".to_string()),
            ("end", "Paused: waiting for an answer".to_string()),
            (
                "resumed",
                "Resumed with the answer to its question (delta continue)".to_string()
            ),
            ("reply", "Model reply 3: final answer".to_string()),
            ("end", "Completed".to_string()),
        ]
    );
    let mentions = |needle: &str| {
        trace
            .entries
            .iter()
            .filter(|e| e.text.contains(needle) || e.title.contains(needle))
            .count()
    };
    assert_eq!(mentions("do the thing"), 1, "the task once");
    assert_eq!(mentions("all done"), 1, "the final answer once");
    assert_eq!(mentions("SIGINT"), 1, "the interruption once");
    let question = &trace.entries[6];
    assert_eq!(question.text, "Your password?");
    assert!(question.sensitive && question.redacted);
    assert_eq!(
        question.answer.as_deref(),
        Some("[REDACTED: sensitive answer kept in secrets/call_1_0]")
    );
    assert_eq!(trace.pauses.len(), 2);
    assert_eq!(trace.tokens.total_tokens, 7);
    // Every line above is an event the journal module reads: a field or type renamed there
    // and not in these lines (the engine's own shape) fails here, not silently on the page.
    assert_eq!(trace.skipped_lines, 0);
}

/// A journal line that is not an event this delta reads (a newer delta's event, a
/// hand-edited line) is left out and counted; the trace around it is whole, and a torn last
/// line of a live run is neither shown nor counted.
#[test]
fn an_unknown_event_is_skipped_and_counted_and_the_trace_goes_on() {
    let mut lines = INTERRUPTED_THEN_ANSWERED[..5].to_vec();
    lines.insert(
        2,
        r#"{"seq":99,"timestamp":"2026-11-26T17:39:09.221Z","type":"CONTEXT_COMPACTED","kept":3}"#,
    );
    let tmp = workspace_with("R1", &lines, COMPLETED);
    let journal = tmp.path().join(".delta/R1/journal.jsonl");
    let mut text = std::fs::read_to_string(&journal).unwrap();
    text.push_str(r#"{"seq":6,"timestamp":"2026-11-26T17:39"#);
    std::fs::write(&journal, text).unwrap();
    let trace = run_trace(tmp.path(), "R1").unwrap();
    assert_eq!(trace.skipped_lines, 1);
    assert_eq!(
        kinds_and_titles(&trace),
        [
            ("start", "Run started: agent sleeper".to_string()),
            ("reply", "Model reply 1: calls nap".to_string()),
            ("tool", "Tool nap → FAILED".to_string()),
        ]
    );
    let json = serde_json::to_value(&trace).unwrap();
    assert_eq!(json["skippedLines"], 1);
    let whole = run_trace(
        workspace_with("R1", INTERRUPTED_THEN_ANSWERED, COMPLETED).path(),
        "R1",
    )
    .unwrap();
    let json = serde_json::to_value(&whole).unwrap();
    assert!(
        json.get("skippedLines").is_none(),
        "absent when none: {json}"
    );
}

/// The poll of a page that has the trace: unchanged only while the journal is the size the
/// page knows, and then the reply being streamed only for a running run (the file is not
/// even read otherwise).
#[test]
fn a_poll_is_unchanged_only_at_the_known_size_with_the_partial_reply_of_a_running_run() {
    let partial = || {
        Some(PartialReply {
            iteration: 2,
            ..PartialReply::default()
        })
    };
    let running = || Some(RunStatus::Running);
    assert_eq!(unchanged_since(None, 10, running, partial, 5), None);
    assert_eq!(unchanged_since(Some(9), 10, running, partial, 5), None);
    let same = unchanged_since(Some(10), 10, running, partial, 5).unwrap();
    assert_eq!(
        same,
        Unchanged {
            unchanged: true,
            journal_bytes: 10,
            status: Some(RunStatus::Running),
            partial: partial(),
            now: 5,
        }
    );
    let ended = unchanged_since(
        Some(10),
        10,
        || Some(RunStatus::Completed),
        || -> Option<PartialReply> { panic!("read for a run that does not run") },
        5,
    )
    .unwrap();
    assert_eq!(
        (ended.status, &ended.partial),
        (Some(RunStatus::Completed), &None)
    );
    let json = serde_json::to_value(TracePoll::Unchanged(ended)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"unchanged": true, "journalBytes": 10, "status": "COMPLETED",
            "partial": null, "now": 5})
    );
}

#[test]
fn poll_trace_answers_unchanged_at_the_known_size_and_the_trace_otherwise() {
    let tmp = workspace_with("R1", INTERRUPTED_THEN_ANSWERED, COMPLETED);
    let size = std::fs::metadata(tmp.path().join(".delta/R1/journal.jsonl"))
        .unwrap()
        .len();
    assert!(matches!(
        poll_trace(tmp.path(), "R1", Some(size)).unwrap(),
        TracePoll::Unchanged(Unchanged { journal_bytes, .. }) if journal_bytes == size
    ));
    for known in [None, Some(size - 1)] {
        let TracePoll::Trace(trace) = poll_trace(tmp.path(), "R1", known).unwrap() else {
            panic!("a trace for {known:?}");
        };
        assert_eq!(trace.journal_bytes, size);
    }
    assert!(matches!(
        poll_trace(tmp.path(), "../R1", Some(size)),
        Err(InspectError::Invalid { .. })
    ));
}

#[test]
fn spans_give_each_model_call_tool_call_and_wait_for_an_answer_its_time() {
    let tmp = workspace_with("R1", INTERRUPTED_THEN_ANSWERED, COMPLETED);
    let trace = run_trace(tmp.path(), "R1").unwrap();
    let spans: Vec<(&str, String, Option<i64>, bool)> = trace
        .spans
        .iter()
        .map(|s| {
            (
                s.kind,
                s.label.clone(),
                s.end.map(|e| e - s.start),
                s.start_unknown,
            )
        })
        .collect();
    assert_eq!(
        spans,
        [
            ("model", "model call 1".to_string(), Some(8), false),
            ("tool", "nap".to_string(), Some(1509), false),
            ("model", "model call 2".to_string(), Some(0), true),
            (
                "human",
                "waiting for an answer".to_string(),
                Some(2769),
                false
            ),
            ("model", "model call 3".to_string(), Some(4), false),
        ]
    );
    assert_eq!(trace.spans[1].status.as_deref(), Some("FAILED"));
}

#[test]
fn a_failed_run_ends_once_with_its_error_kind() {
    let lines = [
        INTERRUPTED_THEN_ANSWERED[0],
        INTERRUPTED_THEN_ANSWERED[1],
        r#"{"seq":3,"timestamp":"2026-11-26T17:39:10.000Z","type":"ERROR","error_type":"llm_error","error_message":"HTTP 400: bad"}"#,
        r#"{"seq":4,"timestamp":"2026-11-26T17:39:10.000Z","type":"ENGINE_END","run_id":"R1","status":"FAILED","final_iteration":0,"error":"llm_error: HTTP 400: bad"}"#,
    ];
    let tmp = workspace_with("R1", &lines, r#"{"status":"FAILED"}"#);
    let trace = run_trace(tmp.path(), "R1").unwrap();
    assert_eq!(
        kinds_and_titles(&trace),
        [
            ("start", "Run started: agent sleeper".to_string()),
            ("end", "Failed: llm_error".to_string()),
        ]
    );
    assert_eq!(trace.entries[1].text, "HTTP 400: bad");
}

/// Regression (issue 31 item 17): the model call a run failed on (4 min 40 s, then HTTP
/// 500 for good) had no bar: only calls with a reply (a THOUGHT) were drawn. It is now the
/// last bar, marked FAILED, from the tool's result to the ERROR.
#[test]
fn the_model_call_that_failed_the_run_is_in_the_waterfall_marked_failed_with_its_duration() {
    let lines = [
        INTERRUPTED_THEN_ANSWERED[0],
        INTERRUPTED_THEN_ANSWERED[1],
        INTERRUPTED_THEN_ANSWERED[2],
        INTERRUPTED_THEN_ANSWERED[3],
        INTERRUPTED_THEN_ANSWERED[4],
        r#"{"seq":6,"timestamp":"2026-11-26T17:43:50.737Z","type":"ERROR","error_type":"llm_error","error_message":"model call failed after 3 attempt(s): HTTP 500"}"#,
        r#"{"seq":7,"timestamp":"2026-11-26T17:43:50.737Z","type":"ENGINE_END","run_id":"R1","status":"FAILED","final_iteration":2,"error":"model call failed after 3 attempt(s): HTTP 500"}"#,
    ];
    let tmp = workspace_with("R1", &lines, r#"{"status":"FAILED"}"#);
    let trace = run_trace(tmp.path(), "R1").unwrap();
    let spans: Vec<(&str, u32, Option<i64>, Option<&str>)> = trace
        .spans
        .iter()
        .map(|s| {
            (
                s.kind,
                s.iteration,
                s.end.map(|e| e - s.start),
                s.status.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        spans,
        [
            ("model", 1, Some(8), Some("tool_calls")),
            ("tool", 1, Some(1509), Some("FAILED")),
            ("model", 2, Some(280_000), Some("FAILED")),
        ]
    );
    let failed = trace.spans.last().unwrap();
    assert_eq!(failed.label, "model call 2");
    assert!(!failed.start_unknown);
    // A run that fails on anything but its model call gets no model bar for it.
    let mut other = lines;
    other[5] = r#"{"seq":6,"timestamp":"2026-11-26T17:43:50.737Z","type":"ERROR","error_type":"context_error","error_message":"a source failed"}"#;
    let tmp = workspace_with("R1", &other, r#"{"status":"FAILED"}"#);
    assert_eq!(run_trace(tmp.path(), "R1").unwrap().spans.len(), 2);
}

#[test]
fn a_running_run_shows_the_call_in_progress_and_the_reply_streaming_into_it() {
    let lines = &INTERRUPTED_THEN_ANSWERED[..5];
    let tmp = workspace_with("R1", lines, r#"{"status":"RUNNING"}"#);
    let dir = tmp.path().join(".delta/R1");
    let partial = |iteration: u32, complete: bool| PartialReply {
        iteration,
        complete,
        content: "Half a sent".into(),
        ..PartialReply::default()
    };
    crate::workspace::live_reply::write_partial_reply(
        &partial_reply_path(&dir),
        &partial(2, false),
    )
    .unwrap();
    let trace = run_trace(tmp.path(), "R1").unwrap();
    let last = trace.spans.last().unwrap();
    assert_eq!((last.kind, last.iteration, last.end), ("model", 2, None));
    assert_eq!(trace.partial, Some(partial(2, false)));
    // The reply of an earlier iteration, or a complete one, is not the call in progress.
    for stale in [partial(1, false), partial(2, true)] {
        crate::workspace::live_reply::write_partial_reply(&partial_reply_path(&dir), &stale)
            .unwrap();
        assert_eq!(run_trace(tmp.path(), "R1").unwrap().partial, None);
    }
}

/// A FIFO or a link planted in a run folder by a tool never blocks or misleads the server.
#[test]
fn a_fifo_as_journal_and_a_link_as_metadata_are_reported_not_followed() {
    let tmp = workspace_with("R1", INTERRUPTED_THEN_ANSWERED, COMPLETED);
    let dir = tmp.path().join(".delta/R1");
    std::fs::remove_file(dir.join("metadata.json")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("metadata.json")).unwrap();
    let trace = run_trace(tmp.path(), "R1").unwrap();
    assert!(
        trace
            .unreadable
            .as_deref()
            .unwrap()
            .contains("symbolic link"),
        "{:?}",
        trace.unreadable
    );
    std::fs::remove_file(dir.join("journal.jsonl")).unwrap();
    nix::unistd::mkfifo(&dir.join("journal.jsonl"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let error = run_trace(tmp.path(), "R1").unwrap_err().to_string();
    assert!(error.contains("FIFO"), "{error}");
    assert!(matches!(
        run_trace(tmp.path(), "../R1"),
        Err(InspectError::Invalid { .. })
    ));
    assert!(matches!(
        run_trace(tmp.path(), "R2"),
        Err(InspectError::NotFound(_))
    ));
}

/// A compaction is a point of its own in the trace, saying what later requests no longer
/// carry (issue 32).
#[test]
fn a_compaction_is_marked_where_it_happened() {
    let lines = [
        INTERRUPTED_THEN_ANSWERED[0],
        INTERRUPTED_THEN_ANSWERED[1],
        r#"{"seq":3,"timestamp":"2026-11-26T17:39:09.228Z","type":"CONTEXT_COMPACTED","iteration":9,"strategy":"mask","reason":"refusal","masked":["call_0_0","call_1_0"],"dropped_through":2,"summary":"The fox read pages.","tokens_before":4100,"tokens_after":1800,"budget":3774,"window":{"tokens":4096,"source":"refusal"}}"#,
        r#"{"seq":4,"timestamp":"2026-11-26T17:39:09.300Z","type":"THOUGHT","iteration":9,"content":"done","tool_calls":[],"finish_reason":"stop"}"#,
    ];
    let tmp = workspace_with("R1", &lines, COMPLETED);
    let trace = run_trace(tmp.path(), "R1").unwrap();
    let compaction = trace
        .entries
        .iter()
        .find(|e| e.kind == "compaction")
        .unwrap();
    assert_eq!(
        compaction.title,
        "Context compacted: 4100 → 1800 tokens (mask)"
    );
    assert_eq!(compaction.iteration, Some(9));
    assert_eq!(compaction.seq, 3);
    for phrase in [
        "The server refused the request",
        "2 tool result(s) shown as a one-line stub",
        "Events up to #2 replaced by this summary:\nThe fox read pages.",
    ] {
        assert!(
            compaction.text.contains(phrase),
            "{phrase}: {}",
            compaction.text
        );
    }
}
