//! Faults of the run's surroundings (issue 11): context sources that are not regular files
//! or take too long, and the cancellation that must still end such runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use delta_actors::agent::load_agent;
use delta_actors::plan::load_plan;
use delta_actors::RunStatus;
use delta_actors::{LlmTarget, OrchestrationRequest, Supervisor};

use crate::harness::*;

/// Regression: an agent whose context.yaml names a FIFO hung every run of it, and an
/// orchestration's per-run timeout could not end them (the read held the actor's thread).
#[test]
fn orchestration_over_an_agent_with_a_fifo_context_file_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agents/piper");
    write_agent_at(
        &agent,
        "name: piper\nllm:\n  model: scripted\ntools: []\n",
        &format!(
            "{DEFAULT_CONTEXT}  - type: file\n    id: pipe\n    path: '${{AGENT_HOME}}/pipe.md'\n"
        ),
    );
    nix::unistd::mkfifo(&agent.join("pipe.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let plan_path = dir.path().join("plan.yaml");
    std::fs::write(
        &plan_path,
        "defaults: { agent: ./agents/piper, timeout: 2s }\nstages:\n  - { id: read, message: go, foreach: { items: [1, 2] } }\n",
    )
    .unwrap();
    let plan = Arc::new(load_plan(&plan_path, &[]).unwrap());
    let agents = plan
        .stages
        .iter()
        .map(|s| (s.agent.clone(), Arc::new(load_agent(&s.agent).unwrap())))
        .collect();
    let llm = LlmTarget::Scripted(script("steps:\n  - answer: never\n"));
    let request = OrchestrationRequest::new(plan, "fifo", ws.path(), llm)
        .with_agents(agents)
        .with_env(test_env());
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let summary = supervisor
        .orchestrate_blocking(request)
        .unwrap()
        .wait_blocking()
        .unwrap();
    let runs = &summary.stages[0].runs;
    assert_eq!(runs.len(), 2, "{summary:#?}");
    for run in runs {
        assert_eq!(run.status, RunStatus::Failed, "{run:?}");
        let error = run.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("'pipe'") && error.contains("FIFO"),
            "{error}"
        );
    }
}

/// The run's timeout ends a context build that is waiting on a slow generator.
#[test]
fn run_timeout_interrupts_a_slow_context_generator() {
    let agent = TestAgent::new(
        "slowgen",
        "",
        "  - name: echo\n    exec: \"echo ${text}\"\n",
    );
    std::fs::write(
        agent.path().join("context.yaml"),
        format!("{DEFAULT_CONTEXT}  - type: computed_file\n    id: slow\n    generator:\n      command: [sleep, '30']\n      timeout_ms: 60000\n    output_path: '${{CWD}}/slow.md'\n"),
    )
    .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut request = new_run(
        agent.load(),
        ws.path(),
        script("steps:\n  - answer: never\n"),
        "t",
    );
    request.timeout = Some(Duration::from_millis(300));
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let began = Instant::now();
    let result = drive(&supervisor, request);
    assert!(began.elapsed() < Duration::from_secs(20), "{result:?}");
    assert_eq!(result.status, RunStatus::Interrupted, "{result:?}");
    assert_eq!(result.error.unwrap().kind, "timeout");
}

/// A loopback endpoint that accepts connections and never sends a byte; counts them.
fn silent_endpoint() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut stream in listener.incoming().take(32).flatten() {
            // delta asks an http:// endpoint once whether it speaks HTTP/2 (a connection that
            // opens with the preface): not an attempt, so not counted.
            let mut start = [0u8; 14];
            let _ = std::io::Read::read_exact(&mut stream, &mut start);
            if &start != b"PRI * HTTP/2.0" {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            held.push(stream);
        }
    });
    (base_url, accepted)
}

