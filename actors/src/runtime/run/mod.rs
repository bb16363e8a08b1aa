//! `RunActor`: one actor per run_id drives the Think-Act-Observe loop.
//!
//! Each iteration is a chain of continuations on the actor, never a blocking call:
//! - `think.rs`: `on_iteration_start`, the context builder, `pre_llm_request`, the model call
//!   through the endpoint's gateway, `post_llm_response`, the THOUGHT;
//! - `calls.rs`: the reply's calls planned and their ACTION_REQUESTs journaled;
//! - `act.rs`: each call run in its own `ToolActor` (one at a time, or all at once with
//!   `parallel_tool_calls`) between `pre_tool_execution` and `post_tool_execution`, results
//!   journaled strictly in reply order, `on_iteration_end`, loop;
//! - `asking.rs`: ask_human (terminal prompt, or pause WAITING_FOR_INPUT);
//! - `finish.rs`: ERROR, `on_error`, ENGINE_END and metadata, `on_run_end`, the RunResult;
//! - `hooks.rs`: firing hooks as futures on the actor and journaling HOOK_EXECUTED.
//!
//! Cancellation (Ctrl-C, timeouts) cancels the run's token, which kills running tool and hook
//! groups and aborts the context build or model call; the run then finishes INTERRUPTED at
//! that safe point.
//!
//! The journal is the truth: `events` is a cache of its prefix, appended only after the
//! journal write succeeded.

mod act;
mod asking;
mod calls;
mod env;
mod finish;
mod hooks;
pub mod human;
mod log;
pub mod setup;
mod think;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use crate::api::{RunErrorInfo, RunEvent, RunRequest, RunResult, SupervisorConfig};
use crate::journal::{Event, Journal, JournalEvent};
use crate::metadata::{write_metadata, write_metadata_with, RunLock, RunMetadata};
use crate::protocol::{RunStatus, TokenUsage};
use crate::runtime::gateway::LlmGateway;
use crate::workspace::{now_rfc3339, RunPaths};

use calls::Acting;
use log::EngineLog;

/// How often a live run's metadata.json shows its progress.
const PROGRESS_WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Error kind of a run that could not be taken because its files could not be written or
/// read (as opposed to `setup_error`, a refusal). Nothing of the run was changed either way.
pub const SETUP_IO_ERROR_KIND: &str = "setup_io_error";

/// Default iteration cap when neither the request nor the agent sets one.
pub const DEFAULT_MAX_ITERATIONS: u32 = 30;

/// Stop at the next safe point and finish INTERRUPTED.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelRunActor {
    pub reason: String,
    /// The run's own wall-clock limit expired (error type `timeout`).
    pub timeout: bool,
}

/// Where this driving's wall time went (for RunMetrics and benchmarks).
#[derive(Default)]
struct Timings {
    model: std::time::Duration,
    queue: std::time::Duration,
    tools: std::time::Duration,
}

struct StopRequest {
    reason: String,
    timeout: bool,
}

pub struct RunActor {
    run_id: String,
    request: RunRequest,
    config: Arc<SupervisorConfig>,
    gateway: Addr<LlmGateway>,
    events_tx: broadcast::Sender<RunEvent>,
    result_tx: Option<oneshot::Sender<RunResult>>,
    paths: RunPaths,
    journal: Option<Journal>,
    events: Arc<Vec<JournalEvent>>,
    meta: Option<RunMetadata>,
    lock: Option<RunLock>,
    log: EngineLog,
    cancel: CancellationToken,
    stop: Option<StopRequest>,
    /// Iteration number across the run's whole life (THOUGHTs so far).
    iteration: u32,
    /// Iterations driven by this start or continuation (the cap applies to these).
    iterations_this_start: u32,
    max_iterations: u32,
    started_at: Instant,
    start_time: String,
    usage: TokenUsage,
    model_usage: BTreeMap<String, TokenUsage>,
    model_call: Option<SpawnHandle>,
    acting: Option<Acting>,
    timings: Timings,
    last_progress_write: Option<Instant>,
    child_env: Arc<Vec<(String, String)>>,
    generator_env: Arc<BTreeMap<String, String>>,
    secrets: Arc<HashMap<String, String>>,
    tool_schemas: Arc<Vec<serde_json::Value>>,
    finished: bool,
    /// Hooks whose process is running (a stop waits for them: their group is killed).
    hooks_running: usize,
    /// Cancels the end hooks (`on_error`, `on_run_end`), which outlive the run's own token.
    end_hooks_cancel: CancellationToken,
    /// The first failure to write metadata.json in this driving, with its path and cause.
    metadata_failure: Option<String>,
    /// Audit record kinds already warned about (one WARNING per kind per run).
    audit_warned: std::collections::HashSet<hooks::AuditKind>,
}

