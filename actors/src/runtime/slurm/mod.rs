//! `SlurmExecutor`: one orchestration's runs as Slurm jobs, behind the executor port
//! (`runtime/executor.rs`). The OrchestrationActor hands it planned runs and gets each run's
//! end back, as from any executor; every decision stays with the scheduler. Each planned
//! run is first described in the orchestration's folder (`handoff.rs`: the file the job
//! reads). [`Slurm`] starts one per orchestration.
//!
//! One work cycle at a time (submissions, cancels and the periodic look are never
//! interleaved): `squeue` first, then — runs asked for since the last cycle — adopt the
//! ones a job of this orchestration already runs (a resume after a kill), submit the others
//! grouped per stage (`sbatch` job arrays), `scancel` the cancelled ones, then read the
//! result files of the runs whose jobs were known. A run whose job has left the queue
//! without a result (node failure, `scancel`, preemption, time limit) is settled from its
//! own files (`settle.rs`): the journal and metadata are the truth.
//!
//! Must not: decide retries (a vanished run is reported FAILED; the scheduler retries),
//! block its arbiter on a Slurm command (they run as futures), or see a provider key.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::cluster::handoff::{read_result, result_path};
use crate::cluster::slurm::sbatch::{logs_dir, plan_submissions, JobTemplate};
use crate::cluster::slurm::TaskState;
use crate::cluster::slurm::{SlurmSettings, SlurmTools};
use crate::plan::schedule::RunEnd;
use crate::plan::ResolvedPlan;
use crate::protocol::{RunErrorInfo, RunErrorKind, RunResult, RunStatus};
use crate::runtime::executor::{
    Cancel, Executor, ExecutorDesk, ExecutorError, ExecutorSetup, Flush, StartedExecutor,
    StopExecutor, Submit,
};

mod handoff;
pub mod launch;
mod settle;

/// Queue looks in a row that must miss a job before its run is settled (the queue and the
/// shared filesystem are not updated at the same instant).
const MISSES_BEFORE_SETTLING: u32 = 2;

struct Tracked {
    stage: String,
    index: usize,
    work_dir: PathBuf,
    result: PathBuf,
    /// `<job>_<task>` or `<job>` once submitted or adopted.
    job: Option<String>,
    reply: Option<oneshot::Sender<RunEnd>>,
    cancelled: bool,
    misses: u32,
}

/// What the Slurm executor submits with.
#[derive(Clone)]
pub struct SlurmJobs {
    /// The plan's validated `executor:` settings: partition, account, time limit, extra
    /// `sbatch` arguments, array width and how often the queue is polled.
    pub settings: SlurmSettings,
    /// `sbatch`, `squeue` and `scancel` as found on the orchestrating host's PATH.
    pub tools: SlurmTools,
    /// The `delta` binary on the nodes.
    pub delta_path: PathBuf,
    /// The environment of every `sbatch`, which the jobs inherit: no provider key, the
    /// relay's address and token.
    pub job_env: Vec<(String, String)>,
    /// The relay route of each agent's endpoint, by the agent folder the plan resolved.
    pub routes: HashMap<PathBuf, String>,
    /// The relay routes of the stages with a `budget:` (the same endpoints, charged to the
    /// stage's cap too), by stage id and agent folder; the other stages' runs take `routes`.
    pub stage_routes: HashMap<(String, PathBuf), String>,
}

impl std::fmt::Debug for SlurmJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmJobs")
            .field("settings", &self.settings)
            .field("delta_path", &self.delta_path)
            .field(
                "job_env",
                &self.job_env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("routes", &self.routes)
            .field("stage_routes", &self.stage_routes)
            .finish_non_exhaustive()
    }
}

/// The Slurm executor, an [`Executor`] to hand to `Supervisor::orchestrate_on`
/// ([`launch::start_slurm`] builds one): what its jobs are submitted with.
pub struct Slurm(pub Arc<SlurmJobs>);

impl Executor for Slurm {
    fn start(&self, setup: ExecutorSetup) -> Result<Box<dyn StartedExecutor>, ExecutorError> {
        Ok(Box::new(ExecutorDesk::of(
            SlurmExecutor::new(self.0.clone(), setup).start(),
        )))
    }
}