/// A plan's `llm.request_timeout` bounds every attempt of its runs, over the agent's own.
#[test]
fn plan_llm_request_timeout_overrides_the_agents_and_fails_runs_as_llm_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agents/patient");
    write_agent_at(
        &agent,
        "name: patient\nllm:\n  model: m\n  request_timeout: 10m\ntools: []\n",
        DEFAULT_CONTEXT,
    );
    let plan_path = dir.path().join("plan.yaml");
    std::fs::write(
        &plan_path,
        "llm: { request_timeout: 200ms }\ndefaults: { agent: ./agents/patient }\nstages:\n  - { id: ask, message: hello }\n",
    )
    .unwrap();
    let plan = Arc::new(load_plan(&plan_path, &[]).unwrap());
    assert_eq!(plan.llm_timeouts.request, Some(Duration::from_millis(200)));
    let (base_url, accepted) = silent_endpoint();
    let agents = plan
        .stages
        .iter()
        .map(|s| (s.agent.clone(), Arc::new(load_agent(&s.agent).unwrap())))
        .collect();
    let llm = LlmTarget::Http(delta_actors::llm::Endpoint::new(base_url.clone(), None));
    let request = OrchestrationRequest::new(plan, "silent", ws.path(), llm)
        .with_agents(agents)
        .with_env(test_env())
        .with_max_parallel(1);
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let summary = supervisor
        .orchestrate_blocking(request)
        .unwrap()
        .wait_blocking()
        .unwrap();
    let run = &summary.stages[0].runs[0];
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    let error = run.error.as_deref().unwrap_or_default();
    assert!(error.contains("llm_timeout"), "{error}");
    assert!(error.contains("after 3 attempt(s)"), "{error}");
    assert!(error.contains("200 ms (llm.request_timeout)"), "{error}");
    assert!(error.contains(&base_url), "{error}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[test]
fn plan_llm_timeouts_are_range_checked_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (llm, key, phrase) in [
        (
            "{ idle_timeout: 5ms }",
            "llm.idle_timeout",
            "outside the accepted range",
        ),
        (
            "{ request_timeout: 3d }",
            "llm.request_timeout",
            "outside the accepted range",
        ),
        (
            "{ request_timeout: soon }",
            "llm.request_timeout",
            "not a duration",
        ),
    ] {
        let path = dir.path().join("plan.yaml");
        std::fs::write(
            &path,
            format!("llm: {llm}\nstages:\n  - {{ id: a, agent: ., message: m }}\n"),
        )
        .unwrap();
        let err = load_plan(&path, &[]).unwrap_err().to_string();
        assert!(err.contains(key) && err.contains(phrase), "{llm}: {err}");
    }
}

/// Regression: a journal whose lines were duplicated (pasted twice) replayed every tool call
/// twice and the provider refused the history (HTTP 400). The repeats are replayed once,
/// with a WARNING, and the strict scripted model accepts the conversation.
#[test]
fn duplicated_journal_lines_are_replayed_once_and_the_run_continues() {
    let agent = TestAgent::new("twice", "", "  - name: echo\n    exec: \"echo ${text}\"\n");
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "strict: true\nsteps:\n  - tool: echo\n    args: { text: hi }\n  - answer: first\n  - answer: \"second: {{ last_user }}\"\n",
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let first = drive(&supervisor, request.clone());
    assert_eq!(first.status, RunStatus::Completed, "{first:?}");
    let path = run_dir(&first).join("journal.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}{text}")).unwrap();

    let again = drive(
        &supervisor,
        continue_run(&request, &first.run_id, Some("more")),
    );
    assert_eq!(again.status, RunStatus::Completed, "{again:?}");
    assert_eq!(again.result.as_deref(), Some("second: more"));
    let warnings: Vec<String> = journal(&again)
        .iter()
        .filter_map(|e| match &e.event {
            delta_actors::journal::Event::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains("repeats")),
        "{warnings:?}"
    );
}

