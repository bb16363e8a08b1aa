//! Acceptance tests of `Supervisor::orchestrate` (issue 6): DAG ordering and parallel
//! independent stages, `max_parallel` and the shared rate limiter counted at a scripted HTTP
//! endpoint, retries, `on_failure` both ways, `isolate`, per-run timeouts, every `foreach`
//! form, template and `output: json` errors, and resume after `cancel_all`.
//!
//! Plans are written into a temporary directory next to their agents; every model is the
//! scripted one (in process, or served on 127.0.0.1:0 when the test counts requests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, FixedOffset};
use delta_actors::agent::load_agent;
use delta_actors::api::{
    LlmTarget, OrchestrationEvent, OrchestrationHandle, OrchestrationRequest, Supervisor,
    SupervisorConfig,
};
use delta_actors::journal::{read_journal, Event, JournalEvent};
use delta_actors::llm::{scripted, Endpoint, Script, ScriptServer};
use delta_actors::metadata::{read_metadata, write_metadata};
use delta_actors::plan::state::{
    OrchestrationState, OrchestrationStatus, OrchestrationSummary, StageStatus, StageSummary,
};
use delta_actors::plan::{load_plan, ResolvedPlan};
use delta_actors::workspace::RunPaths;
use delta_actors::RunStatus;
use tempfile::TempDir;
use tokio::sync::broadcast;

use crate::harness::{fast_config, script, test_env, DEFAULT_CONTEXT};

/// A plan directory (`plan.yaml` + `agents/<name>/`) and a separate shared workspace.
struct PlanDir {
    dir: TempDir,
    ws: TempDir,
}

