//! `OrchestrationActor`: one plan's executor. The decisions (stage order, `max_parallel`,
//! retries, `output: json`, `on_failure`, resume) are the pure [`Scheduler`]'s; this actor
//! owns the mailbox and the side effects: it feeds the scheduler events (started, a stage
//! expanded, a run submitted or finished, cancel) and carries out the effects it returns —
//! expanding stages and describing their runs' files, handing runs to its executor (the
//! port of `runtime/executor.rs`: this process or a cluster, the actor cannot tell), appending to the orchestration's scheduling journal, emitting events,
//! writing the summary.
//!
//! Files: `mod.rs` the actor, the effect loop and handing runs to the executor, `resume.rs` expanding a stage and describing what its runs left on disk,
//! `summary.rs` the end (summary.json, the caller's reply).
//!
//! Must not: decide scheduling (the scheduler does), touch run files itself (RunActors do;
//! the janitor settles a run a kill left finished in its journal but not in its metadata),
//! or block its arbiter.

use std::collections::VecDeque;
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::{broadcast, oneshot};

mod resume;
mod summary;

use std::sync::Arc;

use crate::clock::now_rfc3339;
use crate::plan::schedule::Launch;
use crate::plan::schedule::{Effect, Event, Prior, RunEnd, Scheduler};
use crate::plan::state::{OrchestrationState, OrchestrationSummary, SchedulingEvent};
use crate::plan::PlannedRun;
use crate::protocol::{OrchestrationEvent, TraceSpan};
use crate::request::{ObservedOrchestration, ObserverHandle, OrchestrationRequest};
use crate::runtime::admission::RunDesk;
use crate::runtime::executor::{
    CancelPlanned, Executor, ExecutorSetup, StartedExecutor, SubmitPlanned,
};
use crate::runtime::janitor::JanitorActor;

/// Stop submitting, interrupt the plan's runs, finish INTERRUPTED.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelOrchestration {
    pub reason: String,
}

pub struct OrchestrationActor {
    /// The resolved plan and options of this orchestration. Set in `new`; read only.
    request: OrchestrationRequest,
    /// Where local runs are admitted and cancelled (the supervisor's desk). Set in `new`.
    supervisor: RunDesk,
    /// Progress events for watchers (CLI, serve); the actor only sends on it.
    events: broadcast::Sender<OrchestrationEvent>,
    /// Where the final summary goes; taken (left `None`) by `summary.rs` when the plan ends.
    reply: Option<oneshot::Sender<OrchestrationSummary>>,
    /// The orchestration's folder and records; `None` when it failed to open in `new`.
    /// Effects of the scheduler update it as runs start and end.
    state: Option<OrchestrationState>,
    /// The plan's scheduler (events in, effects out); fed by the actor's handlers.
    scheduler: Scheduler,
    /// How the orchestration's folder opened, handed to the scheduler when the actor starts.
    opened: Option<Event>,
    /// When the actor was built (monotonic), for the summary's duration. Set in `new`.
    started_at: Instant,
    /// The same moment in RFC 3339, as the summary records it. Set in `new`.
    started_at_text: String,
    /// The janitor of the orchestration's folder, started in `started` when the folder opened;
    /// taken and stopped by `summary.rs` at the end.
    janitor: Option<Addr<JanitorActor>>,
    /// Starts the executor when the actor starts.
    executor: Arc<dyn Executor>,
    /// Where runs are handed (`None` before the start, or when the executor could not
    /// start: `executor_error` says why, and every run ends lost with it).
    desk: Option<Box<dyn StartedExecutor>>,
    executor_error: Option<String>,
    /// Submissions or cancels were handed to the executor in this batch of effects.
    batch_open: bool,
    /// Told every event before the watchers (trace and metric export); set once, before
    /// the actor starts.
    observer: Option<ObserverHandle>,
    /// The plan's and stages' spending caps, seeded with what earlier invocations spent;
    /// shared with the executor, whose runs charge them.
    budgets: Arc<crate::budget::PlanBudgets>,
    /// The 80 % line was sent; a cap ran out and the scheduler was told.
    budget_warned: bool,
    budget_stopped: bool,
}

