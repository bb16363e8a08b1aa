//! The Think-Act-Observe loop through the public Supervisor API with the scripted model:
//! files of a run, observations for bad calls, caps, retries, parallel calls, cancellation,
//! continue after a crash, ask_human and sensitive answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use delta_actors::journal::{ActionStatus, Event};
use delta_actors::RunStatus;
use delta_actors::{RunStart, Supervisor, SupervisorConfig};

use crate::harness::*;

const TOOLS: &str = "  - name: echo\n    exec: \"echo ${text}\"\n  - name: write\n    exec: \"tee ${file}\"\n    stdin: content\n  - name: env_dump\n    exec: \"env\"\n";

#[test]
fn five_tool_run_records_every_event_and_completes() {
    let agent = TestAgent::new("five", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: echo\n    args: { text: one }\n  - tool: echo\n    args: { text: two }\n  - tool: write\n    args: { file: out.txt, content: \"hello file\" }\n  - tool: echo\n    args: { text: four }\n  - tool: echo\n    args: { text: five }\n  - answer: \"finished {{ task }}\"\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "the job"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert_eq!(result.result.as_deref(), Some("finished the job"));
    assert_eq!(result.metrics.iterations, 6);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "hello file"
    );

    let events = journal(&result);
    assert_seq_increasing(&events);
    let types = event_types(&events);
    assert_eq!(types.first().map(String::as_str), Some("ENGINE_START"));
    assert_eq!(types.last().map(String::as_str), Some("ENGINE_END"));
    assert_eq!(types.iter().filter(|t| *t == "ACTION_REQUEST").count(), 5);
    assert_eq!(types.iter().filter(|t| *t == "ACTION_RESULT").count(), 5);
    assert!(observations(&events)[0].contains("=== STDOUT ===\none"));

    let meta = metadata(&result);
    assert_eq!(meta.status, RunStatus::Completed);
    assert_eq!(meta.result.as_deref(), Some("finished the job"));
    assert_eq!(meta.iterations, 6);
    assert!(meta.usage.total_tokens > 0);

    let dir = run_dir(&result);
    assert_eq!(
        std::fs::read_dir(dir.join("io/invocations"))
            .unwrap()
            .count(),
        6
    );
    let tool_records = std::fs::read_dir(dir.join("io/tool_executions"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert_eq!(tool_records, 5);
    assert!(dir.join("engine.log").exists());
    let invocation = std::fs::read_dir(dir.join("io/invocations"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let text = std::fs::read_to_string(invocation.path()).unwrap();
    assert!(
        !text.contains("sk-test-secret"),
        "the key leaked into an invocation record"
    );
    let record: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(record["request"]["tool_choice"], "auto", "{text}");
}

#[test]
fn tools_never_see_the_api_key() {
    let agent = TestAgent::new("envcheck", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: env_dump\n  - answer: done\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    let obs = observations(&journal(&result)).join("\n");
    assert!(obs.contains("DELTA_RUN_ID="), "{obs}");
    assert!(obs.contains("AGENT_HOME="));
    assert!(
        !obs.contains("sk-test-secret"),
        "DELTA_API_KEY reached a tool"
    );
}

#[test]
fn unknown_tool_and_malformed_arguments_become_observations() {
    let agent = TestAgent::new("bad-calls", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: no_such_tool\n  - tool: echo\n    raw_args: \"{not json\"\n  - tool: echo\n    args: { wrong: 1 }\n  - answer: recovered\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed);
    let obs = observations(&journal(&result));
    assert!(obs[0].contains("unknown tool 'no_such_tool'"), "{}", obs[0]);
    assert!(obs[0].contains("echo"), "lists the available tools");
    assert!(obs[1].contains("not valid JSON"), "{}", obs[1]);
    assert!(obs[2].contains("invalid arguments"), "{}", obs[2]);
}

#[test]
fn iteration_cap_fails_the_run() {
    let agent = TestAgent::new("loop", "max_iterations: 3\n", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: echo\n    args: {text: a}\n  - tool: echo\n    args: {text: b}\n  - tool: echo\n    args: {text: c}\n  - tool: echo\n    args: {text: d}\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(result.error.as_ref().unwrap().kind, "max_iterations");
    assert_eq!(result.exit_code(), 1);
    assert_eq!(metadata(&result).status, RunStatus::Failed);
}

#[test]
fn retryable_failures_are_retried_then_succeed() {
    let agent = TestAgent::new("retry", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - fail: 429\n    times: 2\n    then: { answer: ok }\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let dir = run_dir(&result);
    let (attempts, calls): (Vec<_>, Vec<_>) = std::fs::read_dir(dir.join("io/invocations"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .partition(|p| p.to_string_lossy().contains("_attempt"));
    // Each failed attempt has a record of its own, and the call's record counts them all.
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(calls.len(), 1, "{calls:?}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&calls[0]).unwrap()).unwrap();
    assert_eq!(record["attempts"], 3);
}

#[test]
fn exhausted_retries_fail_the_run_with_the_error() {
    let agent = TestAgent::new("down", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - fail: 500\n    message: upstream exploded\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Failed);
    let error = result.error.clone().unwrap();
    assert_eq!(error.kind, "llm_error");
    assert!(error.message.contains("3 attempt"), "{}", error.message);
    assert!(error.message.contains("upstream exploded"));
    let events = journal(&result);
    assert!(event_types(&events).contains(&"ERROR".to_string()));
}

#[test]
fn parallel_calls_record_results_in_reply_order() {
    let agent = TestAgent::new(
        "par",
        "parallel_tool_calls: true\n",
        "  - name: nap\n    shell: \"sleep ${secs}; echo slept ${secs}\"\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tools:\n      - { tool: nap, args: { secs: \"0.3\" } }\n      - { tool: nap, args: { secs: \"0\" } }\n  - answer: done\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed);
    let obs = observations(&journal(&result));
    assert!(
        obs[0].contains("slept 0.3"),
        "first result is the first call's: {obs:?}"
    );
    assert!(obs[1].contains("slept 0"));
}

#[test]
fn cancel_interrupts_and_kills_the_running_tool_then_continue_resumes() {
    let agent = TestAgent::new("slow", "", "  - name: wait\n    exec: \"sleep 30\"\n");
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: wait\n  - answer: resumed fine\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let handle = submit_until_tool_started(&sup, request.clone());
    let run_id = handle.run_id.clone();
    sup.cancel(&run_id);
    let result = handle.wait_blocking().unwrap();
    assert_eq!(result.status, RunStatus::Interrupted);
    assert!(
        result.metrics.duration_ms < 10_000,
        "the sleeping tool was killed"
    );
    let obs = observations(&journal(&result));
    assert_eq!(obs.len(), 1, "the killed call still has exactly one result");

    let resumed = drive(&sup, continue_run(&request, &run_id, None));
    assert_eq!(resumed.status, RunStatus::Completed, "{resumed:?}");
    assert_eq!(resumed.result.as_deref(), Some("resumed fine"));
    assert_seq_increasing(&journal(&resumed));
}

#[test]
fn a_queued_run_cancelled_alone_ends_interrupted_like_one_cancelled_with_all() {
    let agent = TestAgent::new("queued", "", "  - name: wait\n    exec: \"sleep 30\"\n");
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: wait\n  - answer: done\n");
    let sup = Supervisor::start(SupervisorConfig {
        max_parallel: 1,
        ..fast_config()
    })
    .unwrap();
    let running = submit_until_tool_started(&sup, new_run(agent.load(), ws.path(), s.clone(), "a"));
    let queued_one = sup
        .submit_blocking(new_run(agent.load(), ws.path(), s.clone(), "b"))
        .unwrap();
    let queued_all = sup
        .submit_blocking(new_run(agent.load(), ws.path(), s, "c"))
        .unwrap();
    sup.cancel(&queued_one.run_id);
    let one = queued_one.wait_blocking().unwrap();
    sup.cancel_all("stop everything");
    let all = queued_all.wait_blocking().unwrap();
    assert_eq!(
        running.wait_blocking().unwrap().status,
        RunStatus::Interrupted
    );
    for result in [&one, &all] {
        assert_eq!(result.status, RunStatus::Interrupted, "{result:?}");
        assert_eq!(
            result.error.as_ref().map(|e| e.kind.as_str()),
            Some("interrupted")
        );
        assert!(
            !run_dir(result).exists(),
            "a run cancelled in the queue never wrote anything"
        );
    }
}

#[test]
fn unanswered_calls_get_a_synthetic_result_on_continue() {
    let agent = TestAgent::new("crash", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: echo\n    args: { text: hi }\n  - answer: after crash\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let first = drive(&sup, request.clone());
    // Simulate a crash after the model asked for a tool: cut the journal after the THOUGHT
    // and mark the run RUNNING (as a killed process leaves it).
    let dir = run_dir(&first);
    let text = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .take_while(|l| !l.contains("\"ACTION_REQUEST\""))
        .collect();
    std::fs::write(dir.join("journal.jsonl"), format!("{}\n", kept.join("\n"))).unwrap();
    let mut meta = metadata(&first);
    meta.status = RunStatus::Running;
    delta_actors::metadata::write_metadata(&dir, &meta).unwrap();

    let resumed = drive(&sup, continue_run(&request, &first.run_id, None));
    assert_eq!(resumed.status, RunStatus::Completed, "{resumed:?}");
    let events = journal(&resumed);
    let interrupted = events
        .iter()
        .any(|e| matches!(&e.event, Event::Interrupted { reason } if reason.contains("janitor")));
    assert!(interrupted, "the janitor marked the orphaned run");
    let synthetic = events.iter().any(|e| matches!(&e.event, Event::ActionResult { status: ActionStatus::Error, observation_content, .. } if observation_content.contains("interrupted before a result")));
    assert!(synthetic);
}

#[test]
fn async_ask_human_pauses_then_continue_answers() {
    let agent = TestAgent::new("asker", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tools:\n      - { tool: ask_human, args: { prompt: \"Which color?\" } }\n      - { tool: echo, args: { text: side } }\n  - answer: \"color is {{ last_observation }}\"\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let paused = drive(&sup, request.clone());
    assert_eq!(paused.status, RunStatus::WaitingForInput);
    assert_eq!(paused.exit_code(), 101);
    assert_eq!(paused.interaction.as_ref().unwrap().prompt, "Which color?");
    let dir = run_dir(&paused);
    assert!(dir.join("interaction/request.json").exists());
    // The other call of the reply ran before the pause.
    assert!(observations(&journal(&paused))
        .iter()
        .any(|o| o.contains("side")));

    let done = drive(&sup, continue_run(&request, &paused.run_id, Some("blue")));
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert!(!dir.join("interaction/request.json").exists());
    let events = journal(&done);
    assert!(event_types(&events).contains(&"HUMAN_INPUT_RECEIVED".to_string()));
    let users = events
        .iter()
        .filter(|e| matches!(e.event, Event::UserMessage { .. }))
        .count();
    assert_eq!(users, 1, "the answer is not an extra user message");
}

#[test]
fn sensitive_answers_stay_out_of_every_log() {
    let agent = TestAgent::new("secretive", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: ask_human\n    args: { prompt: \"API key?\", input_type: password }\n  - answer: \"got it\"\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let paused = drive(&sup, request.clone());
    assert_eq!(paused.status, RunStatus::WaitingForInput);
    let secret = "hunter2-very-secret";
    let done = drive(&sup, continue_run(&request, &paused.run_id, Some(secret)));
    assert_eq!(done.status, RunStatus::Completed);
    let dir = run_dir(&done);
    let mut holders = Vec::new();
    for entry in walk(&dir) {
        if std::fs::read(&entry)
            .unwrap()
            .windows(secret.len())
            .any(|w| w == secret.as_bytes())
        {
            holders.push(entry);
        }
    }
    assert_eq!(
        holders.len(),
        1,
        "only the secret file holds it: {holders:?}"
    );
    assert!(holders[0].starts_with(dir.join("secrets")));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&holders[0]).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn every_file_and_folder_of_a_run_is_private() {
    let agent = TestAgent::new("private", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: echo\n    args: { text: shown }\n  - tool: ask_human\n    args: { prompt: \"Which?\" }\n  - answer: done\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let paused = drive(&sup, request.clone());
    assert_eq!(paused.status, RunStatus::WaitingForInput, "{paused:?}");
    let dir = run_dir(&paused);
    for kept in ["engine.log", "interaction/request.json"] {
        assert!(dir.join(kept).is_file(), "{kept}");
    }
    assert_private(&dir);
    let done = drive(
        &sup,
        continue_run(&request, &paused.run_id, Some("this one")),
    );
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_private(&dir);
}

/// Nobody but the owner reads a run, whatever the process's umask lets through.
fn assert_private(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    for path in entries(dir) {
        let mode = std::fs::symlink_metadata(&path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", path.display());
    }
}

/// Every file under `dir`, at any depth.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    entries(dir).into_iter().filter(|p| !p.is_dir()).collect()
}

/// Every file and folder under `dir`, at any depth.
fn entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(entries(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn run_timeout_interrupts_with_type_timeout() {
    let agent = TestAgent::new("late", "", "  - name: wait\n    exec: \"sleep 30\"\n");
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: wait\n  - answer: never\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let mut request = new_run(agent.load(), ws.path(), s, "t");
    request.timeout = Some(Duration::from_millis(300));
    let result = drive(&sup, request);
    assert_eq!(result.status, RunStatus::Interrupted);
    assert_eq!(result.error.unwrap().kind, "timeout");
}

#[test]
fn continue_of_a_completed_run_requires_a_message() {
    let agent = TestAgent::new("done", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - answer: first\n  - answer: \"second: {{ last_user }}\"\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let first = drive(&sup, request.clone());
    let refused = drive(&sup, continue_run(&request, &first.run_id, None));
    assert_eq!(refused.status, RunStatus::Failed);
    assert!(refused.error.unwrap().message.contains("-m"));
    assert_eq!(
        metadata(&first).status,
        RunStatus::Completed,
        "a refused continue changes nothing"
    );
    let second = drive(
        &sup,
        continue_run(&request, &first.run_id, Some("more please")),
    );
    assert_eq!(second.result.as_deref(), Some("second: more please"));
}

#[test]
fn a_second_driver_of_the_same_run_is_refused() {
    let agent = TestAgent::new("locked", "", "  - name: wait\n    exec: \"sleep 30\"\n");
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: wait\n  - answer: x\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let handle = submit_until_tool_started(&sup, request.clone());
    let run_id = handle.run_id.clone();
    // A second supervisor stands in for a second process: the run lock refuses it.
    let other = Supervisor::start(fast_config()).unwrap();
    let refused = drive(&other, continue_run(&request, &run_id, Some("me too")));
    assert_eq!(refused.status, RunStatus::Failed);
    assert!(refused.error.unwrap().message.contains("another process"));
    sup.cancel(&run_id);
    assert_eq!(
        handle.wait_blocking().unwrap().status,
        RunStatus::Interrupted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_embeds_in_a_plain_tokio_program() {
    let agent = TestAgent::new("embedded", "", TOOLS);
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: echo\n    args: { text: async }\n  - answer: embedded ok\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let mut requests = Vec::new();
    for i in 0..5 {
        let mut r = new_run(agent.load(), ws.path(), s.clone(), &format!("task {i}"));
        r.run_id = Some(format!("embed-{i}"));
        requests.push(sup.submit(r).await.unwrap());
    }
    for handle in requests {
        let result = handle.wait().await.unwrap();
        assert_eq!(result.status, RunStatus::Completed);
        assert_eq!(result.result.as_deref(), Some("embedded ok"));
    }
    assert!(matches!(
        RunStart::New {
            task: String::new()
        },
        RunStart::New { .. }
    ));
}

/// Runs in a child copy of this test binary (see the test below): `kill_running_tools`
/// kills every tool group of the process, so it must not run beside the other tests.
#[test]
#[ignore = "helper: run only by kill_running_tools_kills_a_runs_tool_at_once in a child process"]
fn helper_kill_running_tools() {
    if std::env::var_os("DELTA_TEST_KILL_TOOLS_HELPER").is_none() {
        return;
    }
    let agent = TestAgent::new("killed", "", "  - name: wait\n    exec: \"sleep 30\"\n");
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: wait\n  - answer: went on\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let handle = submit_until_tool_started(&sup, new_run(agent.load(), ws.path(), s, "t"));
    // ToolStarted is sent as the process starts; its group is registered right after.
    for _ in 0..1000 {
        if delta_actors::tool::process::live_group_count() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(sup.kill_running_tools(), 1);
    let result = handle.wait_blocking().unwrap();
    assert!(
        result.metrics.duration_ms < 10_000,
        "the sleeping tool was killed: {result:?}"
    );
    let obs = observations(&journal(&result));
    assert!(obs[0].contains("KILLED BY SIGNAL 9"), "{obs:?}");
    println!("\nKILL_RUNNING_TOOLS_OK");
}

/// The second Ctrl-C of `delta run`: the handle kills the tools without waiting for the run.
#[test]
fn kill_running_tools_kills_a_runs_tool_at_once() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "run::helper_kill_running_tools",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DELTA_TEST_KILL_TOOLS_HELPER", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("KILL_RUNNING_TOOLS_OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
