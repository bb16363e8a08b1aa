//! Lifecycle hooks through `delta run`: all eight firing with their env and payload, skip,
//! request override, failing and hanging hooks, Ctrl-C while a hook runs, and the legacy
//! `lifecycle_hooks` key of agent.yaml.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

const CONTEXT: &str = "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n";

fn write_agent(dir: &Path, extra_yaml: &str) {
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            "name: hooked\nllm:\n  model: scripted\n{extra_yaml}tools:\n  - name: touch\n    exec: \"touch ${{file}}\"\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("system_prompt.md"), "You are a test agent.\n").unwrap();
    std::fs::write(dir.join("context.yaml"), CONTEXT).unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "steps:\n  - tool: touch\n    args: { file: forbidden }\n  - answer: all done\n",
    )
    .unwrap();
}

fn delta_run(agent: &Path, ws: &Path) -> assert_cmd::assert::Assert {
    Command::cargo_bin("delta")
        .unwrap()
        .env_remove("DELTA_API_KEY")
        .env("HOME", ws)
        .arg("run")
        .arg("-a")
        .arg(agent)
        .arg("-m")
        .arg("do it")
        .arg("-w")
        .arg(ws)
        .arg("--format")
        .arg("json")
        .arg("--llm-script")
        .arg(agent.join("script.yaml"))
        .timeout(std::time::Duration::from_secs(60))
        .assert()
}

/// A temporary agent (see [`write_agent`]) with `hooks_yaml` as its hooks.yaml, and an
/// empty workspace.
fn agent_with_hooks(hooks_yaml: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let agent = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    write_agent(agent.path(), "");
    std::fs::write(agent.path().join("hooks.yaml"), hooks_yaml).unwrap();
    (agent, ws)
}

fn journal_lines(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn hooks_yaml_skip_failure_and_run_end_through_delta_run() {
    let (agent, ws) = agent_with_hooks("pre_tool_execution:\n  command: [sh, -c, \"echo '{\\\"action\\\":\\\"skip\\\",\\\"observation\\\":\\\"blocked by policy\\\"}'\"]\npost_llm_response:\n  command: [sh, -c, \"echo 'cannot reach webhook' >&2; exit 3\"]\non_run_end:\n  command: [sh, -c, \"env > end.env; cat > end.json\"]\n");

    let output = delta_run(agent.path(), ws.path())
        .success()
        .get_output()
        .clone();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["status"], "COMPLETED", "{result}");
    assert_eq!(result["result"], "all done");
    assert!(
        !ws.path().join("forbidden").exists(),
        "the skipped tool ran"
    );

    let end: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("end.json")).unwrap())
            .unwrap();
    assert_eq!(end["status"], "COMPLETED");
    assert_eq!(end["result"], "all done");
    let env = std::fs::read_to_string(ws.path().join("end.env")).unwrap();
    let run_id = result["run_id"].as_str().unwrap();
    assert!(env.contains(&format!("DELTA_RUN_ID={run_id}")), "{env}");
    assert!(env.contains("DELTA_HOOK=on_run_end"));

    let run_dir = Path::new(result["metadata"]["run_dir"].as_str().unwrap()).to_path_buf();
    let lines = journal_lines(&run_dir);
    let skipped = lines.iter().find(|l| l["type"] == "ACTION_RESULT").unwrap();
    assert_eq!(skipped["status"], "SUCCESS");
    assert_eq!(skipped["observation_content"], "blocked by policy");
    let failed: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "HOOK_EXECUTED" && l["hook_name"] == "post_llm_response")
        .collect();
    assert_eq!(failed.len(), 2);
    assert_eq!(failed[0]["status"], "FAILED");
    assert_eq!(
        failed[0]["reason"],
        "exited with code 3: cannot reach webhook"
    );
    let record = run_dir.join(failed[0]["io_path_ref"].as_str().unwrap());
    let record: Value = serde_json::from_str(&std::fs::read_to_string(record).unwrap()).unwrap();
    assert_eq!(record["exit_code"], 3);
    assert_eq!(record["stderr"], "cannot reach webhook\n");
    assert_eq!(lines.last().unwrap()["hook_name"], "on_run_end");
}

#[test]
fn legacy_lifecycle_hooks_in_agent_yaml_still_run() {
    let agent = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    write_agent(
        agent.path(),
        "lifecycle_hooks:\n  pre_tool_exec:\n    command: [sh, -c, \"echo $TOOL_NAME > pre-tool.txt\"]\n",
    );
    let output = delta_run(agent.path(), ws.path())
        .success()
        .get_output()
        .clone();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["status"], "COMPLETED", "{result}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("pre-tool.txt")).unwrap(),
        "touch\n"
    );
    assert!(
        ws.path().join("forbidden").exists(),
        "nothing skipped the tool"
    );
}

/// Writes each invocation's env and stdin to `<workspace>/dumps/<hook>/<n>.{env,json}`.
const DUMP: &str =
    "d=dumps/$DELTA_HOOK; mkdir -p $d; n=$(ls $d | grep -c env); env > $d/$n.env; cat > $d/$n.json";

fn dumped(ws: &Path, hook: &str) -> Vec<(String, Value)> {
    let dir = ws.join("dumps").join(hook);
    (0..)
        .map_while(|n| {
            let env = std::fs::read_to_string(dir.join(format!("{n}.env"))).ok()?;
            let stdin = std::fs::read_to_string(dir.join(format!("{n}.json"))).ok()?;
            Some((env, serde_json::from_str(&stdin).unwrap()))
        })
        .collect()
}

