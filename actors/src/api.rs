//! The public handle on the engine: [`Supervisor`] owns the actix System on its own thread and
//! admits runs; [`RunHandle`] awaits one run's [`RunResult`]; [`RunEvent`]s stream progress.
//!
//! No actix type crosses this module: an embedder calls it from its own tokio runtime or from
//! plain synchronous code (`*_blocking` methods). The `delta` CLI is the first embedder.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot};

use crate::agent::ResolvedAgent;
use crate::llm::{ChatBackend, Endpoint, RetryPolicy, Script};
use crate::protocol::{RunStatus, TokenUsage};
use crate::runtime::supervisor::{CancelAll, CancelRun, RunSupervisor, SubmitRun};

/// Engine-wide settings, fixed when the [`Supervisor`] starts.
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
    /// Per-request HTTP timeout.
    pub llm_http_timeout: Duration,
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
            llm_http_timeout: Duration::from_secs(600),
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

/// `error` of a RunResult (spec §2.6.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunErrorInfo {
    /// `max_iterations`, `llm_error`, `context_error`, `journal_error`, `engine_panic`,
    /// `interrupted`, `timeout`, `setup_error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

/// `interaction` of a RunResult: the pending ask_human question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionInfo {
    pub prompt: String,
    pub input_type: String,
    pub sensitive: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    pub total_cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Per model: `{input_tokens, output_tokens, total_tokens}`.
    pub model_usage: BTreeMap<String, TokenUsage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    pub iterations: u32,
    pub duration_ms: u64,
    /// Time the model spent answering (calls minus queueing and backoff), this driving only.
    #[serde(default)]
    pub model_time_ms: u64,
    /// Time waiting for the endpoint's limits and in retry backoff.
    #[serde(default)]
    pub queue_time_ms: u64,
    /// Wall time of the tool phases (parallel calls count once).
    #[serde(default)]
    pub tool_time_ms: u64,
    pub start_time: String,
    pub end_time: String,
    pub usage: UsageReport,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResultMetadata {
    pub agent_name: String,
    pub workspace_path: String,
    pub run_dir: String,
}

/// The outcome of one run (RunResult schema 2.0, spec §2.6.6), printed by the CLI for every
/// final status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema_version: String,
    pub run_id: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunErrorInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interaction: Option<InteractionInfo>,
    pub metrics: RunMetrics,
    pub metadata: RunResultMetadata,
}

impl RunResult {
    /// The RunResult a finished run recorded, rebuilt from its metadata (for a run whose
    /// process died after its journal's end but before it could answer).
    pub fn from_metadata(
        meta: &crate::metadata::RunMetadata,
        run_dir: &std::path::Path,
    ) -> RunResult {
        let error = meta.error.as_ref().map(|e| {
            let (kind, message) = e.split_once(": ").unwrap_or(("error", e.as_str()));
            RunErrorInfo {
                kind: kind.to_string(),
                message: message.to_string(),
                details: None,
            }
        });
        RunResult {
            schema_version: "2.0".into(),
            run_id: meta.run_id.clone(),
            status: meta.status,
            result: meta.result.clone(),
            error,
            interaction: None,
            metrics: RunMetrics {
                iterations: meta.iterations,
                duration_ms: 0,
                model_time_ms: 0,
                queue_time_ms: 0,
                tool_time_ms: 0,
                start_time: meta.created_at.clone(),
                end_time: meta
                    .end_time
                    .clone()
                    .unwrap_or_else(|| meta.updated_at.clone()),
                usage: UsageReport {
                    total_cost_usd: 0.0,
                    input_tokens: meta.usage.input_tokens,
                    output_tokens: meta.usage.output_tokens,
                    model_usage: BTreeMap::new(),
                },
            },
            metadata: RunResultMetadata {
                agent_name: meta.agent_name.clone(),
                workspace_path: meta.work_dir.clone(),
                run_dir: run_dir.to_string_lossy().into_owned(),
            },
        }
    }

