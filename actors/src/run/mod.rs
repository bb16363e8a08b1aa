//! The run loop: one run's Think-Act-Observe iterations as one async function
//! ([`RunLoop::drive`]), free of actix so it can be driven and tested on a plain tokio
//! runtime.
//!
//! # Layout
//! - `state.rs`: the taken run's state and the value types the steps pass around (every
//!   other file of the loop imports from it, none from each other);
//! - `drive.rs`: take the run, iterate (hooks → context → model → tool calls → loop), end —
//!   the whole life of a run, read top to bottom;
//! - `context_step.rs`: the context step: the model's window and the request's budget, the
//!   sources, the request built from the journal, compactions carried out and journaled, a
//!   request the server refused as too long compacted and sent again;
//! - `model.rs`: the model step: the request from the context builder, a `pre_llm_request`
//!   override, the call through the model port, its io/invocations record;
//! - `budget_step.rs`: the spending caps checked before each model call and charged after;
//! - `calls.rs`: the tool phase of one reply: each call through its hooks and the tool port,
//!   results journaled in reply order;
//! - `end.rs`: ERROR, `on_error`, ENGINE_END, final metadata, the RunResult, `on_run_end`;
//! - `hooks.rs`: firing a configured hook and journaling `HOOK_EXECUTED` / WARNING;
//! - `recorder.rs`: the journal, its in-memory prefix and `engine.log`;
//! - `env.rs`: the environments of the run's tools and context generators;
//! - `take.rs`: taking the run: its files created, or reopened under its lock for a
//!   continue, with what a crash left behind repaired;
//! - `unstarted.rs`: the RunResults of runs never driven to an end (refused, cancelled in
//!   the queue, or whose actor panicked);
//! - `human.rs`: ask_human bookkeeping (request file, answers, sensitive values);
//! - `redaction.rs`: sensitive answers kept out of RunEvents and the RunResult.
//!
//! The journal is the truth: the recorder's events are a cache of its prefix holding the real
//! text; every writer of the run (journal, metadata, io/ records, engine.log, events, result)
//! redacts sensitive answers through the run's [`crate::redact::Redactor`].
//!
//! The loop reaches the outside through two ports: [`ModelPort`] (one model call through the
//! endpoint's limits and retries) and [`ToolPort`] (one tool job: a process, or an engine
//! call such as an MCP tool). The runtime implements them with the endpoint's shared
//! `LlmGate` and the `ToolActor` actor; tests implement them with fakes. What a tool call
//! becomes is the tool kinds' decision (`tool::kind`): the run opens its toolbox once
//! (`tool::kind::registry`) and plans every call through it.
//!
//! Cancellation is one [`RunControl`]: a stop request cancels its token, which kills running
//! tool and hook process groups and aborts the context build or the model call; the loop
//! checks it at its await points and ends INTERRUPTED there.
//!
//! Must not: import actix, print, or read the process environment (the request carries it).

mod budget_step;
mod call_event;
mod calls;
mod context_step;
mod drive;
mod end;
mod env;
mod hooks;
pub mod human;
mod live_reply;
mod model;
mod recorder;
mod redaction;
mod state;
mod take;
mod unstarted;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::LocalBoxFuture;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::llm::{
    CallFailure, CallOutcome, ChatRequest, ContextWindow, RequestMeta, RetryObserver,
};
use crate::protocol::RunEvent;
use crate::request::{RunRequest, SupervisorConfig};
use crate::tool::job::{ToolExecution, ToolJob};
use crate::tool::kind::registry::ToolServices;

pub use unstarted::{record_panic_failure, setup_failure, unstarted_interrupted};

/// Default iteration cap when neither the request nor the agent sets one.
pub const DEFAULT_MAX_ITERATIONS: u32 = 30;

/// One model call through the endpoint's in-flight cap, rate limit and retries.
pub trait ModelPort {
    /// Sends `request`; ends early (a cancelled [`CallFailure`]) when `cancel` fires.
    fn complete(
        &self,
        request: Arc<ChatRequest>,
        meta: RequestMeta,
        cancel: CancellationToken,
        on_retry: RetryObserver,
    ) -> LocalBoxFuture<'static, Result<CallOutcome, CallFailure>>;

    /// How a request to `model` is to be written now (streaming, provider quirks); the run
    /// serializes its request this way once, for the wire and its record.
    fn wire_options(&self, model: &str) -> crate::llm::WireOptions {
        let _ = model;
        crate::llm::WireOptions::default()
    }

