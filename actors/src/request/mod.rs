//! What an embedder asks of the engine: the engine's settings ([`SupervisorConfig`]), one run
//! ([`RunRequest`]: how it begins, where its model calls go, who answers its questions) and
//! one plan ([`OrchestrationRequest`]).
//!
//! These sit between the domain and the runtime: a request carries a compiled agent, a
//! resolved plan and a model backend, so it imports those modules, and only the
//! runtime, the handles and the run loop import it.
//!
//! Must not: be imported by [`crate::protocol`] or by the domain modules whose values it
//! carries (`agent`, `plan`, `llm`, `tool`, `cluster`).

mod observer;

pub use observer::{EngineObserver, ObservedOrchestration, ObserverHandle};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::ResolvedAgent;
use crate::llm::{LlmTarget, LlmTimeouts, RetryPolicy};
use crate::protocol::TraceSpan;

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
    /// (default: 600 s for the whole request, 60 s of silence in a streamed reply).
    pub llm_timeouts: LlmTimeouts,
    /// Bytes of each output stream (stdout, stderr) kept at the head of the observation the
    /// model sees when a tool's output is longer than head + tail (default 8 KiB); the middle
    /// is cut, and the full output stays in `io/tool_executions/`.
    pub observation_head_bytes: usize,
    /// Bytes of each output stream kept at the tail of the observation (default 8 KiB).
    pub observation_tail_bytes: usize,
    /// Cap, in bytes, of the full output file kept per stream in `io/tool_executions/`
    /// (default 64 MiB); output past it is counted but not stored.
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
    /// Send a [`RunEvent::ReplyText`](crate::protocol::RunEvent::ReplyText) for each piece of
    /// a streamed reply as it arrives (default false: one event per chunk of every run is
    /// work nobody needs in a batch; `delta run` on a terminal turns it on).
    pub reply_text_events: bool,
    /// Keep the text of a streamed reply, as it arrives, in the run's `io/reply.partial`
    /// (rewritten at most every 250 ms, marked complete when the reply is whole) for a
    /// separate process to watch: `delta serve`'s run inspector shows it growing. Only
    /// replies that carry text write it (default false: `delta run` and `delta orchestrate`
    /// turn it on; see [`crate::workspace::live_reply`]).
    pub partial_reply_file: bool,
    /// The file that keeps what endpoints taught across processes (see
    /// [`crate::llm::memory`]): read when an endpoint's first call is written, written at
    /// each new lesson. `None` (the default, as embedders get it): lessons last for the
    /// process only. The CLI sets `$XDG_CACHE_HOME/delta/endpoints.json`.
    pub endpoint_memory: Option<PathBuf>,
    /// Told every run and orchestration event as it is emitted, losslessly (trace and
    /// metric export; see [`EngineObserver`]). `None` (the default): nobody is, at no cost.
    pub observer: Option<ObserverHandle>,
    /// Put the messages of each model call into its
    /// [`RunEvent::ModelCallFinished`](crate::protocol::RunEvent::ModelCallFinished)
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` for `delta`); sensitive
    /// answers are redacted there as everywhere. Default false: conversations stay in the
    /// run's files.
    pub capture_message_content: bool,
    /// How long a new run waits at most for its workspace's creation lock
    /// (`.delta/.creating.lock`, held for a few file-system calls by each creator) before it
    /// is refused naming the process that holds it (default 30 s; see
    /// [`crate::workspace::LockWait`]). A wait of over a second is announced with a
    /// [`RunEvent::Waiting`](crate::protocol::RunEvent::Waiting) event, and a stop request
    /// ends it at once.
    pub creation_lock_wait: Duration,
    /// The kernel's sandbox features, as every run's tools are confined with them (`None`,
    /// the default: probed once per process). Set to simulate another kernel, e.g.
    /// [`KernelSupport::none`](crate::sandbox::KernelSupport::none) to see what an agent
    /// whose `sandbox:` is required does without Landlock (it refuses to run).
    pub sandbox_support: Option<crate::sandbox::KernelSupport>,
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
            reply_text_events: false,
            partial_reply_file: false,
            endpoint_memory: None,
            observer: None,
            capture_message_content: false,
            creation_lock_wait: crate::workspace::DEFAULT_CREATION_LOCK_WAIT,
            sandbox_support: None,
        }
    }
}

/// How a run begins.
#[derive(Debug, Clone)]
pub enum RunStart {
    /// A new run with this task.
    New {
        /// The user's task: the run's first user message.
        task: String,
    },
    /// Continue an existing run (`delta continue`), optionally with a message whose meaning
    /// depends on the run's status (an answer when WAITING_FOR_INPUT, else a user message).
    Continue {
        /// The answer or the new user message; `None` to resume as the journal left it.
        message: Option<String>,
        /// Take over a run recorded as RUNNING on another host, whose process cannot be
        /// checked from here (`--force`). A run whose lock is held is never taken.
        force: bool,
    },
}

/// Asks a human on a terminal (`-i`). The CLI provides one; embedders may provide their own.
pub trait HumanPrompter: Send + Sync + 'static {
    /// Asks `prompt` and returns the answer, or an error text when no answer can be had
    /// (EOF, no terminal); an error fails the run (`human_input_error`) quoting the text.
    /// `input_type` is `text`, `password` (hide the typing) or `confirmation` (yes or no);
    /// `sensitive` answers are redacted everywhere the engine writes, so echo none of them.
    /// Called on a blocking thread: it may block.
    fn ask(&self, prompt: &str, input_type: &str, sensitive: bool) -> Result<String, String>;
}

/// A request to start or continue one run: build it with [`RunRequest::new`] and the
/// `with_*` setters (new fields may be added; they get defaults).
///
/// ```
/// # fn demo(agent: std::sync::Arc<delta_actors::agent::ResolvedAgent>, llm: delta_actors::LlmTarget) {
/// use delta_actors::{RunRequest, RunStart};
/// let request = RunRequest::new(agent, "/tmp/ws", RunStart::New { task: "say hello".into() }, llm)
///     .with_run_id("hello-1")
///     .with_max_iterations(5);
/// # }
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct RunRequest {
    /// The loaded agent (see [`crate::agent::load_agent`]).
    pub agent: Arc<ResolvedAgent>,
    /// The workspace: tools start here, and the run's files go to
    /// `<work_dir>/.delta/<run_id>/`.
    pub work_dir: PathBuf,
    /// Generated (`YYYYMMDD_HHMMSS_xxxxxx`) when absent for a new run; required to continue.
    pub run_id: Option<String>,
    /// A new task, or the continuation of the run `run_id`.
    pub start: RunStart,
    /// Iteration cap for this start or continuation (default: the agent's, else 30).
    pub max_iterations: Option<u32>,
    /// Where the run's model calls go.
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
    /// The span this start of the run is (W3C trace context): its tools, hooks and context
    /// generators get `TRACEPARENT`/`TRACESTATE` naming their own spans under it, its model
    /// calls send a `traceparent` header, and its events carry it for an exporter. `None`
    /// (the default): the run sets no trace context (children inherit the environment's).
    pub trace: Option<TraceSpan>,
    /// The spending caps this run charges and consults before each model call (its own,
    /// its plan's, its stage's; docs/cost.md). Empty (the default): no cap.
    pub budgets: Vec<Arc<crate::budget::BudgetLedger>>,
}

