//! What an actor that submits runs (an orchestration) may ask of the `RunSupervisor`: the
//! two messages, and [`RunDesk`], the handle it holds. The handle is typed by message, not by
//! the supervisor, so the orchestrator does not import the supervisor that starts it (no
//! import cycle between the two).
//!
//! Must not: hold state or decide anything; the supervisor admits, queues and cancels.

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::protocol::{EngineError, RunResult};
use crate::request::RunRequest;

/// Submit a run; replies with its run id once admitted or queued.
#[derive(Message)]
#[rtype(result = "Result<String, EngineError>")]
pub struct SubmitRun {
    pub request: RunRequest,
    pub reply: oneshot::Sender<RunResult>,
}

/// Interrupt one run.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelRun {
    pub run_id: String,
    pub reason: String,
}

/// Where runs are submitted and cancelled: the `RunSupervisor`, seen through the two
/// messages it takes from an orchestration.
#[derive(Clone)]
pub struct RunDesk {
    pub submit: Recipient<SubmitRun>,
    pub cancel: Recipient<CancelRun>,
}

impl RunDesk {
    /// The desk of an actor that handles both messages.
    pub fn of<A>(addr: Addr<A>) -> RunDesk
    where
        A: Actor + Handler<SubmitRun> + Handler<CancelRun>,
        A::Context: actix::dev::ToEnvelope<A, SubmitRun> + actix::dev::ToEnvelope<A, CancelRun>,
    {
        RunDesk {
            submit: addr.clone().recipient(),
            cancel: addr.recipient(),
        }
    }
}
