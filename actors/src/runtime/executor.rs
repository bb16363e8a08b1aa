//! The executor port: where an orchestration's runs execute, seen by the
//! `OrchestrationActor` through four messages ([`SubmitPlanned`], [`CancelPlanned`],
//! [`Flush`], [`StopExecutor`]) and [`ExecutorDesk`], the handle of their recipients — the
//! way [`RunDesk`](crate::runtime::admission::RunDesk) is the supervisor's. An executor is an
//! actor taking the four messages; [`Executor::start`] starts one per orchestration.
//!
//! Built in: [`LocalExecutor`] (this process, an adapter over the `RunSupervisor`'s
//! `RunDesk`) and, with the `cluster` feature, the Slurm executor
//! (`SlurmExecutor`, which writes its own handoff files). An embedder adds
//! `delta_actors::executor::slurm::start_slurm` runs a plan on Slurm in one call (relay,
//! routes, the jobs' environment). The supervisor picks the built-in one a request names.
//! An embedder adds one by implementing [`Executor`] and passing it to `Supervisor::orchestrate_on`; no
//! orchestrator file changes (docs/scale-out.md).
//!
//! Must not: decide scheduling (retries, order, limits are the scheduler's): an executor
//! runs what it is handed and reports each run's end.

use std::path::PathBuf;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::plan::schedule::{Launch, RunEnd};
use crate::plan::PlannedRun;
use crate::request::{OrchestrationRequest, RunRequest, RunStart};
use crate::runtime::admission::{CancelRun, RunDesk, SubmitRun};

/// Run one planned run; its end is sent on `reply` (a dropped `reply` reads as a lost run).
/// The run's workspace `work_dir` exists already.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubmitPlanned {
    /// The run as the scheduler planned it (id, stage, index, agent, message, limits).
    pub run: PlannedRun,
    /// Its workspace, created already.
    pub work_dir: PathBuf,
    /// Started afresh or continued from its journal.
    pub launch: Launch,
    /// Where the run's end goes.
    pub reply: oneshot::Sender<RunEnd>,
    /// The span this submission of the run is, when the orchestration is traced (see
    /// `RunRequest::trace`): an executor running it elsewhere carries it along.
    pub trace: Option<crate::protocol::TraceSpan>,
}

/// Interrupt one run (a run not started yet ends INTERRUPTED).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelPlanned {
    /// The run to interrupt.
    pub run_id: String,
    /// Why, for the run's record.
    pub reason: String,
}

/// Carry out the submissions and cancels asked for so far: sent after each batch of the
/// scheduler's effects, so an executor may group a stage's fan-out (Slurm: one job array).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Flush;

/// The orchestration is over: release whatever the executor holds and stop.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopExecutor;

/// Where an orchestration hands its runs: the recipients of the four messages.
#[derive(Clone)]
pub struct ExecutorDesk {
    /// Takes [`SubmitPlanned`].
    pub submit: Recipient<SubmitPlanned>,
    /// Takes [`CancelPlanned`].
    pub cancel: Recipient<CancelPlanned>,
    /// Takes [`Flush`].
    pub flush: Recipient<Flush>,
    /// Takes [`StopExecutor`].
    pub stop: Recipient<StopExecutor>,
}

impl ExecutorDesk {
    /// The desk of an actor that handles the four messages.
    pub fn of<A>(addr: Addr<A>) -> ExecutorDesk
    where
        A: Actor
            + Handler<SubmitPlanned>
            + Handler<CancelPlanned>
            + Handler<Flush>
            + Handler<StopExecutor>,
        A::Context: actix::dev::ToEnvelope<A, SubmitPlanned>
            + actix::dev::ToEnvelope<A, CancelPlanned>
            + actix::dev::ToEnvelope<A, Flush>
            + actix::dev::ToEnvelope<A, StopExecutor>,
    {
        ExecutorDesk {
            submit: addr.clone().recipient(),
            cancel: addr.clone().recipient(),
            flush: addr.clone().recipient(),
            stop: addr.recipient(),
        }
    }
}