impl RunRequest {
    /// A request to run `agent` in `work_dir`, starting as `start`, with its model calls going
    /// to `llm`. Everything else has its default: a generated run id (for a new run), the
    /// agent's iteration cap, an empty environment, no time limit, no terminal for ask_human.
    pub fn new(
        agent: Arc<ResolvedAgent>,
        work_dir: impl Into<PathBuf>,
        start: RunStart,
        llm: LlmTarget,
    ) -> RunRequest {
        RunRequest {
            agent,
            work_dir: work_dir.into(),
            run_id: None,
            start,
            max_iterations: None,
            llm,
            env: Arc::new(BTreeMap::new()),
            timeout: None,
            prompter: None,
            workspace_id: None,
            orchestration_id: None,
            trace: None,
            budgets: Vec::new(),
        }
    }

    /// Adds a spending cap the run charges and stops at (INTERRUPTED `budget_exhausted`).
    pub fn with_budget(mut self, ledger: Arc<crate::budget::BudgetLedger>) -> RunRequest {
        self.budgets.push(ledger);
        self
    }

    /// The run's id (validated when submitted; required to continue a run).
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> RunRequest {
        self.run_id = Some(run_id.into());
        self
    }

    /// The iteration cap of this start or continuation.
    pub fn with_max_iterations(mut self, max_iterations: u32) -> RunRequest {
        self.max_iterations = Some(max_iterations);
        self
    }

