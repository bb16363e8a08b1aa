//! `OrchestrationActor`: one plan's state machine. Stages form a DAG; a stage starts when
//! its needs have finished, expands into runs (`plan::expand_stage`), and its runs are
//! submitted to the `RunSupervisor` with at most `max_parallel` of the plan's runs in flight.
//! Failed runs are continued with a retry message per the stage's `retries`; `output: json`
//! results that do not parse are retried the same way, then count as failed.
//!
//! Resume: a planned run whose files exist is not started again. COMPLETED runs are reused
//! (their recorded result feeds later stages), INTERRUPTED and orphaned RUNNING runs are
//! continued, FAILED runs get their remaining retries. With deterministic run ids
//! (`<orchestration>-<stage>-<index>`) and each run's lock, no item runs twice to completion.
//!
//! Files: `mod.rs` the actor and its scheduling, `runs.rs` submitting a run and taking its
//! result (retries), `resume.rs` what to do with runs already on disk, `summary.rs` progress
//! events and the final summary.
//!
//! Must not: touch run files itself (RunActors do; the janitor settles a run a kill left
//! finished in its journal but not in its metadata), or block its arbiter.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::{broadcast, oneshot};

mod resume;
mod runs;
mod summary;

use runs::retry_message;

use crate::plan::state::{
    OrchestrationState, OrchestrationSummary, RunCounts, RunRow, SchedulingEvent, StageStatus,
};
use crate::plan::{expand_stage, ready_stages, PlannedRun, RunRecord, StageContext};
use crate::protocol::{OrchestrationEvent, OrchestrationRequest};
use crate::runtime::janitor::JanitorActor;
use crate::runtime::supervisor::{CancelRun, RunSupervisor};
use crate::workspace::now_rfc3339;

/// Stop submitting, interrupt the plan's runs, finish INTERRUPTED.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelOrchestration {
    pub reason: String,
}

/// How a planned run is (re)started.
enum Launch {
    New,
    Resume(Option<String>),
}

struct StageRun {
    planned: PlannedRun,
    work_dir: PathBuf,
    attempts: u32,
    /// FAILED outcomes so far (retries are granted per failure, not per attempt).
    failures: u32,
    /// Why the first failed attempt of this invocation failed: kept for the summary row when
    /// a retry fails differently.
    first_error: Option<String>,
    done: Option<RunRow>,
    pending_launch: Option<Launch>,
}

struct StageState {
    runs: Vec<StageRun>,
    outstanding: usize,
    status: StageStatus,
}

pub struct OrchestrationActor {
    request: OrchestrationRequest,
    supervisor: Addr<RunSupervisor>,
    events: broadcast::Sender<OrchestrationEvent>,
    reply: Option<oneshot::Sender<OrchestrationSummary>>,
    state: Option<OrchestrationState>,
    context: StageContext,
    stages: BTreeMap<String, StageState>,
    started_stages: HashSet<String>,
    passable: HashSet<String>,
    stop_reason: Option<String>,
    failed: bool,
    in_flight: HashSet<String>,
    prior_attempts: HashMap<String, u32>,
    prior_failures: HashMap<String, u32>,
    started_at: Instant,
    started_at_text: String,
    setup_error: Option<String>,
    janitor: Option<Addr<JanitorActor>>,
}

