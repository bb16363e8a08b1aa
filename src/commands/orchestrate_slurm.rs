//! What `delta orchestrate --executor slurm` adds to the command: resolving the executor
//! (`--executor` over the plan's `executor:`), the `--dry-run` preview of the `sbatch`
//! commands, the `--check` probe job, and the environment the jobs get — this process's
//! minus every provider key, plus the relay's address and token.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use delta_actors::agent::ResolvedAgent;
use delta_actors::api::Relay;
use delta_actors::cluster::relay_record::{read_record, write_record};
use delta_actors::cluster::slurm::probe::run_probe;
use delta_actors::cluster::slurm::sbatch::{plan_submissions, JobTemplate};
use delta_actors::cluster::slurm::{SlurmSettings, SlurmTools};
use delta_actors::cluster::{RunExecutor, SlurmJobs};
use delta_actors::plan::executor::{resolve_executor, ExecutorChoice, ExecutorKind};
use delta_actors::plan::state::OrchestrationState;
use delta_actors::plan::{expand_stage, orchestration_id, ResolvedPlan, StageContext};
use delta_actors::relay::{
    new_relay_token, token_digest, RelayConfig, RelayError, RelayLimits, RelayRoute,
};
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

/// The variable that carries the relay's address into a job (`http://HOST:PORT`).
pub const RELAY_URL_VAR: &str = "DELTA_BASE_URL";
/// The variable that carries the orchestration's relay token into a job.
pub const RELAY_TOKEN_VAR: &str = "DELTA_RELAY_TOKEN";
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
pub fn delta_path(settings: &SlurmSettings) -> Result<PathBuf, CliError> {
    match &settings.delta_path {
        Some(path) => Ok(path.clone()),
        None => std::env::current_exe().map_err(|e| {
            CliError::Runtime(format!(
                "cannot tell where this delta binary is ({e}); set executor.delta_path in the plan"
            ))
        }),
    }
}

/// `sbatch`, `squeue` and `scancel` from PATH, or the error that names the missing one.
pub fn slurm_tools(env: &BTreeMap<String, String>) -> Result<SlurmTools, CliError> {
    let path = env.get("PATH").map(std::ffi::OsString::from);
    SlurmTools::find(path.as_deref()).map_err(|e| CliError::Config(e.to_string()))
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

/// The environment of every `sbatch` (and so of every job, `--export=ALL`): this process's
/// minus `DELTA_API_KEY`, each agent's `api_key_env`, any variable holding one of the
/// endpoints' keys and the offline-model switches, plus the relay's address and token.
pub fn job_env(
    process: &BTreeMap<String, String>,
    key_vars: &[String],
    targets: &[&LlmTarget],
    relay_url: &str,
    relay_token: &str,
) -> Vec<(String, String)> {
    let keys: Vec<&str> = targets
        .iter()
        .filter_map(|t| match t {
            LlmTarget::Http(endpoint) => endpoint.api_key.as_deref(),
            _ => None,
        })
        .filter(|k| !k.is_empty())
        .collect();
    let mut env: BTreeMap<String, String> = process
        .iter()
        .filter(|(name, value)| {
            name.as_str() != "DELTA_API_KEY"
                && name.as_str() != "DELTA_LLM_SCRIPT"
                && name.as_str() != RELAY_TOKEN_VAR
                && !key_vars.contains(name)
                && !keys.iter().any(|k| value.contains(k))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.insert(RELAY_URL_VAR.to_owned(), relay_url.to_owned());
    env.insert(RELAY_TOKEN_VAR.to_owned(), relay_token.to_owned());
    env.into_iter().collect()
}

/// The running parts of `--executor slurm`: the relay (kept alive while the plan runs) and
/// the executor handed to the engine.
pub struct SlurmRun {
    pub relay: Relay,
    pub executor: RunExecutor,
}

/// Starts the relay for every agent's endpoint and prepares the jobs' submission:
/// `sbatch`/`squeue`/`scancel` must be on PATH, the relay must bind.
pub fn start_slurm(
    settings: SlurmSettings,
    plan: &ResolvedPlan,
    agents: &HashMap<PathBuf, Arc<ResolvedAgent>>,
    llm_by_agent: &HashMap<PathBuf, LlmTarget>,
    relay_listen: Option<SocketAddr>,
    max_parallel: usize,
    orchestration_dir: &Path,
) -> Result<SlurmRun, CliError> {
    let process = process_env();
    let tools = slurm_tools(&process)?;
    let delta_path = delta_path(&settings)?;
    let mut paths: Vec<&PathBuf> = llm_by_agent.keys().collect();
    paths.sort();
    let mut routes = HashMap::new();
    let mut relay_routes = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let name = format!("a{i}");
        routes.insert((*path).clone(), name.clone());
        relay_routes.push(RelayRoute {
            name,
            target: llm_by_agent[*path].clone(),
        });
    }
    let token = new_relay_token();
    // A resume listens where the jobs still running were told the relay is, and accepts
    // their tokens.
    let earlier = read_record(orchestration_dir);
    let listen = match (relay_listen, earlier.listen) {
        (Some(asked), Some(before)) if asked.port() == 0 && asked.ip() == before.ip() => before,
        (Some(asked), _) => asked,
        (None, Some(before)) => before,
        (None, None) => default_relay_address(),
    };
    let config = RelayConfig {
        listen,
        token: token.clone(),
        routes: relay_routes,
        max_in_flight: plan.llm.max_in_flight.unwrap_or(max_parallel),
        requests_per_minute: plan.llm.requests_per_minute,
        request_timeout: plan
            .llm_timeouts
            .request
            .unwrap_or(delta_actors::llm::DEFAULT_REQUEST_TIMEOUT),
        accepted_token_digests: earlier.token_digests,
        limits: RelayLimits::default(),
    };
    let fallback = (Some(listen) == earlier.listen).then(|| RelayConfig {
        listen: relay_listen.unwrap_or_else(default_relay_address),
        ..config.clone()
    });
    let relay = match (Relay::start(config), fallback) {
        (Ok(relay), _) => relay,
        // The earlier address is taken: new jobs get the new one; jobs still running from
        // before cannot reach the model and are retried after they fail.
        (Err(RelayError::Bind { addr, message }), Some(fallback)) => {
            eprintln!("warning: the relay cannot listen where it did before ({addr}: {message}); jobs still running from before will fail their model calls and be retried");
            Relay::start(fallback).map_err(|e| CliError::Config(format!("--relay-listen: {e}")))?
        }
        (Err(e), _) => return Err(CliError::Config(format!("--relay-listen: {e}"))),
    };
    create_private_dir(orchestration_dir)?;
    write_record(orchestration_dir, relay.addr(), token_digest(&token)).map_err(|e| {
        CliError::Runtime(format!(
            "cannot record the relay in {}: {e}",
            orchestration_dir.display()
        ))
    })?;
    let mut key_vars: Vec<String> = agents
        .values()
        .filter_map(|a| a.llm.api_key_env.clone())
        .collect();
    key_vars.push("DELTA_API_KEY".into());
    let targets: Vec<&LlmTarget> = llm_by_agent.values().collect();
    let job_env = job_env(&process, &key_vars, &targets, &relay.url(), &token);
    let executor = RunExecutor::Slurm(Arc::new(SlurmJobs {
        settings,
        tools,
        delta_path,
        job_env,
        routes,
    }));
    Ok(SlurmRun { relay, executor })
}

/// The orchestration's folder, created 0700 as the engine would (it may not exist yet).
fn create_private_dir(dir: &Path) -> Result<(), CliError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| CliError::Runtime(format!("cannot create {}: {e}", dir.display())))
}

