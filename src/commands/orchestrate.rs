//! `delta orchestrate plan.yaml`: validate a plan, load every agent once, and drive the
//! whole batch in this process through one Supervisor; progress on stderr, the summary on
//! stdout. `--dry-run` validates and prints the stage graph; `--resume ID` finishes an
//! interrupted orchestration (its id is checked like a run id before it touches a path).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use delta_actors::agent::{
    llm_target, load_agent, load_env_cascade, script_path, scripted_model, with_env_model,
    with_model_override, ResolvedAgent,
};
use delta_actors::cluster::slurm::probe::{missing_folders, remove_empty_folders};
use delta_actors::cluster::slurm::SlurmSettings;
use delta_actors::executor::slurm::SlurmStart;
use delta_actors::plan::limits::MAX_PARALLEL;
use delta_actors::plan::state::{
    check_resumable, find_workspace, next_plan_workspace, next_plan_workspace_path, recorded_plan,
    validate_orchestration_id, OrchestrationState, OrchestrationStatus, OrchestrationSummary,
};
use delta_actors::plan::{load_plan, load_plan_with_vars, orchestration_id, ResolvedPlan};
use delta_actors::{LlmTarget, OrchestrationRequest, RunEvent, Supervisor, SupervisorConfig};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::commands::engine::{
    parse_llm_timeout_arg, process_env, supervisor_config, with_env_overrides, Interruption,
};
use crate::commands::observe::{observe, MetricsListen, Observability};
use crate::commands::orchestrate_slurm::{
    dry_run_previews, run_check, slurm_settings, start_slurm, ExecutorArg,
};
use crate::error::CliError;
use crate::output::hints::program_for_hints;
use crate::output::orchestration::{print_dry_run, print_summary, Progress};
use crate::output::Format;

#[derive(Debug, Args)]
#[command(after_help = concat!("Examples:
  delta orchestrate examples/plans/map-reduce/plan.yaml --llm-script examples/plans/map-reduce/llm-script.yaml
  delta orchestrate plan.yaml --dry-run                  # validate, load every agent, print the stage graph
  delta orchestrate plan.yaml --var repo=acme/api --max-parallel 32 --format json
  delta orchestrate plan.yaml --llm-timeout 3m          # bound each model call attempt of every run
  delta orchestrate plan.yaml --resume nightly-20261122-101500-ab12 -w ws   # after a crash or Ctrl-C
  delta orchestrate plan.yaml --budget-usd 20            # no model call past $20 (docs/cost.md)
  delta orchestrate plan.yaml --resume ID -w ws --budget-usd 40   # go on after the budget ran out
  delta orchestrate plan.yaml --executor slurm --dry-run # print the sbatch commands it would submit
  delta orchestrate plan.yaml --executor slurm --check   # probe: do the nodes share the workspace?
  delta orchestrate plan.yaml --executor slurm           # every run as a Slurm job (docs/scale-out.md)
  delta list-orchestrations -w ws                        # the ids, statuses and counts of a workspace

The plan format (every key, templates, foreach, needs, limits): docs/plan.md.

