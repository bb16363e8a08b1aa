//! [`EngineObserver`]: what an embedder (or `delta` with trace and metric export) is told of
//! every event the engine emits, synchronously and losslessly, beside the broadcast channels
//! whose slow readers miss events.
//!
//! The engine calls it on the thread that emits the event (a run's arbiter, the
//! orchestration's actor), after sensitive answers were redacted. An observer must return
//! at once: copy what it needs, count it, hand it to a thread of its own; never block, never
//! do I/O in place.
//!
//! Must not: be handed anything that is not already an event (no second bookkeeping); the
//! one exception is the orchestration's own spending caps, lent read-only for the gauges of
//! what is left of them (they are the count, not a copy of it).

use std::sync::Arc;

use crate::budget::PlanBudgets;
use crate::protocol::{OrchestrationEvent, RunEvent, TraceSpan};

/// The orchestration an [`OrchestrationEvent`] belongs to.
#[derive(Debug, Clone, Copy)]
pub struct ObservedOrchestration<'a> {
    /// The orchestration's id.
    pub id: &'a str,
    /// The plan's `name`.
    pub plan_name: &'a str,
    /// The orchestration's span, when its request carried one
    /// ([`OrchestrationRequest::trace`](crate::OrchestrationRequest::trace)); its stages'
    /// spans are its children `("stage", <stage id>)` (see [`TraceSpan::child`]).
    pub trace: Option<&'a TraceSpan>,
    /// The orchestration's spending caps (the plan's and its stages'), for the metrics of
    /// what is left of them; `None` where no orchestration actor is behind the event.
    pub budgets: Option<&'a Arc<PlanBudgets>>,
}

/// Told every event, as it is emitted. Both methods default to doing nothing.
pub trait EngineObserver: Send + Sync + 'static {
    /// A run's event (every run of the engine).
    fn run_event(&self, event: &RunEvent) {
        let _ = event;
    }

    /// An orchestration's event.
    fn orchestration_event(
        &self,
        orchestration: ObservedOrchestration<'_>,
        event: &OrchestrationEvent,
    ) {
        let _ = (orchestration, event);
    }
}

/// An observer as the engine's settings hold it (cloned with them; `Debug` names no more
/// than that there is one).
#[derive(Clone)]
pub struct ObserverHandle(pub Arc<dyn EngineObserver>);

impl std::fmt::Debug for ObserverHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObserverHandle")
    }
}

impl ObserverHandle {
    /// Hands `event` to the observer.
    pub fn run_event(&self, event: &RunEvent) {
        self.0.run_event(event);
    }

    /// Hands `event` of `orchestration` to the observer.
    pub fn orchestration_event(
        &self,
        orchestration: ObservedOrchestration<'_>,
        event: &OrchestrationEvent,
    ) {
        self.0.orchestration_event(orchestration, event);
    }
}