impl PlanDir {
    fn new() -> PlanDir {
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
    fn agent(&self, name: &str, tools_yaml: &str) -> &Self {
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

    fn plan(&self, yaml: &str) -> Arc<ResolvedPlan> {
        let path = self.path().join("plan.yaml");
        std::fs::write(&path, yaml).unwrap();
        Arc::new(load_plan(&path, &[]).unwrap())
    }

    fn request(
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
        OrchestrationRequest {
            max_parallel: plan.max_parallel,
            plan,
            orchestration_id: id.to_string(),
            workspace: self.ws().to_path_buf(),
            agents,
            llm_by_agent: HashMap::new(),
            llm,
            env: test_env(),
            resume,
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

fn results(summary: &OrchestrationSummary, id: &str) -> Vec<String> {
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

#[test]
fn stages_wait_for_their_needs_and_independent_stages_overlap() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, events) = run_plan(
        &p,
        "max_parallel: 8\ndefaults: { agent: ./agents/worker }\nstages:\n  - { id: first, message: one }\n  - { id: left, needs: [first], message: left }\n  - { id: right, needs: [first], message: right }\n  - { id: last, needs: [left, right], message: last }\n",
        "default_latency: 300\nsteps:\n  - answer: \"{{ task }}\"\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(summary.exit_code(), 0);

    // The orchestrator is one actor: its event order is its decision order.
    let first_done = position(&events, finished("first"));
    let left_start = position(&events, started("left"));
    let right_start = position(&events, started("right"));
    assert!(first_done < left_start && first_done < right_start);
    let left_done = position(&events, finished("left"));
    let right_done = position(&events, finished("right"));
    assert!(
        left_start < right_done && right_start < left_done,
        "left and right overlap"
    );
    let last_start = position(&events, started("last"));
    assert!(left_done < last_start && right_done < last_start);

    // And the runs' own journals agree in wall-clock time.
    let ws = p.ws();
    let first = interval(ws, "t-first-0");
    let left = interval(ws, "t-left-0");
    let right = interval(ws, "t-right-0");
    let last = interval(ws, "t-last-0");
    assert!(
        first.1 <= left.0 && first.1 <= right.0,
        "{first:?} {left:?} {right:?}"
    );
    assert!(
        left.0 < right.1 && right.0 < left.1,
        "not overlapping: {left:?} {right:?}"
    );
    assert!(
        left.1 <= last.0 && right.1 <= last.0,
        "{left:?} {right:?} {last:?}"
    );
}

/// Serves `yaml` on 127.0.0.1:0 on `rt` and returns the server with an `LlmTarget` for it.
fn http_model(rt: &tokio::runtime::Runtime, yaml: &str) -> (ScriptServer, LlmTarget) {
    let script = Arc::new(Script::from_yaml_str(yaml, "served.yaml").unwrap());
    let server = rt
        .block_on(scripted::serve(
            script,
            SocketAddr::from(([127, 0, 0, 1], 0)),
        ))
        .unwrap();
    let target = LlmTarget::Http(Endpoint::new(server.base_url(), Some("sk-test".into())));
    (server, target)
}

fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn max_parallel_caps_runs_in_flight_at_the_endpoint() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let rt = server_runtime();
    // One model call per run: a run is in flight at the endpoint for nearly all its life,
    // so four concurrent runs show up as four concurrent requests.
    let (server, llm) = http_model(
        &rt,
        "default_latency: 50\nsteps:\n  - answer: \"{{ task }}\"\n",
    );
    let plan = p.plan(
        "max_parallel: 4\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: \"{{ range(30) | list }}\"\n    message: \"item {{ item }}\"\n",
    );
    // The engine-wide caps are far above 4: only the plan's max_parallel can hold it there.
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let (summary, _) = orchestrate(&supervisor, p.request(plan, "t", llm, false));
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(stage(&summary, "work").completed, 30);
    let stats = server.stats();
    assert_eq!(stats.requests_total(), 30);
    assert!(
        stats.max_in_flight() <= 4,
        "{} in flight",
        stats.max_in_flight()
    );
    assert_eq!(stats.max_in_flight(), 4, "the limit was never reached");
}

#[test]
fn requests_per_minute_is_shared_by_every_run_of_the_endpoint() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let rt = server_runtime();
    let (server, llm) = http_model(&rt, ECHO_TASK);
    let plan = p.plan(
        "max_parallel: 8\nllm: { requests_per_minute: 120 }\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c, d, e] }\n    message: \"item {{ item }}\"\n",
    );
    // The CLI turns the plan's `llm:` into these engine settings; embedders do the same.
    let config = SupervisorConfig {
        llm_requests_per_minute: plan.llm.requests_per_minute,
        ..fast_config()
    };
    let supervisor = Supervisor::start(config).unwrap();
    let began = Instant::now();
    let (summary, _) = orchestrate(&supervisor, p.request(plan, "t", llm, false));
    let elapsed = began.elapsed();
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let stats = server.stats();
    assert_eq!(stats.requests_total(), 5);
    // 120/min = one slot every 500 ms, no burst: five requests span at least 2 s.
    assert!(elapsed >= Duration::from_millis(1950), "{elapsed:?}");
    // Two slots fit in a 1 s window; a third only through arrival jitter at the server.
    let per_second = stats.max_requests_in_window(Duration::from_secs(1));
    assert!(per_second <= 3, "{per_second} requests within 1 s");
    assert!(stats.max_requests_in_window(Duration::from_millis(300)) <= 1);
}

#[test]
fn a_failed_run_is_continued_with_a_retry_message_and_completes() {
    let p = PlanDir::new();
    p.agent("worker", "");
    // fast_config retries a model call 3 times: 3 scripted 500s fail the first attempt.
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker, retries: 1 }\nstages:\n  - { id: solo, message: go }\n",
        "steps:\n  - fail: 500\n    times: 3\n    then: { answer: \"recovered after: {{ last_user }}\" }\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let row = &stage(&summary, "solo").runs[0];
    assert_eq!(row.status, RunStatus::Completed);
    assert_eq!(row.attempts, 2);
    assert!(
        row.result
            .as_deref()
            .unwrap()
            .contains("The previous attempt failed"),
        "{row:?}"
    );
    let journal = run_journal(p.ws(), "t-solo-0");
    assert_eq!(completed_ends(&journal), 1);
    let attempts = OrchestrationState::attempts_so_far(&OrchestrationState::dir_for(p.ws(), "t"));
    assert_eq!(attempts["t-solo-0"], 2);
}

#[test]
fn exhausted_retries_leave_a_failed_row_and_exit_code_1() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker, retries: 2 }\nstages:\n  - { id: solo, message: go }\n",
        "steps:\n  - fail: 500\n",
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed);
    assert_eq!(summary.exit_code(), 1);
    let solo = stage(&summary, "solo");
    assert_eq!(solo.status, StageStatus::Failed);
    assert_eq!(solo.failed, 1);
    let row = &solo.runs[0];
    assert_eq!(row.status, RunStatus::Failed);
    assert_eq!(row.attempts, 3, "one attempt plus two retries");
    assert!(row.error.as_deref().unwrap().contains("500"), "{row:?}");
}

