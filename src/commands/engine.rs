//! What `run`, `continue` and `orchestrate` share: choosing the model endpoint (or the
//! scripted model), the supervisor settings, and driving submitted runs to their results
//! while printing progress and turning Ctrl-C / SIGTERM into a clean interruption.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delta_actors::agent::{load_env_cascade, ResolvedAgent};
use delta_actors::llm::{Dialect, Endpoint, HttpTransport, Script};
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

/// The scripted model's script file: `--llm-script`, else `DELTA_LLM_SCRIPT` (after the
/// `.env` cascade), else none.
pub fn script_path(env: &BTreeMap<String, String>, script: Option<&Path>) -> Option<PathBuf> {
    script.map(Path::to_path_buf).or_else(|| {
        env.get("DELTA_LLM_SCRIPT")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    })
}

/// The scripted model, loaded and checked once, when a script is chosen ([`script_path`]):
/// a missing or invalid script is a configuration error (exit 126).
pub fn scripted_model(
    env: &BTreeMap<String, String>,
    script: Option<&Path>,
) -> Result<Option<Arc<Script>>, CliError> {
    script_path(env, script)
        .map(|path| Ok(Arc::new(Script::load(&path)?)))
        .transpose()
}

/// Chooses where model calls go: `--llm-script`/`DELTA_LLM_SCRIPT` (offline), else the
/// agent's or the environment's OpenAI-compatible endpoint with its key.
pub fn llm_target(
    agent: &ResolvedAgent,
    env: &BTreeMap<String, String>,
    script: Option<&Path>,
) -> Result<LlmTarget, CliError> {
    if let Some(script) = scripted_model(env, script)? {
        return Ok(LlmTarget::Scripted(script));
    }
    // The URL first: `DELTA_BASE_URL=127.0.0.1:8080/v1` (no scheme) was reported as a
    // missing key, because only an http:// URL is known to be on this machine.
    // agent.yaml's `llm.base_url` is checked when the agent loads.
    if agent.llm.base_url.is_none() {
        if let Some(url) = env.get(BASE_URL_VAR).filter(|u| !u.is_empty()) {
            check_base_url(url)?;
        }
    }
    let key_var = agent
        .llm
        .api_key_env
        .clone()
        .unwrap_or_else(|| "DELTA_API_KEY".to_string());
    let key = env.get(&key_var).filter(|k| !k.is_empty()).cloned();
    let base_url = agent
        .llm
        .base_url
        .clone()
        .or_else(|| env.get(BASE_URL_VAR).filter(|u| !u.is_empty()).cloned());
    // A server on this machine (llama.cpp, Ollama, LM Studio, vLLM...) usually wants no key.
    let key_optional = base_url.as_deref().is_some_and(is_loopback_url);
    match (key, base_url) {
        (None, Some(base_url)) if key_optional => Ok(LlmTarget::Http(
            Endpoint::new(base_url, None)
                .with_transport(transport(agent, env)?)
                .with_dialect(dialect(agent, env)?),
        )),
        (None, _) => Err(CliError::NoApiKey {
            key_var,
            agent_home: agent.home.clone(),
            slurm: false,
        }),
        (Some(_), None) => Err(CliError::NoEndpoint),
        (Some(key), Some(base_url)) => Ok(LlmTarget::Http(
            Endpoint::new(base_url, Some(key))
                .with_transport(transport(agent, env)?)
                .with_dialect(dialect(agent, env)?),
        )),
    }
}

/// The environment variable naming the model endpoint (below agent.yaml's `llm.base_url`).
pub const BASE_URL_VAR: &str = "DELTA_BASE_URL";

/// `DELTA_BASE_URL` must be an `http://` or `https://` URL with a host: anything else is
/// refused (exit 126) with the URL written as it should be.
fn check_base_url(url: &str) -> Result<(), CliError> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    let well_formed = host.is_some_and(|host| !host.is_empty())
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if well_formed {
        return Ok(());
    }
    let example = if url.contains("://") || url.trim().is_empty() {
        "http://127.0.0.1:8080/v1".to_owned()
    } else if is_loopback_url(&format!("http://{}", url.trim())) {
        format!("http://{}", url.trim())
    } else {
        format!("https://{}", url.trim())
    };
    Err(CliError::Config(format!(
        "{BASE_URL_VAR}='{url}' is not an http:// or https:// URL with a host; write it with its \
         scheme and the API's /v1 prefix, e.g. {BASE_URL_VAR}={example} (a model server on this \
         machine, such as llama.cpp, Ollama or LM Studio on http://127.0.0.1, needs no API key)"
    )))
}