/// Regression: with io/ unwritable, audit records were skipped in silence. Now the first
/// failure of each kind is a WARNING naming the path and the OS error, once per run.
#[test]
fn unwritable_audit_folders_are_reported_once_per_kind() {
    let tools = "  - name: break_io\n    shell: \"rm -rf \\\"$DELTA_RUN_DIR/io/invocations\\\" \\\"$DELTA_RUN_DIR/io/tool_executions\\\" && touch \\\"$DELTA_RUN_DIR/io/invocations\\\" \\\"$DELTA_RUN_DIR/io/tool_executions\\\"\"\n  - name: echo\n    exec: \"echo ${text}\"\n";
    let agent = TestAgent::new("auditless", "", tools);
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: break_io\n  - tool: echo\n    args: { text: one }\n  - tool: echo\n    args: { text: two }\n  - answer: done\n",
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let result = drive(&supervisor, new_run(agent.load(), ws.path(), s, "t"));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert_eq!(result.result.as_deref(), Some("done"));
    let warnings: Vec<String> = journal(&result)
        .iter()
        .filter_map(|e| match &e.event {
            delta_actors::journal::Event::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    for folder in ["io/invocations", "io/tool_executions"] {
        let warning = warnings
            .iter()
            .find(|w| w.contains(&format!("({folder})")))
            .unwrap_or_else(|| panic!("no warning for {folder}: {warnings:#?}"));
        assert!(warning.contains("Not a directory"), "{warning}");
        assert!(
            warning.contains(&run_dir(&result).join(folder).display().to_string()),
            "{warning}"
        );
    }
}

/// Regression: a reply cut at the output limit (`finish_reason: length`) with no content
/// ended the run COMPLETED with an empty answer. It now fails as `truncated`, saying how to
/// go on, and a continue gets the model going again.
#[test]
fn reply_cut_at_the_output_limit_fails_as_truncated_and_can_be_continued() {
    let agent = TestAgent::new("cut", "", "  - name: echo\n    exec: \"echo ${text}\"\n");
    let ws = tempfile::tempdir().unwrap();
    // The empty cut reply is not sent back (providers refuse an assistant turn that says
    // nothing), so the continuation is told apart by its message, not by its step.
    let s = script(
        "rules:\n  - last_user_contains: shorter\n    steps:\n      - answer: \"The whole answer: {{ last_user }}\"\n  - steps:\n      - answer: \"\"\n        finish_reason: length\n",
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let cut = drive(&supervisor, request.clone());
    assert_eq!(cut.status, RunStatus::Failed, "{cut:?}");
    assert_eq!(cut.result, None);
    let error = cut.error.clone().unwrap();
    assert_eq!(error.kind, "truncated");
    for phrase in [
        "finish_reason: length",
        "llm.max_tokens",
        "delta continue --run-id",
    ] {
        assert!(
            error.message.contains(phrase),
            "{phrase}: {}",
            error.message
        );
    }
    let resumed = drive(
        &supervisor,
        continue_run(&request, &cut.run_id, Some("shorter, please")),
    );
    assert_eq!(resumed.status, RunStatus::Completed, "{resumed:?}");
    assert_eq!(
        resumed.result.as_deref(),
        Some("The whole answer: shorter, please")
    );
}

/// A process killed right after journaling a cut reply must not complete the run with it
/// on `continue` (a recorded final answer is reused without asking the model again).
#[test]
fn a_journaled_cut_reply_is_not_taken_as_the_final_answer() {
    use delta_actors::journal::recorded_final_answer;
    use delta_actors::journal::{Event, JournalEvent};
    let event = |seq, event| JournalEvent {
        seq,
        timestamp: "t".into(),
        event,
    };
    let thought = |finish_reason: &str| Event::Thought {
        iteration: 1,
        content: Some("partial".into()),
        tool_calls: vec![],
        llm_invocation_ref: None,
        finish_reason: Some(finish_reason.into()),
        usage: None,
        prompt: None,
    };
    let task = event(
        1,
        Event::UserMessage {
            content: "t".into(),
        },
    );
    assert_eq!(
        recorded_final_answer(&[task.clone(), event(2, thought("stop"))]).as_deref(),
        Some("partial")
    );
    assert_eq!(
        recorded_final_answer(&[task, event(2, thought("length"))]),
        None
    );
}

/// The answer file of a paused run is read on the run's actor thread: a FIFO there is
/// refused instead of blocking every run of the arbiter.
#[test]
fn a_fifo_answer_file_is_refused_without_blocking() {
    let agent = TestAgent::new("asker", "", "  - name: echo\n    exec: \"echo ${text}\"\n");
    let ws = tempfile::tempdir().unwrap();
    let s = script(
        "steps:\n  - tool: ask_human\n    args: { prompt: \"Which color?\" }\n  - answer: \"color is {{ last_observation }}\"\n",
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let request = new_run(agent.load(), ws.path(), s, "t");
    let paused = drive(&supervisor, request.clone());
    assert_eq!(paused.status, RunStatus::WaitingForInput, "{paused:?}");
    let response = run_dir(&paused).join("interaction/response.txt");
    nix::unistd::mkfifo(&response, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let refused = drive(&supervisor, continue_run(&request, &paused.run_id, None));
    let error = refused.error.unwrap();
    assert_eq!(error.kind, "setup_error");
    assert!(
        error.message.contains("not a regular file"),
        "{}",
        error.message
    );
    std::fs::remove_file(&response).unwrap();
    std::fs::write(&response, "blue\n").unwrap();
    let done = drive(&supervisor, continue_run(&request, &paused.run_id, None));
    assert_eq!(done.result.as_deref(), Some("color is blue"), "{done:?}");
}