impl OrchestrationActor {
    pub fn new(
        request: OrchestrationRequest,
        supervisor: Addr<RunSupervisor>,
        events: broadcast::Sender<OrchestrationEvent>,
        reply: oneshot::Sender<OrchestrationSummary>,
    ) -> Self {
        let context = StageContext::new(request.orchestration_id.clone());
        // Opened here, before `Supervisor::orchestrate` returns the id to the caller: an id
        // the caller has seen always has its folder and plan path, so `--resume` finds it
        // however early the process is killed.
        let vars = serde_json::to_value(&request.plan.vars).unwrap_or_default();
        let (state, prior_attempts, prior_failures, setup_error) = match OrchestrationState::open(
            &request.workspace,
            &request.orchestration_id,
            &request.plan.file,
            &vars,
            request.resume,
        ) {
            Ok(mut state) => {
                let attempts = OrchestrationState::attempts_so_far(&state.dir);
                let failures = OrchestrationState::failures_so_far(&state.dir);
                let started = SchedulingEvent::OrchestrationStarted {
                    plan: request.plan.file.to_string_lossy().into_owned(),
                    workspace: request.workspace.to_string_lossy().into_owned(),
                    resumed: request.resume,
                };
                if let Err(e) = state.record(started) {
                    tracing::warn!(target: "delta::orchestrate", "{e}");
                }
                state.sync();
                (Some(state), attempts, failures, None)
            }
            Err(e) => (None, HashMap::new(), HashMap::new(), Some(e.to_string())),
        };
        OrchestrationActor {
            request,
            supervisor,
            events,
            reply: Some(reply),
            failed: setup_error.is_some(),
            state,
            context,
            stages: BTreeMap::new(),
            started_stages: HashSet::new(),
            passable: HashSet::new(),
            stop_reason: None,
            in_flight: HashSet::new(),
            prior_attempts,
            prior_failures,
            started_at: Instant::now(),
            started_at_text: now_rfc3339(),
            setup_error,
            janitor: None,
        }
    }

    fn record(&mut self, event: SchedulingEvent) {
        if let Some(state) = self.state.as_mut() {
            if let Err(e) = state.record(event) {
                tracing::warn!(target: "delta::orchestrate", "{e}");
            }
        }
    }

    fn emit(&self, event: OrchestrationEvent) {
        let _ = self.events.send(event);
    }

    /// Starts ready stages, submits runs up to the limit, and finishes when nothing is left.
    fn advance(&mut self, ctx: &mut Context<Self>) {
        if self.stop_reason.is_none() && !self.failed {
            loop {
                let ready = ready_stages(&self.request.plan, &self.passable, &self.started_stages);
                if ready.is_empty() {
                    break;
                }
                for stage in ready {
                    self.start_stage(&stage);
                }
            }
        }
        self.submit_more(ctx);
        let running = self
            .stages
            .values()
            .any(|s| s.status == StageStatus::Running);
        if self.in_flight.is_empty() && (!running || self.stop_reason.is_some()) {
            self.finish(ctx);
        }
    }

    fn start_stage(&mut self, id: &str) {
        self.started_stages.insert(id.to_string());
        let Some(stage) = self.request.plan.stage(id).cloned() else {
            return;
        };
        let planned = match expand_stage(&self.request.plan, id, &self.context) {
            Ok(p) => p,
            Err(e) => {
                let message = e.to_string();
                tracing::error!(target: "delta::orchestrate", "{message}");
                self.setup_error.get_or_insert(message);
                self.stages.insert(
                    id.to_string(),
                    StageState {
                        runs: Vec::new(),
                        outstanding: 0,
                        status: StageStatus::Failed,
                    },
                );
                self.failed = true;
                self.record(SchedulingEvent::StageFinished {
                    stage: id.to_string(),
                    status: StageStatus::Failed,
                    counts: RunCounts::default(),
                });
                return;
            }
        };
        self.record(SchedulingEvent::StageStarted {
            stage: id.to_string(),
            runs: planned.len(),
        });
        let total = planned.len();
        let mut runs = Vec::with_capacity(planned.len());
        for p in planned {
            let work_dir = match &p.work_dir_suffix {
                Some(suffix) => self.request.workspace.join(suffix),
                None => self.request.workspace.clone(),
            };
            let attempts = self.prior_attempts.get(&p.run_id).copied().unwrap_or(0);
            let failures = self.prior_failures.get(&p.run_id).copied().unwrap_or(0);
            let (done, launch) = self.existing_state(
                &p,
                &work_dir,
                attempts,
                failures,
                stage.retries,
                stage.output,
            );
            runs.push(StageRun {
                planned: p,
                work_dir,
                attempts,
                failures,
                first_error: None,
                done,
                pending_launch: launch,
            });
        }
        let outstanding = runs.iter().filter(|r| r.done.is_none()).count();
        // After the runs found on disk are known, so a resume's progress starts where the
        // last invocation stopped rather than at 0.
        self.emit(OrchestrationEvent::StageStarted {
            stage: id.to_string(),
            runs: total,
            already_done: RunCounts::tally(
                runs.len() - outstanding,
                runs.iter().filter_map(|r| r.done.as_ref()),
            ),
        });
        self.stages.insert(
            id.to_string(),
            StageState {
                runs,
                outstanding,
                status: StageStatus::Running,
            },
        );
        if outstanding == 0 {
            self.finish_stage(id);
        }
    }