/// What an executor is started with, once per orchestration.
#[derive(Clone)]
pub struct ExecutorSetup {
    /// The orchestration as the embedder asked for it (plan, agents, model targets,
    /// environment, `max_parallel`).
    pub request: OrchestrationRequest,
    /// The orchestration's folder (`<workspace>/.delta/orchestrations/<id>`), already open.
    pub orchestration_dir: PathBuf,
    /// The engine's run supervisor, for executors that run in this process.
    pub runs: RunDesk,
    /// The plan's and stages' spending caps, which every run of this process charges.
    pub budgets: std::sync::Arc<crate::budget::PlanBudgets>,
}

/// Starts an orchestration's executor. Called from inside the orchestration's actor, so an
/// implementation may `start()` actors.
pub trait Executor: Send + Sync + 'static {
    /// The desk of a started executor, or why it cannot start (every run then ends lost).
    fn start(&self, setup: ExecutorSetup) -> Result<ExecutorDesk, String>;
}

/// Runs in this process: each planned run becomes a `RunRequest` for the `RunSupervisor`.
pub struct LocalExecutor;

impl Executor for LocalExecutor {
    fn start(&self, setup: ExecutorSetup) -> Result<ExecutorDesk, String> {
        Ok(ExecutorDesk::of(LocalRuns { setup }.start()))
    }
}

/// The adapter actor of [`LocalExecutor`].
struct LocalRuns {
    setup: ExecutorSetup,
}

impl Actor for LocalRuns {
    type Context = Context<Self>;
}

impl LocalRuns {
    /// The supervisor's request for `planned`, or why there is none.
    fn run_request(
        &self,
        planned: PlannedRun,
        work_dir: PathBuf,
        launch: Launch,
        trace: Option<crate::protocol::TraceSpan>,
    ) -> Result<RunRequest, String> {
        let request = &self.setup.request;
        let Some(agent) = request.agents.get(&planned.agent).cloned() else {
            return Err(format!(
                "agent {} was not loaded before the orchestration started",
                planned.agent.display()
            ));
        };
        let start = match launch {
            Launch::New => RunStart::New {
                task: planned.message,
            },
            Launch::Continue(message) => RunStart::Continue {
                message,
                force: false,
            },
        };
        Ok(RunRequest {
            agent,
            work_dir,
            run_id: Some(planned.run_id),
            start,
            max_iterations: planned.max_iterations,
            llm: request
                .llm_by_agent
                .get(&planned.agent)
                .unwrap_or(&request.llm)
                .clone(),
            env: request.env.clone(),
            timeout: planned.timeout,
            prompter: None,
            workspace_id: None,
            orchestration_id: Some(request.orchestration_id.clone()),
            trace,
            budgets: self.setup.budgets.for_stage(&planned.stage_id),
        })
    }
}

impl Handler<SubmitPlanned> for LocalRuns {
    type Result = ();

    fn handle(&mut self, msg: SubmitPlanned, ctx: &mut Self::Context) {
        let run_id = msg.run.run_id.clone();
        let work_dir = msg.work_dir.clone();
        let request = match self.run_request(msg.run, msg.work_dir, msg.launch, msg.trace) {
            Ok(request) => request,
            Err(message) => {
                let _ = msg.reply.send(RunEnd::Lost(message));
                return;
            }
        };
        let (tx, rx) = oneshot::channel();
        // Enqueued at once, in the order the orchestration asked (a cancel sent after it
        // reaches the supervisor after it).
        let submitted = self
            .setup
            .runs
            .submit
            .send(SubmitRun { request, reply: tx });
        let reply = msg.reply;
        async move {
            let result = match submitted.await {
                Ok(Ok(_)) => rx
                    .await
                    .map_err(|_| "the engine stopped before the run finished".to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the engine stopped".to_string()),
            };
            let _ = reply.send(RunEnd::from_result(result, &work_dir, &run_id));
        }
        .into_actor(self)
        .spawn(ctx);
    }
}

impl Handler<CancelPlanned> for LocalRuns {
    type Result = ();

    fn handle(&mut self, msg: CancelPlanned, _: &mut Self::Context) {
        self.setup.runs.cancel.do_send(CancelRun {
            run_id: msg.run_id,
            reason: msg.reason,
        });
    }
}

impl Handler<Flush> for LocalRuns {
    type Result = ();

    /// Runs were handed to the supervisor as they came.
    fn handle(&mut self, _: Flush, _: &mut Self::Context) {}
}

impl Handler<StopExecutor> for LocalRuns {
    type Result = ();

    fn handle(&mut self, _: StopExecutor, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
