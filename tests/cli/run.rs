//! Acceptance tests of `delta run` (issue 3) through the real HTTP client against
//! `delta mock-llm`: files, events, metadata and RunResult formats, hostile parameters,
//! big stdin, error observations, tool timeouts, retries, the iteration cap, Ctrl-C and
//! SIGTERM, run ids, and torn journals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::harness::*;

const FIVE_TOOLS: &str = r#"tools:
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
  - name: shout
    description: Upper-case a text
    shell: "printf '%s' ${text} | tr a-z A-Z"
"#;

fn five_tool_script() -> Value {
    json!({
        "default_latency": 0,
        "steps": [
            {"tool": "say", "args": {"message": "hello {{ task }}"}},
            {"tool": "write_file", "args": {"filename": "notes.txt", "content": "one two three\n"}},
            {"tool": "count_words", "args": {"text": "alpha beta gamma delta"}},
            {"tool": "list", "args": {"dir": "."}},
            {"tool": "shout", "args": {"text": "quiet words"}},
            {"answer": "All done. {{ last_observation }}"}
        ]
    })
}

#[test]
fn five_tool_run_leaves_complete_files_and_a_json_run_result() {
    let case = Case::new("five", FIVE_TOOLS, &five_tool_script());
    let out = case.run("r-json", "the task", &[]);
    out.assert_code(0);
    let result = out.json();
    assert_eq!(result["schema_version"], "2.0");
    assert_eq!(result["status"], "COMPLETED");
    assert_eq!(result["run_id"], "r-json");
    let answer = result["result"].as_str().unwrap();
    assert!(
        answer.starts_with("All done.") && answer.contains("QUIET WORDS"),
        "{answer}"
    );

    // The tools really ran in the workspace.
    assert_eq!(
        std::fs::read_to_string(case.work_dir().join("notes.txt")).unwrap(),
        "one two three\n"
    );

    let journal = case.journal("r-json");
    assert_seq_strictly_increasing(&journal);
    let mut expected = vec!["ENGINE_START", "USER_MESSAGE"];
    for _ in 0..5 {
        expected.extend(["THOUGHT", "ACTION_REQUEST", "ACTION_RESULT"]);
    }
    expected.extend(["THOUGHT", "ENGINE_END"]);
    assert_eq!(types(&journal), expected);
    let obs = observations(&journal);
    assert!(obs[0].contains("hello the task"), "{}", obs[0]);
    assert!(obs[2].contains('4'), "word count: {}", obs[2]);
    assert!(obs[3].contains("notes.txt"), "listing: {}", obs[3]);
    for request in events_of(&journal, "ACTION_REQUEST") {
        let id = &request["action_id"];
        let results: Vec<_> = events_of(&journal, "ACTION_RESULT")
            .into_iter()
            .filter(|r| &r["action_id"] == id)
            .collect();
        assert_eq!(results.len(), 1, "one result for {id}");
    }
    let end = journal.last().unwrap();
    assert_eq!(end["status"], "COMPLETED");
    assert_eq!(end["result"].as_str(), Some(answer));

    let meta = case.metadata("r-json");
    assert_eq!(meta["status"], "COMPLETED");
    assert_eq!(meta["run_id"], "r-json");
    assert_eq!(meta["agent_name"], "five");
    assert_eq!(meta["initial_message"], "the task");
    assert_eq!(meta["task"], "the task", "the original engine's field name");
    assert_eq!(meta["iterations"], 6);
    assert_eq!(meta["result"].as_str(), Some(answer));
    assert!(meta["pid"].as_u64().is_some() && meta["hostname"].is_string());

    let run_dir = case.run_dir("r-json");
    assert!(case.work_dir().join(".delta/VERSION").is_file());
    assert!(run_dir.join("engine.log").is_file());
    let invocations = files_under(&run_dir.join("io/invocations"));
    assert_eq!(invocations.len(), 6, "{invocations:?}");
    for file in &invocations {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            !text.contains("sk-cli-test"),
            "API key leaked into {file:?}"
        );
    }
    let executions: Vec<_> = files_under(&run_dir.join("io/tool_executions"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(executions.len(), 5, "{executions:?}");
}

#[test]
fn text_and_raw_formats() {
    let case = Case::new("five", FIVE_TOOLS, &five_tool_script());
    let text = case.delta(
        &[
            case.run_args("r-text", "t")
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            vec!["--format", "text"],
        ]
        .concat(),
    );
    text.assert_code(0);
    assert!(text.stdout.contains("COMPLETED"), "{}", text.stdout);
    assert!(text.stdout.contains("r-text"), "{}", text.stdout);
    assert!(text.stdout.contains("QUIET WORDS"), "{}", text.stdout);
    // Progress goes to stderr, never stdout.
    assert!(text.stderr.contains("shout"), "{}", text.stderr);
    assert!(!text.stdout.contains("[iteration"), "{}", text.stdout);

    let raw = case.delta(
        &[
            case.run_args("r-raw", "t")
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            vec!["--format", "raw"],
        ]
        .concat(),
    );
    raw.assert_code(0);
    let expected = case.metadata("r-raw")["result"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(raw.stdout.trim_end_matches('\n'), expected);
}

const HOSTILE: [&str; 8] = [
    "$(touch pwned1)",
    "; touch pwned2",
    "`touch pwned3`",
    "it's \"quoted\" \\ back",
    "line one\nline two && touch pwned4",
    "| touch pwned5",
    "${HOME} $PATH *",
    "-n",
];

#[test]
fn hostile_parameter_values_arrive_literally_in_exec_and_shell_mode() {
    let tools = r#"tools:
  - name: exec_echo
    description: print the value (no shell)
    exec: "printf %s:END ${value}"
  - name: shell_echo
    description: print the value through sh
    shell: "printf '%s' ${value}; echo :END"
"#;
    let calls: Vec<Value> = HOSTILE
        .iter()
        .flat_map(|v| {
            [
                json!({"tool": "exec_echo", "args": {"value": v}}),
                json!({"tool": "shell_echo", "args": {"value": v}}),
            ]
        })
        .collect();
    let script = json!({"steps": [{"tools": calls}, {"answer": "checked"}]});
    let case = Case::new("hostile", tools, &script);
    case.run("r1", "hostile", &[]).assert_code(0);

    let journal = case.journal("r1");
    let obs = observations(&journal);
    assert_eq!(obs.len(), HOSTILE.len() * 2);
    for (i, value) in HOSTILE.iter().enumerate() {
        let expected = format!("=== STDOUT ===\n{value}:END");
        for o in &obs[2 * i..2 * i + 2] {
            assert!(
                o.contains(&expected),
                "value {value:?} not literal in:\n{o}"
            );
        }
    }
    let planted: Vec<_> = files_under(case.path())
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("pwned")
        })
        .collect();
    assert!(planted.is_empty(), "injection created {planted:?}");
}