/// One orchestration's runs as Slurm jobs: the actor behind the executor port (through the
/// runtime's private adapter) that writes handoff files, submits job arrays at each flush,
/// and polls `squeue` and the result files for the runs' ends.
pub struct SlurmExecutor {
    /// What jobs are submitted with (settings, relay, environment) and the cluster's commands.
    jobs: Arc<SlurmJobs>,
    /// The plan, for the handoff files (its folder and model-call settings).
    plan: Arc<ResolvedPlan>,
    /// The orchestration's id (job names and labels carry it, so a resume adopts its jobs).
    orchestration_id: String,
    /// `<workspace>/.delta/orchestrations/<id>`: handoff and result files go under its `slurm/`.
    orchestration_dir: PathBuf,
    /// The orchestration's workspace.
    workspace: PathBuf,
    /// The array throttle (`%N` of `sbatch --array`): runs of a stage at once.
    max_parallel: usize,
    /// Every run handed over and not ended, by run id: its job, its reply, its files.
    runs: HashMap<String, Tracked>,
    /// Runs written and waiting for the next cycle's `sbatch`.
    to_submit: Vec<String>,
    /// Runs whose jobs the next cycle cancels (`scancel`).
    to_cancel: Vec<String>,
    /// A cycle (submit, cancel, poll) is running: cycles never overlap.
    busy: bool,
    /// Something was asked while a cycle ran: run another when it ends.
    again: bool,
    /// Jobs whose run this executor has already taken the end of: never adopted again
    /// (a cancelled job stays in the queue, COMPLETING, for a while).
    ended_jobs: HashSet<String>,
}

/// What one cycle learned, applied when it ends.
#[derive(Default)]
struct CycleOutcome {
    /// `None` when `squeue` failed (nothing is settled on a failed look).
    live: Option<HashSet<String>>,
    jobs: Vec<(String, String)>,
    lost: Vec<(String, String)>,
    /// Asked to run, but already COMPLETED on disk.
    completed: Vec<String>,
    results: Vec<(String, RunResult)>,
    /// Runs whose jobs were known when the cycle started (the only ones a miss counts for).
    watched: Vec<String>,
}

impl SlurmExecutor {
    pub fn new(jobs: Arc<SlurmJobs>, setup: ExecutorSetup) -> Self {
        let request = setup.request;
        SlurmExecutor {
            jobs,
            plan: request.plan,
            orchestration_id: request.orchestration_id,
            orchestration_dir: setup.orchestration_dir,
            workspace: request.workspace,
            max_parallel: request.max_parallel,
            runs: HashMap::new(),
            to_submit: Vec::new(),
            to_cancel: Vec::new(),
            busy: false,
            again: false,
            ended_jobs: HashSet::new(),
        }
    }

    fn reply(&mut self, run_id: &str, end: RunEnd) {
        if let Some(mut run) = self.runs.remove(run_id) {
            if let Some(job) = run.job.take() {
                self.ended_jobs.insert(job);
            }
            if let Some(reply) = run.reply.take() {
                let _ = reply.send(end);
            }
        }
    }