", crate::model_env_help!(), "
Exit codes: 0 every run completed, 1 a stage or run failed, 2 bad arguments, 126 invalid plan,
agent or orchestration id, 130 interrupted (the summary prints the command that resumes)."))]
pub struct OrchestrateArgs {
    /// The plan (YAML). Optional with --resume and -w: the plan recorded by the orchestration is used.
    pub plan: Option<PathBuf>,
    /// Shared workspace (default: the plan's `workspace:`, else <plan dir>/workspaces/W00N).
    #[arg(short = 'w', long = "work-dir")]
    pub work_dir: Option<PathBuf>,
    /// Runs in flight at once across the plan, 1-10000 (overrides the plan's max_parallel).
    #[arg(long, value_parser = clap::value_parser!(u64).range(*MAX_PARALLEL.start()..=*MAX_PARALLEL.end()))]
    pub max_parallel: Option<u64>,
    /// Template variable, repeatable: --var repo=acme/api
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
    /// Summary format on stdout: text (counts per stage, and the runs: all of a stage of
    /// up to 20, else those that did not complete, at most 20), json (the summary.json
    /// object, every run) or raw (one `run_id<TAB>status` line per run).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// List every run in the text summary, however many (default: a stage of more than
    /// 20 runs lists at most 20 that did not complete).
    #[arg(long)]
    pub all_runs: bool,
    /// Finish the orchestration with this id (as printed when it started): completed runs
    /// are kept, interrupted ones continued, the rest started.
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,
    /// Validate the plan and every agent, print the stage graph, run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Use the built-in scripted model with this script for every agent (offline).
    #[arg(long, value_name = "FILE")]
    pub llm_script: Option<PathBuf>,
    /// Limit on each model call attempt of every run, e.g. 90s or 2m (overrides the plan's
    /// and the agents' `llm.request_timeout`; default 600s). A timed-out attempt is retried.
    #[arg(long, value_name = "DURATION", value_parser = parse_llm_timeout_arg)]
    pub llm_timeout: Option<std::time::Duration>,
    /// Where the runs execute: local (this process) or slurm (Slurm job arrays; see
    /// docs/scale-out.md). Overrides the plan's `executor.type` (default local).
    #[arg(long, value_enum, value_name = "KIND")]
    pub executor: Option<ExecutorArg>,
    /// With --executor slurm: submit a probe job that checks the workspace is on a
    /// filesystem the nodes share and that they find delta, then exit (0 = ready).
    #[arg(long)]
    pub check: bool,
    /// With --executor slurm: the address the LLM relay listens on, reachable from the
    /// nodes (default: this host's address, any free port).
    #[arg(long, value_name = "ADDR")]
    pub relay_listen: Option<std::net::SocketAddr>,
    /// Do not keep each run's streaming model reply in its io/reply.partial (which
    /// `delta serve` shows growing); the batch then writes no file for it.
    #[arg(long)]
    pub no_live_reply: bool,
    /// Serve Prometheus metrics of the batch at http://ADDR/metrics while it runs (e.g.
    /// 127.0.0.1:9464; port 0 picks one, printed on stderr). Loopback only unless
    /// --metrics-public; DELTA_METRICS_TOKEN, when set, is asked for as a bearer token.
    /// Metric names: docs/observability.md.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Allow --metrics-listen on a non-loopback address (other hosts can scrape it); needs
    /// DELTA_METRICS_TOKEN (16 characters or more), which every scrape must send.
    #[arg(long, requires = "metrics_listen")]
    pub metrics_public: bool,
    /// The plan's spending cap (each flag replaces the same key of plan.yaml's `budget:`;
    /// stages keep theirs). Resume with a bigger one to go on after it ran out.
    #[command(flatten)]
    pub budget: crate::commands::budget_args::BudgetArgs,
}

