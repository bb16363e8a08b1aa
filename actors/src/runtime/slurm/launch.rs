//! Running a plan on Slurm in one call: [`start_slurm`] starts the relay for every agent's
//! endpoint, records it in the orchestration's folder (a resume listens where the jobs
//! still running were told it is), and builds the Slurm executor to hand to
//! `Supervisor::orchestrate_on`: the tools from PATH, the `delta` binary on the nodes, each
//! agent's relay route (and each capped stage's: `RelayRoutes`) and the jobs' environment
//! — this process's minus every provider key, plus the relay's address and token
//! ([`job_env`]).
//!
//! Must not: print (warnings come back in [`SlurmStart::warnings`]) or put a provider key in
//! the jobs' environment.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agent::ResolvedAgent;
use crate::cluster::relay_record::{read_record, write_record};
use crate::cluster::slurm::{SlurmSettings, SlurmTools};
use crate::llm::LlmTarget;
use crate::plan::ResolvedPlan;
use crate::relay::{
    new_relay_token, token_digest, RelayConfig, RelayError, RelayLimits, RelayRoute,
};
use crate::runtime::executor::Executor;
use crate::runtime::relay::Relay;
use crate::runtime::slurm::{Slurm, SlurmJobs};

/// The variable that carries the relay's address into a job (`http://HOST:PORT`).
pub const RELAY_URL_VAR: &str = "DELTA_BASE_URL";
/// The variable that carries the orchestration's relay token into a job.
pub const RELAY_TOKEN_VAR: &str = "DELTA_RELAY_TOKEN";

/// Why a plan cannot start on Slurm.
#[derive(Debug, thiserror::Error)]
pub enum SlurmStartError {
    /// `sbatch`, `squeue` or `scancel` is not on PATH (the message names it).
    #[error("{0}")]
    Tools(String),
    /// The `delta` binary for the nodes is unknown.
    #[error("cannot tell where this delta binary is ({0}); set executor.delta_path in the plan")]
    DeltaPath(String),
    /// The relay cannot start (address taken, bad route).
    #[error("--relay-listen: {0}")]
    Relay(RelayError),
    /// The orchestration's folder or its relay record cannot be written.
    #[error("{0}")]
    Folder(String),
}

impl SlurmStartError {
    /// A configuration the user can fix (exit 126), as opposed to a failure of this host.
    pub fn is_configuration(&self) -> bool {
        matches!(self, SlurmStartError::Tools(_) | SlurmStartError::Relay(_))
    }
}

/// The running parts of a plan on Slurm: the relay (keep it alive while the plan runs) and
/// the executor to hand to `Supervisor::orchestrate_on`.
pub struct SlurmStart {
    /// The relay the jobs' model calls go through.
    pub relay: Relay,
    /// The Slurm executor, ready for `Supervisor::orchestrate_on`.
    pub executor: Arc<dyn Executor>,
    /// What the caller should tell the user (the relay could not listen where it did).
    pub warnings: Vec<String>,
}

/// What [`start_slurm`] needs of the orchestration.
pub struct SlurmLaunch<'a> {
    /// The plan's validated `executor:` settings.
    pub settings: SlurmSettings,
    /// The plan.
    pub plan: &'a ResolvedPlan,
    /// Every agent the plan names (their `api_key_env` stays out of the jobs).
    pub agents: &'a HashMap<PathBuf, Arc<ResolvedAgent>>,
    /// Where each agent's model calls go; each becomes a relay route.
    pub llm_by_agent: &'a HashMap<PathBuf, LlmTarget>,
    /// `--relay-listen` (default: this host's address as the cluster sees it).
    pub relay_listen: Option<SocketAddr>,
    /// The relay's in-flight limit when the plan sets none.
    pub max_parallel: usize,
    /// The orchestration's folder (created 0700 if missing).
    pub orchestration_dir: &'a Path,
    /// This process's environment, which the jobs inherit minus the keys.
    pub process_env: &'a BTreeMap<String, String>,
}