/// This host's address as the cluster sees it (its name resolved), any free port; loopback
/// when the name does not resolve to another address.
fn default_relay_address() -> SocketAddr {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    (host.as_str(), 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.find(|a| a.is_ipv4() && !a.ip().is_loopback()))
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
}

/// `--executor slurm --check`: the probe job; prints what it found on stderr.
pub fn run_check(
    settings: &SlurmSettings,
    workspace: &Path,
    env: &BTreeMap<String, String>,
) -> Result<i32, CliError> {
    let tools = slurm_tools(env)?;
    let delta = delta_path(settings)?;
    let job_env = job_env(env, &[], &[], "", "");
    let job_env: Vec<(String, String)> = job_env
        .into_iter()
        .filter(|(k, _)| k != RELAY_URL_VAR && k != RELAY_TOKEN_VAR)
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    eprintln!(
        "submitting a probe job: it writes into {} from a compute node and runs {} --version there",
        workspace.display(),
        delta.display()
    );
    let report = rt
        .block_on(run_probe(
            &tools, settings, workspace, &delta, &job_env, PROBE_TIME,
        ))
        .map_err(|e| CliError::Config(e.to_string()))?;
    eprintln!(
        "ok: job {} on node {} wrote into the workspace and ran {} ({} ms)",
        report.job_id,
        report.node,
        report.delta_version,
        report.waited.as_millis()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use delta_actors::llm::Endpoint;

    #[test]
    fn job_env_keeps_no_provider_key() {
        let process: BTreeMap<String, String> = [
            ("PATH", "/usr/bin"),
            ("DELTA_API_KEY", "sk-canary"),
            ("OPENAI_KEY", "sk-other"),
            ("COPY_OF_KEY", "prefix sk-other suffix"),
            ("DELTA_LLM_SCRIPT", "/s.yaml"),
            ("HOME", "/root"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let target = LlmTarget::Http(Endpoint::new("https://x/v1", Some("sk-other".into())));
        let env = job_env(
            &process,
            &["OPENAI_KEY".into()],
            &[&target],
            "http://127.0.0.1:9",
            "tok",
        );
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["DELTA_BASE_URL", "DELTA_RELAY_TOKEN", "HOME", "PATH"]
        );
        assert!(!env.iter().any(|(_, v)| v.contains("sk-")));
    }
}