    /// The documented exit code for this status: 0 COMPLETED, 1 FAILED, 101
    /// WAITING_FOR_INPUT, 130 INTERRUPTED.
    pub fn exit_code(&self) -> i32 {
        match self.status {
            RunStatus::Completed => 0,
            RunStatus::WaitingForInput => 101,
            RunStatus::Interrupted => 130,
            RunStatus::Failed | RunStatus::Running => 1,
        }
    }
}

/// Progress, streamed to every subscriber. Lossy for slow subscribers; results never are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        run_id: String,
        agent_name: String,
        work_dir: String,
        resumed: bool,
    },
    IterationStarted {
        run_id: String,
        iteration: u32,
        max_iterations: u32,
    },
    Thought {
        run_id: String,
        iteration: u32,
        text: String,
    },
    ToolStarted {
        run_id: String,
        iteration: u32,
        action_id: String,
        tool_name: String,
        summary: String,
    },
    ToolFinished {
        run_id: String,
        iteration: u32,
        action_id: String,
        tool_name: String,
        success: bool,
        exit_code: Option<i32>,
        duration_ms: u64,
        preview: String,
    },
    ModelRetry {
        run_id: String,
        attempt: u32,
        error: String,
        delay_ms: u64,
    },
    RunFinished {
        run_id: String,
        status: RunStatus,
        duration_ms: u64,
        error: Option<String>,
    },
}

impl RunEvent {
    pub fn run_id(&self) -> &str {
        match self {
            RunEvent::RunStarted { run_id, .. }
            | RunEvent::IterationStarted { run_id, .. }
            | RunEvent::Thought { run_id, .. }
            | RunEvent::ToolStarted { run_id, .. }
            | RunEvent::ToolFinished { run_id, .. }
            | RunEvent::ModelRetry { run_id, .. }
            | RunEvent::RunFinished { run_id, .. } => run_id,
        }
    }
}

/// Errors of the handle itself (not of a run: those are FAILED RunResults).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the engine could not start: {0}")]
    Start(String),
    #[error("the engine has shut down")]
    Stopped,
    #[error("{0}")]
    Rejected(String),
}

/// Awaits one run's result.
pub struct RunHandle {
    pub run_id: String,
    receiver: oneshot::Receiver<RunResult>,
}

impl RunHandle {
    /// Waits for the run to reach a final status.
    pub async fn wait(self) -> Result<RunResult, EngineError> {
        self.receiver.await.map_err(|_| EngineError::Stopped)
    }

    /// Synchronous variant for code without an async runtime.
    pub fn wait_blocking(self) -> Result<RunResult, EngineError> {
        self.receiver
            .blocking_recv()
            .map_err(|_| EngineError::Stopped)
    }
}

/// Handle on a running engine. Dropping it stops the engine (in-flight runs are interrupted).
pub struct Supervisor {
    addr: Addr<RunSupervisor>,
    events: broadcast::Sender<RunEvent>,
    system: Option<actix::System>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    /// Starts the actix System on a dedicated thread, with `config.arbiters` arbiters for runs.
    pub fn start(config: SupervisorConfig) -> Result<Supervisor, EngineError> {
        let (events, _) = broadcast::channel(config.event_capacity.max(16));
        let events_for_system = events.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("delta-supervisor".into())
            .spawn(move || {
                let system = actix::System::new();
                system.block_on(async move {
                    let addr = RunSupervisor::new(config, events_for_system).start();
                    let _ = ready_tx.send((addr, actix::System::current()));
                });
                let _ = system.run();
            })
            .map_err(|e| EngineError::Start(e.to_string()))?;
        let (addr, system) = ready_rx
            .recv()
            .map_err(|_| EngineError::Start("the actor system thread exited early".into()))?;
        Ok(Supervisor {
            addr,
            events,
            system: Some(system),
            thread: Some(thread),
        })
    }