/// The delta binary the jobs run: `executor.delta_path`, else this executable.
pub fn delta_path(settings: &SlurmSettings) -> Result<PathBuf, SlurmStartError> {
    match &settings.delta_path {
        Some(path) => Ok(path.clone()),
        None => std::env::current_exe().map_err(|e| SlurmStartError::DeltaPath(e.to_string())),
    }
}

/// `sbatch`, `squeue` and `scancel` from `env`'s PATH, or the error that names the missing one.
pub fn slurm_tools(env: &BTreeMap<String, String>) -> Result<SlurmTools, SlurmStartError> {
    let path = env.get("PATH").map(std::ffi::OsString::from);
    SlurmTools::find(path.as_deref()).map_err(|e| SlurmStartError::Tools(e.to_string()))
}

/// The environment of every `sbatch` (and so of every job, `--export=ALL`): `process`
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

/// The plan's and the stages' caps as the relay's ledgers for the whole batch (its jobs'
/// runs cannot share the orchestrating process's ledgers), seeded with what earlier
/// invocations spent; each route priced at its agent's `llm.price`, else the plan's, else
/// the catalogue's. `None` when the plan caps nothing.
fn batch_budget(
    plan: &ResolvedPlan,
    agents: &HashMap<PathBuf, Arc<ResolvedAgent>>,
    llm_by_agent: &HashMap<PathBuf, crate::llm::LlmTarget>,
    routes: &RelayRoutes,
    orchestration_dir: &Path,
) -> Option<Arc<crate::relay::budget::RelayBudget>> {
    use crate::budget::PlanBudgets;
    let spent = crate::plan::state::OrchestrationState::spent_so_far(orchestration_dir);
    let caps = PlanBudgets::new(
        plan.budget,
        plan.stages
            .iter()
            .map(|stage| (stage.id.as_str(), stage.budget)),
        &spent,
    );
    caps.ledgers().next()?;
    let mut prices = HashMap::new();
    for (route, path) in routes.agent_of_route() {
        let Some(agent) = agents.get(path) else {
            continue;
        };
        let base_url = match llm_by_agent.get(path) {
            Some(crate::llm::LlmTarget::Http(endpoint)) => Some(endpoint.base_url.as_str()),
            _ => None,
        };
        let configured = agent.llm.price.or(plan.llm.price);
        if let Some(found) =
            crate::llm::price::price_of(configured.as_ref(), &agent.llm.model, base_url)
        {
            prices.insert(route.to_string(), found.price);
        }
    }
    Some(Arc::new(crate::relay::budget::RelayBudget::new(
        caps,
        routes.stage_of_route(),
        prices,
    )))
}

/// The relay's routes for a plan: `a<i>` for each agent's endpoint (agents in path order),
/// and, for each stage with a `budget:`, `s<j>a<i>` to the same endpoints (stages in plan
/// order), so that the relay knows from a request's route which stage's cap it charges.
#[derive(Debug, Default)]
struct RelayRoutes {
    /// The route of each agent's endpoint, by the agent folder the plan resolved.
    by_agent: HashMap<PathBuf, String>,
    /// The routes of the capped stages, by stage id and agent folder.
    by_stage: HashMap<(String, PathBuf), String>,
    /// Every route, in the order the relay serves them (the first is also `/v1`).
    served: Vec<RelayRoute>,
}

impl RelayRoutes {
    fn of(plan: &ResolvedPlan, llm_by_agent: &HashMap<PathBuf, LlmTarget>) -> RelayRoutes {
        let mut endpoints: Vec<(&PathBuf, &LlmTarget)> = llm_by_agent.iter().collect();
        endpoints.sort_by_key(|(path, _)| *path);
        let mut routes = RelayRoutes::default();
        for (i, (path, target)) in endpoints.iter().enumerate() {
            let name = format!("a{i}");
            routes.by_agent.insert((*path).clone(), name.clone());
            routes.serve(name, target);
        }
        let capped = plan
            .stages
            .iter()
            .enumerate()
            .filter(|(_, stage)| stage.budget.is_some_and(|budget| !budget.is_empty()));
        for (j, stage) in capped {
            for (i, (path, target)) in endpoints.iter().enumerate() {
                let name = format!("s{j}a{i}");
                routes
                    .by_stage
                    .insert((stage.id.clone(), (*path).clone()), name.clone());
                routes.serve(name, target);
            }
        }
        routes
    }