pub fn run(args: &OrchestrateArgs) -> Result<i32, CliError> {
    let (plan_path, mut plan, overrides) = plan_of(args)?;
    let agents = load_agents(&plan)?;
    let slurm = slurm_settings(&plan, args.executor)?;
    if args.check && slurm.is_none() {
        return Err(CliError::Usage(
            "--check probes a Slurm cluster: add --executor slurm (or executor: {type: slurm} in the plan)".into(),
        ));
    }
    if args.dry_run {
        return dry_run(args, &plan, &agents, slurm.as_ref());
    }
    if let (true, Some(settings), None) = (args.check, &slurm, &args.resume) {
        return check_cluster(args, &plan, settings);
    }
    let (workspace, made_now) = workspace_for(args, &plan)?;
    // A setting refused from here on (.env, --llm-script, keys, Slurm) leaves no empty
    // workspace behind; disarmed once the orchestration starts.
    let mut fresh = FreshWorkspace {
        path: made_now.then(|| workspace.clone()),
    };
    if let (true, Some(settings)) = (args.check, &slurm) {
        return run_check(settings, &workspace, &process_env());
    }
    let id = match &args.resume {
        Some(id) => resumed(id, &workspace, &mut plan, &plan_path, &overrides)?,
        None => orchestration_id(plan.name.as_deref()),
    };
    let cwd = std::env::current_dir()?;
    let env = load_env_cascade(Some(&workspace), &plan.dir, &cwd, &process_env())?;
    let models = model_targets(args, &plan, agents, &env.vars, slurm.is_some())?;
    // The cap the orchestration (and, under Slurm, its relay, with the stages' caps) enforces.
    plan.budget = priced_budget(args, &plan, &models)?;
    let max_parallel = args.max_parallel.map_or(plan.max_parallel, |n| {
        usize::try_from(n).unwrap_or(usize::MAX)
    });
    let (config, observability, notices) = engine_config(args, &plan, max_parallel, &env.vars)?;
    let slurm_run = slurm
        .map(|settings| {
            let dir = OrchestrationState::dir_for(&workspace, &id)?;
            start_slurm_for(args, settings, &plan, &models, max_parallel, &dir)
        })
        .transpose()?;
    let supervisor = Supervisor::start(config)?;
    // Known before anything runs: recorded with the start (for `list-orchestrations`) and
    // printed on a forced exit as well as under an interrupted summary.
    let resume_argv = resume_command(&ResumeParts {
        plan: &plan.file,
        id: &id,
        workspace: &workspace,
        script: script_path(&env.vars, args.llm_script.as_deref()).as_deref(),
        max_parallel: args.max_parallel,
        llm_timeout: args.llm_timeout,
        executor: args.executor,
        budget: &args.budget,
        cwd: &cwd,
    });
    let resume_hint = shell_words::join(&resume_argv);
    let mut request = OrchestrationRequest::new(Arc::new(plan), id, &workspace, models.default)
        .with_agents(models.agents)
        .with_llm_by_agent(models.llm_by_agent)
        .with_env(Arc::new(env.vars))
        .with_max_parallel(max_parallel)
        .with_resume_command(resume_argv);
    if args.resume.is_some() {
        request = request.resuming();
    }
    if let Some(root) = observability.as_ref().and_then(|o| o.root_span()) {
        request = request.with_trace(root);
    }
    fresh.path = None;
    drive_and_report(
        args,
        supervisor,
        request,
        slurm_run,
        (observability, notices),
        resume_hint,
    )
}

/// Drives the orchestration to its summary, stops what was started for it, prints the
/// summary (with the resume command when it was interrupted) and answers its exit code.
fn drive_and_report(
    args: &OrchestrateArgs,
    supervisor: Supervisor,
    request: OrchestrationRequest,
    slurm_run: Option<SlurmStart>,
    (observability, notices): (Option<Observability>, mpsc::Receiver<RunEvent>),
    resume_hint: String,
) -> Result<i32, CliError> {
    let executor = slurm_run.as_ref().map(|slurm| slurm.executor.clone());
    let summary = drive(&supervisor, request, executor, notices, &resume_hint);
    supervisor.shutdown();
    if let Some(observability) = observability {
        observability.finish();
    }
    let summary = summary?;
    if let Some(slurm_run) = slurm_run {
        slurm_run.relay.stop();
    }
    let resume_hint = (summary.status == OrchestrationStatus::Interrupted).then_some(resume_hint);
    print_summary(&summary, args.format, resume_hint.as_deref(), args.all_runs);
    Ok(summary.exit_code())
}

/// `--var NAME=VALUE`s, in order.
type VarOverrides = Vec<(String, String)>;

/// The plan file, the plan loaded with `--var`s and `--llm-timeout`, and the `--var`s
/// (a `--resume` id is checked first).
fn plan_of(args: &OrchestrateArgs) -> Result<(PathBuf, ResolvedPlan, VarOverrides), CliError> {
    let overrides = parse_vars(&args.vars)?;
    if let Some(id) = &args.resume {
        validate_orchestration_id(id)?;
    }
    let plan_path = plan_path(args)?;
    let mut plan = load_plan(&plan_path, &overrides)?;
    if let Some(limit) = args.llm_timeout {
        plan.llm_timeouts.request = Some(limit);
    }
    Ok((plan_path, plan, overrides))
}