/// `http://localhost…`, `http://127.x.x.x…` or `http://[::1]…`: an endpoint on this machine.
pub(crate) fn is_loopback_url(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The environment variable that overrides `llm.stream`: `1`/`true` (always stream),
/// `0`/`false` (never), `auto`.
pub const STREAM_VAR: &str = "DELTA_LLM_STREAM";

/// The agent's `llm.stream`, `llm.tool_call_content`, `llm.max_tokens_field` and
/// `llm.system_role`, with `DELTA_LLM_STREAM` over the first.
fn dialect(agent: &ResolvedAgent, env: &BTreeMap<String, String>) -> Result<Dialect, CliError> {
    let mut dialect = agent.llm.dialect;
    if let Some(raw) = env.get(STREAM_VAR).filter(|v| !v.trim().is_empty()) {
        dialect.stream = match raw.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => Some(true),
            "0" | "false" | "off" | "no" => Some(false),
            "auto" => None,
            _ => {
                return Err(CliError::Config(format!(
                    "{STREAM_VAR}='{raw}' is not on, off or auto; set {STREAM_VAR}=0 to send model \
                     calls without streaming, {STREAM_VAR}=1 to always stream, or unset it (auto: \
                     stream unless the endpoint cannot)"
                )))
            }
        };
    }
    Ok(dialect)
}

/// The environment variable that overrides `llm.http2`: `1`/`true` (HTTP/2, also without
/// TLS), `0`/`false` (HTTP/1.1 only).
pub const HTTP2_VAR: &str = "DELTA_LLM_HTTP2";

/// The agent's `llm.http2` / `llm.max_connections`, with `DELTA_LLM_HTTP2` over the former.
fn transport(
    agent: &ResolvedAgent,
    env: &BTreeMap<String, String>,
) -> Result<HttpTransport, CliError> {
    let mut transport = agent.llm.transport;
    if let Some(raw) = env.get(HTTP2_VAR).filter(|v| !v.trim().is_empty()) {
        transport.http2 = Some(match raw.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => true,
            "0" | "false" | "off" | "no" => false,
            _ => {
                return Err(CliError::Config(format!(
                    "{HTTP2_VAR}='{raw}' is not on or off; set {HTTP2_VAR}=1 to speak HTTP/2 to the \
                     endpoint (also over plain http://), {HTTP2_VAR}=0 for HTTP/1.1 only, or unset it"
                )))
            }
        });
    }
    Ok(transport)
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

/// Applies `DELTA_MODEL` (if set) over the agent's model.
pub fn with_model_override(agent: ResolvedAgent, env: &BTreeMap<String, String>) -> ResolvedAgent {
    match env.get("DELTA_MODEL").filter(|m| !m.is_empty()) {
        Some(model) => {
            let mut agent = agent;
            agent.llm.model = model.clone();
            agent
        }
        None => agent,
    }
}

/// The environment variable that gives the model's context window (tokens), over agent.yaml's
/// `llm.context_window`.
pub const CONTEXT_WINDOW_VAR: &str = "DELTA_CONTEXT_WINDOW";

