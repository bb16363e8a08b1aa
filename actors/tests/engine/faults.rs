//! Faults of the run's surroundings (issue 11): context sources that are not regular files
//! or take too long, and the cancellation that must still end such runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delta_actors::agent::load_agent;
use delta_actors::api::{LlmTarget, OrchestrationRequest, Supervisor};
use delta_actors::plan::load_plan;
use delta_actors::RunStatus;

use crate::harness::*;

/// Regression: an agent whose context.yaml names a FIFO hung every run of it, and an
/// orchestration's per-run timeout could not end them (the read held the actor's thread).
#[test]
fn orchestration_over_an_agent_with_a_fifo_context_file_ends() {
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agents/piper");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("agent.yaml"),
        "name: piper\nllm:\n  model: scripted\ntools: []\n",
    )
    .unwrap();
    std::fs::write(agent.join("system_prompt.md"), "You read pipes.\n").unwrap();
    std::fs::write(
        agent.join("context.yaml"),
        format!(
            "{DEFAULT_CONTEXT}  - type: file\n    id: pipe\n    path: '${{AGENT_HOME}}/pipe.md'\n"
        ),
    )
    .unwrap();
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
    let request = OrchestrationRequest {
        max_parallel: plan.max_parallel,
        plan,
        orchestration_id: "fifo".into(),
        workspace: ws.path().to_path_buf(),
        agents,
        llm_by_agent: HashMap::new(),
        llm: LlmTarget::Scripted(script("steps:\n  - answer: never\n")),
        env: test_env(),
        resume: false,
    };
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