const FAILING_ITEM: &str = "rules:\n  - task_contains: \"item bad\"\n    steps: [{ fail: 400 }]\n  - steps:\n      - answer: \"{{ task }}\"\n";

#[test]
fn on_failure_stop_skips_dependants_and_fails_the_orchestration() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, events) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [good, bad] }\n    message: \"item {{ item }}\"\n  - id: combine\n    message: \"{{ stages.work.results | tojson }}\"\n",
        FAILING_ITEM,
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    assert_eq!(summary.exit_code(), 1);
    assert_eq!(stage(&summary, "work").status, StageStatus::Failed);
    let combine = stage(&summary, "combine");
    assert_eq!(combine.status, StageStatus::Skipped);
    assert!(combine.runs.is_empty());
    assert!(!events.iter().any(started("combine")));
    assert!(!RunPaths::new(p.ws(), "t-combine-0").run_dir.exists());
}

#[test]
fn on_failure_continue_lets_dependants_see_the_failed_items() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    on_failure: continue\n    foreach: { items: [good, bad] }\n    message: \"item {{ item }}\"\n  - id: combine\n    message: \"{% for r in stages.work.runs %}[{{ r.status }}]{% endfor %} {{ stages.work.results | tojson }}\"\n",
        FAILING_ITEM,
    );
    let work = stage(&summary, "work");
    assert_eq!(work.status, StageStatus::CompletedWithFailures);
    assert_eq!((work.completed, work.failed), (1, 1));
    let combine = stage(&summary, "combine");
    assert_eq!(combine.status, StageStatus::Completed);
    // The scripted model echoes its task: this is the message the aggregator received.
    assert_eq!(
        results(&summary, "combine"),
        vec!["[COMPLETED][FAILED] [\"item good\",null]".to_string()]
    );
}

#[test]
fn isolated_stages_give_each_run_its_own_sub_workspace() {
    let p = PlanDir::new();
    p.agent("worker", "  - name: mark\n    exec: \"touch marker.txt\"\n");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: iso\n    isolate: true\n    foreach: { items: [a, b, c] }\n    message: \"item {{ item }}\"\n  - id: shared\n    needs: []\n    message: shared\n",
        "steps:\n  - tool: mark\n  - answer: done\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    for index in 0..3 {
        let dir = p.ws().join("iso").join(index.to_string());
        assert!(dir.join("marker.txt").is_file(), "{}", dir.display());
        let run_id = format!("t-iso-{index}");
        assert!(RunPaths::new(&dir, &run_id).metadata.is_file());
        assert!(!RunPaths::new(p.ws(), &run_id).run_dir.exists());
    }
    assert!(p.ws().join("marker.txt").is_file(), "the shared stage");
    assert!(RunPaths::new(p.ws(), "t-shared-0").metadata.is_file());
}

#[test]
fn a_run_over_its_timeout_is_interrupted_and_counted_as_failed() {
    let p = PlanDir::new();
    p.agent("worker", "  - name: nap\n    exec: \"sleep 30\"\n");
    let began = Instant::now();
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker, timeout: 300ms }\nstages:\n  - { id: slow, message: go }\n",
        "steps:\n  - tool: nap\n  - answer: never\n",
    );
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "the tool was not killed"
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    assert_eq!(summary.exit_code(), 1);
    let slow = stage(&summary, "slow");
    assert_eq!(slow.status, StageStatus::Failed);
    assert_eq!(slow.runs[0].status, RunStatus::Interrupted);
    assert!(
        slow.runs[0].error.as_deref().unwrap().contains("timeout"),
        "{:?}",
        slow.runs[0]
    );
}