/// The orchestration `id` to resume in `workspace`, checked resumable; `plan` becomes the
/// plan with the vars it started with, so later stages get the same messages.
fn resumed(
    id: &str,
    workspace: &Path,
    plan: &mut ResolvedPlan,
    plan_path: &Path,
    overrides: &[(String, String)],
) -> Result<String, CliError> {
    let dir = check_resumable(workspace, id)?;
    if let Some(serde_json::Value::Object(saved)) = OrchestrationState::saved_vars(&dir) {
        *plan = load_plan_with_vars(plan_path, &saved, overrides)?;
    }
    Ok(id.to_owned())
}

/// The Slurm executor for this orchestration, with its relay (`--relay-listen`).
fn start_slurm_for(
    args: &OrchestrateArgs,
    settings: SlurmSettings,
    plan: &ResolvedPlan,
    models: &ModelTargets,
    max_parallel: usize,
    orchestration_dir: &Path,
) -> Result<SlurmStart, CliError> {
    let (agents, llm) = (&models.agents, &models.llm_by_agent);
    let relay = args.relay_listen;
    start_slurm(
        settings,
        plan,
        agents,
        llm,
        relay,
        max_parallel,
        orchestration_dir,
    )
}

/// `--dry-run`: what the real start would check first, the plan as it would run, exit 0.
fn dry_run(
    args: &OrchestrateArgs,
    plan: &ResolvedPlan,
    agents: &BTreeMap<PathBuf, ResolvedAgent>,
    slurm: Option<&SlurmSettings>,
) -> Result<i32, CliError> {
    match (
        &args.resume,
        args.work_dir.as_ref().or(plan.workspace.as_ref()),
    ) {
        // What the real resume checks first: the orchestration exists and is not driven.
        (Some(id), _) => {
            check_resumable(&resume_workspace(args, plan, id)?, id)?;
        }
        (None, Some(chosen)) => workspace_creatable(chosen).map_err(|e| {
            CliError::Config(format!("cannot create workspace {}: {e}", chosen.display()))
        })?,
        (None, None) => {}
    }
    warn_without_model(args, plan, agents, slurm.is_some())?;
    let max_parallel = args.max_parallel.map_or(plan.max_parallel, |n| n as usize);
    let previews = match slurm {
        Some(settings) => Some(dry_run_previews(plan, settings, max_parallel)?),
        None => None,
    };
    print_dry_run(plan, agents, args.format, previews.as_deref());
    Ok(0)
}

/// Each agent of the plan with the environment's model settings, and where its model calls
/// go; the first agent's target is the request's default.
struct ModelTargets {
    agents: HashMap<PathBuf, Arc<ResolvedAgent>>,
    llm_by_agent: HashMap<PathBuf, LlmTarget>,
    default: LlmTarget,
}

fn model_targets(
    args: &OrchestrateArgs,
    plan: &ResolvedPlan,
    agents: BTreeMap<PathBuf, ResolvedAgent>,
    env: &BTreeMap<String, String>,
    slurm: bool,
) -> Result<ModelTargets, CliError> {
    // Loaded once for every agent: a broken script is reported once.
    let scripted = scripted_model(env, args.llm_script.as_deref())?;
    let mut llm_by_agent = HashMap::new();
    let mut loaded = HashMap::new();
    for (path, agent) in agents {
        let agent = with_env_model(agent, env)?.with_default_sandbox(plan.sandbox.as_ref());
        let target = match &scripted {
            Some(script) => LlmTarget::Scripted(script.clone()),
            None => llm_target(&agent, env, None).map_err(|e| {
                let e = CliError::from(e);
                if slurm {
                    e.under_slurm()
                } else {
                    e
                }
            })?,
        };
        llm_by_agent.insert(path.clone(), target);
        loaded.insert(path, Arc::new(agent));
    }
    let Some(default) = llm_by_agent.values().next().cloned() else {
        return Err(CliError::Config(format!(
            "{}: the plan has no stages",
            plan.file.display()
        )));
    };
    Ok(ModelTargets {
        agents: loaded,
        llm_by_agent,
        default,
    })
}