impl RunActor {
    pub fn new(
        run_id: String,
        request: RunRequest,
        config: Arc<SupervisorConfig>,
        gateway: Addr<LlmGateway>,
        events_tx: broadcast::Sender<RunEvent>,
        result_tx: oneshot::Sender<RunResult>,
    ) -> Self {
        let paths = RunPaths::new(&request.work_dir, &run_id);
        let max_iterations = request
            .max_iterations
            .or(request.agent.max_iterations)
            .unwrap_or(DEFAULT_MAX_ITERATIONS)
            .max(1);
        let (child_env, generator_env) =
            env::child_environments(&run_id, &request, &config, &paths);
        let tool_schemas = think::tool_schemas(&request);
        RunActor {
            log: EngineLog::new(paths.engine_log.clone()),
            run_id,
            request,
            config,
            gateway,
            events_tx,
            result_tx: Some(result_tx),
            paths,
            journal: None,
            events: Arc::new(Vec::new()),
            meta: None,
            lock: None,
            cancel: CancellationToken::new(),
            stop: None,
            iteration: 0,
            iterations_this_start: 0,
            max_iterations,
            started_at: Instant::now(),
            start_time: now_rfc3339(),
            usage: TokenUsage::default(),
            model_usage: BTreeMap::new(),
            model_call: None,
            acting: None,
            timings: Timings::default(),
            last_progress_write: Some(Instant::now()),
            child_env: Arc::new(child_env),
            generator_env: Arc::new(generator_env),
            secrets: Arc::new(HashMap::new()),
            tool_schemas,
            finished: false,
            hooks_running: 0,
            end_hooks_cancel: CancellationToken::new(),
            metadata_failure: None,
            audit_warned: std::collections::HashSet::new(),
        }
    }

    fn emit(&self, event: RunEvent) {
        // No subscriber is fine: events are progress, not results.
        let _ = self.events_tx.send(event);
    }

    /// Appends to the journal and the cache. A journal that cannot be written ends the run.
    fn append(&mut self, event: Event, ctx: &mut Context<Self>) -> bool {
        let Some(journal) = self.journal.as_mut() else {
            return false;
        };
        match journal.append(event) {
            Ok(recorded) => {
                Arc::make_mut(&mut self.events).push(recorded);
                true
            }
            Err(e) => {
                let message = format!("cannot write the journal: {e}");
                self.journal = None;
                self.finish(
                    RunStatus::Failed,
                    None,
                    Some(error_info("journal_error", message)),
                    None,
                    ctx,
                );
                false
            }
        }
    }

    /// `durable` at status changes (when `journal_fsync`); progress updates between them are
    /// atomic but not fsynced, so a crash loses at most the last iteration count.
    /// Progress (iterations, usage) for people watching a live run: written at most every
    /// [`PROGRESS_WRITE_INTERVAL`], since each write creates and renames a file. Status
    /// changes always write at once (`save_metadata`), so nothing a resume needs waits here.
    fn save_progress(&mut self) {
        let due = self
            .last_progress_write
            .is_none_or(|t| t.elapsed() >= PROGRESS_WRITE_INTERVAL);
        if due {
            self.last_progress_write = Some(Instant::now());
            let _ = self.save_metadata(false);
        }
    }

    /// Writes the run's record; false when it could not be written (the first such failure
    /// of the run is kept in `metadata_failure`: it is the cause the user needs to read).
    fn save_metadata(&mut self, durable: bool) -> bool {
        let Some(meta) = self.meta.as_mut() else {
            return true;
        };
        meta.updated_at = now_rfc3339();
        meta.iterations = self.iteration;
        meta.usage = self.usage;
        match write_metadata_with(&self.paths.run_dir, meta, durable) {
            Ok(()) => true,
            Err(e) => {
                self.log
                    .line(&format!("warning: cannot write metadata.json: {e}"));
                self.metadata_failure.get_or_insert_with(|| e.to_string());
                false
            }
        }
    }
}

pub(crate) fn error_info(kind: &str, message: String) -> RunErrorInfo {
    RunErrorInfo {
        kind: kind.to_string(),
        message,
        details: None,
    }
}

