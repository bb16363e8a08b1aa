//! The executor port: where an orchestration's runs execute. An executor is plain Rust: an
//! [`Executor`] starts one [`StartedExecutor`] per orchestration, which takes the
//! orchestration's four requests — [`submit`](StartedExecutor::submit) a planned run (its
//! [`RunEnd`] comes back on the run's `reply`), [`cancel`](StartedExecutor::cancel) one,
//! [`flush`](StartedExecutor::flush) what was asked so far, [`stop`](StartedExecutor::stop) —
//! and fails to start with an [`ExecutorError`]. No actix type is part of it.
//!
//! Built in: [`LocalExecutor`] (this process, an adapter over the `RunSupervisor`'s
//! `RunDesk`) and, with the `cluster` feature, the Slurm executor (`SlurmExecutor`, which
//! writes its own handoff files; `delta_actors::executor::slurm::start_slurm` runs a plan on
//! Slurm in one call: relay, routes, the jobs' environment). Both are actors inside the
//! runtime, reached through `ExecutorDesk`, the private adapter holding their mailboxes. The
//! supervisor picks the built-in one a request names; an embedder adds one by implementing
//! [`Executor`] and passing it to `Supervisor::orchestrate_on`, and no orchestrator file
//! changes (docs/scale-out.md).
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

/// One planned run to execute; its end is sent on `reply` (a dropped `reply` reads as a lost
/// run). The run's workspace `work_dir` exists already.
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
#[derive(Debug, Clone)]
pub struct CancelPlanned {
    /// The run to interrupt.
    pub run_id: String,
    /// Why, for the run's record.
    pub reason: String,
}

/// Why an executor could not start for an orchestration: every run handed to it then ends
/// lost, with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecutorError {
    /// A service or setting it needs is missing or refused (a cluster not answering, a
    /// folder it cannot write).
    #[error("the {executor} executor cannot start: {reason}")]
    CannotStart {
        /// The executor's name, for the message (`local`, `slurm`, `kubernetes`...).
        executor: String,
        /// What is missing, and how to fix it.
        reason: String,
    },
    /// It started and has stopped since (it takes no more runs).
    #[error("the {executor} executor has stopped")]
    Stopped {
        /// The executor's name.
        executor: String,
    },
}

/// One orchestration's started executor. Its methods are called in the order the scheduler
/// decided, on the orchestration's thread inside the engine's runtime: they must not block
/// (hand slow work to a task: `tokio::spawn` works there), and a run's end may come back on
/// its `reply` at any later time.
pub trait StartedExecutor: Send + 'static {
    /// Take one planned run; its end goes to `run.reply`.
    fn submit(&mut self, run: SubmitPlanned);
    /// Interrupt a run submitted earlier.
    fn cancel(&mut self, cancel: CancelPlanned);
    /// Carry out the submissions and cancels asked for so far: called after each batch of
    /// the scheduler's effects, so an executor may group a stage's fan-out (Slurm: one job
    /// array).
    fn flush(&mut self);
    /// The orchestration is over: release whatever the executor holds.
    fn stop(&mut self);
}

/// Starts an orchestration's executor.
pub trait Executor: Send + Sync + 'static {
    /// A started executor for the orchestration `setup` describes, or why it cannot start.
    /// Called inside the engine's runtime (see [`StartedExecutor`]).
    fn start(&self, setup: ExecutorSetup) -> Result<Box<dyn StartedExecutor>, ExecutorError>;
}

/// [`StartedExecutor::submit`] as a message of the runtime's built-in executor actors.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Submit(pub(crate) SubmitPlanned);

/// [`StartedExecutor::cancel`] as a message.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Cancel(pub(crate) CancelPlanned);

/// [`StartedExecutor::flush`] as a message.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Flush;

/// [`StartedExecutor::stop`] as a message.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StopExecutor;

/// The private adapter between the port and a built-in executor actor: the recipients of
/// its four messages.
#[derive(Clone)]
pub(crate) struct ExecutorDesk {
    submit: Recipient<Submit>,
    cancel: Recipient<Cancel>,
    flush: Recipient<Flush>,
    stop: Recipient<StopExecutor>,
}

impl ExecutorDesk {
    /// The desk of an actor that handles the four messages.
    pub(crate) fn of<A>(addr: Addr<A>) -> ExecutorDesk
    where
        A: Actor + Handler<Submit> + Handler<Cancel> + Handler<Flush> + Handler<StopExecutor>,
        A::Context: actix::dev::ToEnvelope<A, Submit>
            + actix::dev::ToEnvelope<A, Cancel>
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

impl StartedExecutor for ExecutorDesk {
    /// A stopped actor drops the message, and with it the run's `reply`: the run ends lost.
    fn submit(&mut self, run: SubmitPlanned) {
        self.submit.do_send(Submit(run));
    }

    fn cancel(&mut self, cancel: CancelPlanned) {
        self.cancel.do_send(Cancel(cancel));
    }

    fn flush(&mut self) {
        self.flush.do_send(Flush);
    }

    fn stop(&mut self) {
        self.stop.do_send(StopExecutor);
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
    /// The engine's run supervisor, for the executor that runs in this process.
    pub(crate) runs: RunDesk,
    /// The plan's and stages' spending caps, which every run of this process charges.
    pub(crate) budgets: std::sync::Arc<crate::budget::PlanBudgets>,
}

/// Runs in this process: each planned run becomes a `RunRequest` for the `RunSupervisor`.
pub struct LocalExecutor;

impl Executor for LocalExecutor {
    fn start(&self, setup: ExecutorSetup) -> Result<Box<dyn StartedExecutor>, ExecutorError> {
        Ok(Box::new(ExecutorDesk::of(LocalRuns { setup }.start())))
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

impl Handler<Submit> for LocalRuns {
    type Result = ();

    fn handle(&mut self, Submit(msg): Submit, ctx: &mut Self::Context) {
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

impl Handler<Cancel> for LocalRuns {
    type Result = ();

    fn handle(&mut self, Cancel(msg): Cancel, _: &mut Self::Context) {
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