    /// The complete environment tools, hooks and generators inherit.
    pub fn with_env(mut self, env: Arc<BTreeMap<String, String>>) -> RunRequest {
        self.env = env;
        self
    }

    /// A wall-clock limit: on expiry the run is INTERRUPTED with error type `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> RunRequest {
        self.timeout = Some(timeout);
        self
    }

    /// Asks ask_human questions through `prompter` instead of pausing the run.
    pub fn with_prompter(mut self, prompter: Arc<dyn HumanPrompter>) -> RunRequest {
        self.prompter = Some(prompter);
        self
    }

    /// The workspace's name (`W001`) recorded in the run's metadata.
    pub fn with_workspace_id(mut self, workspace_id: impl Into<String>) -> RunRequest {
        self.workspace_id = Some(workspace_id.into());
        self
    }

    /// The orchestration the run belongs to, recorded in its metadata.
    pub fn with_orchestration_id(mut self, orchestration_id: impl Into<String>) -> RunRequest {
        self.orchestration_id = Some(orchestration_id.into());
        self
    }

    /// The span this start of the run is (see [`RunRequest::trace`]).
    pub fn with_trace(mut self, trace: TraceSpan) -> RunRequest {
        self.trace = Some(trace);
        self
    }
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

/// A whole plan to run in this engine (`delta orchestrate`): build it with
/// [`OrchestrationRequest::new`] and the `with_*` setters.
#[derive(Clone)]
#[non_exhaustive]
pub struct OrchestrationRequest {
    /// The validated plan (see [`crate::plan::load_plan`]).
    pub plan: Arc<crate::plan::ResolvedPlan>,
    /// Names the orchestration's folder and seeds its runs' deterministic ids (see
    /// [`crate::plan::orchestration_id`]); resuming needs the same id.
    pub orchestration_id: String,
    /// The shared workspace (runs of `isolate: true` stages get `<workspace>/<stage>/<index>`).
    pub workspace: PathBuf,
    /// Every agent the plan names, loaded once, by the path the plan resolved.
    pub agents: std::collections::HashMap<PathBuf, Arc<ResolvedAgent>>,
    /// Where each agent's model calls go (agents may use different endpoints); runs of
    /// agents missing here use `llm`.
    pub llm_by_agent: std::collections::HashMap<PathBuf, LlmTarget>,
    /// Where model calls go for agents not in `llm_by_agent`.
    pub llm: LlmTarget,
    /// The complete environment every run's tools, hooks and generators inherit (secrets
    /// are scrubbed from it before any child sees it).
    pub env: Arc<BTreeMap<String, String>>,
    /// Continue an earlier orchestration with this id: COMPLETED runs are reused,
    /// INTERRUPTED ones continued, the rest started.
    pub resume: bool,
    /// Runs in flight for this plan at most.
    pub max_parallel: usize,
    /// The command (argv) that resumes this orchestration, recorded in its scheduling
    /// journal for `delta list-orchestrations` (see [`Self::with_resume_command`]).
    pub resume_command: Option<Vec<String>>,
    /// The orchestration's span (W3C trace context): its stages are its children
    /// `("stage", <id>)` and each submitted run a child of its stage's span with an id of its
    /// own. `None` (the default): no trace context.
    pub trace: Option<TraceSpan>,
    /// The plan's spending cap (default: plan.yaml's `budget:`; `delta orchestrate
    /// --budget-usd/--budget-tokens` replace it). Stages keep their own `budget:`.
    pub budget: Option<crate::budget::Budget>,
}