#[test]
fn every_foreach_form_expands_in_item_order() {
    let p = PlanDir::new();
    p.agent("worker", "")
        .file("data/b.txt", "b")
        .file("data/a.txt", "a")
        .file("data/c.txt", "c")
        .file("data/skip.md", "not matched")
        .file("list.txt", "first\n\nsecond\nthird\n");
    let (summary, _) = run_plan(
        &p,
        "vars: { names: [x, y] }\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: tpl\n    foreach: \"{{ vars.names }}\"\n    message: \"tpl {{ index }} {{ item }}\"\n  - id: items\n    needs: []\n    foreach: { items: [{ n: 1 }, { n: 2 }] }\n    message: \"items {{ index }} {{ item.n }}\"\n  - id: files\n    needs: []\n    foreach: { files: \"data/*.txt\" }\n    message: \"{{ item }}\"\n  - id: lines\n    needs: []\n    foreach: { lines: list.txt }\n    message: \"lines {{ item }}\"\n",
        ECHO_TASK,
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(results(&summary, "tpl"), ["tpl 0 x", "tpl 1 y"]);
    assert_eq!(results(&summary, "items"), ["items 0 1", "items 1 2"]);
    let data = p.path().join("data");
    let expected: Vec<String> = ["a.txt", "b.txt", "c.txt"]
        .iter()
        .map(|f| data.join(f).to_string_lossy().into_owned())
        .collect();
    let files: Vec<String> = results(&summary, "files")
        .iter()
        .map(|f| PathBuf::from(f).to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, expected);
    assert_eq!(
        results(&summary, "lines"),
        ["lines first", "lines second", "lines third"]
    );
}

#[test]
fn a_template_error_at_expansion_names_the_stage_and_expression() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, events) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: planner, output: json, message: plan }\n  - id: work\n    foreach: \"{{ stages.planner.output.steps }}\"\n    message: \"do {{ item }}\"\n",
        "steps:\n  - answer: '{\"tasks\": [1, 2]}'\n",
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    assert_eq!(summary.exit_code(), 1);
    assert_eq!(stage(&summary, "planner").status, StageStatus::Completed);
    assert_eq!(stage(&summary, "work").status, StageStatus::Failed);
    let error = summary.error.as_deref().unwrap();
    assert!(error.contains("stages.work.foreach"), "{error}");
    assert!(error.contains("stages.planner.output.steps"), "{error}");
    assert!(!events.iter().any(started("work")));
}

#[test]
fn json_output_feeds_later_stages_and_non_json_is_retried_then_failed() {
    let p = PlanDir::new();
    p.agent("planner", "").agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "stages:\n  - { id: plan, agent: ./agents/planner, output: json, message: plan }\n  - id: work\n    agent: ./agents/worker\n    foreach: \"{{ stages.plan.output.steps }}\"\n    message: \"do {{ item }}\"\n",
        "rules:\n  - agent: planner\n    steps:\n      - answer: \"```json\\n{\\\"steps\\\": [\\\"x\\\", \\\"y\\\"]}\\n```\"\n  - steps:\n      - answer: \"{{ task }}\"\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(results(&summary, "work"), ["do x", "do y"]);

    let p = PlanDir::new();
    p.agent("planner", "");
    let (summary, _) = run_plan(
        &p,
        "stages:\n  - { id: plan, agent: ./agents/planner, output: json, retries: 1, message: plan }\n",
        "steps:\n  - answer: \"no json here\"\n",
    );
    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    let row = &stage(&summary, "plan").runs[0];
    assert_eq!(row.status, RunStatus::Failed);
    assert_eq!(row.attempts, 2);
    assert!(
        row.error.as_deref().unwrap().contains("not valid JSON"),
        "{row:?}"
    );
}

#[test]
fn resume_after_cancel_all_reuses_completed_runs_and_finishes_the_rest() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "max_parallel: 2\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: \"{{ range(6) | list }}\"\n    message: \"item {{ item }}\"\n  - id: combine\n    message: \"{{ stages.work.results | join(',') }}\"\n",
    );
    let model = script("default_latency: 150\nsteps:\n  - answer: \"{{ task }}\"\n");
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let mut handle = supervisor
        .orchestrate_blocking(p.request(
            plan.clone(),
            "t",
            LlmTarget::Scripted(model.clone()),
            false,
        ))
        .unwrap();
    let mut events = take_events(&mut handle);
    let mut completed = 0;
    while completed < 2 {
        match events.blocking_recv().unwrap() {
            OrchestrationEvent::RunFinished {
                status: RunStatus::Completed,
                ..
            } => completed += 1,
            OrchestrationEvent::Finished { .. } => panic!("finished before the cancel"),
            _ => {}
        }
    }
    supervisor.cancel_all("test interrupt");
    let first = handle.wait_blocking().unwrap();
    assert_eq!(first.status, OrchestrationStatus::Interrupted, "{first:#?}");
    assert_eq!(first.exit_code(), 130);
    let done_before: Vec<String> = stage(&first, "work")
        .runs
        .iter()
        .filter(|r| r.status == RunStatus::Completed)
        .map(|r| r.run_id.clone())
        .collect();
    assert!(
        done_before.len() >= 2 && done_before.len() < 6,
        "{first:#?}"
    );
    let journals_before: HashMap<String, Vec<u8>> = done_before
        .iter()
        .map(|id| {
            let bytes = std::fs::read(RunPaths::new(p.ws(), id).journal).unwrap();
            (id.clone(), bytes)
        })
        .collect();
    drop(supervisor);

    let supervisor = Supervisor::start(fast_config()).unwrap();
    let (second, _) = orchestrate(
        &supervisor,
        p.request(plan, "t", LlmTarget::Scripted(model), true),
    );
    assert_eq!(second.status, OrchestrationStatus::Completed, "{second:#?}");
    let work = stage(&second, "work");
    assert_eq!(work.completed, 6);
    for row in &work.runs {
        assert_eq!(row.reused, done_before.contains(&row.run_id), "{row:?}");
        assert_eq!(
            completed_ends(&run_journal(p.ws(), &row.run_id)),
            1,
            "{row:?}"
        );
    }
    for (id, bytes) in &journals_before {
        let after = std::fs::read(RunPaths::new(p.ws(), id).journal).unwrap();
        assert_eq!(&after, bytes, "{id} was run again");
    }
    assert_eq!(
        results(&second, "combine"),
        ["item 0,item 1,item 2,item 3,item 4,item 5"]
    );
}