#[test]
fn one_mebibyte_stdin_parameter_reaches_the_tool() {
    let tools = r#"tools:
  - name: measure
    description: count bytes and lines of the input
    exec: "wc -c"
    stdin: data
"#;
    let line = format!("{}\n", "x".repeat(1023));
    let data = line.repeat(1024);
    assert_eq!(data.len(), 1 << 20);
    let script = json!({"steps": [
        {"tool": "measure", "args": {"data": data}},
        {"answer": "{{ last_observation }}"}
    ]});
    let case = Case::new("bigstdin", tools, &script);
    let out = case.run("r1", "measure", &[]);
    out.assert_code(0);
    let result = out.json()["result"].as_str().unwrap().to_string();
    assert!(result.contains("1048576"), "{result}");
    let record = files_under(&case.run_dir("r1").join("io/tool_executions"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let record = read_json(&record);
    assert_eq!(record["stdin_bytes"], 1 << 20, "{record}");
    assert_eq!(record["argv"], json!(["wc", "-c"]));
}

#[test]
fn unknown_tool_and_malformed_arguments_become_observations() {
    let tools = r#"tools:
  - name: say
    description: print
    exec: "echo ${message}"
"#;
    let script = json!({"steps": [
        {"tools": [
            {"tool": "no_such_tool", "args": {}},
            {"tool": "say", "raw_args": "{not json"}
        ]},
        {"answer": "recovered"}
    ]});
    let case = Case::new("errors", tools, &script);
    let out = case.run("r1", "break things", &[]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "recovered");
    let journal = case.journal("r1");
    let results = events_of(&journal, "ACTION_RESULT");
    assert_eq!(results.len(), 2);
    let unknown = results[0]["observation_content"].as_str().unwrap();
    assert!(unknown.contains("no_such_tool"), "{unknown}");
    assert_ne!(results[0]["status"], "SUCCESS");
    let malformed = results[1]["observation_content"].as_str().unwrap();
    assert!(
        malformed.to_lowercase().contains("argument") || malformed.to_lowercase().contains("json"),
        "{malformed}"
    );
    assert_ne!(results[1]["status"], "SUCCESS");
}

#[test]
fn timed_out_tool_leaves_no_process_behind() {
    let case = Case::new(
        "slowtool",
        r#"tools:
  - name: spawn_and_hang
    description: fork a grandchild that ignores SIGTERM, then hang
    exec: "${AGENT_HOME}/spawn.sh"
    timeout_ms: 1000
"#,
        &json!({"steps": [
            {"tool": "spawn_and_hang"},
            {"answer": "{{ last_observation }}"}
        ]}),
    );
    let spawn = case.agent_dir().join("spawn.sh");
    std::fs::write(
        &spawn,
        "#!/bin/sh\nsh -c 'trap \"\" TERM; echo $$ > grandchild.pid.tmp; mv grandchild.pid.tmp grandchild.pid; exec sleep 60' &\n\
         for i in $(seq 1 100); do [ -f grandchild.pid ] && break; sleep 0.01; done\n\
         echo started\nsleep 60\n",
    )
    .unwrap();
    make_executable(&spawn);
    let out = case.run("r1", "hang", &[]);
    out.assert_code(0);
    let result = out.json()["result"].as_str().unwrap().to_lowercase();
    assert!(
        result.contains("timed out") || result.contains("timeout"),
        "{result}"
    );
    assert!(result.contains("started"), "partial output kept: {result}");
    let record = files_under(&case.run_dir("r1").join("io/tool_executions"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let record = read_json(&record);
    assert_eq!(record["timed_out"], true, "{record}");
    assert_eq!(record["timeout_ms"], 1000);
    let pid = wait_for_pid_file(
        &case.work_dir().join("grandchild.pid"),
        Duration::from_secs(5),
    );
    let gone = wait_until(Duration::from_secs(5), || !process_alive(pid));
    if !gone {
        kill_pid(pid);
    }
    assert!(gone, "grandchild {pid} survived the tool timeout");
}

pub fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn rate_limited_twice_then_success_records_the_attempts() {
    let script = json!({"steps": [
        {"fail": 429, "times": 2, "retry_after": 0, "then": {"answer": "finally"}}
    ]});
    let case = Case::new("limited", "tools: []\n", &script);
    let out = case.run("r1", "go", &[]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "finally");
    let mut invocations = files_under(&case.run_dir("r1").join("io/invocations"));
    invocations.sort();
    assert_eq!(invocations.len(), 3, "{invocations:?}");
    // Each failed attempt has its own record, written as it failed, with the request sent.
    for (n, record) in invocations[..2].iter().enumerate() {
        let name = record.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.ends_with(&format!("_1_attempt{}.json", n + 1)),
            "{name}"
        );
        let attempt = read_json(record);
        assert_eq!(attempt["attempt"], n as u64 + 1, "{attempt}");
        assert!(
            attempt["error"].as_str().unwrap().contains("429"),
            "{attempt}"
        );
        assert_eq!(attempt["request"]["messages"][1]["content"], "go");
    }
    let invocation = read_json(&invocations[2]);
    assert_eq!(invocation["attempts"], 3, "{invocation}");
    assert_eq!(case.mock.stats()["failures"], 2);
    let log = std::fs::read_to_string(case.run_dir("r1").join("engine.log")).unwrap();
    assert_eq!(log.matches("model call attempt").count(), 2, "{log}");
}

#[test]
fn server_errors_until_retries_run_out_fail_the_run() {
    let script = json!({"steps": [{"fail": 500, "message": "upstream exploded"}]});
    let case = Case::new("broken", "tools: []\n", &script);
    let out = case.run("r1", "go", &[]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["status"], "FAILED");
    let error = result["error"].to_string();
    assert!(
        error.contains("upstream exploded") || error.contains("500"),
        "{error}"
    );
    assert_eq!(case.metadata("r1")["status"], "FAILED");
    assert_eq!(
        case.mock.stats()["failures"],
        5,
        "default retry budget is 5 attempts"
    );
    let journal = case.journal("r1");
    assert_eq!(journal.last().unwrap()["type"], "ENGINE_END");
    assert_eq!(journal.last().unwrap()["status"], "FAILED");
}

#[test]
fn iteration_cap_fails_the_run() {
    let step = json!({"tool": "say", "args": {"message": "again"}});
    let script = json!({"steps": [step, step, step, step, {"answer": "never"}]});
    let tools = "tools:\n  - name: say\n    description: print\n    exec: \"echo ${message}\"\n";
    let case = Case::new("looper", tools, &script);
    let out = case.run("r1", "loop", &["--max-iterations", "2"]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["status"], "FAILED");
    assert!(
        result["error"].to_string().contains("max_iterations"),
        "{result}"
    );
    let meta = case.metadata("r1");
    assert_eq!(meta["status"], "FAILED");
    assert_eq!(meta["iterations"], 2);
}

#[test]
fn ctrl_c_interrupts_kills_the_tool_group_and_prints_the_result() {
    interrupt_while_a_tool_runs(Signal::SIGINT);
}

#[test]
fn sigterm_interrupts_like_ctrl_c() {
    interrupt_while_a_tool_runs(Signal::SIGTERM);
}

fn interrupt_while_a_tool_runs(signal: Signal) {
    let tools = r#"tools:
  - name: hang
    description: sleep for a long time
    shell: "sleep 60 & echo $! > tool.pid.tmp; mv tool.pid.tmp tool.pid; wait"
"#;
    let script = json!({"steps": [{"tool": "hang"}, {"answer": "resumed"}]});
    let case = Case::new("sleeper", tools, &script);
    let mut child = case.spawn_json_run(case.spawn_cmd(), "r1", "hang");
    let tool_pid = wait_for_pid_file(&case.work_dir().join("tool.pid"), Duration::from_secs(20));
    send_signal(child.id(), signal);
    let status = wait_child(&mut child, Duration::from_secs(15));
    // tool_pid is the shell's child: only a kill of the whole group reaches it.
    let gone = wait_until(Duration::from_secs(5), || !process_alive(tool_pid));
    if !gone {
        kill_pid(tool_pid);
    }
    assert_eq!(status.code(), Some(130));
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["status"], "INTERRUPTED");
    assert!(gone, "tool {tool_pid} still alive after {signal}");
    assert_eq!(case.metadata("r1")["status"], "INTERRUPTED");
    assert_seq_strictly_increasing(&case.journal("r1"));
}

#[test]
fn a_second_ctrl_c_kills_the_tools_and_exits_at_once_leaving_a_resumable_run() {
    // The tool ignores SIGTERM, so the first Ctrl-C alone would wait for the kill grace.
    let tools = r#"tools:
  - name: stubborn
    description: ignores SIGTERM and sleeps
    shell: "trap '' TERM; sleep 60 & echo $! > tool.pid.tmp; mv tool.pid.tmp tool.pid; wait"
"#;
    let script = json!({"steps": [{"tool": "stubborn"}, {"answer": "resumed"}]});
    let case = Case::new("stubborn", tools, &script);
    let stderr_path = case.work_dir().join("..").join("stubborn-stderr.txt");
    let mut child = case
        .spawn_cmd()
        .args(case.run_args("r1", "wait"))
        .args(["--format", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let tool_pid = wait_for_pid_file(&case.work_dir().join("tool.pid"), Duration::from_secs(20));
    send_signal(child.id(), Signal::SIGINT);
    let first_seen = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&stderr_path).is_ok_and(|t| t.contains("to exit at once"))
    });
    assert!(first_seen, "the first Ctrl-C was not acknowledged");
    // A signal within a second of the first is the same Ctrl-C (issue 24 item 17): the
    // forced exit needs a second one later than that.
    std::thread::sleep(Duration::from_millis(1200));
    send_signal(child.id(), Signal::SIGINT);
    let status = wait_child(&mut child, Duration::from_secs(15));
    let gone = wait_until(Duration::from_secs(5), || !process_alive(tool_pid));
    if !gone {
        kill_pid(tool_pid);
    }
    assert_eq!(status.code(), Some(130));
    assert!(gone, "tool {tool_pid} survived the second Ctrl-C");
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(
        stdout.is_empty(),
        "no RunResult on an immediate exit: {stdout}"
    );
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(
        stderr.contains("exiting now") && stderr.contains("continue --run-id r1 -w "),
        "the forced exit names the command that recovers the run:\n{stderr}"
    );
    // Exited before the run could finish: still RUNNING, recovered by continue.
    assert_eq!(case.metadata("r1")["status"], "RUNNING");
    let resumed = case.continue_run("r1", &[]);
    resumed.assert_code(0);
    assert_eq!(resumed.json()["result"], "resumed");
}

#[test]
fn duplicate_and_invalid_run_ids_are_configuration_errors() {
    let case = Case::new("ids", "tools: []\n", &json!({"steps": [{"answer": "ok"}]}));
    case.run("job-7", "first", &[]).assert_code(0);
    let dup = case.run("job-7", "second", &[]);
    dup.assert_code(126);
    assert!(
        dup.stderr.contains("job-7") && dup.stderr.contains("list-runs"),
        "{}",
        dup.stderr
    );
    assert!(dup.stdout.is_empty(), "{}", dup.stdout);
    for bad in ["../escape", "has space", "a/b", ".hidden"] {
        let out = case.run(bad, "x", &[]);
        out.assert_code(126);
        assert!(out.stderr.contains(bad), "{bad}: {}", out.stderr);
    }
    assert!(!case.path().join("escape").exists());
}

#[test]
fn run_folder_left_by_a_kill_during_creation_does_not_block_its_id() {
    let case = Case::new(
        "reuse",
        "tools: []\n",
        &json!({"steps": [{"answer": "ok"}]}),
    );
    // What a SIGKILL between creating the folder and writing metadata.json leaves.
    let abandoned = case.run_dir("job-1");
    std::fs::create_dir_all(abandoned.join("io/invocations")).unwrap();
    std::fs::write(abandoned.join("journal.jsonl"), "").unwrap();
    let out = case.run("job-1", "again", &[]);
    out.assert_code(0);
    assert_eq!(case.metadata("job-1")["initial_message"], "again");
    assert_eq!(types(&case.journal("job-1"))[0], "ENGINE_START");
}

#[test]
fn torn_journal_tail_is_repaired_on_continue() {
    let case = Case::new(
        "torn",
        "tools: []\n",
        &json!({"steps": [{"answer": "first"}, {"answer": "second: {{ last_user }}"}]}),
    );
    case.run("r1", "start", &[]).assert_code(0);
    let path = case.run_dir("r1").join("journal.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    let intact_lines = text.lines().count();
    text.push_str(r#"{"seq":99,"timestamp":"2026-01-01T00:00:00Z","type":"THOU"#);
    std::fs::write(&path, text).unwrap();

    let out = case.continue_run("r1", &["-m", "more"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "second: more");
    let journal = case.journal("r1");
    assert_seq_strictly_increasing(&journal);
    assert!(journal.len() > intact_lines);
    assert!(journal.iter().all(|e| e["seq"] != 99), "torn line kept");
    assert!(
        types(&journal).iter().any(|t| t == "WARNING"),
        "repair not journaled: {:?}",
        types(&journal)
    );
}

/// Issue 11 item 4b: `--max-iterations 0` silently became 1; it is a usage error.
#[test]
fn a_zero_or_negative_iteration_cap_is_a_usage_error() {
    let case = Case::new(
        "cap",
        "tools: []\n",
        &serde_json::json!({"steps": [{"answer": "x"}]}),
    );
    for value in ["0", "-1", "4294967296"] {
        let flag = format!("--max-iterations={value}");
        let out = case.run("r1", "task", &[&flag]);
        out.assert_code(2);
        assert!(
            out.stderr.contains("--max-iterations"),
            "{value}: {}",
            out.stderr
        );
        assert!(!case.run_dir("r1").exists());
    }
}