#[test]
fn all_eight_hooks_fire_through_delta_run() {
    let hooks: String = [
        "on_iteration_start",
        "pre_llm_request",
        "post_llm_response",
        "pre_tool_execution",
        "post_tool_execution",
        "on_iteration_end",
        "on_error",
        "on_run_end",
    ]
    .iter()
    .map(|h| format!("{h}:\n  command: [sh, -c, \"{DUMP}\"]\n"))
    .collect();
    let (agent, ws) = agent_with_hooks(&hooks);
    std::fs::write(
        agent.path().join("script.yaml"),
        "steps:\n  - tool: touch\n    args: { file: made }\n  - fail: 400\n    message: refused by provider\n",
    )
    .unwrap();
    let output = delta_run(agent.path(), ws.path())
        .code(1)
        .get_output()
        .clone();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["status"], "FAILED", "{result}");
    let run_id = result["run_id"].as_str().unwrap();
    let w = ws.path();
    for (hook, count) in [
        ("on_iteration_start", 2),
        ("pre_llm_request", 2),
        ("post_llm_response", 1),
        ("pre_tool_execution", 1),
        ("post_tool_execution", 1),
        ("on_iteration_end", 1),
        ("on_error", 1),
        ("on_run_end", 1),
    ] {
        let calls = dumped(w, hook);
        assert_eq!(calls.len(), count, "{hook}");
        let env = &calls[0].0;
        for var in [
            format!("DELTA_HOOK={hook}"),
            format!("DELTA_RUN_ID={run_id}"),
            "RUN_DIR=".to_string(),
            "JOURNAL_PATH=".to_string(),
            "ITERATION_COUNT=".to_string(),
        ] {
            assert!(env.lines().any(|l| l.starts_with(&var)), "{hook}: {var}");
        }
    }
    assert!(dumped(w, "pre_tool_execution")[0]
        .0
        .contains("TOOL_NAME=touch"));
    assert!(dumped(w, "post_tool_execution")[0]
        .0
        .contains("TOOL_RESULT="));
    assert!(dumped(w, "on_error")[0].0.contains("ERROR_MESSAGE="));
    assert_eq!(
        dumped(w, "pre_tool_execution")[0].1["tool_args"]["file"],
        "made"
    );
    assert_eq!(
        dumped(w, "pre_llm_request")[0].1["messages"][1]["content"],
        "do it"
    );
    assert_eq!(dumped(w, "on_error")[0].1["error_type"], "llm_error");
    assert_eq!(dumped(w, "on_run_end")[0].1["status"], "FAILED");
}

#[test]
fn request_override_and_a_hanging_hook_through_delta_run() {
    let (agent, ws) = agent_with_hooks("on_iteration_start:\n  command: [sleep, \"30\"]\n  timeout_ms: 200\npre_llm_request:\n  command: [sh, -c, \"cat >/dev/null; echo '{\\\"model\\\":\\\"hook-model\\\",\\\"temperature\\\":0.5}'\"]\n");
    std::fs::write(agent.path().join("script.yaml"), "steps:\n  - answer: ok\n").unwrap();
    let started = std::time::Instant::now();
    let output = delta_run(agent.path(), ws.path())
        .success()
        .get_output()
        .clone();
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["status"], "COMPLETED", "{result}");
    let run_dir = Path::new(result["metadata"]["run_dir"].as_str().unwrap()).to_path_buf();
    let invocation = std::fs::read_dir(run_dir.join("io/invocations"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(invocation).unwrap()).unwrap();
    assert_eq!(record["request"]["model"], "hook-model");
    assert_eq!(record["request"]["temperature"], 0.5);
    let lines = journal_lines(&run_dir);
    let hang = lines
        .iter()
        .find(|l| l["type"] == "HOOK_EXECUTED" && l["hook_name"] == "on_iteration_start")
        .unwrap();
    assert_eq!(hang["status"], "TIMED_OUT");
    assert!(hang["reason"]
        .as_str()
        .unwrap()
        .contains("timed out after 200 ms"));
}

/// Ctrl-C while a hook runs: the hook's group is killed, `on_run_end` still runs (bounded),
/// and `delta run` exits 130 promptly.
#[test]
fn ctrl_c_during_a_hook_interrupts_promptly_and_on_run_end_runs() {
    let (agent, ws) = agent_with_hooks(&format!("pre_tool_execution:\n  command: [sh, -c, \"touch hook-started; sleep 30\"]\non_run_end:\n  command: [sh, -c, \"{DUMP}\"]\n"));
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("delta"))
        .env_remove("DELTA_API_KEY")
        .env("HOME", ws.path())
        .args(["run", "-m", "do it", "--format", "json", "-a"])
        .arg(agent.path())
        .arg("-w")
        .arg(ws.path())
        .arg("--llm-script")
        .arg(agent.path().join("script.yaml"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let marker = ws.path().join("hook-started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !marker.exists() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the hook never started");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let signalled = std::time::Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > std::time::Duration::from_secs(15) {
            let _ = child.kill();
            panic!("delta did not exit after Ctrl-C");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(130));
    assert!(!ws.path().join("forbidden").exists(), "the tool never ran");
    let end = dumped(ws.path(), "on_run_end");
    assert_eq!(end.len(), 1);
    assert_eq!(end[0].1["status"], "INTERRUPTED");
}
