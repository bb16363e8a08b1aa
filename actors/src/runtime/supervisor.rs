//! `RunSupervisor`: admits runs up to `max_parallel`, spreads `RunActor`s over an arbiter
//! pool, shares one [`LlmGate`] per endpoint among the runs of it, and turns a run that
//! died without a result (an actor panic) into a FAILED RunResult
//! (`run::record_panic_failure`).
//!
//! Must not: do file or process work itself; every run's I/O happens in its own actor or
//! in the domain functions it calls.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::{broadcast, oneshot};

use crate::llm::LlmTarget;
use crate::llm::{ChatBackend, GateConfig, HttpBackend, LlmGate, ScriptedBackend};
use crate::plan::state::OrchestrationSummary;
use crate::plan::LlmLimits;
use crate::protocol::{EngineError, OrchestrationEvent, RunEvent, RunResult};
use crate::request::{OrchestrationRequest, RunRequest, RunStart, SupervisorConfig};
use crate::run::{record_panic_failure, setup_failure, unstarted_interrupted};
use crate::runtime::admission::{CancelRun, RunDesk, SubmitRun};
use crate::runtime::orchestrator::{CancelOrchestration, OrchestrationActor};
use crate::runtime::run::{CancelRunActor, RunActor};
use crate::tool::kind::registry::ToolServices;
use crate::tool::spawner::{self, Spawner};
use crate::workspace::{generate_run_id, validate_run_id};

/// Start a plan's state machine; its summary arrives on `reply`.
#[derive(Message)]
#[rtype(result = "Result<(), EngineError>")]
pub struct StartOrchestration {
    pub request: OrchestrationRequest,
    pub events: broadcast::Sender<OrchestrationEvent>,
    pub reply: oneshot::Sender<OrchestrationSummary>,
    /// Where the runs execute; `None`: in this process (`LocalExecutor`).
    pub executor: Option<std::sync::Arc<dyn crate::runtime::executor::Executor>>,
}

/// Interrupt every run and drop the queue (queued runs finish INTERRUPTED without starting).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelAll {
    pub reason: String,
}

struct Queued {
    run_id: String,
    request: RunRequest,
    reply: oneshot::Sender<RunResult>,
}

/// The actor that admits runs (at most `max_parallel` at once, the rest queued in order),
/// spreads them over its arbiter pool, and starts orchestrations.
pub struct RunSupervisor {
    /// The engine's settings, shared with every run.
    config: Arc<SupervisorConfig>,
    /// Where every run's events go (the handle's subscribers listen).
    events: broadcast::Sender<RunEvent>,
    /// The pool of threads runs are started on (`config.arbiters` of them).
    arbiters: Vec<Arbiter>,
    /// The arbiter the next run starts on (round robin).
    next_arbiter: usize,
    /// One gate per endpoint (base URL + key): every run of the endpoint shares its
    /// in-flight cap, rate limit and Retry-After barrier.
    gates: HashMap<String, Arc<LlmGate>>,
    /// The runs started and not finished, by run id.
    running: HashMap<String, Addr<RunActor>>,
    /// Runs waiting for a free slot, in the order they were submitted.
    queue: VecDeque<Queued>,
    /// The ids in `queue`, so a second submission of one is refused at once.
    queued_ids: std::collections::HashSet<String>,
    /// The orchestrations running, by orchestration id (to cancel them).
    orchestrations: HashMap<String, Addr<OrchestrationActor>>,
    /// Keeps the process's tool spawner alive while this supervisor runs.
    tool_spawner: Option<Arc<Spawner>>,
    /// What the runs' tool kinds share: the MCP servers, started by the first run that
    /// needs one and killed when this supervisor stops.
    tool_services: ToolServices,
}

impl RunSupervisor {
    pub fn new(config: SupervisorConfig, events: broadcast::Sender<RunEvent>) -> Self {
        RunSupervisor {
            config: Arc::new(config),
            events,
            arbiters: Vec::new(),
            next_arbiter: 0,
            gates: HashMap::new(),
            running: HashMap::new(),
            queue: VecDeque::new(),
            queued_ids: std::collections::HashSet::new(),
            orchestrations: HashMap::new(),
            tool_spawner: None,
            tool_services: ToolServices::new(),
        }
    }

    fn gate_for(&mut self, target: &LlmTarget) -> Result<Arc<LlmGate>, EngineError> {
        self.gate_with_limits(target, &LlmLimits::default())
    }

