//! Acceptance tests of `Supervisor::orchestrate` (issue 6), in three parts:
//! [`scheduling`] (DAG, retries, on_failure, isolate, timeouts, foreach forms, template and
//! `output: json` errors), [`limits`] (max_parallel, requests per minute, Retry-After, counted
//! at a scripted HTTP endpoint) and [`resume`]. This file holds their shared helpers.
//!
//! Plans are written into a temporary directory next to their agents; every model is the
//! scripted one (in process, or served on 127.0.0.1:0 when the test counts requests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod limits;
mod needs;
mod resume;
mod scheduling;
mod tokens;

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, FixedOffset};
use delta_actors::agent::load_agent;
use delta_actors::journal::{read_journal, Event, JournalEvent};
use delta_actors::plan::state::StageSummary;
use delta_actors::plan::{load_plan, ResolvedPlan};
use delta_actors::workspace::RunPaths;
use delta_actors::{
    LlmTarget, OrchestrationEvent, OrchestrationHandle, OrchestrationRequest, OrchestrationSummary,
    RunStatus, Supervisor,
};
use tempfile::TempDir;
use tokio::sync::broadcast;

use crate::harness::{fast_config, script, test_env, DEFAULT_CONTEXT};

/// A plan directory (`plan.yaml` + `agents/<name>/`) and a separate shared workspace.
pub(crate) struct PlanDir {
    dir: TempDir,
    ws: TempDir,
}

impl PlanDir {
    pub(crate) fn new() -> PlanDir {
        PlanDir {
            dir: tempfile::tempdir().unwrap(),
            ws: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn ws(&self) -> &Path {
        self.ws.path()
    }

    /// `agents/<name>` with the given `tools:` list items (may be empty).
    pub(crate) fn agent(&self, name: &str, tools_yaml: &str) -> &Self {
        let dir = self.path().join("agents").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let tools = if tools_yaml.is_empty() {
            "tools: []\n".to_string()
        } else {
            format!("tools:\n{tools_yaml}")
        };
        std::fs::write(
            dir.join("agent.yaml"),
            format!("name: {name}\nllm:\n  model: scripted\n{tools}"),
        )
        .unwrap();
        std::fs::write(dir.join("system_prompt.md"), "You are a test agent.\n").unwrap();
        std::fs::write(dir.join("context.yaml"), DEFAULT_CONTEXT).unwrap();
        self
    }

    fn file(&self, relative: &str, content: &str) -> &Self {
        let path = self.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
        self
    }

    pub(crate) fn plan(&self, yaml: &str) -> Arc<ResolvedPlan> {
        let path = self.path().join("plan.yaml");
        std::fs::write(&path, yaml).unwrap();
        Arc::new(load_plan(&path, &[]).unwrap())
    }

    pub(crate) fn request(
        &self,
        plan: Arc<ResolvedPlan>,
        id: &str,
        llm: LlmTarget,
        resume: bool,
    ) -> OrchestrationRequest {
        let agents = plan
            .stages
            .iter()
            .map(|s| (s.agent.clone(), Arc::new(load_agent(&s.agent).unwrap())))
            .collect();
        let request = OrchestrationRequest::new(plan, id, self.ws(), llm)
            .with_agents(agents)
            .with_env(test_env());
        if resume {
            request.resuming()
        } else {
            request
        }
    }
}

/// Every event since the orchestration started (`resubscribe` alone would miss the first).
fn take_events(handle: &mut OrchestrationHandle) -> broadcast::Receiver<OrchestrationEvent> {
    let fresh = handle.events.resubscribe();
    std::mem::replace(&mut handle.events, fresh)
}

/// Runs a plan to its summary and returns every event it emitted, in order.
fn orchestrate(
    supervisor: &Supervisor,
    request: OrchestrationRequest,
) -> (OrchestrationSummary, Vec<OrchestrationEvent>) {
    let mut handle = supervisor.orchestrate_blocking(request).unwrap();
    let mut events = take_events(&mut handle);
    let summary = handle.wait_blocking().unwrap();
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    (summary, seen)
}

fn run_plan(
    plan_dir: &PlanDir,
    yaml: &str,
    script_yaml: &str,
) -> (OrchestrationSummary, Vec<OrchestrationEvent>) {
    let plan = plan_dir.plan(yaml);
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let request = plan_dir.request(plan, "t", LlmTarget::Scripted(script(script_yaml)), false);
    orchestrate(&supervisor, request)
}

fn stage<'a>(summary: &'a OrchestrationSummary, id: &str) -> &'a StageSummary {
    summary
        .stages
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no stage {id} in {summary:#?}"))
}

pub(crate) fn results(summary: &OrchestrationSummary, id: &str) -> Vec<String> {
    stage(summary, id)
        .runs
        .iter()
        .map(|r| r.result.clone().unwrap_or_default())
        .collect()
}

fn run_journal(work_dir: &Path, run_id: &str) -> Vec<JournalEvent> {
    read_journal(&RunPaths::new(work_dir, run_id).journal).unwrap()
}

fn timestamp(text: &str) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(text).unwrap()
}

/// (first ENGINE_START, last ENGINE_END) timestamps of a run in the shared workspace.
fn interval(ws: &Path, run_id: &str) -> (DateTime<FixedOffset>, DateTime<FixedOffset>) {
    let events = run_journal(ws, run_id);
    let start = events
        .iter()
        .find(|e| matches!(e.event, Event::EngineStart { .. }))
        .unwrap();
    let end = events
        .iter()
        .rev()
        .find(|e| matches!(e.event, Event::EngineEnd { .. }))
        .unwrap();
    (timestamp(&start.timestamp), timestamp(&end.timestamp))
}

fn completed_ends(events: &[JournalEvent]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                Event::EngineEnd {
                    status: RunStatus::Completed,
                    ..
                }
            )
        })
        .count()
}

/// Position of the first event matching `pred` (panics when there is none).
fn position(events: &[OrchestrationEvent], pred: impl Fn(&OrchestrationEvent) -> bool) -> usize {
    events
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("event not found in {events:#?}"))
}

fn started(stage_id: &str) -> impl Fn(&OrchestrationEvent) -> bool + '_ {
    move |e| matches!(e, OrchestrationEvent::RunStarted { stage, .. } if stage == stage_id)
}

fn finished(stage_id: &str) -> impl Fn(&OrchestrationEvent) -> bool + '_ {
    move |e| matches!(e, OrchestrationEvent::RunFinished { stage, .. } if stage == stage_id)
}

const ECHO_TASK: &str = "steps:\n  - answer: \"{{ task }}\"\n";