/// The engine's settings for this plan (arbiters, limits, the environment's overrides), its
/// trace and metric export (OTEL_* variables, `--metrics-listen`) and the progress display's
/// notices.
fn engine_config(
    args: &OrchestrateArgs,
    plan: &ResolvedPlan,
    max_parallel: usize,
    env: &BTreeMap<String, String>,
) -> Result<
    (
        SupervisorConfig,
        Option<Observability>,
        mpsc::Receiver<RunEvent>,
    ),
    CliError,
> {
    let arbiters = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    if let Some(warning) = crate::limits::raise_open_files_for(arbiters, max_parallel) {
        crate::output::notice(&warning);
    }
    let mut config = supervisor_config(arbiters, max_parallel);
    config.llm_max_in_flight = plan.llm.max_in_flight.unwrap_or(max_parallel);
    config.llm_requests_per_minute = plan.llm.requests_per_minute;
    config.partial_reply_file = !args.no_live_reply;
    // DELTA_RETRY_BASE_MS applies here as for run/continue (docs/llm-script.md).
    let config = with_env_overrides(config, env)?;
    let mut config = super::endpoint_memory::with_endpoint_memory(config, env)?;
    let metrics = args.metrics_listen.map(|addr| MetricsListen {
        addr,
        public: args.metrics_public,
    });
    let observability = observe(env, metrics, &mut config)?;
    // The progress display's retry, adaptation and wait lines (attached after export).
    let notices = super::run_notices::attach(&mut config);
    Ok((config, observability, notices))
}

/// What a resume needs to be given again, each path absolute.
struct ResumeParts<'a> {
    plan: &'a Path,
    id: &'a str,
    workspace: &'a Path,
    script: Option<&'a Path>,
    max_parallel: Option<u64>,
    llm_timeout: Option<std::time::Duration>,
    executor: Option<ExecutorArg>,
    budget: &'a crate::commands::budget_args::BudgetArgs,
    cwd: &'a Path,
}

/// The command (argv) that resumes this orchestration, runnable from any folder: the
/// program as it was invoked (absolute when invoked by a path), the plan, `--resume`, `-w`,
/// and the flags the plan cannot supply (`--llm-script`, `--max-parallel`,
/// `--llm-timeout`, and the spending caps given as flags: a resume after a crash must not
/// run without the cap the batch was started with). Vars need no flag: a resume reads the
/// ones saved at the start.
fn resume_command(parts: &ResumeParts<'_>) -> Vec<String> {
    let absolute = |path: &Path| parts.cwd.join(path).to_string_lossy().into_owned();
    let mut argv = vec![
        program_for_hints(parts.cwd),
        "orchestrate".to_owned(),
        absolute(parts.plan),
        "--resume".to_owned(),
        parts.id.to_owned(),
        "-w".to_owned(),
        absolute(parts.workspace),
    ];
    if let Some(script) = parts.script {
        argv.extend(["--llm-script".to_owned(), absolute(script)]);
    }
    if let Some(n) = parts.max_parallel {
        argv.extend(["--max-parallel".to_owned(), n.to_string()]);
    }
    if let Some(limit) = parts.llm_timeout {
        argv.extend([
            "--llm-timeout".to_owned(),
            format!("{}ms", limit.as_millis()),
        ]);
    }
    if parts.executor == Some(ExecutorArg::Slurm) {
        argv.extend(["--executor".to_owned(), "slurm".to_owned()]);
    }
    if let Some(usd) = parts.budget.budget_usd {
        argv.extend(["--budget-usd".to_owned(), usd.to_string()]);
    }
    if let Some(tokens) = parts.budget.budget_tokens {
        argv.extend(["--budget-tokens".to_owned(), tokens.to_string()]);
    }
    argv
}

