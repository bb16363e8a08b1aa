//! MCP tools end to end through the `delta` binary, against the Model Context Protocol
//! reference servers from npm (`@modelcontextprotocol/server-everything` and
//! `server-filesystem`, installed by `scripts/mcp-local.sh install`, which `scripts/test`
//! runs): `delta tool expand` lists their tools, a run calls them and journals the results,
//! a server killed mid-run is started again, an orchestration of 100 runs shares one server
//! of each, and no server process outlives `delta`, even after `kill -9`.
//!
//! Server processes are counted by a marker variable in their environment (each test its
//! own), which they inherit from `delta` like tools do.
//!
//! Without the npm servers the tests fail loudly, unless DELTA_SKIP_MCP=1 says to skip them
//! knowingly (they print SKIPPED).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;

use crate::harness::*;

const LIMIT: Duration = Duration::from_secs(60);

/// `node_modules/.bin` of the installed reference servers, or `None` when skipped knowingly.
fn mcp_servers(test: &str) -> Option<PathBuf> {
    let dir = std::env::var("DELTA_MCP_SERVERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-servers"));
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

/// The `mcp:` section listing both reference servers; `everything` is started through a
/// shell that first appends its pid to `<log_dir>/everything.starts` (then `exec`s it, so
/// the pid is the server's).
fn both_servers(bin: &Path, log_dir: &Path) -> String {
    format!(
        "mcp:\n  everything:\n    command: sh\n    args: [-c, 'echo $$ >> \"{}/everything.starts\"; exec \"{}\" stdio']\n  files:\n    command: {}\n    args: [\"${{CWD}}\"]\n",
        log_dir.display(),
        bin.join("mcp-server-everything").display(),
        bin.join("mcp-server-filesystem").display()
    )
}

/// Living (non-zombie) MCP server processes (the reference servers, the misbehaving test
/// server) whose environment holds `marker`.
fn servers_with(marker: &str) -> Vec<i32> {
    let needle = format!("DELTA_TEST_MCP_MARK={marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            (cmdline.contains("mcp-server-")
                || cmdline.contains("@modelcontextprotocol/server-")
                || cmdline.contains("misbehaving-server"))
                && String::from_utf8_lossy(&environ)
                    .split('\0')
                    .any(|v| v == needle)
                && process_alive(*pid)
        })
        .collect()
}