    /// Starts a cycle, or asks for another after the one running.
    fn kick(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            self.again = true;
            return;
        }
        self.busy = true;
        self.again = false;
        let submit: Vec<(String, String, usize, PathBuf)> = std::mem::take(&mut self.to_submit)
            .into_iter()
            .filter_map(|id| {
                let run = self.runs.get(&id)?;
                Some((id, run.stage.clone(), run.index, run.work_dir.clone()))
            })
            .collect();
        let cancel: Vec<String> = std::mem::take(&mut self.to_cancel)
            .into_iter()
            .filter_map(|id| self.runs.get(&id)?.job.clone())
            .collect();
        let watched: Vec<(String, PathBuf)> = self
            .runs
            .iter()
            .filter(|(_, r)| r.job.is_some())
            .map(|(id, r)| (id.clone(), r.result.clone()))
            .collect();
        let ended_jobs = self.ended_jobs.clone();
        let jobs = self.jobs.clone();
        let orchestration_id = self.orchestration_id.clone();
        let dir = self.orchestration_dir.clone();
        let workspace = self.workspace.clone();
        let max_parallel = self.max_parallel;
        async move {
            let mut outcome = CycleOutcome::default();
            let queue = match jobs.tools.queue().await {
                Ok(queue) => queue,
                Err(e) => {
                    tracing::warn!(target: "delta::slurm", "{e}");
                    Vec::new()
                }
            };
            let live: HashSet<String> = queue
                .iter()
                .filter(|t| t.item_of(&orchestration_id).is_some())
                .map(|t| t.job_id.clone())
                .collect();
            // Adoptable: queued or running, and not a job whose end was already taken.
            let ours: HashMap<(String, usize), String> = queue
                .iter()
                .filter(|t| matches!(t.state, TaskState::Pending | TaskState::Running))
                .filter(|t| !ended_jobs.contains(&t.job_id))
                .filter_map(|t| {
                    let (stage, index) = t.item_of(&orchestration_id)?;
                    Some(((stage.to_owned(), index), t.job_id.clone()))
                })
                .collect();
            outcome.live = Some(live);
            // Runs a job of this orchestration already runs: adopted, not submitted again.
            let mut by_stage: HashMap<String, Vec<(String, usize)>> = HashMap::new();
            for (id, stage, index, work_dir) in submit {
                match ours.get(&(stage.clone(), index)) {
                    Some(job) => outcome.jobs.push((id, job.clone())),
                    // Its job finished between the stage's expansion (a resume saw it
                    // RUNNING) and now: nothing to submit.
                    None if completed_on_disk(&work_dir, &id) => outcome.completed.push(id),
                    None => by_stage.entry(stage).or_default().push((id, index)),
                }
            }
            if !by_stage.is_empty() {
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(logs_dir(&dir));
            }
            let template = JobTemplate {
                orchestration_id: &orchestration_id,
                orchestration_dir: &dir,
                workspace: &workspace,
                delta_path: &jobs.delta_path,
                max_parallel,
            };
            let mut stages: Vec<_> = by_stage.into_iter().collect();
            stages.sort();
            for (stage, runs) in stages {
                let indices: Vec<usize> = runs.iter().map(|(_, i)| *i).collect();
                for submission in plan_submissions(&jobs.settings, &template, &stage, &indices) {
                    let covered: Vec<&(String, usize)> = runs
                        .iter()
                        .filter(|(_, i)| submission.indices().contains(i))
                        .collect();
                    let started = std::time::Instant::now();
                    let submitted = jobs.tools.submit(&submission, &jobs.job_env).await;
                    if let Ok(job) = &submitted {
                        tracing::info!(
                            target: "delta::slurm",
                            "submitted {} run(s) of stage {stage} as Slurm job {job} in {} ms",
                            covered.len(),
                            started.elapsed().as_millis()
                        );
                    }
                    match submitted {
                        Ok(job) => outcome.jobs.extend(
                            covered
                                .iter()
                                .map(|(id, i)| (id.clone(), submission.task_job_id(&job, *i))),
                        ),
                        Err(e) => outcome
                            .lost
                            .extend(covered.iter().map(|(id, _)| (id.clone(), e.to_string()))),
                    }
                }
            }
            if !cancel.is_empty() {
                if let Err(e) = jobs.tools.cancel(&cancel).await {
                    tracing::warn!(target: "delta::slurm", "{e}");
                }
            }
            // After the queue was read: a job gone from it wrote its result before leaving.
            let found = tokio::task::spawn_blocking(move || {
                watched
                    .into_iter()
                    .map(|(id, path)| (id.clone(), read_result(&path), id))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            for (id, result, watched_id) in found {
                outcome.watched.push(watched_id);
                if let Some(result) = result {
                    outcome.results.push((id, result));
                }
            }
            outcome
        }
        .into_actor(self)
        .map(|outcome, act, ctx| {
            act.apply(outcome);
            act.busy = false;
            if act.again || !act.to_submit.is_empty() {
                act.kick(ctx);
            }
        })
        .spawn(ctx);
    }

    fn apply(&mut self, outcome: CycleOutcome) {
        for (id, job) in outcome.jobs {
            if let Some(run) = self.runs.get_mut(&id) {
                run.job = Some(job);
                if run.cancelled {
                    self.to_cancel.push(id);
                    self.again = true;
                }
            }
        }
        for (id, message) in outcome.lost {
            self.reply(&id, RunEnd::Lost(message));
        }
        for id in outcome.completed {
            if let Some(end) = self.settle(&id) {
                self.reply(&id, end);
            }
        }
        let finished: HashSet<String> = outcome.results.iter().map(|(id, _)| id.clone()).collect();
        for (id, mut result) in outcome.results {
            let Some(run) = self.runs.get(&id) else {
                continue;
            };
            // SIGTERM from someone else's scancel, a preemption or the time limit: the run
            // stopped cleanly, but was not asked to stop by the orchestration: a failure the
            // scheduler may retry, like a job that vanished.
            // A run the relay's ledger stopped (the batch's budget ran out) keeps its
            // INTERRUPTED `budget_exhausted`: the orchestration stops on it.
            let budget_stopped = result
                .error
                .as_ref()
                .is_some_and(|e| e.kind == RunErrorKind::BudgetExhausted);
            if result.status == RunStatus::Interrupted && !run.cancelled && !budget_stopped {
                result.status = RunStatus::Failed;
                result.error = Some(RunErrorInfo::new(
                    RunErrorKind::ExecutorStopped,
                    format!(
                        "Slurm job {} was stopped before the run finished (scancel, preemption or time limit)",
                        run.job.as_deref().unwrap_or("?")
                    ),
                ));
            }
            let end = RunEnd::from_result(Ok(result), &run.work_dir, &id);
            self.reply(&id, end);
        }
        let Some(live) = outcome.live else {
            return;
        };
        for id in outcome.watched {
            if finished.contains(&id) {
                continue;
            }
            let Some(run) = self.runs.get_mut(&id) else {
                continue;
            };
            let present = run.job.as_ref().is_some_and(|job| live.contains(job));
            if present {
                run.misses = 0;
                continue;
            }
            run.misses += 1;
            if run.misses >= MISSES_BEFORE_SETTLING {
                if let Some(end) = self.settle(&id) {
                    self.reply(&id, end);
                }
            }
        }
    }
}

/// True when the run's files say COMPLETED (its journal settled first).
fn completed_on_disk(work_dir: &std::path::Path, run_id: &str) -> bool {
    crate::janitor::settle_from_journal(work_dir, run_id);
    let run_dir = crate::workspace::RunPaths::new(work_dir, run_id).run_dir;
    crate::metadata::read_metadata(&run_dir).is_ok_and(|m| m.status == RunStatus::Completed)
}

impl Actor for SlurmExecutor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let every = self.jobs.settings.poll_interval;
        ctx.run_interval(every, |act, ctx| {
            if act.runs.values().any(|r| r.job.is_some()) {
                act.kick(ctx);
            }
        });
    }
}

