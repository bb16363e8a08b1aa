//! Embedding delta in your own program: start a `Supervisor`, run one agent, then a whole
//! plan, watching the event stream — all offline with the built-in scripted model.
//!
//!     cargo run --example embed
//!
//! Everything here is the public `delta_actors` API; no actix type is needed by the host.
//!
//! To reach a real OpenAI-compatible endpoint instead (its URL, key and model from
//! `DELTA_BASE_URL`, `DELTA_API_KEY`, `DELTA_MODEL` or the agent's `.env` files, resolved as
//! `delta run` resolves them), the model target is three lines:
//!
//! ```ignore
//! let env: BTreeMap<String, String> = std::env::vars().collect();
//! let needs = delta_actors::agent::RunNeeds::resolve(agent, &work_dir, &work_dir, &env, None)?;
//! let request = RunRequest::new(Arc::new(needs.agent), &work_dir, start, needs.llm);
//! ```
//!
//! (`needs.env` is the run's environment after the `.env` cascade, for `with_env`; a missing
//! key or endpoint is a `NeedsError` naming the variable.)
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use delta_actors::agent::load_agent;
use delta_actors::llm::Script;
use delta_actors::plan::{load_plan, orchestration_id};
use delta_actors::{
    LlmTarget, OrchestrationRequest, RunEvent, RunRequest, RunStart, Supervisor, SupervisorConfig,
};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let scratch = tempfile::tempdir()?;

    // 1. The engine: one handle, owning its actor system on its own threads.
    let supervisor = Supervisor::start(SupervisorConfig {
        journal_fsync: false,
        ..SupervisorConfig::default()
    })?;

    // 2. One run of the hello-world agent, with progress events.
    let agent = Arc::new(load_agent(&examples.join("agents/hello-world"))?);
    let script = Arc::new(Script::load(
        &examples.join("agents/hello-world/llm-script.yaml"),
    )?);
    let env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k == "PATH" || k == "HOME")
        .collect();
    let mut events = supervisor.subscribe();
    let handle = supervisor
        .submit(
            RunRequest::new(
                agent,
                scratch.path().join("hello"),
                RunStart::New {
                    task: "greet the embedding program".into(),
                },
                LlmTarget::Scripted(script),
            )
            .with_run_id("embedded-hello")
            .with_env(Arc::new(env.clone())),
        )
        .await?;
    let watcher = tokio::spawn(async move {
        let mut tools = 0;
        while let Ok(event) = events.recv().await {
            match event {
                RunEvent::ToolFinished { tool_name, .. } => {
                    tools += 1;
                    println!("  tool finished: {tool_name}");
                }
                RunEvent::RunFinished { status, .. } => {
                    println!("  run finished: {status}");
                    break;
                }
                _ => {}
            }
        }
        tools
    });
    std::fs::create_dir_all(scratch.path().join("hello"))?;
    let result = handle.wait().await?;
    let tools = watcher.await?;
    println!(
        "single run: {} after {} iteration(s), {tools} tool call(s): {:?}",
        result.status, result.metrics.iterations, result.result
    );
    if result.exit_code() != 0 {
        return Err(format!("the single run did not complete: {result:?}").into());
    }

    // 3. A whole plan: map-reduce over 20 files, driven by the same engine.
    let plan_dir = examples.join("plans/map-reduce");
    let plan = load_plan(&plan_dir.join("plan.yaml"), &[])?;
    let script = Arc::new(Script::load(&plan_dir.join("llm-script.yaml"))?);
    let mut agents = HashMap::new();
    for stage in &plan.stages {
        agents.insert(stage.agent.clone(), Arc::new(load_agent(&stage.agent)?));
    }
    let workspace = scratch.path().join("map-reduce");
    std::fs::create_dir_all(&workspace)?;
    let id = orchestration_id(plan.name.as_deref());
    let mut orchestration = supervisor
        .orchestrate(
            OrchestrationRequest::new(Arc::new(plan), id, &workspace, LlmTarget::Scripted(script))
                .with_agents(agents)
                .with_env(Arc::new(env))
                .with_max_parallel(8),
        )
        .await?;
    let mut stage_events = 0;
    while let Ok(event) = orchestration.events.try_recv() {
        stage_events += usize::from(matches!(
            event,
            delta_actors::OrchestrationEvent::StageStarted { .. }
        ));
    }
    let summary = orchestration.wait().await?;
    println!(
        "plan {}: {} ({}), report.md {} bytes, {stage_events} stage event(s) seen before waiting",
        summary.orchestration_id,
        summary.status,
        summary.totals.counts.describe(),
        std::fs::metadata(workspace.join("report.md"))?.len()
    );
    if summary.exit_code() != 0 {
        return Err(format!("the plan did not complete: {summary:?}").into());
    }
    supervisor.shutdown();
    Ok(())
}