impl Actor for RunActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let taken = setup::take_run(
            &self.run_id,
            &self.request,
            self.max_iterations,
            self.config.fsync_every_event,
        );
        let taken = match taken {
            Ok(t) => t,
            Err(e) => {
                // Nothing of the run was touched: answer without writing anything.
                let mut result = crate::runtime::supervisor::setup_failure(
                    &self.request,
                    &self.run_id,
                    &e.to_string(),
                );
                if let (setup::SetupError::Io(_), Some(error)) = (&e, result.error.as_mut()) {
                    // Not a refusal: the files could not be written (a full disk...).
                    error.kind = SETUP_IO_ERROR_KIND.into();
                }
                if let Some(tx) = self.result_tx.take() {
                    let _ = tx.send(result);
                }
                self.finished = true;
                ctx.stop();
                return;
            }
        };
        self.iteration = taken
            .events
            .iter()
            .filter(|e| matches!(e.event, Event::Thought { .. }))
            .count() as u32;
        self.paths = taken.paths;
        self.journal = Some(taken.journal);
        self.events = Arc::new(taken.events);
        self.meta = Some(taken.meta);
        self.lock = Some(taken.lock);
        self.secrets = Arc::new(taken.secrets);
        if let Some(journal) = self.journal.as_mut() {
            if self.config.journal_fsync {
                let _ = journal.sync();
            }
        }
        self.log.line(&format!(
            "run {} {} (agent {}, max {} iterations)",
            self.run_id,
            if taken.resumed { "resumed" } else { "started" },
            self.request.agent.name,
            self.max_iterations
        ));
        self.emit(RunEvent::RunStarted {
            run_id: self.run_id.clone(),
            agent_name: self.request.agent.name.clone(),
            work_dir: self.request.work_dir.to_string_lossy().into_owned(),
            resumed: taken.resumed,
        });
        if let Some(limit) = self.request.timeout {
            ctx.run_later(limit, move |act, ctx| {
                let reason = format!(
                    "the run exceeded its time limit of {} s",
                    limit.as_secs_f64()
                );
                act.handle(
                    CancelRunActor {
                        reason,
                        timeout: true,
                    },
                    ctx,
                );
            });
        }
        if taken.resumed {
            if let Some(answer) = setup::recorded_final_answer(&self.events) {
                self.log.line(
                    "the final answer was already journaled; completing without a model call",
                );
                self.finish(RunStatus::Completed, Some(answer), None, None, ctx);
                return;
            }
        }
        self.think(ctx);
    }
}

impl Handler<CancelRunActor> for RunActor {
    type Result = ();

    fn handle(&mut self, msg: CancelRunActor, ctx: &mut Self::Context) {
        if self.finished {
            // Only the end hooks may still be running: stop them too.
            self.end_hooks_cancel.cancel();
            return;
        }
        if self.stop.is_some() {
            return;
        }
        self.log.line(&format!("stop requested: {}", msg.reason));
        self.stop = Some(StopRequest {
            reason: msg.reason,
            timeout: msg.timeout,
        });
        self.cancel.cancel();
        if let Some(handle) = self.model_call.take() {
            ctx.cancel_future(handle);
            self.interrupt_now(ctx);
            return;
        }
        let waiting_for_processes = self.hooks_running > 0
            || self
                .acting
                .as_ref()
                .is_some_and(|a| a.has_processes_in_flight());
        if !waiting_for_processes {
            self.interrupt_now(ctx);
        }
        // Otherwise the killed tools and hooks report back, and their continuation finishes
        // INTERRUPTED (`end_iteration` or `halted`).
    }
}

/// Records the failure of a run whose actor died without answering (a panic). Best effort:
/// metadata goes FAILED with the reason, the journal gets an ERROR and an ENGINE_END.
pub(crate) fn record_panic_failure(request: &RunRequest, run_id: &str) -> RunResult {
    let message = "the run's actor stopped unexpectedly (engine panic); see engine.log".to_string();
    let paths = RunPaths::new(&request.work_dir, run_id);
    if let Ok((mut journal, _)) = Journal::open(&paths.run_dir, Default::default()) {
        let _ = journal.append(Event::Error {
            error_type: "engine_panic".into(),
            error_message: message.clone(),
            error_details: None,
        });
        let _ = journal.append(Event::EngineEnd {
            run_id: run_id.to_string(),
            status: RunStatus::Failed,
            final_iteration: 0,
            result: None,
            error: Some(message.clone()),
        });
    }
    if let Ok(mut meta) = crate::metadata::read_metadata(&paths.run_dir) {
        meta.status = RunStatus::Failed;
        meta.error = Some(format!("engine_panic: {message}"));
        meta.end_time = Some(now_rfc3339());
        let _ = write_metadata(&paths.run_dir, &meta);
    }
    let mut result = crate::runtime::supervisor::setup_failure(request, run_id, &message);
    if let Some(e) = result.error.as_mut() {
        e.kind = "engine_panic".into();
    }
    result
}
