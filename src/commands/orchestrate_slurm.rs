//! What `delta orchestrate --executor slurm` adds to the command: resolving the executor
//! (`--executor` over the plan's `executor:`), the `--dry-run` preview of the `sbatch`
//! commands, the `--check` probe job, and starting the plan on Slurm (the library's
//! `executor::slurm::start_slurm`: relay, routes, the jobs' environment without provider
//! keys), whose warnings it prints.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use delta_actors::agent::ResolvedAgent;
use delta_actors::cluster::slurm::probe::run_probe;
use delta_actors::cluster::slurm::sbatch::{plan_submissions, JobTemplate};
use delta_actors::cluster::slurm::{SlurmSettings, SlurmTools};
use delta_actors::executor::slurm::{self as launch, SlurmLaunch, SlurmStart, SlurmStartError};
use delta_actors::plan::executor::{resolve_executor, ExecutorChoice, ExecutorKind};
use delta_actors::plan::state::OrchestrationState;
use delta_actors::plan::{expand_stage, orchestration_id, ResolvedPlan, StageContext};
use delta_actors::LlmTarget;

use crate::commands::engine::process_env;

use crate::error::CliError;
use crate::output::orchestration::SbatchPreview;

/// `--executor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorArg {
    /// Every run in this process (the default).
    Local,
    /// Every run as a Slurm job: a stage's fan-out as job arrays (docs/scale-out.md).
    Slurm,
}

pub use launch::{RELAY_TOKEN_VAR, RELAY_URL_VAR};
/// How long `--check` waits for its probe job.
const PROBE_TIME: Duration = Duration::from_secs(120);

/// The Slurm settings when the runs go to Slurm (`--executor slurm` or `executor.type: slurm`).
pub fn slurm_settings(
    plan: &ResolvedPlan,
    flag: Option<ExecutorArg>,
) -> Result<Option<SlurmSettings>, CliError> {
    let kind = flag.map(|f| match f {
        ExecutorArg::Local => ExecutorKind::Local,
        ExecutorArg::Slurm => ExecutorKind::Slurm,
    });
    match resolve_executor(&plan.file, plan.source.executor.as_ref(), kind)
        .map_err(|e| CliError::Config(e.to_string()))?
    {
        ExecutorChoice::Local => Ok(None),
        ExecutorChoice::Slurm(settings) => Ok(Some(settings)),
    }
}

/// The delta binary the jobs run: `executor.delta_path`, else this executable.
fn delta_path(settings: &SlurmSettings) -> Result<PathBuf, CliError> {
    launch::delta_path(settings).map_err(cli_error)
}

/// The library's reason, with the exit code it maps to (126 for what the user can fix).
fn cli_error(e: SlurmStartError) -> CliError {
    if e.is_configuration() {
        CliError::Config(e.to_string())
    } else {
        CliError::Runtime(e.to_string())
    }
}

/// `sbatch`, `squeue` and `scancel` from PATH, or the error that names the missing one.
fn slurm_tools(env: &BTreeMap<String, String>) -> Result<SlurmTools, CliError> {
    launch::slurm_tools(env).map_err(cli_error)
}

/// `--dry-run`: the first submission of every stage whose items are known before the plan
/// runs; stages fed by earlier stages' outputs say so.
pub fn dry_run_previews(
    plan: &ResolvedPlan,
    settings: &SlurmSettings,
    max_parallel: usize,
) -> Result<Vec<SbatchPreview>, CliError> {
    let id = orchestration_id(plan.name.as_deref());
    let workspace = plan
        .workspace
        .clone()
        .unwrap_or_else(|| plan.dir.join("workspaces").join("W00N"));
    let dir = OrchestrationState::root_for(&workspace).join(&id);
    let delta = delta_path(settings)?;
    let template = JobTemplate {
        orchestration_id: &id,
        orchestration_dir: &dir,
        workspace: &workspace,
        delta_path: &delta,
        max_parallel,
    };
    let context = StageContext::new(id.clone());
    let mut previews = Vec::new();
    for stage in &plan.stages {
        // A stage without foreach is one run whatever its message says.
        let indices = match &stage.foreach {
            None => Ok(vec![0]),
            Some(_) => expand_stage(plan, &stage.id, &context)
                .map(|runs| runs.iter().map(|r| r.index).collect::<Vec<usize>>()),
        };
        match indices {
            Ok(indices) => {
                for submission in plan_submissions(settings, &template, &stage.id, &indices) {
                    previews.push(SbatchPreview {
                        stage: stage.id.clone(),
                        command: submission.shell_text(),
                    });
                }
            }
            Err(_) => previews.push(SbatchPreview {
                stage: stage.id.clone(),
                command: format!(
                    "# its items come from the outputs of [{}]: submitted once they finish\n",
                    stage.needs.join(", ")
                ),
            }),
        }
    }
    Ok(previews)
}

/// Starts the relay for every agent's endpoint and prepares the jobs' submission (the
/// library's [`launch::start_slurm`]); its warnings go to stderr.
pub fn start_slurm(
    settings: SlurmSettings,
    plan: &ResolvedPlan,
    agents: &HashMap<PathBuf, Arc<ResolvedAgent>>,
    llm_by_agent: &HashMap<PathBuf, LlmTarget>,
    relay_listen: Option<SocketAddr>,
    max_parallel: usize,
    orchestration_dir: &Path,
) -> Result<SlurmStart, CliError> {
    let process = process_env();
    let started = launch::start_slurm(SlurmLaunch {
        settings,
        plan,
        agents,
        llm_by_agent,
        relay_listen,
        max_parallel,
        orchestration_dir,
        process_env: &process,
    })
    .map_err(cli_error)?;
    for warning in &started.warnings {
        crate::notice!("{warning}");
    }
    Ok(started)
}

/// `--executor slurm --check`: the probe job; prints what it found on stderr.
pub fn run_check(
    settings: &SlurmSettings,
    workspace: &Path,
    env: &BTreeMap<String, String>,
) -> Result<i32, CliError> {
    let tools = slurm_tools(env)?;
    let delta = delta_path(settings)?;
    let job_env = launch::job_env(env, &[], &[], "", "");
    let job_env: Vec<(String, String)> = job_env
        .into_iter()
        .filter(|(k, _)| k != RELAY_URL_VAR && k != RELAY_TOKEN_VAR)
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    crate::notice!(
        "submitting a probe job: it writes into {} from a compute node and runs {} --version there",
        workspace.display(),
        delta.display()
    );
    let report = rt
        .block_on(run_probe(
            &tools, settings, workspace, &delta, &job_env, PROBE_TIME,
        ))
        .map_err(|e| CliError::Config(e.to_string()))?;
    crate::notice!(
        "ok: job {} on node {} wrote into the workspace and ran {} ({} ms)",
        report.job_id,
        report.node,
        report.delta_version,
        report.waited.as_millis()
    );
    Ok(0)
}
