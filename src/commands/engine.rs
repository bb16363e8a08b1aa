//! What `run`, `continue` and `orchestrate` share of the command line: the process
//! environment read once, the supervisor settings of this executable (`delta __spawner`,
//! `delta-sessions` beside it), `--llm-timeout`, and driving submitted runs to their results
//! while printing progress and turning Ctrl-C / SIGTERM into a clean interruption. What a
//! run needs (endpoint, key, dialect, `.env` cascade, model overrides) is the library's
//! (`delta_actors::agent::RunNeeds`).
//!
//! Must not: decide a run's model settings itself (the library does, for every embedder).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use delta_actors::agent::{creation_lock_wait, with_retry_override, ResolvedAgent, RunNeeds};
use delta_actors::metadata::METADATA_FILE;
use delta_actors::tool::spawner::SpawnerCommand;
use delta_actors::{
    LlmTarget, RunErrorKind, RunHandle, RunRequest, RunResult, Supervisor, SupervisorConfig,
};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::broadcast::error::RecvError;

use crate::error::CliError;
use crate::output::progress::{EventPrinter, Verbosity};

/// The `--help` paragraph of `run`, `continue` and `orchestrate` on the variables that
/// choose the model (a string literal, for `concat!` in the commands' `after_help`).
#[macro_export]
macro_rules! model_env_help {
    () => {
        "The model (without --llm-script) is chosen by three variables, read from the environment,
else <workspace>/.env, <agent>/.env, then the project's .env:
  DELTA_BASE_URL   the OpenAI-compatible endpoint with its /v1, e.g. http://127.0.0.1:8080/v1
                   (llama.cpp on this machine) or a provider's (docs/providers.md)
  DELTA_API_KEY    its key (or the variable agent.yaml's llm.api_key_env names); a server on
                   this machine (http://127.0.0.1, http://localhost) needs none
  DELTA_MODEL      the model name, over agent.yaml's llm.model
"
    };
}

/// The process environment as a map, read once at the edge.
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// `--llm-timeout DURATION`: the whole-request limit on each model call attempt, with a
/// unit (`90s`, `2m`), 100ms..24h. Overrides agent.yaml's and the plan's `llm.request_timeout`.
pub fn parse_llm_timeout_arg(text: &str) -> Result<Duration, String> {
    delta_actors::llm::parse_llm_timeout(text)
}

/// Sets `--llm-timeout` (when given) as the agent's whole-request limit.
pub fn with_llm_timeout(agent: ResolvedAgent, limit: Option<Duration>) -> ResolvedAgent {
    match limit {
        Some(limit) => {
            let mut agent = agent;
            agent.llm.timeouts.request = Some(limit);
            agent
        }
        None => agent,
    }
}

/// Supervisor settings for the CLI: tools find `delta-sessions` next to this executable, and
/// start from this executable re-run as `delta __spawner` (started before any run).
pub fn supervisor_config(arbiters: usize, max_parallel: usize) -> SupervisorConfig {
    let executable = std::env::current_exe().ok();
    SupervisorConfig {
        arbiters,
        max_parallel,
        tool_path_dir: executable
            .as_ref()
            .and_then(|p| p.parent().map(Path::to_path_buf)),
        tool_spawner: executable
            .map(|program| SpawnerCommand::new(program, [super::spawner::SUBCOMMAND])),
        ..SupervisorConfig::default()
    }
}

/// Applies the engine settings the environment may change: `DELTA_RETRY_BASE_MS` and
/// `DELTA_CREATION_LOCK_WAIT`, each validated (by the library) before anything is created.
pub fn with_env_overrides(
    config: SupervisorConfig,
    env: &BTreeMap<String, String>,
) -> Result<SupervisorConfig, CliError> {
    let mut config = config;
    config.retry = with_retry_override(config.retry, env)?;
    if let Some(wait) = creation_lock_wait(env)? {
        config.creation_lock_wait = wait;
    }
    Ok(config)
}

/// Submits one run and drives it to its result, printing progress on stderr (with
/// `live_status`, a silent model call's waiting line too, updated in place: for a terminal).
/// The first SIGINT/SIGTERM interrupts the run cleanly (tools killed, INTERRUPTED
/// journaled); see [`Interruption`]. `continue_flags` go into the `delta continue` command
/// printed when a later signal forces the exit.
pub fn drive_single(
    supervisor: &Supervisor,
    request: RunRequest,
    verbosity: Verbosity,
    live_status: bool,
    continue_flags: &[String],
) -> Result<RunResult, CliError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async {
        let mut events = supervisor.subscribe();
        let mut printer = EventPrinter::new(verbosity).with_live_status(live_status);
        let mut ticks = tokio::time::interval(crate::output::progress::WAIT_TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let work_dir = request.work_dir.clone();
        let handle: RunHandle = supervisor.submit(request).await?;
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut interruption = Interruption::new(format!(
            "the run left RUNNING is recovered by `{}`",
            crate::output::hints::continue_command(&handle.run_id, &work_dir, continue_flags)
        ))
        .unless_missing(created_marker(&work_dir, &handle.run_id));
        let wait = handle.wait();
        tokio::pin!(wait);
        let result = loop {
            tokio::select! {
                r = &mut wait => break r,
                ev = events.recv() => match ev {
                    Ok(ev) => printer.print(&ev),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => {}
                },
                _ = ticks.tick(), if printer.is_waiting() => printer.tick(),
                _ = sigint.recv() => interruption.on_signal(supervisor, "SIGINT (Ctrl-C)"),
                _ = sigterm.recv() => interruption.on_signal(supervisor, "SIGTERM"),
            }
        };
        while let Ok(ev) = events.try_recv() {
            printer.print(&ev);
        }
        refusal_as_error(result?)
    })
}

/// A run the engine could not take changed nothing, so printing a FAILED RunResult would
/// misreport it: the CLI says why on stderr instead — exit 126 for a refusal (already exists,
/// locked by another process, not found...), 1 when its files could not be written (a full
/// disk...), which is not a configuration error. A run interrupted before it was created
/// (Ctrl-C while it waited for its workspace's creation lock) has nothing to resume: exit
/// 130 with the reason, and no run named.
fn refusal_as_error(result: RunResult) -> Result<RunResult, CliError> {
    match result.error.as_ref().map(|e| (&e.kind, &e.message)) {
        Some((RunErrorKind::SetupError, message)) => Err(CliError::Config(message.clone())),
        Some((RunErrorKind::SetupIoError, message)) => Err(CliError::Runtime(message.clone())),
        Some((RunErrorKind::Interrupted | RunErrorKind::Timeout, message))
            if !Path::new(&result.metadata.run_dir)
                .join(METADATA_FILE)
                .exists() =>
        {
            Err(CliError::Interrupted(message.clone()))
        }
        _ => Ok(result),
    }
}

/// The file whose existence says a run was created (its metadata, written last).
fn created_marker(work_dir: &Path, run_id: &str) -> PathBuf {
    delta_actors::workspace::RunPaths::new(work_dir, run_id)
        .run_dir
        .join(METADATA_FILE)
}

/// What a single run needs besides its start: the agent with `DELTA_MODEL` applied, the
/// environment after the `.env` cascade, the model target and the engine settings. Building
/// it validates every setting, so a command creates nothing before it succeeds.
pub struct RunInputs {
    pub agent: ResolvedAgent,
    pub env: BTreeMap<String, String>,
    pub llm: LlmTarget,
    pub supervisor: SupervisorConfig,
}

/// Loads the `.env` cascade for `work_dir` (which need not exist yet), resolves the model
/// target and the engine settings (`run`, `continue`).
pub fn run_inputs(
    agent: ResolvedAgent,
    work_dir: &Path,
    llm_script: Option<&Path>,
    verbosity: Verbosity,
) -> Result<RunInputs, CliError> {
    let cwd = std::env::current_dir()?;
    let needs = RunNeeds::resolve(agent, work_dir, &cwd, &process_env(), llm_script)?;
    if verbosity == Verbosity::Verbose {
        for file in &needs.env_files {
            crate::output::notice(&format!("loaded {}", file.display()));
        }
    }
    let supervisor = with_env_overrides(supervisor_config(1, 1), &needs.env)?;
    let supervisor = super::endpoint_memory::with_endpoint_memory(supervisor, &needs.env)?;
    // The OTEL_* variables are checked with the rest, before anything is created.
    delta_actors::telemetry::config::TraceConfig::from_env(&needs.env)
        .map_err(|e| CliError::Config(e.to_string()))?;
    Ok(RunInputs {
        agent: needs.agent,
        env: needs.env,
        llm: needs.llm,
        supervisor,
    })
}

/// Drives one request in a one-run engine, prints its RunResult, returns the exit code.
/// `continue_flags` (see [`model_flags`]) complete the `delta continue` commands the text
/// result suggests.
pub fn run_one(
    request: RunRequest,
    config: SupervisorConfig,
    verbosity: Verbosity,
    format: crate::output::Format,
    continue_flags: &[String],
) -> Result<i32, CliError> {
    let mut config = config;
    // A streamed reply is shown as it arrives to a person watching the text output.
    config.reply_text_events = format == crate::output::Format::Text
        && verbosity != Verbosity::Quiet
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    // ...and kept in io/reply.partial for `delta serve`'s run inspector.
    config.partial_reply_file = true;
    let live_status = config.reply_text_events;
    let (request, observability) = observed(request, &mut config)?;
    let supervisor = Supervisor::start(config)?;
    let result = drive_single(&supervisor, request, verbosity, live_status, continue_flags);
    supervisor.shutdown();
    if let Some(observability) = observability {
        observability.finish();
    }
    let result = result?;
    if let Some(error) = &result.error {
        let needed = super::open_files_baseline();
        if let Some(explained) = crate::limits::explain_open_files(&error.message, needed) {
            crate::notice!("error: {explained}");
        }
    }
    crate::output::run_result::print(&result, format, continue_flags);
    Ok(result.exit_code())
}

/// `request` traced as its environment's `OTEL_*` variables ask (its root span under an
/// inherited `TRACEPARENT`), `config` told its events; the export to finish at the end.
pub fn observed(
    request: RunRequest,
    config: &mut SupervisorConfig,
) -> Result<(RunRequest, Option<super::observe::Observability>), CliError> {
    let observability = super::observe::observe(&request.env, None, config)?;
    let root = observability.as_ref().and_then(|o| o.root_span());
    let request = match root {
        Some(root) => request.with_trace(root),
        None => request,
    };
    Ok((request, observability))
}

/// How SIGINT / SIGTERM stop a command that drives runs.
///
/// The first signal stops every run at its next safe point (INTERRUPTED, resumable) and the
/// command ends with its summary. A signal within [`Interruption::SAME_SIGNAL_WINDOW`] of
/// the first is the same interruption: GNU `timeout` and a terminal's Ctrl-C signal the
/// process and then its group, so one Ctrl-C often arrives twice within microseconds, and
/// used to skip the summary and the resume hint. A later signal kills every tool process
/// group now and exits 130 at once, printing `exit_hint` (the command that picks the work
/// up again).
pub struct Interruption {
    first: Option<Instant>,
    exit_hint: String,
    /// The hint holds only once this file exists (a run not yet created has nothing to
    /// continue).
    hint_needs: Option<PathBuf>,
}

impl Interruption {
    /// Signals closer than this to the first one are taken as the same Ctrl-C.
    pub const SAME_SIGNAL_WINDOW: Duration = Duration::from_secs(1);

    /// No signal yet; `exit_hint` is printed if a later signal forces the exit.
    pub fn new(exit_hint: impl Into<String>) -> Interruption {
        Interruption {
            first: None,
            exit_hint: exit_hint.into(),
            hint_needs: None,
        }
    }

    /// Prints the exit hint only if `file` exists by then; otherwise says that nothing was
    /// created (a hint naming a run that does not exist would send the user after it).
    pub fn unless_missing(mut self, file: PathBuf) -> Interruption {
        self.hint_needs = Some(file);
        self
    }

    /// Handles one SIGINT or SIGTERM (`signal_name` is how stderr names it).
    pub fn on_signal(&mut self, supervisor: &Supervisor, signal_name: &str) {
        match self.first {
            None => {
                self.first = Some(Instant::now());
                crate::notice!(
                    "interrupted by {signal_name}: stopping runs at their next safe point (again, \
                     a second later, to exit at once)"
                );
                supervisor.cancel_all(&format!("interrupted by {signal_name}"));
            }
            Some(first) if first.elapsed() < Self::SAME_SIGNAL_WINDOW => {}
            Some(_) => {
                supervisor.kill_running_tools();
                match &self.hint_needs {
                    Some(file) if !file.exists() => {
                        crate::notice!("interrupted again: exiting now; no run was created")
                    }
                    _ => crate::notice!("interrupted again: exiting now; {}", self.exit_hint),
                }
                std::process::exit(130);
            }
        }
    }
}
