//! Lifecycle hooks through the public Supervisor API: all eight fire with their env and
//! payload, `on_run_end` for every final status, skip and request override from hook output,
//! invalid output ignored with a warning, failing and hanging hooks never stop the run,
//! cancellation while a hook runs; and `continue` leaving a live never-locked run alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use delta_actors::journal::{ActionStatus, Event, JournalEvent};
use delta_actors::RunStatus;
use delta_actors::Supervisor;
use serde_json::Value;

use crate::harness::*;

const ECHO_TOOL: &str =
    "  - name: echo\n    exec: \"echo ${text}\"\n  - name: touch\n    exec: \"touch ${file}\"\n";

/// Dumps each invocation's env, stdin and TOOL_RESULT file to `<workspace>/dumps/<hook>/<n>.*`.
const DUMP_SCRIPT: &str = r#"d="dumps/$DELTA_HOOK"
mkdir -p "$d"
n=$(ls "$d" | grep -c '\.json$')
env > "$d/$n.env"
cat > "$d/$n.json"
if [ -n "$TOOL_RESULT" ]; then cp "$TOOL_RESULT" "$d/$n.result"; fi
"#;

/// An agent whose hooks.yaml is `hooks_yaml`, with `dump.sh` and `hook.sh` (its body given).
fn agent_with_hooks(name: &str, hooks_yaml: &str, hook_sh: &str) -> TestAgent {
    let agent = TestAgent::new(name, "", ECHO_TOOL);
    std::fs::write(agent.path().join("hooks.yaml"), hooks_yaml).unwrap();
    std::fs::write(agent.path().join("dump.sh"), DUMP_SCRIPT).unwrap();
    std::fs::write(agent.path().join("hook.sh"), hook_sh).unwrap();
    agent
}

fn hook_events(events: &[JournalEvent]) -> Vec<(String, String, Option<String>, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::HookExecuted {
                hook_name,
                status,
                reason,
                io_path_ref,
            } => Some((
                hook_name.clone(),
                status.clone(),
                reason.clone(),
                io_path_ref.clone(),
            )),
            _ => None,
        })
        .collect()
}

fn warnings(events: &[JournalEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

fn dump(ws: &Path, hook: &str, n: usize) -> (String, Value) {
    let dir = ws.join("dumps").join(hook);
    let env = std::fs::read_to_string(dir.join(format!("{n}.env")))
        .unwrap_or_else(|e| panic!("{hook} #{n} did not run: {e}"));
    let stdin = std::fs::read_to_string(dir.join(format!("{n}.json"))).unwrap();
    (env, serde_json::from_str(&stdin).unwrap())
}

fn dump_count(ws: &Path, hook: &str) -> usize {
    std::fs::read_dir(ws.join("dumps").join(hook))
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "json")
            })
            .count()
        })
        .unwrap_or(0)
}

fn env_var<'a>(env: &'a str, name: &str) -> Option<&'a str> {
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
}

fn invocation_requests(result: &delta_actors::RunResult) -> Vec<Value> {
    let dir = run_dir(result).join("io/invocations");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let record: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
            record["request"].clone()
        })
        .collect()
}