    /// Admits a run. Returns once it is queued; the handle resolves at its final status.
    pub async fn submit(&self, request: RunRequest) -> Result<RunHandle, EngineError> {
        let (tx, rx) = oneshot::channel();
        let run_id = self
            .addr
            .send(SubmitRun { request, reply: tx })
            .await
            .map_err(|_| EngineError::Stopped)??;
        Ok(RunHandle {
            run_id,
            receiver: rx,
        })
    }

    /// Synchronous variant of [`Supervisor::submit`].
    pub fn submit_blocking(&self, request: RunRequest) -> Result<RunHandle, EngineError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| EngineError::Start(e.to_string()))?;
        rt.block_on(self.submit(request))
    }

    /// Every run's progress events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.events.subscribe()
    }

    /// Asks one run to stop at its next safe point (INTERRUPTED).
    pub fn cancel(&self, run_id: &str) {
        self.addr.do_send(CancelRun {
            run_id: run_id.to_string(),
            reason: "cancelled by the embedding program".into(),
        });
    }

    /// Asks every run to stop (Ctrl-C): running tool groups are killed, runs go INTERRUPTED.
    pub fn cancel_all(&self, reason: &str) {
        self.addr.do_send(CancelAll {
            reason: reason.to_string(),
        });
    }

    /// Stops the actor system and joins its thread. Runs still in flight are abandoned
    /// (call [`Supervisor::cancel_all`] and wait for their handles first for a clean stop).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(system) = self.system.take() {
            system.stop();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
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
}

/// Progress of an orchestration. Lossy for slow subscribers; the summary never is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum OrchestrationEvent {
    StageStarted {
        stage: String,
        runs: usize,
    },
    RunStarted {
        stage: String,
        index: usize,
        run_id: String,
        attempt: u32,
    },
    RunFinished {
        stage: String,
        index: usize,
        run_id: String,
        status: RunStatus,
        duration_ms: u64,
        error: Option<String>,
    },
    StageFinished {
        stage: String,
        status: crate::plan::state::StageStatus,
        completed: usize,
        failed: usize,
    },
    Progress {
        /// Runs known so far (stages not yet expanded are not counted).
        total: usize,
        done: usize,
        running: usize,
        failed: usize,
    },
    Finished {
        status: crate::plan::state::OrchestrationStatus,
    },
}

/// Awaits one orchestration's summary and streams its events.
pub struct OrchestrationHandle {
    pub orchestration_id: String,
    pub events: broadcast::Receiver<OrchestrationEvent>,
    receiver: oneshot::Receiver<crate::plan::state::OrchestrationSummary>,
}

impl OrchestrationHandle {
    pub async fn wait(self) -> Result<crate::plan::state::OrchestrationSummary, EngineError> {
        self.receiver.await.map_err(|_| EngineError::Stopped)
    }

    pub fn wait_blocking(self) -> Result<crate::plan::state::OrchestrationSummary, EngineError> {
        self.receiver
            .blocking_recv()
            .map_err(|_| EngineError::Stopped)
    }
}

impl Supervisor {
    /// Starts a plan: stages fan out into runs driven by this engine, at most
    /// `request.max_parallel` at a time.
    pub async fn orchestrate(
        &self,
        request: OrchestrationRequest,
    ) -> Result<OrchestrationHandle, EngineError> {
        let (events_tx, events) = broadcast::channel(4096);
        let (tx, receiver) = oneshot::channel();
        let orchestration_id = request.orchestration_id.clone();
        self.addr
            .send(crate::runtime::supervisor::StartOrchestration {
                request,
                events: events_tx,
                reply: tx,
            })
            .await
            .map_err(|_| EngineError::Stopped)??;
        Ok(OrchestrationHandle {
            orchestration_id,
            events,
            receiver,
        })
    }

    /// Synchronous variant of [`Supervisor::orchestrate`].
    pub fn orchestrate_blocking(
        &self,
        request: OrchestrationRequest,
    ) -> Result<OrchestrationHandle, EngineError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| EngineError::Start(e.to_string()))?;
        rt.block_on(self.orchestrate(request))
    }
}