/// Applies `DELTA_CONTEXT_WINDOW` (if set) as the agent's `llm.context_window`, checked like
/// the key: a whole number of tokens in range, with room for a prompt beside `llm.max_tokens`.
pub fn with_context_window(
    agent: ResolvedAgent,
    env: &BTreeMap<String, String>,
) -> Result<ResolvedAgent, CliError> {
    use delta_actors::agent::{MAX_CONTEXT_TOKENS, MIN_CONTEXT_TOKENS};
    let Some(raw) = env.get(CONTEXT_WINDOW_VAR).filter(|v| !v.trim().is_empty()) else {
        return Ok(agent);
    };
    let tokens = raw
        .trim()
        .replace('_', "")
        .parse::<u64>()
        .ok()
        .filter(|n| (MIN_CONTEXT_TOKENS..=MAX_CONTEXT_TOKENS).contains(n));
    let reply = agent.llm.max_tokens.map_or(0, u64::from);
    match tokens {
        Some(tokens) if reply + MIN_CONTEXT_TOKENS <= tokens => {
            let mut agent = agent;
            agent.llm.context_window = Some(tokens);
            agent.llm.context_window_from_env = true;
            Ok(agent)
        }
        Some(tokens) => Err(CliError::Config(format!(
            "{CONTEXT_WINDOW_VAR}={tokens} leaves less than {MIN_CONTEXT_TOKENS} tokens for the prompt beside `llm.max_tokens` ({reply}) of {}; set {CONTEXT_WINDOW_VAR} to the model's real window or lower `llm.max_tokens`",
            agent.config_file.display()
        ))),
        None => Err(CliError::Config(format!(
            "{CONTEXT_WINDOW_VAR}='{raw}' is not a number of tokens from {MIN_CONTEXT_TOKENS} to {MAX_CONTEXT_TOKENS}; set it to the model's context window, e.g. {CONTEXT_WINDOW_VAR}=8192, or unset it (delta then asks the server, then its model catalogue)"
        ))),
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

/// The environment variable that shortens the model-call retry backoff (milliseconds of the
/// first wait; doubles per attempt). For tests and CI against a local scripted endpoint,
/// where waiting 1 s, 2 s, 4 s... for scripted 429/500 answers only slows the suite down.
pub const RETRY_BASE_MS_VAR: &str = "DELTA_RETRY_BASE_MS";

/// Applies `DELTA_RETRY_BASE_MS` (if set) to the supervisor's retry policy; the cap on a
/// single wait becomes 64 times the base so the number of attempts is unchanged.
pub fn with_retry_override(
    config: SupervisorConfig,
    env: &BTreeMap<String, String>,
) -> Result<SupervisorConfig, CliError> {
    let Some(raw) = env.get(RETRY_BASE_MS_VAR).filter(|v| !v.trim().is_empty()) else {
        return Ok(config);
    };
    let base_ms: u64 = raw.trim().parse().map_err(|_| {
        CliError::Config(format!(
            "{RETRY_BASE_MS_VAR}='{raw}' is not a whole number of milliseconds; \
             unset it or give e.g. {RETRY_BASE_MS_VAR}=10"
        ))
    })?;
    let mut config = config;
    config.retry.base_delay = Duration::from_millis(base_ms);
    config.retry.max_delay = Duration::from_millis(base_ms.saturating_mul(64));
    Ok(config)
}

/// The environment variable that sets how long a new run waits for its workspace's
/// creation lock (`.delta/.creating.lock`) before it is refused (a duration: `30s`, `2m`;
/// default 30 s, at most 24 h).
pub const CREATION_LOCK_WAIT_VAR: &str = "DELTA_CREATION_LOCK_WAIT";

/// The longest creation-lock wait `DELTA_CREATION_LOCK_WAIT` may ask for.
const MAX_CREATION_LOCK_WAIT: Duration = Duration::from_secs(24 * 3600);

/// Applies the engine settings the environment may change: `DELTA_RETRY_BASE_MS` and
/// `DELTA_CREATION_LOCK_WAIT`, each validated here, before anything is created.
pub fn with_env_overrides(
    config: SupervisorConfig,
    env: &BTreeMap<String, String>,
) -> Result<SupervisorConfig, CliError> {
    let mut config = with_retry_override(config, env)?;
    let Some(raw) = env
        .get(CREATION_LOCK_WAIT_VAR)
        .filter(|v| !v.trim().is_empty())
    else {
        return Ok(config);
    };
    let wait = delta_actors::duration::parse_duration(raw)
        .ok()
        .filter(|wait| *wait <= MAX_CREATION_LOCK_WAIT)
        .ok_or_else(|| {
            CliError::Config(format!(
                "{CREATION_LOCK_WAIT_VAR}='{raw}' is not a duration of at most 24h; unset it \
                 (30s by default) or give e.g. {CREATION_LOCK_WAIT_VAR}=2m"
            ))
        })?;
    config.creation_lock_wait = wait;
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
    let env = load_env_cascade(Some(work_dir), &agent.home, &cwd, &process_env())?;
    if verbosity == Verbosity::Verbose {
        for file in &env.files_loaded {
            eprintln!("loaded {}", file.display());
        }
    }
    let agent = with_context_window(with_model_override(agent, &env.vars), &env.vars)?;
    let llm = llm_target(&agent, &env.vars, llm_script)?;
    let supervisor = with_env_overrides(supervisor_config(1, 1), &env.vars)?;
    let supervisor = super::endpoint_memory::with_endpoint_memory(supervisor, &env.vars)?;
    // The OTEL_* variables are checked with the rest, before anything is created.
    delta_actors::telemetry::config::TraceConfig::from_env(&env.vars)
        .map_err(|e| CliError::Config(e.to_string()))?;
    Ok(RunInputs {
        agent,
        env: env.vars,
        llm,
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
            eprintln!("error: {explained}");
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
                eprintln!(
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
                        eprintln!("interrupted again: exiting now; no run was created")
                    }
                    _ => eprintln!("interrupted again: exiting now; {}", self.exit_hint),
                }
                std::process::exit(130);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn loopback_endpoints_are_recognised() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434/v1",
            "http://LOCALHOST/v1",
            "http://[::1]:1234/v1",
            "http://127.1.2.3/v1",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "https://api.example.com/v1",
            "http://127.0.0.1.example.com/v1",
            "http://10.0.0.1/v1",
            "http://localhost@evil.example/v1",
            "localhost:8080",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

    /// Issue 31 item 16: a URL without its scheme was reported as a missing API key.
    #[test]
    fn a_base_url_without_a_scheme_is_refused_with_the_url_it_should_be() {
        for (url, fix) in [
            (
                "127.0.0.1:8080/v1",
                "DELTA_BASE_URL=http://127.0.0.1:8080/v1",
            ),
            (
                "localhost:11434/v1",
                "DELTA_BASE_URL=http://localhost:11434/v1",
            ),
            (
                "api.example.com/v1",
                "DELTA_BASE_URL=https://api.example.com/v1",
            ),
            ("ftp://host/v1", "DELTA_BASE_URL=http://127.0.0.1:8080/v1"),
            ("http:///v1", "DELTA_BASE_URL=http://127.0.0.1:8080/v1"),
        ] {
            match check_base_url(url) {
                Err(CliError::Config(message)) => {
                    assert!(message.contains(fix), "{url}: {message}");
                    assert!(message.contains("needs no API key"), "{message}");
                }
                other => panic!("{url}: {:?}", other.map_err(|e| e.to_string())),
            }
        }
        for url in ["http://127.0.0.1:8080/v1", "HTTPS://api.example.com/v1"] {
            assert!(check_base_url(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn retry_base_override_shortens_backoff() {
        let config = with_retry_override(
            SupervisorConfig::default(),
            &env(&[(RETRY_BASE_MS_VAR, "7")]),
        );
        let config = config.map_err(|e| e.to_string());
        assert_eq!(
            config.as_ref().map(|c| c.retry.base_delay),
            Ok(Duration::from_millis(7))
        );
        assert_eq!(
            config.map(|c| c.retry.max_delay),
            Ok(Duration::from_millis(7 * 64))
        );
    }

    #[test]
    fn retry_base_override_absent_keeps_default() {
        let default = SupervisorConfig::default().retry.base_delay;
        let config = with_retry_override(SupervisorConfig::default(), &env(&[]));
        let config = config.map_err(|e| e.to_string());
        assert_eq!(config.map(|c| c.retry.base_delay), Ok(default));
    }

    #[test]
    fn retry_base_override_rejects_garbage_naming_the_variable() {
        let err = with_retry_override(
            SupervisorConfig::default(),
            &env(&[(RETRY_BASE_MS_VAR, "fast")]),
        );
        match err {
            Err(CliError::Config(message)) => {
                assert!(
                    message.contains(RETRY_BASE_MS_VAR) && message.contains("fast"),
                    "{message}"
                )
            }
            other => panic!("expected a config error, got {:?}", other.map(|_| ())),
        }
    }
}