    /// `limits` (a plan's `llm:`) override the engine's for a gate created now; an
    /// endpoint already in use keeps its gate, shared by every run of it.
    fn gate_with_limits(
        &mut self,
        target: &LlmTarget,
        limits: &LlmLimits,
    ) -> Result<Arc<LlmGate>, EngineError> {
        let key = target.gateway_key();
        if let Some(gate) = self.gates.get(&key) {
            return Ok(Arc::clone(gate));
        }
        let backend: Arc<dyn ChatBackend> = match target {
            LlmTarget::Http(endpoint) => Arc::new(
                HttpBackend::with_memory(
                    endpoint.clone(),
                    crate::llm::DEFAULT_TIMEOUT,
                    self.config
                        .endpoint_memory
                        .as_ref()
                        .map(crate::llm::EndpointMemory::new),
                )
                .map_err(|e| EngineError::Rejected(e.to_string()))?,
            ),
            LlmTarget::Scripted(script) => Arc::new(ScriptedBackend::new(script.clone())),
            LlmTarget::Custom { backend, .. } => backend.clone(),
        };
        let gate = Arc::new(LlmGate::new(
            backend,
            GateConfig {
                max_in_flight: limits
                    .max_in_flight
                    .unwrap_or(self.config.llm_max_in_flight),
                requests_per_minute: limits
                    .requests_per_minute
                    .or(self.config.llm_requests_per_minute),
                retry: self.config.retry,
            },
        ));
        self.gates.insert(key, Arc::clone(&gate));
        Ok(gate)
    }

    fn launch(&mut self, queued: Queued, ctx: &mut Context<Self>) {
        let Queued {
            run_id,
            request,
            reply,
        } = queued;
        let gate = match self.gate_for(&request.llm) {
            Ok(g) => g,
            Err(e) => {
                let _ = reply.send(setup_failure(&request, &run_id, &e.to_string()));
                return;
            }
        };
        let arbiter = if self.arbiters.is_empty() {
            None
        } else {
            let i = self.next_arbiter % self.arbiters.len();
            self.next_arbiter = self.next_arbiter.wrapping_add(1);
            Some(self.arbiters[i].handle())
        };
        let (result_tx, result_rx) = oneshot::channel();
        let config = self.config.clone();
        let events = self.events.clone();
        let services = self.tool_services.clone();
        let id = run_id.clone();
        let fallback_request = request.clone();
        let make = move |_: &mut Context<RunActor>| {
            RunActor::new(id, request, config, gate, services, events, result_tx)
        };
        let addr = match arbiter {
            Some(handle) => RunActor::start_in_arbiter(&handle, make),
            None => RunActor::create(make),
        };
        self.running.insert(run_id.clone(), addr);

        // A run whose actor dies without answering (a panic) still yields a FAILED result.
        let fallback_id = run_id.clone();
        async move { result_rx.await.ok() }
            .into_actor(self)
            .map(move |outcome, act, ctx| {
                let result = match outcome {
                    Some(result) => result,
                    None => record_panic_failure(&fallback_request, &fallback_id),
                };
                act.running.remove(&fallback_id);
                let _ = reply.send(result);
                act.admit(ctx);
            })
            .spawn(ctx);
    }

    fn admit(&mut self, ctx: &mut Context<Self>) {
        while self.running.len() < self.config.max_parallel.max(1) {
            match self.queue.pop_front() {
                Some(q) => {
                    self.queued_ids.remove(&q.run_id);
                    self.launch(q, ctx)
                }
                None => break,
            }
        }
    }
}

impl Actor for RunSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        // First, while the process holds few descriptors and threads.
        if let Some(command) = &self.config.tool_spawner {
            match spawner::share_for_process(command) {
                Ok(running) => self.tool_spawner = Some(running),
                Err(error) => tracing::warn!(%error, "tools start from the engine process"),
            }
        }
        let n = self.config.arbiters.max(1);
        self.arbiters = (0..n).map(|_| Arbiter::new()).collect();
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.tool_services.shutdown();
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }
}

impl Drop for RunSupervisor {
    /// A system stopped without stopping its actors first still ends the MCP servers.
    fn drop(&mut self) {
        self.tool_services.shutdown();
    }
}

impl Handler<SubmitRun> for RunSupervisor {
    type Result = Result<String, EngineError>;

