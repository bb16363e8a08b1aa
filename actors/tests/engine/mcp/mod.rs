//! MCP tools through the public Supervisor API, against the Model Context Protocol reference
//! servers from npm (`@modelcontextprotocol/server-everything` and `server-filesystem`,
//! installed by `scripts/mcp-local.sh install`, which `scripts/test` runs) and, for the ways
//! a server can break that the reference servers never do, `tests/fixtures/mcp/
//! misbehaving-server.py`.
//!
//! Without the npm servers the tests fail loudly, unless DELTA_SKIP_MCP=1 says to skip them
//! knowingly (they print SKIPPED).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use delta_actors::journal::{ActionStatus, Event, JournalEvent};
use delta_actors::{RunStatus, Supervisor};
use serde_json::Value;

use crate::harness::*;

mod limits;

/// `node_modules/.bin` of the installed reference servers, or `None` when skipped knowingly.
pub fn mcp_servers(test: &str) -> Option<PathBuf> {
    let dir = std::env::var("DELTA_MCP_SERVERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-servers"));
    let bin = dir.join("node_modules/.bin");
    if bin.join("mcp-server-everything").exists() && bin.join("mcp-server-filesystem").exists() {
        return Some(bin);
    }
    if std::env::var("DELTA_SKIP_MCP").as_deref() == Ok("1") {
        eprintln!(
            "SKIPPED {test}: DELTA_SKIP_MCP=1 and no MCP reference servers in {}",
            bin.display()
        );
        return None;
    }
    panic!(
        "{test} needs the MCP reference servers from npm in {}: run `scripts/mcp-local.sh install` \
         (scripts/test does), or skip these tests knowingly with DELTA_SKIP_MCP=1",
        bin.display()
    );
}

/// The misbehaving test server (python3).
pub(super) fn misbehaving_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/mcp/misbehaving-server.py")
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

pub(super) const ECHO_TOOL: &str = "  - name: echo\n    exec: \"echo ${text}\"\n";

pub(super) fn results(events: &[JournalEvent]) -> Vec<(String, ActionStatus, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ActionResult {
                tool_name,
                status,
                observation_content,
                ..
            } => Some((tool_name.clone(), *status, observation_content.clone())),
            _ => None,
        })
        .collect()
}

