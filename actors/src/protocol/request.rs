//! What an embedder asks of the engine: the engine's settings ([`SupervisorConfig`]), one run
//! ([`RunRequest`]: how it begins, where its model calls go, who answers its questions) and
//! one plan ([`OrchestrationRequest`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::ResolvedAgent;
use crate::llm::{ChatBackend, Endpoint, LlmTimeouts, RetryPolicy, Script};

/// Engine-wide settings, fixed when the [`crate::Supervisor`] starts.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// Arbiter threads that host run actors (default: number of CPUs).
    pub arbiters: usize,
    /// Runs driven at once; further submissions wait in a queue (default 1024).
    pub max_parallel: usize,
    /// fsync the journal and metadata at status changes (default true). Benchmarks may turn it off.
    pub journal_fsync: bool,
    /// fsync after every journal event (default false).
    pub fsync_every_event: bool,
    /// Retry policy for model calls.
    pub retry: RetryPolicy,
    /// Model requests in flight per endpoint (default 64).
    pub llm_max_in_flight: usize,
    /// Requests per minute per endpoint (default unlimited).
    pub llm_requests_per_minute: Option<u32>,
    /// Limits on each model call attempt when neither the agent nor the plan sets them
    /// (default: 120 s for the whole request, 60 s of silence).
    pub llm_timeouts: LlmTimeouts,
    /// Bytes of each output stream kept at the head and at the tail of what the model sees.
    pub observation_head_bytes: usize,
    pub observation_tail_bytes: usize,
    /// Cap of the full output files kept per stream in `io/tool_executions/`.
    pub tool_output_file_cap: u64,
    /// Tool timeout when the tool sets none (default 300 s).
    pub default_tool_timeout: Duration,
    /// Directory put first on the tools' PATH (the running `delta` executable's directory).
    pub tool_path_dir: Option<PathBuf>,
    /// Capacity of the event broadcast channel; slow subscribers miss events, never results.
    pub event_capacity: usize,
    /// The program that starts tools, hooks and context generators on the engine's behalf
    /// (the `delta` binary: `delta __spawner`), started with the supervisor so that starting a
    /// tool stays cheap however many descriptors the engine holds. One spawner serves the
    /// whole process (see `tool::spawner`). `None` (the default): tools start from this
    /// process, as embedders without such a binary need.
    pub tool_spawner: Option<crate::tool::spawner::SpawnerCommand>,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            arbiters: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            max_parallel: 1024,
            journal_fsync: true,
            fsync_every_event: false,
            retry: RetryPolicy::default(),
            llm_max_in_flight: 64,
            llm_requests_per_minute: None,
            llm_timeouts: LlmTimeouts::default(),
            observation_head_bytes: 8 * 1024,
            observation_tail_bytes: 8 * 1024,
            tool_output_file_cap: 64 * 1024 * 1024,
            default_tool_timeout: Duration::from_secs(300),
            tool_path_dir: None,
            event_capacity: 4096,
            tool_spawner: None,
        }
    }
}

/// Where a run's model calls go.
#[derive(Clone)]
pub enum LlmTarget {
    /// An OpenAI-compatible HTTP endpoint.
    Http(Endpoint),
    /// The built-in scripted model, in process.
    Scripted(Arc<Script>),
    /// Any backend an embedder provides; `key` identifies it for gateway sharing.
    Custom {
        key: String,
        backend: Arc<dyn ChatBackend>,
    },
}

impl std::fmt::Debug for LlmTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LlmTarget::Http(e) => f.debug_tuple("Http").field(e).finish(),
            LlmTarget::Scripted(_) => f.write_str("Scripted"),
            LlmTarget::Custom { key, .. } => f.debug_struct("Custom").field("key", key).finish(),
        }
    }
}

impl LlmTarget {
    /// Runs with equal keys share one gateway (one in-flight cap, one rate limit).
    pub fn gateway_key(&self) -> String {
        match self {
            LlmTarget::Http(e) => e.key(),
            LlmTarget::Scripted(s) => format!("scripted:{:p}", Arc::as_ptr(s)),
            LlmTarget::Custom { key, .. } => format!("custom:{key}"),
        }
    }
}

/// How a run begins.
#[derive(Debug, Clone)]
pub enum RunStart {
    /// A new run with this task.
    New { task: String },
    /// Continue an existing run (`delta continue`), optionally with a message whose meaning
    /// depends on the run's status (an answer when WAITING_FOR_INPUT, else a user message).
    Continue {
        message: Option<String>,
        force: bool,
    },
}

/// Asks a human on a terminal (`-i`). The CLI provides one; embedders may provide their own.
pub trait HumanPrompter: Send + Sync + 'static {
    /// Returns the answer, or an error text when no answer can be had (EOF, no terminal).
    fn ask(&self, prompt: &str, input_type: &str, sensitive: bool) -> Result<String, String>;
}

/// A request to start or continue one run.
#[derive(Clone)]
pub struct RunRequest {
    pub agent: Arc<ResolvedAgent>,
    pub work_dir: PathBuf,
    /// Generated (`YYYYMMDD_HHMMSS_xxxxxx`) when absent for a new run; required to continue.
    pub run_id: Option<String>,
    pub start: RunStart,
    /// Iteration cap for this start or continuation (default: the agent's, else 30).
    pub max_iterations: Option<u32>,
    pub llm: LlmTarget,
    /// The complete environment tools, hooks and generators inherit (secrets are scrubbed
    /// from it before any child sees it).
    pub env: Arc<BTreeMap<String, String>>,
    /// Wall-clock limit; on expiry the run is INTERRUPTED with error type `timeout`.
    pub timeout: Option<Duration>,
    /// Ask the human on a terminal instead of pausing the run.
    pub prompter: Option<Arc<dyn HumanPrompter>>,
    /// Workspace name (`W001`) for metadata, when the workspace is an agent workspace.
    pub workspace_id: Option<String>,
    /// Set by `delta orchestrate`.
    pub orchestration_id: Option<String>,
}

impl std::fmt::Debug for RunRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRequest")
            .field("agent", &self.agent.name)
            .field("work_dir", &self.work_dir)
            .field("run_id", &self.run_id)
            .field("start", &self.start)
            .field("llm", &self.llm)
            .finish_non_exhaustive()
    }
}

/// A whole plan to run in this engine (`delta orchestrate`).
#[derive(Clone)]
pub struct OrchestrationRequest {
    pub plan: Arc<crate::plan::ResolvedPlan>,
    pub orchestration_id: String,
    /// The shared workspace (runs of `isolate: true` stages get `<workspace>/<stage>/<index>`).
    pub workspace: PathBuf,
    /// Every agent the plan names, loaded once, by the path the plan resolved.
    pub agents: std::collections::HashMap<PathBuf, Arc<ResolvedAgent>>,
    /// Where each agent's model calls go (agents may use different endpoints); runs of
    /// agents missing here use `llm`.
    pub llm_by_agent: std::collections::HashMap<PathBuf, LlmTarget>,
    pub llm: LlmTarget,
    pub env: Arc<BTreeMap<String, String>>,
    /// Continue an earlier orchestration with this id: COMPLETED runs are reused,
    /// INTERRUPTED ones continued, the rest started.
    pub resume: bool,
    /// Runs in flight for this plan at most.
    pub max_parallel: usize,
    /// Where the runs execute: this process (default) or Slurm jobs.
    pub executor: crate::cluster::RunExecutor,
}