    fn serve(&mut self, name: String, target: &LlmTarget) {
        self.served.push(RelayRoute {
            name,
            target: target.clone(),
        });
    }

    /// Each route with the agent folder whose endpoint it reaches.
    fn agent_of_route(&self) -> impl Iterator<Item = (&str, &PathBuf)> {
        let agents = self
            .by_agent
            .iter()
            .map(|(path, name)| (name.as_str(), path));
        let stages = self
            .by_stage
            .iter()
            .map(|((_, path), name)| (name.as_str(), path));
        agents.chain(stages)
    }

    /// The stage each capped stage's route charges, by route name.
    fn stage_of_route(&self) -> HashMap<String, String> {
        self.by_stage
            .iter()
            .map(|((stage, _), name)| (name.clone(), stage.clone()))
            .collect()
    }
}

/// Starts the relay for every agent's endpoint and prepares the jobs' submission:
/// `sbatch`/`squeue`/`scancel` must be on PATH, the relay must bind.
pub fn start_slurm(launch: SlurmLaunch<'_>) -> Result<SlurmStart, SlurmStartError> {
    let SlurmLaunch {
        settings,
        plan,
        agents,
        llm_by_agent,
        relay_listen,
        max_parallel,
        orchestration_dir,
        process_env,
    } = launch;
    let tools = slurm_tools(process_env)?;
    let delta_path = delta_path(&settings)?;
    let routes = RelayRoutes::of(plan, llm_by_agent);
    let relay_budget = batch_budget(plan, agents, llm_by_agent, &routes, orchestration_dir);
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
        routes: routes.served,
        max_in_flight: plan.llm.max_in_flight.unwrap_or(max_parallel),
        requests_per_minute: plan.llm.requests_per_minute,
        tokens_per_minute: None,
        budget: relay_budget,
        request_timeout: plan
            .llm_timeouts
            .request
            .unwrap_or(crate::llm::DEFAULT_REQUEST_TIMEOUT),
        accepted_token_digests: earlier.token_digests,
        limits: RelayLimits::default(),
    };
    let fallback = (Some(listen) == earlier.listen).then(|| RelayConfig {
        listen: relay_listen.unwrap_or_else(default_relay_address),
        ..config.clone()
    });
    let mut warnings = Vec::new();
    let relay = match (Relay::start(config), fallback) {
        (Ok(relay), _) => relay,
        // The earlier address is taken: new jobs get the new one; jobs still running from
        // before cannot reach the model and are retried after they fail.
        (Err(RelayError::Bind { addr, message }), Some(fallback)) => {
            warnings.push(format!("warning: the relay cannot listen where it did before ({addr}: {message}); jobs still running from before will fail their model calls and be retried"));
            Relay::start(fallback).map_err(SlurmStartError::Relay)?
        }
        (Err(e), _) => return Err(SlurmStartError::Relay(e)),
    };
    crate::cluster::create_private_dirs(orchestration_dir).map_err(|e| {
        SlurmStartError::Folder(format!(
            "cannot create {}: {e}",
            orchestration_dir.display()
        ))
    })?;
    write_record(orchestration_dir, relay.addr(), token_digest(&token)).map_err(|e| {
        SlurmStartError::Folder(format!(
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
    let job_env = job_env(process_env, &key_vars, &targets, &relay.url(), &token);
    let executor: Arc<dyn Executor> = Arc::new(Slurm(Arc::new(SlurmJobs {
        settings,
        tools,
        delta_path,
        job_env,
        routes: routes.by_agent,
        stage_routes: routes.by_stage,
    })));
    Ok(SlurmStart {
        relay,
        executor,
        warnings,
    })
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::Endpoint;

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