#[test]
fn all_eight_hooks_fire_with_env_and_payload() {
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
    .map(|h| format!("{h}:\n  command: [sh, \"${{AGENT_HOME}}/dump.sh\"]\n"))
    .collect();
    let agent = agent_with_hooks("all-hooks", &hooks, "");
    let ws = tempfile::tempdir().unwrap();
    // One tool iteration, then a model failure: on_error fires too.
    let s = script(
        "steps:\n  - tool: echo\n    args: { text: hello-from-tool }\n  - fail: 400\n    message: bad request here\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "the task"));
    assert_eq!(result.status, RunStatus::Failed, "{result:?}");
    let w = ws.path();
    let dir = run_dir(&result);

    let expected_counts = [
        ("on_iteration_start", 2),
        ("pre_llm_request", 2),
        ("post_llm_response", 1),
        ("pre_tool_execution", 1),
        ("post_tool_execution", 1),
        ("on_iteration_end", 1),
        ("on_error", 1),
        ("on_run_end", 1),
    ];
    for (hook, count) in expected_counts {
        assert_eq!(dump_count(w, hook), count, "{hook}");
        let (env, _) = dump(w, hook, 0);
        assert_eq!(env_var(&env, "DELTA_HOOK"), Some(hook));
        assert_eq!(env_var(&env, "DELTA_RUN_ID"), Some(result.run_id.as_str()));
        assert_eq!(
            env_var(&env, "RUN_DIR").map(PathBuf::from),
            Some(dir.clone())
        );
        assert_eq!(
            env_var(&env, "JOURNAL_PATH").map(PathBuf::from),
            Some(dir.join("journal.jsonl"))
        );
        assert!(env_var(&env, "ITERATION_COUNT").is_some(), "{hook}");
        assert!(!env.contains("sk-test-secret"), "{hook} saw the API key");
    }

    let (env, payload) = dump(w, "on_iteration_start", 1);
    assert_eq!(env_var(&env, "ITERATION_COUNT"), Some("2"));
    assert_eq!(payload["iteration"], 2);

    let (_, payload) = dump(w, "pre_llm_request", 0);
    assert_eq!(payload["model"], "scripted");
    assert_eq!(payload["messages"][1]["content"], "the task");
    assert!(payload["tools"].is_array());

    let (_, payload) = dump(w, "post_llm_response", 0);
    let call = &payload["response"]["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "echo");

    let (env, payload) = dump(w, "pre_tool_execution", 0);
    assert_eq!(env_var(&env, "TOOL_NAME"), Some("echo"));
    assert_eq!(payload["tool_name"], "echo");
    assert_eq!(payload["tool_args"]["text"], "hello-from-tool");
    assert_eq!(payload["argv"][1], "hello-from-tool");

    let (env, payload) = dump(w, "post_tool_execution", 0);
    assert_eq!(env_var(&env, "TOOL_NAME"), Some("echo"));
    assert!(env_var(&env, "TOOL_RESULT").is_some());
    assert_eq!(payload["status"], "SUCCESS");
    assert_eq!(payload["exit_code"], 0);
    let result_file =
        std::fs::read_to_string(w.join("dumps/post_tool_execution/0.result")).unwrap();
    assert!(result_file.contains("hello-from-tool"), "{result_file}");

    let (_, payload) = dump(w, "on_iteration_end", 0);
    assert_eq!(payload["iteration"], 1);
    assert_eq!(payload["results"][0]["tool_name"], "echo");

    let (env, payload) = dump(w, "on_error", 0);
    assert_eq!(payload["error_type"], "llm_error");
    assert!(payload["message"]
        .as_str()
        .unwrap()
        .contains("bad request here"));
    assert!(env_var(&env, "ERROR_MESSAGE")
        .unwrap()
        .contains("bad request here"));

    let (_, payload) = dump(w, "on_run_end", 0);
    assert_eq!(payload["status"], "FAILED");
    assert_eq!(payload["error"]["type"], "llm_error");

    let events = journal(&result);
    assert_seq_increasing(&events);
    let hooks = hook_events(&events);
    assert_eq!(hooks.len(), 10, "{hooks:?}");
    assert!(
        hooks.iter().all(|h| h.1 == "SUCCESS" && h.2.is_none()),
        "{hooks:?}"
    );
    for (_, _, _, io_ref) in &hooks {
        let record: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(io_ref)).unwrap()).unwrap();
        assert_eq!(record["exit_code"], 0);
        assert!(record["duration_ms"].is_u64());
    }
    // on_run_end runs after ENGINE_END, so it sees the complete journal.
    let types = event_types(&events);
    assert_eq!(&types[types.len() - 2..], ["ENGINE_END", "HOOK_EXECUTED"]);
    assert_eq!(hooks.last().unwrap().0, "on_run_end");
    // Order inside the first iteration.
    let order: Vec<&str> = hooks.iter().take(6).map(|h| h.0.as_str()).collect();
    assert_eq!(
        order,
        [
            "on_iteration_start",
            "pre_llm_request",
            "post_llm_response",
            "pre_tool_execution",
            "post_tool_execution",
            "on_iteration_end"
        ]
    );
}