fn set_status(work_dir: &Path, run_id: &str, status: RunStatus) {
    let run_dir = RunPaths::new(work_dir, run_id).run_dir;
    let mut meta = read_metadata(&run_dir).unwrap();
    meta.status = status;
    write_metadata(&run_dir, &meta).unwrap();
}

/// Each state a `kill -9` can leave between two writes, made by hand: a run that finished
/// but whose metadata still says RUNNING (or INTERRUPTED, after a janitor), a run directory
/// created without metadata, and a run killed before its task reached the journal.
#[test]
fn resume_repairs_what_a_kill_leaves_between_two_writes() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "max_parallel: 4\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c, d] }\n    message: \"item {{ item }}\"\n",
    );
    let model = script(ECHO_TASK);
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let request = p.request(plan.clone(), "t", LlmTarget::Scripted(model.clone()), false);
    let (first, _) = orchestrate(&supervisor, request);
    assert_eq!(first.status, OrchestrationStatus::Completed, "{first:#?}");
    let ws = p.ws();

    set_status(ws, "t-work-0", RunStatus::Running);
    set_status(ws, "t-work-1", RunStatus::Interrupted);
    let finished_journals: Vec<Vec<u8>> = ["t-work-0", "t-work-1"]
        .iter()
        .map(|id| std::fs::read(RunPaths::new(ws, id).journal).unwrap())
        .collect();
    let unstarted = RunPaths::new(ws, "t-work-2");
    std::fs::remove_dir_all(&unstarted.run_dir).unwrap();
    std::fs::create_dir_all(&unstarted.run_dir).unwrap();
    std::fs::write(&unstarted.journal, "").unwrap();
    let taskless = RunPaths::new(ws, "t-work-3");
    let text = std::fs::read_to_string(&taskless.journal).unwrap();
    let first_line = text.lines().next().unwrap();
    assert!(first_line.contains("ENGINE_START"), "{first_line}");
    std::fs::write(&taskless.journal, format!("{first_line}\n")).unwrap();
    set_status(ws, "t-work-3", RunStatus::Running);

    let request = p.request(plan, "t", LlmTarget::Scripted(model), true);
    let (second, _) = orchestrate(&supervisor, request);
    assert_eq!(second.status, OrchestrationStatus::Completed, "{second:#?}");
    assert_eq!(
        results(&second, "work"),
        ["item a", "item b", "item c", "item d"]
    );
    let reused: Vec<bool> = stage(&second, "work")
        .runs
        .iter()
        .map(|r| r.reused)
        .collect();
    assert_eq!(reused, [true, true, false, false]);
    for (id, before) in ["t-work-0", "t-work-1"].iter().zip(&finished_journals) {
        let after = std::fs::read(RunPaths::new(ws, id).journal).unwrap();
        assert_eq!(&after, before, "{id} was run again");
    }
    for id in ["t-work-2", "t-work-3"] {
        assert_eq!(completed_ends(&run_journal(ws, id)), 1, "{id}");
    }
}