    fn handle(&mut self, msg: SubmitRun, ctx: &mut Self::Context) -> Self::Result {
        let run_id =
            match (&msg.request.run_id, &msg.request.start) {
                (Some(id), _) => id.clone(),
                (None, RunStart::New { .. }) => generate_run_id(),
                (None, RunStart::Continue { .. }) => return Err(EngineError::Rejected(
                    "continuing a run needs its run id (--run-id); find it with `delta list-runs`"
                        .into(),
                )),
            };
        validate_run_id(&run_id).map_err(|e| EngineError::Rejected(e.to_string()))?;
        if self.running.contains_key(&run_id) || self.queued_ids.contains(&run_id) {
            return Err(EngineError::Rejected(format!(
                "run '{run_id}' is already being driven by this process"
            )));
        }
        self.queued_ids.insert(run_id.clone());
        self.queue.push_back(Queued {
            run_id: run_id.clone(),
            request: msg.request,
            reply: msg.reply,
        });
        self.admit(ctx);
        Ok(run_id)
    }
}

impl Handler<StartOrchestration> for RunSupervisor {
    type Result = Result<(), EngineError>;

    fn handle(&mut self, msg: StartOrchestration, ctx: &mut Self::Context) -> Self::Result {
        let id = msg.request.orchestration_id.clone();
        if self.orchestrations.get(&id).is_some_and(|a| a.connected()) {
            return Err(EngineError::Rejected(format!(
                "orchestration '{id}' is already running in this process"
            )));
        }
        let limits = &msg.request.plan.llm;
        if limits.max_in_flight.is_some() || limits.requests_per_minute.is_some() {
            let targets =
                std::iter::once(&msg.request.llm).chain(msg.request.llm_by_agent.values());
            for target in targets {
                // Errors resurface, worded for the run, when a run of the target launches.
                let _ = self.gate_with_limits(target, limits);
            }
        }
        let mut request = msg.request;
        apply_plan_llm_timeouts(&mut request);
        let executor = msg
            .executor
            .unwrap_or_else(|| std::sync::Arc::new(crate::runtime::executor::LocalExecutor));
        let addr = OrchestrationActor::new(
            request,
            RunDesk::of(ctx.address()),
            executor,
            msg.events,
            msg.reply,
        )
        .observed_by(self.config.observer.clone())
        .start();
        self.orchestrations.insert(id, addr);
        Ok(())
    }
}

/// The plan's `llm.request_timeout` / `llm.idle_timeout` / `llm.response_format` win over
/// each agent's own; its `llm.price` prices the agents that have none of their own.
fn apply_plan_llm_timeouts(request: &mut OrchestrationRequest) {
    let plan = request.plan.llm_timeouts;
    let response_format = request.plan.llm.response_format;
    let price = request.plan.llm.price;
    if plan.is_empty() && response_format.is_none() && price.is_none() {
        return;
    }
    for agent in request.agents.values_mut() {
        let mut overridden = (**agent).clone();
        overridden.llm.timeouts = plan.over(agent.llm.timeouts);
        overridden.llm.response_format = response_format.or(agent.llm.response_format);
        overridden.llm.price = agent.llm.price.or(price);
        *agent = Arc::new(overridden);
    }
}

impl Handler<CancelRun> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, msg: CancelRun, _ctx: &mut Self::Context) {
        if let Some(addr) = self.running.get(&msg.run_id) {
            addr.do_send(CancelRunActor {
                reason: msg.reason,
                timeout: false,
            });
        } else if let Some(pos) = self.queue.iter().position(|q| q.run_id == msg.run_id) {
            if let Some(q) = self.queue.remove(pos) {
                self.queued_ids.remove(&q.run_id);
                let _ = q
                    .reply
                    .send(unstarted_interrupted(&q.request, &q.run_id, &msg.reason));
            }
        }
    }
}

impl Handler<CancelAll> for RunSupervisor {
    type Result = ();

    fn handle(&mut self, msg: CancelAll, _ctx: &mut Self::Context) {
        // Orchestrations first, so they stop submitting before their runs are interrupted.
        for addr in self.orchestrations.values() {
            addr.do_send(CancelOrchestration {
                reason: msg.reason.clone(),
            });
        }
        self.queued_ids.clear();
        for q in self.queue.drain(..) {
            let _ = q
                .reply
                .send(unstarted_interrupted(&q.request, &q.run_id, &msg.reason));
        }
        for addr in self.running.values() {
            addr.do_send(CancelRunActor {
                reason: msg.reason.clone(),
                timeout: false,
            });
        }
    }
}