impl OrchestrationActor {
    pub fn new(
        request: OrchestrationRequest,
        supervisor: RunDesk,
        executor: Arc<dyn Executor>,
        events: broadcast::Sender<OrchestrationEvent>,
        reply: oneshot::Sender<OrchestrationSummary>,
    ) -> Self {
        // Opened here, before `Supervisor::orchestrate` returns the id to the caller: an id
        // the caller has seen always has its folder and plan path, so `--resume` finds it
        // however early the process is killed.
        let vars = serde_json::to_value(&request.plan.vars).unwrap_or_default();
        let (state, opened) = match OrchestrationState::open(
            &request.workspace,
            &request.orchestration_id,
            &request.plan.file,
            &vars,
            request.resume,
        ) {
            Ok(mut state) => {
                let prior = Prior {
                    attempts: OrchestrationState::attempts_so_far(&state.dir),
                    failures: OrchestrationState::failures_so_far(&state.dir),
                };
                let started = SchedulingEvent::OrchestrationStarted {
                    plan: request.plan.file.to_string_lossy().into_owned(),
                    workspace: request.workspace.to_string_lossy().into_owned(),
                    resumed: request.resume,
                    resume_command: request.resume_command.clone(),
                };
                if let Err(e) = state.record(started) {
                    tracing::warn!(target: "delta::orchestrate", "{e}");
                }
                state.sync();
                (Some(state), Event::Started { prior })
            }
            Err(e) => (
                None,
                Event::SetupFailed {
                    error: e.to_string(),
                },
            ),
        };
        let spent_before = state
            .as_ref()
            .map(|state| OrchestrationState::spent_so_far(&state.dir))
            .unwrap_or_default();
        let budgets = Arc::new(crate::budget::PlanBudgets::new(
            request.budget,
            request
                .plan
                .stages
                .iter()
                .map(|stage| (stage.id.as_str(), stage.budget)),
            &spent_before,
        ));
        let scheduler = Scheduler::new(
            request.plan.clone(),
            &request.orchestration_id,
            &request.workspace,
            request.max_parallel,
        );
        OrchestrationActor {
            request,
            supervisor,
            events,
            reply: Some(reply),
            state,
            scheduler,
            opened: Some(opened),
            started_at: Instant::now(),
            started_at_text: now_rfc3339(),
            janitor: None,
            executor,
            desk: None,
            executor_error: None,
            batch_open: false,
            observer: None,
            budgets,
            budget_warned: false,
            budget_stopped: false,
        }
    }

    /// Before a run's end is fed to the scheduler: the 80 % line once, and, once a cap ran
    /// out, the scheduler told to start nothing more (before the end that would start the
    /// next run).
    fn watch_budgets(&mut self, end: &RunEnd, ctx: &mut Context<Self>) {
        if !self.budget_warned {
            if let Some(message) = self.budgets.warning() {
                self.budget_warned = true;
                self.emit(OrchestrationEvent::Budget {
                    message,
                    exhausted: false,
                });
            }
        }
        // A run elsewhere (a Slurm job) stopped by the relay's ledger for the batch.
        let refused = match end {
            RunEnd::Finished(outcome) => outcome
                .error
                .as_deref()
                .filter(|e| e.starts_with("budget_exhausted: "))
                .and_then(crate::budget::exhausted_note),
            RunEnd::Lost(_) => None,
        };
        if !self.budget_stopped {
            if let Some(reason) = self.budgets.exhausted().or(refused) {
                self.budget_stopped = true;
                self.emit(OrchestrationEvent::Budget {
                    message: reason.clone(),
                    exhausted: true,
                });
                self.apply(Event::BudgetExhausted { reason }, ctx);
            }
        }
    }

    /// The same actor with `observer` told its events.
    pub fn observed_by(mut self, observer: Option<ObserverHandle>) -> Self {
        self.observer = observer;
        self
    }

    /// Sends `event` to the observer, then to the watchers.
    fn emit(&self, event: OrchestrationEvent) {
        if let Some(observer) = &self.observer {
            let plan_name = self.request.plan.name.as_deref().unwrap_or("plan");
            observer.orchestration_event(
                ObservedOrchestration {
                    id: &self.request.orchestration_id,
                    plan_name,
                    trace: self.request.trace.as_ref(),
                    budgets: Some(&self.budgets),
                },
                &event,
            );
        }
        let _ = self.events.send(event);
    }

    /// The span of one submission of `run`: a child, with an id of its own, of its stage's
    /// span (the orchestration span's child `("stage", <id>)`).
    fn run_span(&self, run: &PlannedRun) -> Option<TraceSpan> {
        let stage = self.request.trace.as_ref()?.child("stage", &run.stage_id);
        Some(stage.child_with_id(fastrand::u64(..).to_be_bytes()))
    }

    /// Feeds one event to the scheduler and carries out its effects in order. An effect that
    /// answers with an event (a stage expanded, a run handed over) has that event's effects
    /// carried out before the rest, as if the scheduler had decided them in one go.
    fn apply(&mut self, event: Event, ctx: &mut Context<Self>) {
        let mut effects: VecDeque<Effect> = self.scheduler.handle(event).into();
        while let Some(effect) = effects.pop_front() {
            if let Some(answer) = self.carry_out(effect, ctx) {
                for follow_up in self.scheduler.handle(answer).into_iter().rev() {
                    effects.push_front(follow_up);
                }
            }
        }
        if std::mem::take(&mut self.batch_open) {
            if let Some(desk) = self.desk.as_mut() {
                desk.flush();
            }
        }
    }