/// Drives the orchestration to its summary, with progress on stderr; SIGINT / SIGTERM
/// interrupt it (see [`Interruption`]; a forced exit prints `resume_hint`).
fn drive(
    supervisor: &Supervisor,
    request: OrchestrationRequest,
    executor: Option<Arc<dyn delta_actors::executor::Executor>>,
    mut notices: tokio::sync::mpsc::Receiver<RunEvent>,
    resume_hint: &str,
) -> Result<OrchestrationSummary, CliError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Notices come from the engine's observer, attached before the first run started:
        // its model-call retries are shown (`↻`).
        let mut notices_open = true;
        let handle = match executor {
            Some(executor) => supervisor.orchestrate_on(request, executor).await?,
            None => supervisor.orchestrate(request).await?,
        };
        crate::notice!("orchestration {}", handle.orchestration_id);
        let mut progress = Progress::new();
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut tick = tokio::time::interval(crate::output::orchestration::PROGRESS_INTERVAL);
        // The handle's own receiver holds every event since the start; a resubscribed one
        // would miss those sent before this line (the first stages' StageStarted).
        let mut handle = handle;
        let fresh = handle.events.resubscribe();
        let mut events = std::mem::replace(&mut handle.events, fresh);
        let mut interruption = Interruption::new(format!(
            "its runs left RUNNING are taken over by the resume; Resume with: {resume_hint}"
        ));
        let wait = handle.wait();
        tokio::pin!(wait);
        let summary = loop {
            tokio::select! {
                s = &mut wait => break s,
                ev = events.recv() => if let Ok(ev) = ev { progress.on_event(&ev) },
                ev = notices.recv(), if notices_open => match ev {
                    Some(RunEvent::ModelRetry { run_id, attempt, error, delay_ms }) => {
                        progress.on_retry(&run_id, attempt, &error, delay_ms)
                    }
                    Some(RunEvent::ModelAdapted { message, .. }) => progress.on_adapted(&message),
                    Some(RunEvent::Waiting { run_id, message }) => progress.on_waiting(&run_id, &message),
                    None => notices_open = false,
                    Some(_) => {}
                },
                _ = tick.tick() => progress.tick(),
                _ = sigint.recv() => interruption.on_signal(supervisor, "SIGINT (Ctrl-C)"),
                _ = sigterm.recv() => interruption.on_signal(supervisor, "SIGTERM"),
            }
        };
        while let Ok(ev) = events.try_recv() {
            progress.on_event(&ev);
        }
        progress.done();
        Ok(summary?)
    })
}

fn parse_vars(vars: &[String]) -> Result<Vec<(String, String)>, CliError> {
    vars.iter()
        .map(|v| match v.split_once('=') {
            Some((k, val)) if !k.trim().is_empty() => Ok((k.trim().to_string(), val.to_string())),
            _ => Err(CliError::Usage(format!(
                "--var {v:?}: expected KEY=VALUE, e.g. --var repo=acme/api"
            ))),
        })
        .collect()
}

/// The plan file: as given, or (resume with -w and no plan) the one the orchestration recorded.
fn plan_path(args: &OrchestrateArgs) -> Result<PathBuf, CliError> {
    if let Some(p) = &args.plan {
        return Ok(p.clone());
    }
    let (Some(id), Some(ws)) = (&args.resume, &args.work_dir) else {
        return Err(CliError::Usage(
            "give the plan file (delta orchestrate plan.yaml), or --resume <id> with -w <workspace>".into(),
        ));
    };
    Ok(recorded_plan(ws, id)?)
}

