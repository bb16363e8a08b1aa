//! `RunActor`: one actor per run_id. It owns the run's mailbox — a stop request, and the
//! run's time limit, which counts the run's own time ([`own_time`]: not the time its model
//! calls wait in their endpoint's queue) — and drives the run loop ([`crate::run::RunLoop::drive`]) as one
//! future on its context. The loop reaches the model through the endpoint's shared
//! `LlmGate`, called on this actor's arbiter, and runs each tool call in its own
//! `ToolActor`, through the two ports below.
//!
//! Must not: make decisions about the run (the loop does), or block its arbiter.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use crate::llm::{
    complete_call, CallFailure, CallOutcome, ChatRequest, LlmGate, QueueSink, RequestMeta,
    RetryObserver,
};
use crate::protocol::{RunEvent, RunResult};
use crate::request::{RunRequest, SupervisorConfig};
use crate::run::{ModelPort, RunControl, RunLoop, ToolPort};
use crate::runtime::tool::{Execute, ToolActor};
use crate::tool::job::{ToolExecution, ToolJob};
use crate::tool::kind::registry::ToolServices;

mod own_time;

use own_time::OwnTime;

/// Stop at the next await point and finish INTERRUPTED.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelRunActor {
    pub reason: String,
    /// The run's own wall-clock limit expired (error type `timeout`).
    pub timeout: bool,
}

pub struct RunActor {
    /// The run to drive; `started` takes it (leaving `None`) and spawns its loop.
    run: Option<RunLoop>,
    /// Stop requests shared with the loop: the time limit and `StopRun` set it, the loop reads it.
    control: Arc<RunControl>,
    /// The request's time limit, if any; read once in `started` to arm the timer.
    time_limit: Option<Duration>,
    /// The run's own time, which the limit counts (the model port pauses it while a call
    /// waits in the endpoint's queue).
    own_time: Arc<OwnTime>,
    /// Where the run's result goes; taken (left `None`) when the loop finishes.
    result_tx: Option<oneshot::Sender<RunResult>>,
}

impl RunActor {
    pub fn new(
        run_id: String,
        request: RunRequest,
        config: Arc<SupervisorConfig>,
        gate: Arc<LlmGate>,
        services: ToolServices,
        events: broadcast::Sender<RunEvent>,
        result_tx: oneshot::Sender<RunResult>,
    ) -> Self {
        let control = RunControl::new();
        let time_limit = request.timeout;
        let own_time = OwnTime::start();
        // Only a run with a limit needs to know when its calls wait.
        let queue = time_limit.map(|_| own_time.queue_sink());
        let run = RunLoop::new(
            run_id,
            request,
            config,
            Rc::new(GatePort { gate, queue }),
            Rc::new(ToolActors),
            control.clone(),
            events,
        )
        .with_tool_services(services);
        RunActor {
            run: Some(run),
            control,
            time_limit,
            own_time,
            result_tx: Some(result_tx),
        }
    }
}

impl Actor for RunActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(limit) = self.time_limit {
            let expiry = Arc::clone(&self.own_time).expiry(limit);
            ctx.spawn(expiry.into_actor(self).map(move |(), act, _| {
                let reason = format!(
                    "the run exceeded its time limit of {} s (its own time: model calls, \
                     tools and hooks, not time queued for the endpoint)",
                    limit.as_secs_f64()
                );
                act.control.request_stop(reason, true);
            }));
        }
        let Some(run) = self.run.take() else {
            return;
        };
        ctx.spawn(run.drive().into_actor(self).map(|result, act, ctx| {
            if let Some(tx) = act.result_tx.take() {
                let _ = tx.send(result);
            }
            ctx.stop();
        }));
    }
}

impl Handler<CancelRunActor> for RunActor {
    type Result = ();

    fn handle(&mut self, msg: CancelRunActor, _ctx: &mut Self::Context) {
        self.control.request_stop(msg.reason, msg.timeout);
    }
}

/// The model port: the endpoint's gate, called on the run's own arbiter. The gate's limits
/// are shared state (a semaphore, a locked limiter), so every run of the endpoint still
/// shares one budget, and the call costs no trip to another thread and back.
struct GatePort {
    gate: Arc<LlmGate>,
    /// Told when a call waits in the gate's queue (a run with a time limit).
    queue: Option<QueueSink>,
}

impl ModelPort for GatePort {
    fn complete(
        &self,
        request: Arc<ChatRequest>,
        meta: RequestMeta,
        cancel: CancellationToken,
        on_retry: RetryObserver,
    ) -> LocalBoxFuture<'static, Result<CallOutcome, CallFailure>> {
        let gate = Arc::clone(&self.gate);
        let meta = RequestMeta {
            on_queue: self.queue.clone(),
            ..meta
        };
        Box::pin(async move { complete_call(&gate, request, meta, cancel, Some(on_retry)).await })
    }

    fn wire_options(&self, model: &str) -> crate::llm::WireOptions {
        self.gate.wire_options(model)
    }

    fn take_adaptations(&self) -> Vec<crate::llm::Adaptation> {
        self.gate.take_adaptations()
    }

    fn context_window(
        &self,
        model: &str,
    ) -> LocalBoxFuture<'static, Option<crate::llm::ContextWindow>> {
        let (gate, model) = (Arc::clone(&self.gate), model.to_owned());
        Box::pin(async move { gate.context_window(&model).await })
    }
}

/// The tool port: one `ToolActor` per call (a process or an engine call alike).
struct ToolActors;

impl ToolPort for ToolActors {
    fn execute(
        &self,
        job: ToolJob,
        cancel: CancellationToken,
    ) -> LocalBoxFuture<'static, Option<ToolExecution>> {
        let sent = ToolActor.start().send(Execute { job, cancel });
        Box::pin(async move { sent.await.ok() })
    }
}
