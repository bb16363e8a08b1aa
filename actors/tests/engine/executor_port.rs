//! The executor port (`delta_actors::executor`), from an embedder's side: an executor of
//! its own, written against the public API only, runs a plan to completion through
//! `Supervisor::orchestrate_on` — adding an executor touches no orchestrator file.
//!
//! The test executor answers each run in the engine (the message upper-cased) when the
//! orchestration flushes a batch, as a cluster executor would after one submission. A second
//! one lets go of every run it is handed: those runs fail with a reason and the plan ends; a
//! third cannot start, and its typed error fails every run. No actor framework here: the port is plain
//! Rust.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use delta_actors::executor::{
    CancelPlanned, Executor, ExecutorError, ExecutorSetup, StartedExecutor, SubmitPlanned,
};
use delta_actors::plan::schedule::{RunEnd, RunOutcome};
use delta_actors::plan::state::OrchestrationStatus;
use delta_actors::{LlmTarget, RunStatus, Supervisor, TokenUsage};

use crate::harness::{fast_config, script};
use crate::orchestrate::{results, PlanDir};

/// What the executor saw: the runs of each flushed batch, by message.
#[derive(Default)]
struct Seen {
    batches: Vec<Vec<String>>,
    work_dirs_existed: bool,
    stopped: bool,
}

struct UpperCaseExecutor {
    seen: Arc<Mutex<Seen>>,
}

impl Executor for UpperCaseExecutor {
    fn start(&self, setup: ExecutorSetup) -> Result<Box<dyn StartedExecutor>, ExecutorError> {
        assert!(setup.orchestration_dir.is_dir());
        Ok(Box::new(UpperCaseRuns {
            seen: self.seen.clone(),
            pending: Vec::new(),
        }))
    }
}

struct UpperCaseRuns {
    seen: Arc<Mutex<Seen>>,
    pending: Vec<SubmitPlanned>,
}

impl StartedExecutor for UpperCaseRuns {
    fn submit(&mut self, run: SubmitPlanned) {
        self.seen.lock().unwrap().work_dirs_existed = run.work_dir.is_dir();
        self.pending.push(run);
    }

    fn cancel(&mut self, cancel: CancelPlanned) {
        panic!("nothing is cancelled in this plan: {}", cancel.run_id);
    }

    fn flush(&mut self) {
        let batch = std::mem::take(&mut self.pending);
        self.seen
            .lock()
            .unwrap()
            .batches
            .push(batch.iter().map(|s| s.run.message.clone()).collect());
        for submitted in batch {
            let outcome = RunOutcome {
                tokens_saved: 0,
                run_id: submitted.run.run_id.clone(),
                status: RunStatus::Completed,
                result: Some(submitted.run.message.to_uppercase()),
                error: None,
                duration_ms: 1,
                iterations: 1,
                usage: TokenUsage::default(),
                cost: Default::default(),
                empty_answer: false,
                metadata_written: false,
            };
            let _ = submitted.reply.send(RunEnd::Finished(outcome));
        }
    }

    fn stop(&mut self) {
        self.seen.lock().unwrap().stopped = true;
    }
}

#[test]
fn an_embedders_executor_runs_a_plan_to_completion_through_the_port() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "max_parallel: 8\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c] }\n    message: \"item {{ item }}\"\n  - id: combine\n    needs: [work]\n    message: \"{{ stages.work.results | join(',') }}\"\n",
    );
    // The model is never called: the executor answers every run itself.
    let request = p.request(
        plan,
        "port",
        LlmTarget::Scripted(script("steps: []\n")),
        false,
    );
    let seen = Arc::new(Mutex::new(Seen::default()));
    let executor = Arc::new(UpperCaseExecutor { seen: seen.clone() });
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = rt
        .block_on(supervisor.orchestrate_on(request, executor))
        .unwrap();
    let summary = handle.wait_blocking().unwrap();

    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );
    assert_eq!(results(&summary, "work"), ["ITEM A", "ITEM B", "ITEM C"]);
    assert_eq!(results(&summary, "combine"), ["ITEM A,ITEM B,ITEM C"]);
    let seen = seen.lock().unwrap();
    assert!(seen.work_dirs_existed);
    assert!(seen.stopped, "the orchestration's end stops its executor");
    // A stage's fan-out reaches the executor as one batch, then the next stage's.
    let batches: Vec<_> = seen.batches.iter().filter(|b| !b.is_empty()).collect();
    assert_eq!(
        batches,
        [
            &vec!["item a".to_string(), "item b".into(), "item c".into()],
            &vec!["ITEM A,ITEM B,ITEM C".to_string()],
        ]
    );
}

/// An executor that lets go of every run it is handed (drops its `reply`), as one that
/// crashed between taking a run and reporting it would.
struct DroppingExecutor;

impl Executor for DroppingExecutor {
    fn start(&self, _: ExecutorSetup) -> Result<Box<dyn StartedExecutor>, ExecutorError> {
        Ok(Box::new(DroppingRuns))
    }
}

struct DroppingRuns;

impl StartedExecutor for DroppingRuns {
    fn submit(&mut self, run: SubmitPlanned) {
        drop(run.reply);
    }
    fn cancel(&mut self, _: CancelPlanned) {}
    fn flush(&mut self) {}
    fn stop(&mut self) {}
}

#[test]
fn runs_an_executor_lets_go_of_fail_with_the_reason_and_the_plan_ends() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n  - id: combine\n    needs: [work]\n    message: \"never\"\n",
    );
    let request = p.request(
        plan,
        "dropped",
        LlmTarget::Scripted(script("steps: []\n")),
        false,
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = rt
        .block_on(supervisor.orchestrate_on(request, Arc::new(DroppingExecutor)))
        .unwrap();
    let summary = handle.wait_blocking().unwrap();

    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    let work = summary.stages.iter().find(|s| s.id == "work").unwrap();
    assert_eq!(work.runs.len(), 2, "{summary:#?}");
    for run in &work.runs {
        assert_eq!(run.status, RunStatus::Failed);
        let error = run.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("the executor let go of the run without reporting its end"),
            "{error}"
        );
    }
    let combine = summary.stages.iter().find(|s| s.id == "combine").unwrap();
    assert!(combine.runs.is_empty(), "{summary:#?}");
}

/// An executor that cannot start (its cluster is away): the typed error reaches every run
/// of the plan as its failure, and the plan ends.
struct UnavailableExecutor;

impl Executor for UnavailableExecutor {
    fn start(&self, _: ExecutorSetup) -> Result<Box<dyn StartedExecutor>, ExecutorError> {
        Err(ExecutorError::CannotStart {
            executor: "test-cluster".into(),
            reason: "the cluster does not answer".into(),
        })
    }
}

#[test]
fn an_executor_that_cannot_start_fails_every_run_with_its_error() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n",
    );
    let request = p.request(
        plan,
        "unavailable",
        LlmTarget::Scripted(script("steps: []\n")),
        false,
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = rt
        .block_on(supervisor.orchestrate_on(request, Arc::new(UnavailableExecutor)))
        .unwrap();
    let summary = handle.wait_blocking().unwrap();

    assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
    let work = summary.stages.iter().find(|s| s.id == "work").unwrap();
    assert_eq!(work.runs.len(), 2, "{summary:#?}");
    for run in &work.runs {
        assert_eq!(run.status, RunStatus::Failed);
        let error = run.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("the test-cluster executor cannot start: the cluster does not answer"),
            "{error}"
        );
    }
}