/// `--dry-run` runs nothing, but refuses (exit 126) what the real run would refuse before
/// starting: a `.env` that does not parse, a missing or invalid `--llm-script` /
/// `DELTA_LLM_SCRIPT` (reported once, not per agent), an invalid `DELTA_LLM_HTTP2` or
/// `DELTA_RETRY_BASE_MS`. A missing API key or endpoint is only a warning per agent, so a
/// plan can be checked on a machine that does not hold the key.
fn warn_without_model(
    args: &OrchestrateArgs,
    plan: &ResolvedPlan,
    agents: &BTreeMap<PathBuf, ResolvedAgent>,
    slurm: bool,
) -> Result<(), CliError> {
    let cwd = std::env::current_dir()?;
    let workspace = args.work_dir.clone().or_else(|| plan.workspace.clone());
    let env = load_env_cascade(workspace.as_deref(), &plan.dir, &cwd, &process_env())?;
    with_env_overrides(supervisor_config(1, 1), &env.vars)?;
    super::endpoint_memory::endpoint_memory_path(&env.vars)?;
    if scripted_model(&env.vars, args.llm_script.as_deref())?.is_some() {
        return Ok(());
    }
    for agent in agents.values() {
        let agent = with_model_override(agent.clone(), &env.vars);
        match llm_target(&agent, &env.vars, None).map_err(CliError::from) {
            Ok(_) => {}
            Err(mut missing @ (CliError::NoApiKey { .. } | CliError::NoEndpoint)) => {
                if slurm {
                    missing = missing.under_slurm();
                }
                crate::notice!(
                    "warning: agent {} has no model configured: {missing}",
                    agent.name
                )
            }
            Err(other) => return Err(other),
        }
    }
    Ok(())
}

/// The workspace a `--resume` looks in (`-w`, the plan's `workspace:`, else the one of
/// `<plan dir>/workspaces/*` holding the orchestration); nothing is created.
fn resume_workspace(
    args: &OrchestrateArgs,
    plan: &ResolvedPlan,
    id: &str,
) -> Result<PathBuf, CliError> {
    match (&args.work_dir, &plan.workspace) {
        (Some(w), _) | (None, Some(w)) => Ok(w.clone()),
        (None, None) => find_workspace(&plan.dir, id).ok_or_else(|| {
            CliError::Config(format!(
                "orchestration '{id}' not found under {}/workspaces; hint: pass its workspace with -w",
                plan.dir.display()
            ))
        }),
    }
}

/// Refuses a dollar cap (the plan's, or a stage's) over a stage whose agent's model nothing
/// prices, with the plan's `llm.price` standing in for agents without their own.
/// The plan's cap with the flags over it, once every capped stage's model has a price.
fn priced_budget(
    args: &OrchestrateArgs,
    plan: &ResolvedPlan,
    models: &ModelTargets,
) -> Result<Option<delta_actors::budget::Budget>, CliError> {
    let budget = args.budget.over(plan.budget);
    check_budgets_priced(plan, budget.as_ref(), &models.agents, &models.llm_by_agent)?;
    Ok(budget)
}

fn check_budgets_priced(
    plan: &ResolvedPlan,
    budget: Option<&delta_actors::budget::Budget>,
    agents: &HashMap<PathBuf, Arc<ResolvedAgent>>,
    llm_by_agent: &HashMap<PathBuf, LlmTarget>,
) -> Result<(), CliError> {
    for stage in &plan.stages {
        for cap in [budget, stage.budget.as_ref()].into_iter().flatten() {
            let (Some(agent), Some(llm)) =
                (agents.get(&stage.agent), llm_by_agent.get(&stage.agent))
            else {
                continue;
            };
            let mut priced = ResolvedAgent::clone(agent);
            priced.llm.price = priced.llm.price.or(plan.llm.price);
            delta_actors::budget::check_priced(cap, &priced, llm).map_err(|e| {
                CliError::Config(format!("{}: stage {}: {e}", plan.file.display(), stage.id))
            })?;
        }
    }
    Ok(())
}