    fn submit_more(&mut self, ctx: &mut Context<Self>) {
        if self.stop_reason.is_some() {
            return;
        }
        let limit = self.request.max_parallel.max(1);
        let ids: Vec<String> = self.stages.keys().cloned().collect();
        for id in ids {
            loop {
                if self.in_flight.len() >= limit {
                    return;
                }
                let Some(stage) = self.stages.get_mut(&id) else {
                    break;
                };
                let Some(k) = stage.runs.iter().position(|r| r.pending_launch.is_some()) else {
                    break;
                };
                let launch = stage.runs[k].pending_launch.take();
                if let Some(launch) = launch {
                    self.submit(&id, k, launch, ctx);
                }
            }
        }
    }

    fn finish_stage(&mut self, stage_id: &str) {
        let Some(spec) = self.request.plan.stage(stage_id).cloned() else {
            return;
        };
        let Some(stage) = self.stages.get_mut(stage_id) else {
            return;
        };
        let counts = RunCounts::tally(
            stage.runs.len(),
            stage.runs.iter().filter_map(|r| r.done.as_ref()),
        );
        let status = if self.stop_reason.is_some() && counts.interrupted > 0 {
            StageStatus::Interrupted
        } else if counts.unsuccessful() == 0 {
            StageStatus::Completed
        } else if spec.on_failure == crate::plan::OnFailure::Continue {
            StageStatus::CompletedWithFailures
        } else {
            StageStatus::Failed
        };
        stage.status = status;
        let records: Vec<RunRecord> = stage
            .runs
            .iter()
            .filter_map(|r| r.done.as_ref())
            .map(|r| RunRecord {
                run_id: r.run_id.clone(),
                status: r.status,
                result: r.result.clone(),
                error: r.error.clone(),
            })
            .collect();
        self.context.record_stage(&spec, &records);
        match status {
            StageStatus::Completed | StageStatus::CompletedWithFailures => {
                self.passable.insert(stage_id.to_string());
            }
            _ => self.failed = true,
        }
        self.record(SchedulingEvent::StageFinished {
            stage: stage_id.to_string(),
            status,
            counts,
        });
        if let Some(state) = &self.state {
            state.sync();
        }
        self.emit(OrchestrationEvent::StageFinished {
            stage: stage_id.to_string(),
            status,
            counts,
        });
    }
}

impl Actor for OrchestrationActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.state.is_none() {
            self.finish(ctx);
            return;
        }
        // Runs of this workspace orphaned by other processes are noticed while we work.
        self.janitor = Some(
            JanitorActor::new(
                vec![self.request.workspace.clone()],
                Some(std::time::Duration::from_secs(60)),
            )
            .start(),
        );
        self.advance(ctx);
    }
}

impl Handler<CancelOrchestration> for OrchestrationActor {
    type Result = ();

    fn handle(&mut self, msg: CancelOrchestration, ctx: &mut Self::Context) {
        if self.stop_reason.is_some() {
            return;
        }
        self.stop_reason = Some(msg.reason.clone());
        for run_id in &self.in_flight {
            self.supervisor.do_send(CancelRun {
                run_id: run_id.clone(),
                reason: msg.reason.clone(),
            });
        }
        for stage in self.stages.values_mut() {
            for run in &mut stage.runs {
                run.pending_launch = None;
            }
        }
        if self.in_flight.is_empty() {
            self.finish(ctx);
        }
    }
}