    fn carry_out(&mut self, effect: Effect, ctx: &mut Context<Self>) -> Option<Event> {
        match effect {
            Effect::ExpandStage { stage } => Some(self.expand(stage)),
            Effect::SubmitRun {
                run,
                work_dir,
                launch,
            } => Some(if let Err(e) = std::fs::create_dir_all(&work_dir) {
                // Whichever executor runs it, a run without its workspace cannot start.
                run_lost(
                    &run.run_id,
                    format!(
                        "cannot create the run's workspace {}: {e}",
                        work_dir.display()
                    ),
                )
            } else {
                self.submit(run, work_dir, launch, ctx)
            }),
            Effect::CancelRun { run_id, reason } => {
                if let Some(desk) = self.desk.as_mut() {
                    desk.cancel(CancelPlanned { run_id, reason });
                    self.batch_open = true;
                }
                None
            }
            Effect::Record(event) => {
                if let Some(state) = self.state.as_mut() {
                    if let Err(e) = state.record(event) {
                        tracing::warn!(target: "delta::orchestrate", "{e}");
                    }
                }
                None
            }
            Effect::SyncJournal => {
                if let Some(state) = &self.state {
                    state.sync();
                }
                None
            }
            Effect::Emit(event) => {
                self.emit(event);
                None
            }
            Effect::Finish(conclusion) => {
                self.finish(conclusion, ctx);
                None
            }
        }
    }
}

impl Actor for OrchestrationActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let Some(opened) = self.opened.take() else {
            return;
        };
        if let Some(state) = &self.state {
            let setup = ExecutorSetup {
                request: self.request.clone(),
                orchestration_dir: state.dir.clone(),
                runs: self.supervisor.clone(),
                budgets: Arc::clone(&self.budgets),
            };
            match self.executor.start(setup) {
                Ok(desk) => self.desk = Some(desk),
                Err(e) => self.executor_error = Some(e.to_string()),
            }
        }
        if self.state.is_some() {
            // Runs of this workspace orphaned by other processes are noticed while we work.
            self.janitor = Some(
                JanitorActor::new(
                    vec![self.request.workspace.clone()],
                    Some(std::time::Duration::from_secs(60)),
                )
                .start(),
            );
        }
        self.apply(opened, ctx);
    }
}

impl Handler<CancelOrchestration> for OrchestrationActor {
    type Result = ();

    fn handle(&mut self, msg: CancelOrchestration, ctx: &mut Self::Context) {
        self.apply(Event::CancelRequested { reason: msg.reason }, ctx);
    }
}

impl OrchestrationActor {
    /// Hands the run to the executor and answers [`Event::RunSubmitted`], or
    /// [`RunEnd::Lost`] when there is no executor; its end comes back later as
    /// [`Event::RunFinished`].
    fn submit(
        &mut self,
        run: PlannedRun,
        work_dir: std::path::PathBuf,
        launch: Launch,
        ctx: &mut Context<Self>,
    ) -> Event {
        let trace = self.run_span(&run);
        let Some(desk) = self.desk.as_mut() else {
            let why = self
                .executor_error
                .clone()
                .unwrap_or_else(|| "the executor is not running".into());
            return run_lost(&run.run_id, why);
        };
        let run_id = run.run_id.clone();
        let (reply, end) = oneshot::channel();
        desk.submit(SubmitPlanned {
            run,
            work_dir,
            launch,
            reply,
            trace,
        });
        self.batch_open = true;
        let finished_id = run_id.clone();
        async move {
            end.await
                .unwrap_or_else(|_| RunEnd::Lost(EXECUTOR_DROPPED_THE_RUN.into()))
        }
        .into_actor(self)
        .map(move |end, act, ctx| {
            act.watch_budgets(&end, ctx);
            act.apply(
                Event::RunFinished {
                    run_id: finished_id,
                    end,
                },
                ctx,
            );
        })
        .spawn(ctx);
        Event::RunSubmitted { run_id }
    }
}

/// Why a run failed whose executor let go of it without an end (its actor stopped or
/// panicked, or it dropped the `reply` of `SubmitPlanned`).
const EXECUTOR_DROPPED_THE_RUN: &str =
    "the executor let go of the run without reporting its end (it stopped, failed or dropped the run)";

/// The event for a run that could not be handed to its executor.
fn run_lost(run_id: &str, message: String) -> Event {
    Event::RunFinished {
        run_id: run_id.to_owned(),
        end: RunEnd::Lost(message),
    }
}