fn load_agents(plan: &ResolvedPlan) -> Result<BTreeMap<PathBuf, ResolvedAgent>, CliError> {
    let mut agents = BTreeMap::new();
    for stage in &plan.stages {
        if agents.contains_key(&stage.agent) {
            continue;
        }
        let agent = load_agent(&stage.agent).map_err(|source| CliError::StageAgent {
            plan: plan.file.clone(),
            stage: stage.id.clone(),
            source: Box::new(source),
        })?;
        for warning in &agent.warnings {
            crate::notice!("warning: {warning}");
        }
        agents.insert(stage.agent.clone(), agent);
    }
    Ok(agents)
}

/// `--executor slurm --check`: the probe job in the workspace the plan would run in. The
/// folders made for it are removed again when the probe leaves them empty, so a check
/// leaves no new workspace behind.
fn check_cluster(
    args: &OrchestrateArgs,
    plan: &ResolvedPlan,
    settings: &SlurmSettings,
) -> Result<i32, CliError> {
    let chosen = match (&args.work_dir, &plan.workspace) {
        (Some(w), _) | (None, Some(w)) => w.clone(),
        (None, None) => next_plan_workspace_path(&plan.dir),
    };
    let created = missing_folders(&chosen);
    let checked = std::fs::create_dir_all(&chosen)
        .and_then(|()| chosen.canonicalize())
        .map_err(|e| CliError::Config(format!("workspace {}: {e}", chosen.display())))
        .and_then(|workspace| run_check(settings, &workspace, &process_env()));
    remove_empty_folders(&created);
    checked
}

/// Whether [`workspace_for`] could create `path` (`--dry-run` creates nothing): it is a
/// folder already, or its nearest existing ancestor is a folder this user may write to.
/// The error is the one the creation would meet.
fn workspace_creatable(path: &Path) -> std::io::Result<()> {
    let mut existing = path;
    loop {
        match std::fs::metadata(existing) {
            Ok(meta) if meta.is_dir() && existing == path => return Ok(()),
            Ok(meta) if !meta.is_dir() => {
                let errno = if existing == path {
                    nix::errno::Errno::EEXIST
                } else {
                    nix::errno::Errno::ENOTDIR
                };
                return Err(std::io::Error::from(errno));
            }
            Ok(_) => {
                return nix::unistd::access(existing, nix::unistd::AccessFlags::W_OK)
                    .map_err(std::io::Error::from)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match existing.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => existing = parent,
            _ => return Ok(()),
        }
    }
}

/// A workspace folder this command made, removed again if the command ends before the
/// orchestration starts and it is still empty (`remove_dir` removes nothing else).
struct FreshWorkspace {
    path: Option<PathBuf>,
}

impl Drop for FreshWorkspace {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = std::fs::remove_dir(path);
        }
    }
}

/// The shared workspace, absolute, and whether this call made its folder. A new
/// orchestration creates it; a resume needs it to exist already (creating an empty one
/// would only hide a mistyped -w).
fn workspace_for(args: &OrchestrateArgs, plan: &ResolvedPlan) -> Result<(PathBuf, bool), CliError> {
    let (chosen, made_now) = match (&args.resume, &args.work_dir, &plan.workspace) {
        (Some(id), _, _) => (resume_workspace(args, plan, id)?, false),
        (None, Some(w), _) | (None, None, Some(w)) => (w.clone(), !w.exists()),
        // The first W00N that does not exist, made here.
        (None, None, None) => (next_plan_workspace(&plan.dir)?, true),
    };
    if args.resume.is_none() {
        std::fs::create_dir_all(&chosen).map_err(|e| {
            CliError::Config(format!("cannot create workspace {}: {e}", chosen.display()))
        })?;
    }
    let absolute = chosen.canonicalize().map_err(|e| match &args.resume {
        Some(id) => CliError::Config(format!(
            "orchestration '{id}' not found: its workspace {} cannot be opened ({e}); hint: give \
             the workspace the orchestration ran in with -w (`delta list-orchestrations -w <dir>` \
             lists a workspace's orchestrations)",
            chosen.display()
        )),
        None => CliError::Config(format!("workspace {}: {e}", chosen.display())),
    })?;
    Ok((absolute, made_now))
}
