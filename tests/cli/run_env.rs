//! Acceptance tests of `delta run` (issue 3) about what surrounds the loop: where the model
//! key comes from (.env, a clear error without one), what a tool process gets (environment,
//! stdin), how big outputs are cut for the model, parallel tool calls, the context recipe,
//! agent workspaces, and the offline hello-world example.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

#[test]
fn without_a_key_or_script_the_error_says_how_to_set_one() {
    let case = Case::new("nokey", "tools: []\n", &json!({"steps": [{"answer": "x"}]}));
    let mut cmd = case.cmd();
    // A remote endpoint needs a key (one on this machine does not: see below); this one is
    // never contacted.
    cmd.env_remove("DELTA_API_KEY")
        .env("DELTA_BASE_URL", "https://llm.example.invalid/v1");
    let out = cmd.args(case.run_args("r1", "task")).output().unwrap();
    assert_eq!(out.status.code(), Some(126));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DELTA_API_KEY") && stderr.contains("--llm-script"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    assert!(!case.work_dir().join(".delta/r1").exists());
}

/// llama.cpp, Ollama, LM Studio and vLLM on this machine take no key: a loopback endpoint is
/// called without one (and without an `Authorization` header).
#[test]
fn a_model_server_on_this_machine_needs_no_key() {
    let case = Case::new(
        "local",
        "tools: []\n",
        &json!({"steps": [{"answer": "keyless"}]}),
    );
    let mut cmd = case.cmd();
    cmd.env_remove("DELTA_API_KEY");
    let out = cmd
        .args(case.run_args("r1", "task"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["result"], "keyless");
}

#[test]
fn key_and_endpoint_come_from_the_workspace_dot_env() {
    let case = Case::new(
        "dotenv",
        "tools: []\n",
        &json!({"steps": [{"answer": "via .env"}]}),
    );
    std::fs::write(
        case.work_dir().join(".env"),
        format!(
            "DELTA_API_KEY=sk-from-dotenv\nDELTA_BASE_URL={}\n",
            case.mock.base_url
        ),
    )
    .unwrap();
    let mut cmd = case.cmd();
    cmd.env_remove("DELTA_API_KEY").env_remove("DELTA_BASE_URL");
    let out = cmd
        .args(case.run_args("r1", "task"))
        .args(["--format", "raw"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), "via .env");
}

#[test]
fn tools_get_the_engine_variables_but_never_the_api_key() {
    let tools = r#"tools:
  - name: show_env
    description: print the environment
    exec: "env"
"#;
    let script = json!({"steps": [{"tool": "show_env"}, {"answer": "ok"}]});
    let case = Case::new("envy", tools, &script);
    case.run("r1", "task", &[]).assert_code(0);
    let env = observations(&case.journal("r1")).remove(0);
    assert!(
        !env.contains("sk-cli-test"),
        "API key leaked to a tool:\n{env}"
    );
    assert!(!env.contains("DELTA_API_KEY="), "{env}");
    let line = |name: &str| {
        env.lines()
            .find(|l| l.starts_with(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing:\n{env}"))
            .split_once('=')
            .unwrap()
            .1
            .to_string()
    };
    assert_eq!(line("DELTA_RUN_ID"), "r1");
    let work_dir = case.work_dir().canonicalize().unwrap();
    assert_eq!(line("DELTA_CWD"), work_dir.display().to_string());
    let agent_home = case.agent_dir().canonicalize().unwrap();
    assert_eq!(line("AGENT_HOME"), agent_home.display().to_string());
    assert_eq!(line("DELTA_AGENT_HOME"), agent_home.display().to_string());
    let delta_dir = delta_exe().parent().unwrap().canonicalize().unwrap();
    let first_on_path = line("PATH").split(':').next().unwrap().to_string();
    assert_eq!(
        std::path::Path::new(&first_on_path).canonicalize().unwrap(),
        delta_dir
    );
}

#[test]
fn a_tool_without_a_stdin_parameter_reads_dev_null_not_the_engines_stdin() {
    let tools = r#"tools:
  - name: read_stdin
    description: read standard input to its end
    exec: "cat"
"#;
    let script = json!({"steps": [{"tool": "read_stdin"}, {"answer": "{{ last_observation }}"}]});
    let case = Case::new("stdin", tools, &script);
    // delta's own stdin stays open and silent: a tool that inherited it would block.
    let mut child = case
        .spawn_cmd()
        .args(case.run_args("r1", "task"))
        .args(["--format", "raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let open_stdin = child.stdin.take();
    let status = wait_child(&mut child, Duration::from_secs(20));
    drop(open_stdin);
    assert_eq!(status.code(), Some(0));
    let obs = observations(&case.journal("r1")).remove(0);
    assert!(obs.contains("EXIT CODE: 0"), "{obs}");
}

#[test]
fn big_output_is_cut_for_the_model_and_kept_whole_on_disk() {
    let tools = r#"tools:
  - name: flood
    description: print numbered lines
    exec: "seq 1 20000"
"#;
    let script = json!({"steps": [{"tool": "flood"}, {"answer": "ok"}]});
    let case = Case::new("flood", tools, &script);
    case.run("r1", "task", &[]).assert_code(0);
    let obs = observations(&case.journal("r1")).remove(0);
    // seq 1 20000 prints 108894 bytes: the model sees the head, a cut line and the tail.
    assert!(
        obs.len() < 20_000,
        "observation not cut: {} bytes",
        obs.len()
    );
    assert!(obs.contains("\n1\n2\n3\n"), "head kept");
    assert!(obs.contains("\n19999\n20000"), "tail kept");
    assert!(!obs.contains("\n10000\n"), "middle cut");
    let full: Vec<_> = files_under(&case.run_dir("r1").join("io/tool_executions"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".stdout"))
        .collect();
    assert_eq!(full.len(), 1, "{full:?}");
    let text = std::fs::read_to_string(&full[0]).unwrap();
    assert_eq!(text.lines().count(), 20_000);
    let name = full[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        obs.contains(&name),
        "the cut line says where the full text is:\n{obs}"
    );
}

#[test]
fn parallel_tool_calls_run_concurrently_and_are_recorded_in_reply_order() {
    // `waiter` only succeeds if `signaller` runs while it waits: proof of concurrency
    // without timing assumptions.
    let tools = r#"parallel_tool_calls: true
tools:
  - name: waiter
    description: wait for the signal file
    shell: "for i in $(seq 1 200); do if [ -f signal ]; then echo saw-signal; exit 0; fi; sleep 0.05; done; echo gave-up; exit 1"
  - name: signaller
    description: create the signal file
    exec: "touch signal"
"#;
    let script = json!({"steps": [
        {"tools": [{"tool": "waiter"}, {"tool": "signaller"}]},
        {"answer": "ok"}
    ]});
    let case = Case::new("parallel", tools, &script);
    case.run("r1", "task", &[]).assert_code(0);
    let journal = case.journal("r1");
    let results = events_of(&journal, "ACTION_RESULT");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["tool_name"], "waiter");
    assert_eq!(results[1]["tool_name"], "signaller");
    let waited = results[0]["observation_content"].as_str().unwrap();
    assert!(waited.contains("saw-signal"), "{waited}");
}

#[test]
fn ctrl_c_during_a_slow_model_call_interrupts_at_once() {
    let script = json!({"steps": [{"answer": "too late", "latency": "20s"}]});
    let case = Case::new("slowmodel", "tools: []\n", &script);
    let child = case.spawn_json_run(case.spawn_cmd(), "r1", "task");
    let in_flight = wait_until(Duration::from_secs(20), || {
        case.mock.stats()["in_flight"] == 1
    });
    assert!(in_flight, "the model call never started");
    send_signal(child.id(), nix::sys::signal::Signal::SIGINT);
    let out = wait_output(child, Duration::from_secs(5));
    assert_eq!(out.code, 130, "{}", out.stdout);
    assert_eq!(out.json()["status"], "INTERRUPTED");
    // Nothing answered the call, so nothing of it was journaled.
    assert!(events_of(&case.journal("r1"), "THOUGHT").is_empty());
}

fn write_context(case: &Case, generator: &str) {
    let context = format!(
        "sources:\n  - type: file\n    id: system_prompt\n    path: '${{AGENT_HOME}}/system_prompt.md'\n  - type: computed_file\n    id: notes\n    generator:\n      command: [\"sh\", \"-c\", '{generator}']\n    output_path: '${{CWD}}/notes.md'\n    on_missing: skip\n  - type: journal\n    id: conversation_history\n"
    );
    std::fs::write(case.agent_dir().join("context.yaml"), context).unwrap();
}

#[test]
fn computed_context_reaches_the_model_in_order_with_block_headers() {
    let case = Case::new("ctx", "tools: []\n", &json!({"steps": [{"answer": "ok"}]}));
    write_context(&case, "echo generated for $DELTA_RUN_ID > notes.md");
    case.run("r1", "task", &[]).assert_code(0);
    let invocation = files_under(&case.run_dir("r1").join("io/invocations")).remove(0);
    let messages = read_json(&invocation)["request"]["messages"].clone();
    let system: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    let all = system.join("\n");
    let prompt_at = all.find("# Context Block: system_prompt").expect(&all);
    let notes_at = all.find("# Context Block: notes").expect(&all);
    assert!(prompt_at < notes_at, "{all}");
    assert!(all.contains("generated for r1"), "{all}");
}

#[test]
fn a_failing_generator_fails_the_run_naming_the_source_even_with_on_missing_skip() {
    let case = Case::new("ctx", "tools: []\n", &json!({"steps": [{"answer": "ok"}]}));
    write_context(&case, "echo broken >&2; exit 3");
    let out = case.run("r1", "task", &[]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["status"], "FAILED");
    assert!(result["error"].to_string().contains("notes"), "{result}");
    assert_eq!(
        case.mock.stats()["requests_total"],
        0,
        "the model was called"
    );
}

#[test]
fn without_work_dir_each_run_gets_the_next_agent_workspace() {
    let case = Case::new(
        "wsagent",
        "tools: []\n",
        &json!({"steps": [{"answer": "ok"}]}),
    );
    let agent = case.agent_dir().display().to_string();
    // `-y`, then no flag at all: without a terminal delta never asks either.
    for extra in [vec!["-y"], vec![]] {
        let out = case.delta(&[&["run", "--agent", &agent, "-m", "task"][..], &extra].concat());
        out.assert_code(0);
    }
    let workspaces = case.agent_dir().join("workspaces");
    for name in ["W001", "W002"] {
        let runs = std::fs::read_dir(workspaces.join(name).join(".delta"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .count();
        assert_eq!(runs, 1, "{name}");
    }
    let last_used = std::fs::read_to_string(workspaces.join("LAST_USED")).unwrap();
    assert_eq!(last_used.trim(), "W002");
}

/// Regression (issue 11 item 15): a configuration error (here: no model configured) used to
/// leave an empty new workspace W00N behind and move LAST_USED. Everything is validated
/// before anything is created, with or without `-w`.
#[test]
fn a_configuration_error_creates_no_workspace_and_keeps_last_used() {
    let case = Case::new(
        "nomodel",
        "tools: []\n",
        &json!({"steps": [{"answer": "ok"}]}),
    );
    let agent = case.agent_dir().display().to_string();
    case.delta(&["run", "--agent", &agent, "-y", "-m", "first"])
        .assert_code(0);
    let workspaces = case.agent_dir().join("workspaces");
    let before: Vec<_> = std::fs::read_dir(&workspaces)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        std::fs::read_to_string(workspaces.join("LAST_USED")).unwrap(),
        "W001"
    );

    let missing_ws = case.path().join("never-created");
    let missing_ws = missing_ws.display().to_string();
    for extra in [vec!["-y"], vec!["-w", missing_ws.as_str()]] {
        let mut cmd = case.cmd();
        cmd.env_remove("DELTA_API_KEY").env_remove("DELTA_BASE_URL");
        let out = cmd
            .args([&["run", "--agent", &agent, "-m", "second"][..], &extra].concat())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{extra:?}: {stderr}");
        assert!(stderr.contains("DELTA_API_KEY"), "{stderr}");
    }
    let after: Vec<_> = std::fs::read_dir(&workspaces)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(after, before, "no new workspace");
    assert_eq!(
        std::fs::read_to_string(workspaces.join("LAST_USED")).unwrap(),
        "W001"
    );
    assert!(!Path::new(&missing_ws).exists(), "-w folder created");
}

/// `delta run` under `ulimit {limit_flag} 20`, through `sh` (the limit applies to the exec'd
/// delta only).
fn run_with_open_files_limit(case: &Case, limit_flag: &str, run_id: &str) -> Outcome {
    let script = format!("ulimit {limit_flag} 20 && exec \"$0\" \"$@\"");
    let output = assert_cmd::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(delta_exe())
        .args(case.run_args(run_id, "task"))
        .args(["--format", "json"])
        .env_clear()
        .envs(case.env())
        .current_dir(case.path())
        .timeout(COMMAND_TIMEOUT)
        .output()
        .unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Regression (issue 11 item 4b): `ulimit -n 20` made `delta run` panic creating an arbiter.
/// It now stops before starting the engine, says the limit and what it needs, exit 126.
#[test]
fn too_few_open_files_is_a_clear_error_not_a_panic() {
    let case = Case::new("fds", "tools: []\n", &json!({"steps": [{"answer": "ok"}]}));
    let out = run_with_open_files_limit(&case, "-n", "r1");
    out.assert_code(126);
    assert!(
        out.stderr
            .contains("too many open files (limit 20; need about"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("ulimit -n"), "{}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
    assert!(!case.run_dir("r1").exists());
}

/// A low soft limit under a high hard one is raised, as `delta bench` does.
#[test]
fn a_low_soft_open_files_limit_is_raised_to_what_the_engine_needs() {
    let case = Case::new("fds", "tools: []\n", &json!({"steps": [{"answer": "ok"}]}));
    let out = run_with_open_files_limit(&case, "-Sn", "r1");
    out.assert_code(0);
    assert_eq!(out.json()["status"], "COMPLETED");
}

#[test]
fn hello_world_example_script_runs_offline() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = manifest.join("examples/agents/hello-world/llm-script.yaml");
    let case = Case::new(
        "unused",
        "tools: []\n",
        &json!({"steps": [{"answer": "x"}]}),
    );
    // The example itself, copied so its workspaces land in the temporary root.
    let example = manifest.join("examples/agents/hello-world");
    copy_dir(&example, &case.path().join("hello-world"));
    let _ = std::fs::remove_dir_all(case.path().join("hello-world/workspaces"));
    let mut cmd = case.cmd();
    cmd.env_remove("DELTA_API_KEY").env_remove("DELTA_BASE_URL");
    let out = cmd
        .args([
            "run",
            "--agent",
            "hello-world",
            "-m",
            "Say hello",
            "-y",
            "--format",
            "json",
        ])
        .arg("--llm-script")
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "COMPLETED");
    let hello = case.path().join("hello-world/workspaces/W001/hello.txt");
    assert!(std::fs::read_to_string(hello)
        .unwrap()
        .contains("Say hello"));
}

#[test]
fn ctrl_c_during_a_retry_after_wait_interrupts_at_once() {
    let script = json!({"steps": [
        {"fail": 429, "times": 1, "retry_after": 30, "then": {"answer": "too late"}}
    ]});
    let case = Case::new("backoff", "tools: []\n", &script);
    let mut cmd = case.spawn_cmd();
    // Default retry policy: the provider's Retry-After of 30 s is honoured.
    cmd.env_remove("DELTA_RETRY_BASE_MS");
    let child = case.spawn_json_run(cmd, "r1", "task");
    // In its retry wait once the engine has recorded the failed attempt (the mock counting
    // its 429 is earlier: the answer may still be on its way, and a Ctrl-C then cancels the
    // call instead of interrupting the wait).
    let attempt_recorded = || {
        let records = case.run_dir("r1").join("io/invocations");
        records.is_dir()
            && crate::harness::files_under(&records)
                .iter()
                .any(|p| p.to_string_lossy().ends_with("_1_attempt1.json"))
    };
    let rate_limited = wait_until(Duration::from_secs(20), || {
        case.mock.stats()["failures"] == 1 && attempt_recorded()
    });
    assert!(rate_limited, "the first attempt never failed");
    send_signal(child.id(), nix::sys::signal::Signal::SIGINT);
    let out = wait_output(child, Duration::from_secs(5));
    assert_eq!(out.code, 130, "{}", out.stdout);
    assert_eq!(out.json()["status"], "INTERRUPTED");
    assert_eq!(
        case.mock.stats()["requests_total"],
        1,
        "retried after Ctrl-C"
    );
    // Issue 25 §3: the run stopped mid-retry keeps the record of its failed attempt, written
    // when the attempt failed, and its engine.log line.
    let invocations = crate::harness::files_under(&case.run_dir("r1").join("io/invocations"));
    assert!(
        invocations
            .iter()
            .any(|p| p.to_string_lossy().ends_with("_1_attempt1.json")),
        "{invocations:?}"
    );
    let log = std::fs::read_to_string(case.run_dir("r1").join("engine.log")).unwrap();
    assert!(log.contains("model call attempt 1 failed"), "{log}");
}

#[test]
fn a_journal_window_keeps_the_task_and_a_valid_history() {
    let tools = "tools:\n  - name: say\n    description: print\n    exec: \"echo ${message}\"\n";
    let say = |m: &str| json!({"tool": "say", "args": {"message": m}});
    // With a window of one iteration the model sees one assistant turn per request, so
    // the scripted step stays 1 and the calls keep coming: the iteration cap ends the run.
    let script = json!({"steps": [say("first"), say("later")]});
    let case = Case::new("window", tools, &script);
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n    max_iterations: 1\n",
    )
    .unwrap();
    let out = case.run("r1", "the original task", &["--max-iterations", "4"]);
    out.assert_code(1);
    assert_eq!(
        case.mock.stats()["rejected_invalid"],
        0,
        "invalid windowed history"
    );
    let mut invocations = files_under(&case.run_dir("r1").join("io/invocations"));
    invocations.sort();
    let last = read_json(invocations.last().unwrap());
    let messages = last["request"]["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool"],
        "{messages:?}"
    );
    assert_eq!(messages[1]["content"], "the original task");
}

#[test]
fn rules_match_non_ascii_agent_names_and_tasks_over_http() {
    let script = json!({"rules": [
        {"agent": "agent-é", "task_contains": "café", "steps": [{"answer": "matched {{ agent }}"}]},
        {"steps": [{"answer": "fell through"}]}
    ]});
    let case = Case::new("agent-é", "tools: []\n", &script);
    let out = case.run("r1", "un café ☕", &[]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "matched agent-é");
}