#[test]
fn on_run_end_fires_for_completed_and_waiting_runs() {
    let agent = agent_with_hooks(
        "end-hook",
        "on_run_end:\n  command: [sh, \"${AGENT_HOME}/dump.sh\"]\n",
        "",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: ask_human\n    args: { prompt: \"name?\" }\n  - answer: \"bye {{ task }}\"\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let paused = drive(&sup, request.clone());
    assert_eq!(paused.status, RunStatus::WaitingForInput);
    let done = drive(&sup, continue_run(&request, &paused.run_id, Some("Ada")));
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        dump(ws.path(), "on_run_end", 0).1["status"],
        "WAITING_FOR_INPUT"
    );
    let (_, end) = dump(ws.path(), "on_run_end", 1);
    assert_eq!(end["status"], "COMPLETED");
    assert_eq!(end["result"], "bye t");
}

#[test]
fn on_run_end_fires_for_an_interrupted_run_and_cancel_stops_a_running_hook() {
    let agent = agent_with_hooks(
        "cancel-hook",
        "pre_tool_execution:\n  command: [sh, \"${AGENT_HOME}/hook.sh\"]\non_run_end:\n  command: [sh, \"${AGENT_HOME}/dump.sh\"]\n",
        "touch hook-started\nsleep 30\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: touch\n    args: { file: tool-ran }\n  - answer: never\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let handle = sup
        .submit_blocking(new_run(agent.load(), ws.path(), s, "t"))
        .unwrap();
    let run_id = handle.run_id.clone();
    let started = ws.path().join("hook-started");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the hook never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let cancelled_at = Instant::now();
    sup.cancel(&run_id);
    let result = handle.wait_blocking().unwrap();
    assert_eq!(result.status, RunStatus::Interrupted, "{result:?}");
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(10),
        "the hook's group was killed"
    );
    assert!(
        !ws.path().join("tool-ran").exists(),
        "the tool never started"
    );
    let events = journal(&result);
    let hooks = hook_events(&events);
    assert_eq!(hooks[0].0, "pre_tool_execution");
    assert_eq!(hooks[0].1, "CANCELLED", "{hooks:?}");
    assert!(hooks[0].2.as_deref().unwrap().contains("stopped"));
    assert_eq!(
        observations(&events).len(),
        1,
        "the call still has a result"
    );
    assert_eq!(dump(ws.path(), "on_run_end", 0).1["status"], "INTERRUPTED");
}

#[test]
fn pre_tool_hook_can_skip_a_call() {
    let agent = agent_with_hooks(
        "skipper",
        "pre_tool_execution:\n  command: [sh, \"${AGENT_HOME}/hook.sh\"]\npost_tool_execution:\n  command: [sh, \"${AGENT_HOME}/dump.sh\"]\n",
        "if [ \"$TOOL_NAME\" = touch ]; then echo '{\"action\":\"skip\",\"observation\":\"policy: no files\"}'; fi\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: touch\n    args: { file: forbidden }\n  - tool: echo\n    args: { text: allowed }\n  - answer: done\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert!(
        !ws.path().join("forbidden").exists(),
        "the skipped tool ran"
    );
    let events = journal(&result);
    let results: Vec<(ActionStatus, String)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ActionResult {
                status,
                observation_content,
                ..
            } => Some((*status, observation_content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        results[0],
        (ActionStatus::Success, "policy: no files".to_string())
    );
    assert!(results[1].1.contains("allowed"), "{results:?}");
    // The model saw the observation.
    let second_request = &invocation_requests(&result)[1];
    let messages = second_request["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["content"], "policy: no files");
    // post_tool_execution runs for executed calls only.
    assert_eq!(dump_count(ws.path(), "post_tool_execution"), 1);
    assert_eq!(
        dump(ws.path(), "post_tool_execution", 0).1["tool_name"],
        "echo"
    );
}

#[test]
fn pre_llm_hook_can_override_the_request() {
    let agent = agent_with_hooks(
        "override",
        "pre_llm_request:\n  command: [sh, \"${AGENT_HOME}/hook.sh\"]\n",
        "cat > /dev/null\necho '{\"model\":\"hooked-model\",\"temperature\":0.25,\"max_tokens\":99,\"messages\":[{\"role\":\"system\",\"content\":\"short prompt\"},{\"role\":\"user\",\"content\":\"rewritten task\"}]}'\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - answer: ok\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "original task"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let request = &invocation_requests(&result)[0];
    assert_eq!(request["model"], "hooked-model");
    assert_eq!(request["temperature"], 0.25);
    assert_eq!(request["max_tokens"], 99);
    assert_eq!(request["messages"].as_array().unwrap().len(), 2);
    assert_eq!(request["messages"][1]["content"], "rewritten task");
    assert!(
        request["tools"].is_array(),
        "tools are not the hook's to change"
    );
    assert!(warnings(&journal(&result)).is_empty());
}

#[test]
fn invalid_override_is_ignored_with_a_warning() {
    let agent = agent_with_hooks(
        "bad-override",
        "pre_llm_request:\n  command: [sh, \"${AGENT_HOME}/hook.sh\"]\n",
        "echo '{\"model\":\"x\",\"temperature\":\"hot\"}'\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - answer: ok\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let request = &invocation_requests(&result)[0];
    assert_eq!(request["model"], "scripted", "nothing of it was applied");
    assert!(request.get("temperature").is_none());
    let w = warnings(&journal(&result));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("pre_llm_request"), "{}", w[0]);
    assert!(w[0].contains("`temperature`"), "{}", w[0]);
}

#[test]
fn a_hanging_hook_times_out_and_the_run_goes_on() {
    let agent = agent_with_hooks(
        "hang",
        "on_iteration_start:\n  command: [sh, \"${AGENT_HOME}/hook.sh\"]\n  timeout_ms: 200\n",
        "sleep 30\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - answer: still fine\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert_eq!(result.result.as_deref(), Some("still fine"));
    assert!(result.metrics.duration_ms < 10_000);
    let hooks = hook_events(&journal(&result));
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].1, "TIMED_OUT");
    assert!(
        hooks[0]
            .2
            .as_deref()
            .unwrap()
            .contains("timed out after 200 ms"),
        "{hooks:?}"
    );
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir(&result).join(&hooks[0].3)).unwrap())
            .unwrap();
    assert_eq!(record["status"], "TIMED_OUT");
}

#[test]
fn a_failing_hook_records_why_and_never_stops_the_run() {
    let agent = agent_with_hooks(
        "failing",
        "post_llm_response:\n  command: [sh, \"${AGENT_HOME}/hook.sh\"]\non_iteration_end:\n  command: [\"${AGENT_HOME}/missing-hook\"]\n",
        "echo 'webhook unreachable' >&2\nexit 4\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script("steps:\n  - tool: echo\n    args: { text: a }\n  - answer: done\n");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let hooks = hook_events(&journal(&result));
    let failed: Vec<_> = hooks.iter().filter(|h| h.1 == "FAILED").collect();
    assert_eq!(failed.len(), hooks.len(), "{hooks:?}");
    let post = hooks.iter().find(|h| h.0 == "post_llm_response").unwrap();
    assert_eq!(
        post.2.as_deref(),
        Some("exited with code 4: webhook unreachable")
    );
    let end = hooks.iter().find(|h| h.0 == "on_iteration_end").unwrap();
    assert!(
        end.2.as_deref().unwrap().contains("could not start"),
        "{end:?}"
    );
    assert!(!hooks
        .iter()
        .any(|h| h.2.as_deref() == Some("Unknown error")));
}

/// `continue` on a RUNNING run written by the original engine (no lock file) whose recorded
/// process is still alive must be refused, not treated as orphaned.
#[test]
fn continue_leaves_a_live_never_locked_run_alone() {
    let agent = TestAgent::new("legacy-live", "", ECHO_TOOL);
    let ws = tempfile::tempdir().unwrap();
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(
        agent.load(),
        ws.path(),
        script("steps:\n  - answer: ok\n"),
        "t",
    );
    let done = drive(&sup, request.clone());
    let dir = run_dir(&done);
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    // spawn() can return while the child is still inside execve, named after this thread.
    let comm = format!("/proc/{}/comm", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
        assert!(std::time::Instant::now() < deadline, "sleep never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut meta = metadata(&done);
    meta.status = RunStatus::Running;
    meta.pid = child.id();
    meta.process_name = "sleep".into();
    delta_actors::metadata::write_metadata(&dir, &meta).unwrap();
    std::fs::remove_file(dir.join("lock")).unwrap();
    let refused = drive(&sup, continue_run(&request, &done.run_id, Some("again")));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(refused.status, RunStatus::Failed);
    let message = refused.error.unwrap().message;
    assert!(message.contains("another process"), "{message}");
    assert!(message.contains(&format!("pid {}", meta.pid)), "{message}");
    // Once the process is gone the run is taken over as orphaned and resumed.
    let resumed = drive(&sup, continue_run(&request, &done.run_id, Some("again")));
    assert_eq!(resumed.status, RunStatus::Completed, "{resumed:?}");
    let interrupted = journal(&resumed).iter().any(|e| {
        matches!(&e.event, Event::Interrupted { reason } if reason.contains(&format!("process {} no longer exists", meta.pid)))
    });
    assert!(interrupted);
}

/// A sensitive ask_human answer given on `continue` reaches the model (and a pre_llm_request
/// hook's stdin), but no record: not io/invocations, not io/hooks, not the journal.
#[test]
fn sensitive_answer_reaches_the_model_and_no_record() {
    let agent = agent_with_hooks(
        "secret-hooks",
        "pre_llm_request:\n  command: [sh, \"${AGENT_HOME}/hook.sh\"]\n",
        "cat > /dev/null\necho \"$DELTA_RUN_ID\" >&2\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: ask_human\n    args: { prompt: \"PIN?\", input_type: password }\n  - answer: \"observed {{ last_observation | length }} chars\"\n",
    );
    let sup = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let paused = drive(&sup, request.clone());
    assert_eq!(paused.status, RunStatus::WaitingForInput);
    let secret = "pin-4711-very-secret";
    let done = drive(&sup, continue_run(&request, &paused.run_id, Some(secret)));
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(
        done.result.as_deref(),
        Some(format!("observed {} chars", secret.len()).as_str()),
        "the model saw the answer itself, not the redaction marker"
    );
    let dir = run_dir(&done);
    let mut holders = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains(secret)
        {
            holders.push(path);
        }
    }
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert!(holders[0].starts_with(dir.join("secrets")));
    let hooks = hook_events(&journal(&done));
    assert_eq!(hooks.len(), 2, "one pre_llm_request per model call");
}