fn outcome(output: std::process::Output) -> Outcome {
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A unique marker for one test's server processes.
fn marker(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

#[test]
fn tool_expand_lists_the_mcp_tools_and_a_run_calls_them_with_results_journaled() {
    let Some(bin) =
        mcp_servers("tool_expand_lists_the_mcp_tools_and_a_run_calls_them_with_results_journaled")
    else {
        return;
    };
    let mark = marker("expand-run");
    let logs = tempfile::tempdir().unwrap();
    let agent = format!(
        "tools:\n  - name: echo\n    exec: \"echo ${{text}}\"\n{}",
        both_servers(&bin, logs.path())
    );
    let case = Case::new(
        "mcp-cli",
        &agent,
        &json!({"steps": [
            {"tool": "everything__get-sum", "args": {"a": 2, "b": 40}},
            {"tool": "files__write_file", "args": {"path": "report.txt", "content": "written by MCP"}},
            {"tool": "files__read_text_file", "args": {"path": "report.txt"}},
            {"tool": "everything__get-env"},
            {"answer": "done: {{ last_observation }}"}
        ]}),
    );
    assert!(servers_with(&mark).is_empty());

    let expand = case
        .cmd()
        .env("DELTA_TEST_MCP_MARK", &mark)
        .args(["tool", "expand", "agent", "--format", "json", "-w", "ws"])
        .output()
        .unwrap();
    let expand = outcome(expand);
    expand.assert_code(0);
    let document = expand.json();
    let tools = document["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.first(), Some(&"echo"));
    assert_eq!(names.last(), Some(&"ask_human"));
    let sum = tools
        .iter()
        .find(|t| t["name"] == "everything__get-sum")
        .unwrap();
    assert_eq!(sum["syntax"], "mcp");
    assert_eq!(sum["server"], "everything");
    assert_eq!(sum["server_tool"], "get-sum");
    assert_eq!(sum["defined_in"], "agent.yaml (mcp.everything)");
    assert_eq!(sum["parameters"][0]["name"], "a");
    assert_eq!(sum["parameters"][0]["type"], "number");
    assert!(names.contains(&"files__read_text_file"), "{names:?}");
    assert!(
        expand.stderr.contains("tool(s) of MCP servers"),
        "{}",
        expand.stderr
    );
    assert!(
        servers_with(&mark).is_empty(),
        "tool expand left a server running"
    );

    let out = outcome(
        case.cmd()
            .env("DELTA_TEST_MCP_MARK", &mark)
            .args(case.run_args("r1", "add"))
            .args(["--format", "json"])
            .output()
            .unwrap(),
    );
    out.assert_code(0);
    assert_eq!(out.json()["status"], "COMPLETED");
    let journal = case.journal("r1");
    let observations = observations(&journal);
    assert_eq!(observations[0], "The sum of 2 and 40 is 42.");
    assert!(
        observations[1].contains("Successfully wrote"),
        "{}",
        observations[1]
    );
    assert_eq!(observations[2], "written by MCP");
    // The servers get the tools' environment: the marker, never the API key.
    assert!(observations[3].contains(&mark), "{}", observations[3]);
    assert!(
        !observations[3].contains("sk-cli-test"),
        "{}",
        observations[3]
    );
    assert_eq!(
        std::fs::read_to_string(case.work_dir().join("report.txt")).unwrap(),
        "written by MCP"
    );
    let results = events_of(&journal, "ACTION_RESULT");
    assert_eq!(results[0]["tool_name"], "everything__get-sum");
    assert_eq!(results[0]["status"], "SUCCESS");
    let record = read_json(
        &case
            .run_dir("r1")
            .join(results[0]["execution_ref"].as_str().unwrap()),
    );
    assert_eq!(record["kind"], "mcp");
    assert_eq!(
        record["target"],
        json!({"server": "everything", "tool": "get-sum"})
    );
    assert!(
        servers_with(&mark).is_empty(),
        "a server outlived `delta run`"
    );
}

#[test]
fn an_mcp_server_killed_mid_run_is_started_again_and_the_run_goes_on() {
    let Some(bin) =
        mcp_servers("an_mcp_server_killed_mid_run_is_started_again_and_the_run_goes_on")
    else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let starts = logs.path().join("everything.starts");
    // The tool kills the server and returns once it is dead (a zombie or gone), so the next
    // call finds it dead rather than dying.
    let agent = format!(
        "tools:\n  - name: kill_server\n    shell: \"p=$(head -n1 '{}'); kill -9 $p; while [ -e /proc/$p ] && ! grep -q ') [ZX]' /proc/$p/stat; do sleep 0.01; done\"\n{}",
        starts.display(),
        both_servers(&bin, logs.path())
    );
    let case = Case::new(
        "mcp-crash",
        &agent,
        &json!({"steps": [
            {"tool": "everything__echo", "args": {"message": "before"}},
            {"tool": "kill_server"},
            {"tool": "everything__echo", "args": {"message": "after"}},
            {"answer": "done"}
        ]}),
    );
    let out = case.run("r1", "t", &[]);
    out.assert_code(0);
    let observations = observations(&case.journal("r1"));
    assert_eq!(observations[0], "Echo: before");
    assert_eq!(observations[2], "Echo: after");
    let pids = std::fs::read_to_string(&starts).unwrap();
    assert_eq!(
        pids.lines().count(),
        2,
        "started again after the kill: {pids}"
    );
}

#[test]
fn an_orchestration_of_100_runs_shares_one_server_of_each_and_leaves_no_process() {
    let Some(bin) =
        mcp_servers("an_orchestration_of_100_runs_shares_one_server_of_each_and_leaves_no_process")
    else {
        return;
    };
    let mark = marker("orchestrate-100");
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = dir.path().join("agents/worker");
    std::fs::create_dir_all(&agent_dir).unwrap();
    std::fs::write(
        agent_dir.join("agent.yaml"),
        format!(
            "name: worker\nllm:\n  model: scripted\ntools: []\n{}",
            both_servers(&bin, dir.path())
        ),
    )
    .unwrap();
    std::fs::write(
        agent_dir.join("system_prompt.md"),
        "You are a test agent.\n",
    )
    .unwrap();
    std::fs::write(
        agent_dir.join("context.yaml"),
        "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n",
    )
    .unwrap();
    let items: Vec<String> = (0..100).map(|i| format!("item{i}")).collect();
    std::fs::write(
        dir.path().join("plan.yaml"),
        format!(
            "name: mcp-fan-out\nmax_parallel: 50\nworkspace: ./ws\nstages:\n  - id: fan\n    agent: ./agents/worker\n    foreach: {{ items: {} }}\n    message: \"handle {{{{ item }}}}\"\n",
            serde_json::to_string(&items).unwrap()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("ws")).unwrap();
    std::fs::write(dir.path().join("ws/shared.txt"), "shared notes").unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "steps:\n  - tool: everything__echo\n    args: { message: \"{{ task }}\" }\n  - tool: files__read_text_file\n    args: { path: shared.txt }\n  - answer: \"{{ last_observation }}\"\n",
    )
    .unwrap();
    assert!(servers_with(&mark).is_empty());
    let output = std::process::Command::new(delta_exe())
        .current_dir(dir.path())
        .env("DELTA_TEST_MCP_MARK", &mark)
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .args([
            "orchestrate",
            "plan.yaml",
            "--llm-script",
            "script.yaml",
            "--format",
            "json",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = outcome(output);
    out.assert_code(0);
    let summary = out.json();
    let stage = &summary["stages"][0];
    assert_eq!(stage["completed"], 100, "{summary:#}");
    assert!(
        servers_with(&mark).is_empty(),
        "a server outlived the orchestration"
    );
    let starts = std::fs::read_to_string(dir.path().join("everything.starts")).unwrap();
    assert_eq!(
        starts.lines().count(),
        1,
        "one server for the 100 runs: {starts}"
    );
    // Every run called both servers and got their answers.
    let runs_dir = dir.path().join("ws/.delta");
    let mut checked = 0;
    for entry in std::fs::read_dir(&runs_dir).unwrap().flatten() {
        let journal = entry.path().join("journal.jsonl");
        if !journal.exists() {
            continue;
        }
        let observations = observations(&read_journal(&journal));
        assert!(
            observations[0].starts_with("Echo: handle item"),
            "{observations:?}"
        );
        assert_eq!(observations[1], "shared notes");
        checked += 1;
    }
    assert_eq!(checked, 100);
}

#[test]
fn sigkill_of_delta_leaves_no_mcp_server_running() {
    let Some(bin) = mcp_servers("sigkill_of_delta_leaves_no_mcp_server_running") else {
        return;
    };
    let mark = marker("sigkill");
    let logs = tempfile::tempdir().unwrap();
    // A third server that ignores the end of its stdin: only a kill of its group ends it.
    let stubborn = format!(
        "  stubborn:\n    command: python3\n    args: [\"{}\"]\n    env: {{ MCP_IGNORE_EOF: \"1\" }}\n",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/mcp/misbehaving-server.py")
            .display()
    );
    let agent = format!(
        "tools:\n  - name: hang\n    shell: \"echo $$ > tool.pid.tmp; mv tool.pid.tmp tool.pid; sleep 300\"\n{}{stubborn}",
        both_servers(&bin, logs.path())
    );
    let case = Case::new(
        "mcp-kill",
        &agent,
        &json!({"steps": [
            {"tool": "everything__echo", "args": {"message": "up"}},
            {"tool": "stubborn__echo", "args": {"message": "up"}},
            {"tool": "hang"},
            {"answer": "unreachable"}
        ]}),
    );
    let mut engine = case
        .spawn_cmd()
        .env("DELTA_TEST_MCP_MARK", &mark)
        .args(case.run_args("r1", "hang"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tool = wait_for_pid_file(&case.work_dir().join("tool.pid"), LIMIT);
    let servers = servers_with(&mark);
    assert_eq!(
        servers.len(),
        3,
        "the servers run while the run does: {servers:?}"
    );
    send_signal(engine.id(), Signal::SIGKILL);
    wait_child(&mut engine, LIMIT);
    let all_gone = wait_until(LIMIT, || {
        servers_with(&mark).is_empty() && !process_alive(tool)
    });
    if !all_gone {
        for pid in servers_with(&mark) {
            kill_pid(pid);
        }
        kill_group(tool);
    }
    assert!(
        all_gone,
        "an MCP server or the tool outlived `kill -9` of delta"
    );
}

/// The test server that misbehaves on demand (python3).
fn misbehaving_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/misbehaving-server.py")
}

/// Tool definitions large enough to weigh on every model request (issue 31, item 4): each
/// run of a batch gets the WARNING in its journal, and stderr says it once, not once a run.
#[test]
fn large_mcp_tool_definitions_are_warned_in_every_journal_and_once_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = dir.path().join("agents/worker");
    write_agent(
        &agent_dir,
        "worker",
        &format!(
            "tools: []\nmcp:\n  big:\n    command: python3\n    args: [\"{}\", big-schemas]\n",
            misbehaving_server().display()
        ),
    );
    std::fs::write(
        dir.path().join("plan.yaml"),
        "name: big-tools\nmax_parallel: 3\nworkspace: ./ws\nstages:\n  - id: fan\n    agent: ./agents/worker\n    foreach: { items: [a, b, c] }\n    message: \"handle {{ item }}\"\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("script.yaml"), "steps:\n  - answer: done\n").unwrap();
    let output = std::process::Command::new(delta_exe())
        .current_dir(dir.path())
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .args([
            "orchestrate",
            "plan.yaml",
            "--llm-script",
            "script.yaml",
            "--format",
            "json",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = outcome(output);
    out.assert_code(0);
    assert_eq!(
        out.stderr.matches("KiB of JSON").count(),
        1,
        "said once: {}",
        out.stderr
    );
    assert!(out.stderr.contains("`tools:`"), "{}", out.stderr);
    let mut journals = 0;
    for entry in std::fs::read_dir(dir.path().join("ws/.delta"))
        .unwrap()
        .flatten()
    {
        let journal = entry.path().join("journal.jsonl");
        if !journal.exists() {
            continue;
        }
        let journal = read_journal(&journal);
        let warnings = events_of(&journal, "WARNING");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0]["message"]
                .as_str()
                .unwrap()
                .contains("KiB of JSON"),
            "{warnings:?}"
        );
        journals += 1;
    }
    assert_eq!(journals, 3);
}