    /// What the endpoint taught since this was last asked (each lesson returned once, to
    /// whichever run asks first), for the run to announce.
    fn take_adaptations(&self) -> Vec<crate::llm::Adaptation> {
        Vec::new()
    }

    /// `model`'s context window as the endpoint tells it, when it does (asked once per
    /// endpoint and model; see [`crate::llm::window::probe`]).
    fn context_window(&self, model: &str) -> LocalBoxFuture<'static, Option<ContextWindow>> {
        let _ = model;
        Box::pin(async { None })
    }
}

/// One tool job: a process (its own group, timeout, output caps) or an engine call (an MCP
/// tool, within its time limit), with its audit record.
pub trait ToolPort {
    /// Runs `job`; `cancel` kills its process group or abandons its call. `None` when the
    /// executor went away without an answer.
    fn execute(
        &self,
        job: ToolJob,
        cancel: CancellationToken,
    ) -> LocalBoxFuture<'static, Option<ToolExecution>>;
}

/// Why a run was asked to stop.
#[derive(Debug, Clone)]
pub struct StopRequest {
    pub reason: String,
    /// The run's own wall-clock limit expired (error type `timeout`).
    pub timeout: bool,
}

/// The stop switch shared by a run's loop and whoever may stop it (its actor, a timer).
#[derive(Debug, Default)]
pub struct RunControl {
    token: CancellationToken,
    /// Cancels the end hooks (`on_error`, `on_run_end`), which outlive the run's token.
    end_hooks: CancellationToken,
    stop: Mutex<Option<StopRequest>>,
    ending: AtomicBool,
}

impl RunControl {
    /// A control with nothing requested.
    pub fn new() -> Arc<RunControl> {
        Arc::new(RunControl::default())
    }

    /// Asks the run to stop at its next await point. The first request wins; a request that
    /// arrives while the run is ending cuts its end hooks short instead.
    pub fn request_stop(&self, reason: String, timeout: bool) {
        let mut stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        if self.ending.load(Ordering::SeqCst) {
            self.end_hooks.cancel();
            return;
        }
        if stop.is_none() {
            *stop = Some(StopRequest { reason, timeout });
            self.token.cancel();
        }
    }

    /// Whether a stop was requested.
    pub fn is_stopping(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The stop request, if any.
    pub fn stop_request(&self) -> Option<StopRequest> {
        self.stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The run's token (tools, hooks, model call and context build hang off it).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// From now on a stop request cancels the end hooks.
    fn begin_ending(&self) {
        let _stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        self.ending.store(true, Ordering::SeqCst);
    }
}

/// One run to drive: the request, the engine settings, the two ports and the stop switch.
pub struct RunLoop {
    /// The run's id (its folder under `.delta/`).
    pub(crate) run_id: String,
    /// What to run: agent, work folder, start, model target, environment, limits.
    pub(crate) request: RunRequest,
    /// The engine's settings (limits, retry, output caps), shared with every run.
    pub(crate) config: Arc<SupervisorConfig>,
    /// Where model calls go (the gate of the run's endpoint, or a test's model).
    pub(crate) model: Rc<dyn ModelPort>,
    /// Where tool calls go (the tool kinds, or a test's tools).
    pub(crate) tools: Rc<dyn ToolPort>,
    /// The stop switch: a cancel asks the loop to stop at its next safe point.
    pub(crate) control: Arc<RunControl>,
    /// Where the run's events go (the supervisor's subscribers).
    pub(crate) events: broadcast::Sender<RunEvent>,
    /// What the run's tool kinds share with the engine's other runs (MCP servers).
    pub(crate) services: ToolServices,
}

impl RunLoop {
    /// A run ready to [`drive`](RunLoop::drive).
    pub fn new(
        run_id: String,
        request: RunRequest,
        config: Arc<SupervisorConfig>,
        model: Rc<dyn ModelPort>,
        tools: Rc<dyn ToolPort>,
        control: Arc<RunControl>,
        events: broadcast::Sender<RunEvent>,
    ) -> RunLoop {
        RunLoop {
            run_id,
            request,
            config,
            model,
            tools,
            control,
            events,
            services: ToolServices::default(),
        }
    }

    /// Opens the run's tools with `services` (the engine's shared MCP servers) instead of
    /// services of its own.
    pub fn with_tool_services(mut self, services: ToolServices) -> RunLoop {
        self.services = services;
        self
    }
}