impl Handler<Submit> for SlurmExecutor {
    type Result = ();

    fn handle(&mut self, Submit(msg): Submit, _ctx: &mut Self::Context) {
        let (run_id, stage, index) = (
            msg.run.run_id.clone(),
            msg.run.stage_id.clone(),
            msg.run.index,
        );
        let prepared = self
            .write_handoff(msg.run, &msg.work_dir, msg.launch, msg.trace)
            .and_then(|()| {
                result_path(&self.orchestration_dir, &stage, index).map_err(|e| e.to_string())
            });
        let result = match prepared {
            Ok(path) => path,
            Err(e) => {
                let _ = msg.reply.send(RunEnd::Lost(e));
                return;
            }
        };
        self.to_submit.push(run_id.clone());
        self.runs.insert(
            run_id,
            Tracked {
                stage,
                index,
                work_dir: msg.work_dir,
                result,
                job: None,
                reply: Some(msg.reply),
                cancelled: false,
                misses: 0,
            },
        );
    }
}

impl Handler<Cancel> for SlurmExecutor {
    type Result = ();

    fn handle(&mut self, Cancel(msg): Cancel, _ctx: &mut Self::Context) {
        let Some(run) = self.runs.get_mut(&msg.run_id) else {
            return;
        };
        run.cancelled = true;
        if run.job.is_some() {
            self.to_cancel.push(msg.run_id);
        } else if let Some(pos) = self.to_submit.iter().position(|id| *id == msg.run_id) {
            // Not submitted yet: nothing ran.
            self.to_submit.remove(pos);
            let end = self.unstarted_interrupted(&msg.run_id);
            self.reply(&msg.run_id, end);
        }
        // Submitting in the cycle running now: cancelled when its job id comes back.
    }
}

impl Handler<Flush> for SlurmExecutor {
    type Result = ();

    fn handle(&mut self, _msg: Flush, ctx: &mut Self::Context) {
        if !self.to_submit.is_empty() || !self.to_cancel.is_empty() {
            self.kick(ctx);
        }
    }
}

impl Handler<StopExecutor> for SlurmExecutor {
    type Result = ();

    fn handle(&mut self, _msg: StopExecutor, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