pub(super) fn warnings(events: &[JournalEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// The io/tool_executions records of a run, in name order.
fn tool_records(result: &delta_actors::RunResult) -> Vec<Value> {
    let dir = run_dir(result).join("io/tool_executions");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

/// The tool names of the run's first model request, from its io/invocations record.
pub(super) fn offered_tools(result: &delta_actors::RunResult) -> Vec<String> {
    let dir = run_dir(result).join("io/invocations");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let record: Value = serde_json::from_str(&std::fs::read_to_string(&paths[0]).unwrap()).unwrap();
    record["request"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn mcp_tools_of_both_reference_servers_are_offered_called_and_journaled() {
    let Some(bin) =
        mcp_servers("mcp_tools_of_both_reference_servers_are_offered_called_and_journaled")
    else {
        return;
    };
    let mcp = format!(
        "mcp:\n  everything:\n    command: {}\n    args: [stdio]\n  files:\n    command: {}\n    args: [\"${{CWD}}\"]\n",
        bin.join("mcp-server-everything").display(),
        bin.join("mcp-server-filesystem").display()
    );
    let agent = TestAgent::new("mcp-both", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    std::fs::write(ws_path.join("notes.txt"), "seven lines of notes\n").unwrap();
    let s = script(&format!(
        "steps:\n  - tool: everything__echo\n    args: {{ message: hello from delta }}\n  - tool: files__read_text_file\n    args: {{ path: \"{}\" }}\n  - tool: files__read_text_file\n    args: {{ path: /etc/hostname }}\n  - tool: everything__get-env\n  - tool: echo\n    args: {{ text: still here }}\n  - answer: done\n",
        ws_path.join("notes.txt").display()
    ));
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), &ws_path, s, "use the servers"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");

    let offered = offered_tools(&result);
    assert_eq!(
        offered.first().map(String::as_str),
        Some("echo"),
        "{offered:?}"
    );
    assert_eq!(
        offered.last().map(String::as_str),
        Some("ask_human"),
        "{offered:?}"
    );
    for name in [
        "everything__echo",
        "everything__get-sum",
        "files__read_text_file",
        "files__list_directory",
    ] {
        assert!(
            offered.iter().any(|o| o == name),
            "{name} not offered: {offered:?}"
        );
    }

    let events = journal(&result);
    let results = results(&events);
    assert_eq!(results.len(), 5, "{results:?}");
    assert_eq!(results[0].0, "everything__echo");
    assert_eq!(results[0].1, ActionStatus::Success);
    assert_eq!(results[0].2, "Echo: hello from delta");
    assert_eq!(results[1].1, ActionStatus::Success);
    assert_eq!(results[1].2, "seven lines of notes");
    // The filesystem server refuses a path outside its root: the tool's error, as a result.
    assert_eq!(results[2].1, ActionStatus::Failed);
    assert!(results[2].2.contains("Access denied"), "{}", results[2].2);
    // The server's environment is the tools' one: no API key.
    assert_eq!(results[3].1, ActionStatus::Success);
    assert!(results[3].2.contains("PATH"), "{}", results[3].2);
    assert!(!results[3].2.contains("sk-test-secret"), "{}", results[3].2);
    assert!(!results[3].2.contains("DELTA_API_KEY"), "{}", results[3].2);
    assert_eq!(
        results[4].2,
        "=== STDOUT ===\nstill here\n=== EXIT CODE: 0 ==="
    );

    let requests: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ActionRequest {
                resolved_command, ..
            } => Some(resolved_command.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        requests[0],
        r#"mcp everything echo {"message":"hello from delta"}"#
    );

    let records = tool_records(&result);
    assert_eq!(records.len(), 5);
    assert_eq!(records[0]["kind"], "mcp");
    assert_eq!(records[0]["target"]["server"], "everything");
    assert_eq!(records[0]["target"]["tool"], "echo");
    assert_eq!(records[0]["ending"], "answered");
    assert_eq!(records[0]["success"], true);
    assert_eq!(records[0]["arguments"]["message"], "hello from delta");
    assert_eq!(records[2]["success"], false);
    assert_eq!(records[4]["kind"], "process");
    sup.shutdown();
}

#[test]
fn an_mcp_server_that_does_not_start_gives_the_model_an_error_and_the_run_goes_on() {
    let mcp = format!(
        "mcp:\n  gone:\n    command: /nonexistent/mcp-server\n  quits:\n    command: python3\n    args: [\"{}\", exit-at-start]\n",
        misbehaving_server()
    );
    let agent = TestAgent::new("mcp-broken", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: gone__anything\n  - tool: quits__echo\n    args: { message: hi }\n  - tool: echo\n    args: { text: went on }\n  - answer: done\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let events = journal(&result);
    let warnings = warnings(&events);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("MCP server `gone` is not available"),
        "{warnings:?}"
    );
    assert!(
        warnings[0].contains("/nonexistent/mcp-server"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("MCP server `quits` is not available"),
        "{warnings:?}"
    );
    assert!(warnings[1].contains("exit code 3"), "{warnings:?}");
    assert!(
        warnings[1].contains("no configuration, giving up"),
        "{warnings:?}"
    );
    let results = results(&events);
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].1, ActionStatus::Error);
    assert!(
        results[0].2.starts_with(
            "Error: tool 'gone__anything' cannot be called now: MCP server `gone` is not available"
        ),
        "{}",
        results[0].2
    );
    assert!(
        results[1].2.contains("no configuration, giving up"),
        "{}",
        results[1].2
    );
    assert_eq!(results[2].1, ActionStatus::Success);
    let offered = offered_tools(&result);
    assert_eq!(offered, ["echo", "ask_human"]);
    sup.shutdown();
}

#[test]
fn an_mcp_server_that_crashes_mid_call_gives_an_error_result_and_is_started_again_for_the_next_call(
) {
    let ws = tempfile::tempdir().unwrap();
    let log = ws.path().join("starts.log");
    let mcp = format!(
        "mcp:\n  flaky:\n    command: python3\n    args: [\"{}\"]\n    env: {{ MCP_START_LOG: \"{}\" }}\n",
        misbehaving_server(),
        log.display()
    );
    let agent = TestAgent::new("mcp-crash", &mcp, ECHO_TOOL);
    let s = script(
        "steps:\n  - tool: flaky__crash\n  - tool: flaky__echo\n    args: { message: after the crash }\n  - answer: done\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let results = results(&journal(&result));
    assert_eq!(results[0].1, ActionStatus::Failed);
    assert!(results[0].2.starts_with("Error: "), "{}", results[0].2);
    assert!(results[0].2.contains("exit code 7"), "{}", results[0].2);
    assert!(
        results[0].2.contains("crashing on purpose"),
        "{}",
        results[0].2
    );
    assert_eq!(results[1].1, ActionStatus::Success);
    assert_eq!(results[1].2, "echo: after the crash");
    let starts = std::fs::read_to_string(&log).unwrap();
    assert_eq!(starts.lines().count(), 2, "{starts}");
    let records = tool_records(&result);
    assert_eq!(records[0]["ending"], "failed");
    sup.shutdown();
}

#[test]
fn an_mcp_server_that_hangs_or_answers_garbage_gives_an_error_result_within_its_time_limit() {
    let mcp = format!(
        "mcp:\n  odd:\n    command: python3\n    args: [\"{}\"]\n    timeout_ms: 1500\n",
        misbehaving_server()
    );
    let agent = TestAgent::new("mcp-hang", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: odd__hang\n  - tool: odd__garbage\n  - tool: odd__echo\n    args: { message: fine }\n  - answer: done\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let started = Instant::now();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let results = results(&journal(&result));
    assert_eq!(results[0].1, ActionStatus::Failed);
    assert_eq!(
        results[0].2,
        "Error: no answer within 1500 ms (the server's `timeout_ms`)"
    );
    assert_eq!(results[1].1, ActionStatus::Failed);
    assert!(results[1].2.starts_with("Error: "), "{}", results[1].2);
    assert_eq!(results[2].2, "echo: fine");
    let records = tool_records(&result);
    assert_eq!(records[0]["ending"], "timed_out");
    assert_eq!(records[0]["timed_out"], true);
    assert_eq!(records[0]["timeout_ms"], 1500);
    sup.shutdown();
}

#[test]
fn an_mcp_server_silent_or_garbled_at_start_is_given_up_after_its_start_limit() {
    let server = misbehaving_server();
    let mcp = format!(
        "mcp:\n  mute:\n    command: python3\n    args: [\"{server}\", silent-at-start]\n    startup_timeout_ms: 1000\n  noise:\n    command: python3\n    args: [\"{server}\", garbage-at-start]\n    startup_timeout_ms: 1000\n"
    );
    let agent = TestAgent::new("mcp-mute", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: mute__echo\n  - answer: done\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let events = journal(&result);
    let warnings = warnings(&events);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    for warning in &warnings {
        assert!(warning.contains("within 1000 ms"), "{warning}");
        assert!(warning.contains("startup_timeout_ms"), "{warning}");
    }
    let results = results(&events);
    assert!(
        results[0].2.contains("cannot be called now"),
        "{}",
        results[0].2
    );
    sup.shutdown();
}

#[test]
fn pre_tool_execution_can_skip_an_mcp_call_and_post_tool_execution_sees_its_result() {
    let ws = tempfile::tempdir().unwrap();
    let log = ws.path().join("starts.log");
    let mcp = format!(
        "mcp:\n  srv:\n    command: python3\n    args: [\"{}\"]\n    env: {{ MCP_START_LOG: \"{}\" }}\n",
        misbehaving_server(),
        log.display()
    );
    let agent = TestAgent::new("mcp-hooks", &mcp, ECHO_TOOL);
    std::fs::write(
        agent.path().join("hooks.yaml"),
        "pre_tool_execution:\n  command: [sh, \"${AGENT_HOME}/pre.sh\"]\npost_tool_execution:\n  command: [sh, \"${AGENT_HOME}/post.sh\"]\n",
    )
    .unwrap();
    std::fs::write(
        agent.path().join("pre.sh"),
        "cat > \"pre-$TOOL_NAME.json\"\nif [ \"$TOOL_NAME\" = srv__crash ]; then echo '{\"action\":\"skip\",\"observation\":\"policy: no crashing\"}'; fi\n",
    )
    .unwrap();
    std::fs::write(
        agent.path().join("post.sh"),
        "cat > \"post-$TOOL_NAME.json\"\n",
    )
    .unwrap();
    let s = script(
        "steps:\n  - tool: srv__crash\n  - tool: srv__echo\n    args: { message: allowed }\n  - answer: done\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let results = results(&journal(&result));
    assert_eq!(results[0].2, "policy: no crashing");
    assert_eq!(results[1].2, "echo: allowed");
    // The skipped call never reached the server: one start, never crashed.
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
    let pre: Value = serde_json::from_str(
        &std::fs::read_to_string(ws.path().join("pre-srv__echo.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(pre["target"]["server"], "srv");
    assert_eq!(pre["target"]["tool"], "echo");
    assert_eq!(
        pre["resolved_command"],
        r#"mcp srv echo {"message":"allowed"}"#
    );
    assert!(pre.get("argv").is_none(), "{pre}");
    let post: Value = serde_json::from_str(
        &std::fs::read_to_string(ws.path().join("post-srv__echo.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(post["observation"], "echo: allowed");
    assert!(!ws.path().join("post-srv__crash.json").exists());
    sup.shutdown();
}

#[test]
fn runs_of_one_supervisor_share_one_mcp_server_which_ends_with_the_supervisor() {
    let ws = tempfile::tempdir().unwrap();
    let log = ws.path().join("starts.log");
    let mcp = format!(
        "mcp:\n  shared:\n    command: python3\n    args: [\"{}\"]\n    env: {{ MCP_START_LOG: \"{}\" }}\n",
        misbehaving_server(),
        log.display()
    );
    let agent = TestAgent::new("mcp-shared", &mcp, ECHO_TOOL);
    let s = script(
        "steps:\n  - tool: shared__echo\n    args: { message: one }\n  - tool: shared__echo\n    args: { message: two }\n  - answer: done\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let dir = ws.path().join(format!("w{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            sup.submit_blocking(new_run(agent.load(), &dir, s.clone(), "t"))
                .unwrap()
        })
        .collect();
    for handle in handles {
        let result = handle.wait_blocking().unwrap();
        assert_eq!(result.status, RunStatus::Completed, "{result:?}");
        let results = results(&journal(&result));
        assert_eq!(results[1].2, "echo: two");
    }
    let starts = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        starts.lines().count(),
        1,
        "one server for every run: {starts}"
    );
    let pid: i32 = starts.trim().parse().unwrap();
    assert!(alive(pid), "the server lives as long as the supervisor");
    sup.shutdown();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pid), "the server {pid} outlived its supervisor");
}

/// True while `pid` is a living process (not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

struct Answers(&'static str);

impl delta_actors::HumanPrompter for Answers {
    fn ask(&self, _: &str, _: &str, _: bool) -> Result<String, String> {
        Ok(self.0.to_string())
    }
}

/// A sensitive answer sent to an MCP tool reaches the server (it echoes it back), but no
/// file of the run holds it: not the journal, the io/ record, nor the `.output` file of an
/// answer long enough to be cut.
#[test]
fn a_sensitive_answer_sent_to_an_mcp_tool_is_redacted_from_every_file() {
    const CANARY: &str = "canary-mcp-7731";
    let mcp = format!(
        "mcp:\n  srv:\n    command: python3\n    args: [\"{}\"]\n",
        misbehaving_server()
    );
    let agent = TestAgent::new("mcp-secret", &mcp, ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let padding = "x".repeat(20_000);
    let s = script(&format!(
        "steps:\n  - tool: ask_human\n    args: {{ prompt: \"PIN?\", sensitive: true }}\n  - tool: srv__echo\n    args: {{ message: \"{padding} {CANARY} {padding}\" }}\n  - answer: done\n"
    ));
    let mut request = new_run(agent.load(), ws.path(), s, "t");
    request.prompter = Some(std::sync::Arc::new(Answers(CANARY)));
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, request);
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let dir = run_dir(&result);
    let records = tool_records(&result);
    assert_eq!(records[0]["kind"], "mcp");
    let output = records[0]["output"]["file"].as_str().unwrap();
    let output = std::fs::read_to_string(output).unwrap();
    assert!(output.starts_with("echo: xxx"), "{}", &output[..40]);
    assert!(
        output.contains("[REDACTED: sensitive answer"),
        "the .output file"
    );
    let mut files = vec![dir.clone()];
    let mut checked = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "secrets") {
                continue;
            }
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                !text.contains(CANARY),
                "{} holds the answer",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 5);
    let results = results(&journal(&result));
    assert!(
        results[1].2.contains("[... "),
        "cut for the model: {}",
        &results[1].2[..80]
    );
    sup.shutdown();
}