#[test]
fn the_orchestration_folder_exists_once_orchestrate_returns() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan =
        p.plan("defaults: { agent: ./agents/worker }\nstages:\n  - { id: one, message: go }\n");
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let model = script("default_latency: 100\nsteps: [{ answer: done }]\n");
    let handle = supervisor
        .orchestrate_blocking(p.request(plan, "t", LlmTarget::Scripted(model), false))
        .unwrap();
    // The caller may print the id and be killed now: `--resume` must find the folder.
    let dir = OrchestrationState::dir_for(p.ws(), "t");
    let journal = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
    assert!(journal.contains("ORCHESTRATION_STARTED"), "{journal}");
    assert!(dir.join("plan.yaml").is_file());
    assert_eq!(
        handle.wait_blocking().unwrap().status,
        OrchestrationStatus::Completed
    );
}

/// An interruption (Ctrl-C, kill) is not a failure: continuing the run on resume must not
/// use up the retries the stage grants for failures.
#[test]
fn an_interrupted_attempt_does_not_use_up_the_retries() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "defaults: { agent: ./agents/worker, retries: 1 }\nstages:\n  - { id: solo, message: go }\n",
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let slow = script("steps:\n  - answer: never\n    latency: 5000\n");
    let mut handle = supervisor
        .orchestrate_blocking(p.request(plan.clone(), "t", LlmTarget::Scripted(slow), false))
        .unwrap();
    let mut events = take_events(&mut handle);
    loop {
        if let OrchestrationEvent::RunStarted { .. } = events.blocking_recv().unwrap() {
            break;
        }
    }
    supervisor.cancel_all("test interrupt");
    let first = handle.wait_blocking().unwrap();
    assert_eq!(first.status, OrchestrationStatus::Interrupted, "{first:#?}");

    // On resume the continued attempt fails (3 model errors use up the call retries), and
    // the stage's one retry must still be there.
    let flaky =
        script("steps:\n  - fail: 500\n    times: 3\n    then: { answer: \"recovered\" }\n");
    let (second, _) = orchestrate(
        &supervisor,
        p.request(plan, "t", LlmTarget::Scripted(flaky), true),
    );
    assert_eq!(second.status, OrchestrationStatus::Completed, "{second:#?}");
    let row = &stage(&second, "solo").runs[0];
    assert_eq!(row.result.as_deref(), Some("recovered"));
}

/// A 429 with Retry-After seen by one run holds back every run of the endpoint.
#[test]
fn retry_after_from_one_run_holds_back_the_others() {
    let p = PlanDir::new();
    p.agent("worker", "  - name: echo\n    exec: \"echo ${text}\"\n");
    let plan = p.plan(
        "max_parallel: 2\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n",
    );
    let model = script(
        "rules:\n  - task_contains: \"item a\"\n    steps:\n      - fail: 429\n        times: 1\n        retry_after: 1\n        then: { answer: \"a done\" }\n  - steps:\n      - tool: echo\n        args: { text: x }\n        latency: 200\n      - answer: \"b done\"\n",
    );
    // Retry-After is honoured up to the retry policy's max_delay: make room for 1 s.
    let mut config = fast_config();
    config.retry.max_delay = Duration::from_secs(2);
    let supervisor = Supervisor::start(config).unwrap();
    let (summary, _) = orchestrate(
        &supervisor,
        p.request(plan, "t", LlmTarget::Scripted(model), false),
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    let rows = &stage(&summary, "work").runs;
    assert!(rows[0].duration_ms >= 950, "{:?}", rows[0]);
    // Run b alone needs ~200 ms; its second model call waited for a's Retry-After.
    assert!(rows[1].duration_ms >= 750, "{:?}", rows[1]);
}

/// A run that completed with an answer `output: json` rejects stays failed on resume.
#[test]
fn resume_checks_json_output_of_completed_runs_again() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: plan, output: json, message: plan }\n  - { id: work, message: \"{{ stages.plan.output }}\" }\n",
    );
    let model = script("steps: [{ answer: \"no json here\" }]\n");
    let supervisor = Supervisor::start(fast_config()).unwrap();
    for resume in [false, true] {
        let request = p.request(
            plan.clone(),
            "t",
            LlmTarget::Scripted(model.clone()),
            resume,
        );
        let (summary, _) = orchestrate(&supervisor, request);
        assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
        let row = &stage(&summary, "plan").runs[0];
        assert_eq!(row.status, RunStatus::Failed, "resume {resume}: {row:?}");
        assert!(row.error.as_deref().unwrap().contains("not valid JSON"));
        assert_eq!(stage(&summary, "work").status, StageStatus::Skipped);
    }
}