impl OrchestrationRequest {
    /// The plan `plan` as orchestration `orchestration_id` in `workspace`, every run's model
    /// calls going to `llm` unless [`with_llm_by_agent`](Self::with_llm_by_agent) says
    /// otherwise. Defaults: no agents loaded (each run's agent must then be added with
    /// [`with_agents`](Self::with_agents)), an empty environment, a new orchestration, and the
    /// plan's own `max_parallel`.
    pub fn new(
        plan: Arc<crate::plan::ResolvedPlan>,
        orchestration_id: impl Into<String>,
        workspace: impl Into<PathBuf>,
        llm: LlmTarget,
    ) -> OrchestrationRequest {
        let max_parallel = plan.max_parallel;
        let budget = plan.budget;
        OrchestrationRequest {
            plan,
            orchestration_id: orchestration_id.into(),
            workspace: workspace.into(),
            agents: std::collections::HashMap::new(),
            llm_by_agent: std::collections::HashMap::new(),
            llm,
            env: Arc::new(BTreeMap::new()),
            resume: false,
            max_parallel,
            resume_command: None,
            trace: None,
            budget,
        }
    }

    /// The plan's spending cap, instead of plan.yaml's `budget:` (validate it first:
    /// [`crate::budget::Budget::invalid`]).
    pub fn with_budget(mut self, budget: crate::budget::Budget) -> OrchestrationRequest {
        self.budget = Some(budget);
        self
    }

    /// Every agent the plan names, loaded once, by the path the plan resolved.
    pub fn with_agents(
        mut self,
        agents: std::collections::HashMap<PathBuf, Arc<ResolvedAgent>>,
    ) -> OrchestrationRequest {
        self.agents = agents;
        self
    }

    /// Where each agent's model calls go, when not to the request's `llm`.
    pub fn with_llm_by_agent(
        mut self,
        llm_by_agent: std::collections::HashMap<PathBuf, LlmTarget>,
    ) -> OrchestrationRequest {
        self.llm_by_agent = llm_by_agent;
        self
    }

    /// The complete environment every run's tools, hooks and generators inherit.
    pub fn with_env(mut self, env: Arc<BTreeMap<String, String>>) -> OrchestrationRequest {
        self.env = env;
        self
    }

    /// Continue the earlier orchestration with this id (COMPLETED runs are reused).
    pub fn resuming(mut self) -> OrchestrationRequest {
        self.resume = true;
        self
    }

    /// Runs in flight for this plan at most.
    pub fn with_max_parallel(mut self, max_parallel: usize) -> OrchestrationRequest {
        self.max_parallel = max_parallel;
        self
    }

    /// The exact command (argv) that resumes this orchestration, with every flag the plan
    /// cannot supply (`--llm-script`, ...): recorded with each start, so a listing of the
    /// workspace can print it after a crash.
    pub fn with_resume_command(mut self, argv: Vec<String>) -> OrchestrationRequest {
        self.resume_command = Some(argv);
        self
    }

    /// The orchestration's span (see [`OrchestrationRequest::trace`]).
    pub fn with_trace(mut self, trace: TraceSpan) -> OrchestrationRequest {
        self.trace = Some(trace);
        self
    }
}
