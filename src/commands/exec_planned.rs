//! `delta exec-planned <orchestration dir> <stage> <index>`: the compute-node side of
//! `delta orchestrate --executor slurm`. Reads the planned run the orchestrating process
//! described in the orchestration's folder, runs or continues it with the normal engine (a
//! one-run Supervisor in this process; SIGTERM from `scancel` interrupts it cleanly), its
//! model calls through the orchestration's relay, and records the RunResult beside the
//! planned run for the orchestrating process to pick up.
//!
//! The job script passes nothing but the folder, the stage and the item: the task is in the
//! folder, the relay's address and token in the job's environment (never on disk, never
//! given to tools).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use delta_actors::agent::{load_agent, load_env_cascade, with_env_model};
use delta_actors::cluster::handoff::{read_planned, write_result, HandoffLaunch};
use delta_actors::llm::Endpoint;
use delta_actors::{LlmTarget, RunRequest, RunStart};

use crate::commands::engine::{drive_single, process_env, supervisor_config, with_env_overrides};
use crate::commands::orchestrate_slurm::{RELAY_TOKEN_VAR, RELAY_URL_VAR};
use crate::error::CliError;
use crate::output::progress::Verbosity;

#[derive(Debug, Args)]
#[command(
    after_help = "Runs inside a job that `delta orchestrate --executor slurm` submitted; the job
script is this one line. Needs DELTA_BASE_URL (the relay) and DELTA_RELAY_TOKEN in the
environment, which that job has. Exit codes as for `delta run`."
)]
pub struct ExecPlannedArgs {
    /// The orchestration's folder (`<workspace>/.delta/orchestrations/<id>`).
    pub orchestration_dir: PathBuf,
    /// The stage id.
    pub stage: String,
    /// The item's index in the stage.
    pub index: usize,
}

pub fn run(args: &ExecPlannedArgs) -> Result<i32, CliError> {
    let planned = read_planned(&args.orchestration_dir, &args.stage, args.index)
        .map_err(|e| CliError::Config(e.to_string()))?;
    let mut env = process_env();
    let relay = env.remove(RELAY_URL_VAR).filter(|u| !u.is_empty());
    let token = env.remove(RELAY_TOKEN_VAR).filter(|t| !t.is_empty());
    let (Some(relay), Some(token)) = (relay, token) else {
        return Err(CliError::Config(format!(
            "exec-planned runs inside a job of `delta orchestrate --executor slurm`: \
             {RELAY_URL_VAR} and {RELAY_TOKEN_VAR} must be set (the job's environment has them)"
        )));
    };
    let mut agent = load_agent(&planned.agent)
        .map_err(|e| CliError::Config(format!("{}: {e}", planned.agent.display())))?;
    let plan_timeouts = delta_actors::llm::LlmTimeoutSettings {
        request: planned.llm_request_timeout_ms.map(Duration::from_millis),
        idle: planned.llm_idle_timeout_ms.map(Duration::from_millis),
    };
    agent.llm.timeouts = plan_timeouts.over(agent.llm.timeouts);
    if let Some(format) = planned.llm_response_format {
        agent.llm.response_format = Some(format);
    }
    agent.llm.price = agent.llm.price.or(planned.llm_price);
    let cwd = std::env::current_dir().map_err(|e| CliError::Runtime(e.to_string()))?;
    let cascade = load_env_cascade(Some(&planned.work_dir), &planned.plan_dir, &cwd, &env)
        .map_err(|e| CliError::Config(e.to_string()))?;
    let agent =
        with_env_model(agent, &cascade.vars)?.with_default_sandbox(planned.sandbox.as_ref());
    let base_url = format!("{}/r/{}/v1", relay.trim_end_matches('/'), planned.llm_route);
    let start = match planned.launch {
        HandoffLaunch::New { task } => RunStart::New { task },
        HandoffLaunch::Continue { message } => RunStart::Continue {
            message,
            force: false,
        },
    };
    let mut request = RunRequest::new(
        Arc::new(agent),
        planned.work_dir.clone(),
        start,
        LlmTarget::Http(Endpoint::new(base_url, Some(token))),
    )
    .with_run_id(planned.run_id.clone())
    .with_env(Arc::new(cascade.vars.clone()))
    .with_orchestration_id(planned.orchestration_id.clone());
    if let Some(max_iterations) = planned.max_iterations {
        request = request.with_max_iterations(max_iterations);
    }
    if let Some(timeout_ms) = planned.timeout_ms {
        request = request.with_timeout(Duration::from_millis(timeout_ms));
    }
    // The submitting host's span of this run: the node's run continues it.
    if let Some(trace) = planned.trace.clone() {
        request = request.with_trace(trace);
    }
    let config = with_env_overrides(supervisor_config(1, 1), &cascade.vars)?;
    let mut config = super::endpoint_memory::with_endpoint_memory(config, &cascade.vars)?;
    // The run's span came with the handoff; this job exports it (and its calls' spans).
    let observability = super::observe::observe(&cascade.vars, None, &mut config)?;
    let supervisor =
        delta_actors::Supervisor::start(config).map_err(|e| CliError::Runtime(e.to_string()))?;
    let result = drive_single(&supervisor, request, Verbosity::Normal, false, &[]);
    supervisor.shutdown();
    if let Some(observability) = observability {
        observability.finish();
    }
    let result = result?;
    write_result(&args.orchestration_dir, &args.stage, args.index, &result)
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    crate::notice!("run {} ended {}", result.run_id, result.status);
    Ok(result.exit_code())
}
