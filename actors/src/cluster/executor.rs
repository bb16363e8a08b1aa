//! cluster::executor — [`RunExecutor`]: where an orchestration's runs execute, as the
//! embedder chooses it in the `OrchestrationRequest`: in this process (the default), or as
//! Slurm jobs with everything the `SlurmExecutor` needs ([`SlurmJobs`]).
//!
//! The Slurm variant exists with the `cluster` feature (default on). An embedder's own
//! executor is not named here: it is handed to `Supervisor::orchestrate_on`.
//!
//! Must not: hold a provider key: the jobs' environment was cleared of keys by whoever built
//! it, and carries the relay's address and token instead.

#[cfg(feature = "cluster")]
use std::{collections::HashMap, path::PathBuf, sync::Arc};

#[cfg(feature = "cluster")]
use super::slurm::{SlurmSettings, SlurmTools};

/// Where an orchestration's runs execute.
#[derive(Debug, Clone, Default)]
pub enum RunExecutor {
    /// In this process, through the run supervisor.
    #[default]
    Local,
    /// As Slurm jobs: a stage's fan-out as job arrays.
    #[cfg(feature = "cluster")]
    Slurm(Arc<SlurmJobs>),
}

/// What the Slurm executor submits with.
#[cfg(feature = "cluster")]
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
}

#[cfg(feature = "cluster")]
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
            .finish_non_exhaustive()
    }
}
