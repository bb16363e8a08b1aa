//! `LlmGateway`: one actor per model endpoint (base URL + key), on its own arbiter. It owns
//! the endpoint's [`LlmGate`] — the in-flight cap, the requests-per-minute limiter, the
//! endpoint-wide `Retry-After` barrier and the retry policy — so every run of a batch shares
//! one budget. Runs ask it with [`Complete`]; each request is a future on the gateway's
//! arbiter that ends early when the asking run cancels.

use std::sync::Arc;

use actix::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::llm::{
    complete_call, CallFailure, CallOutcome, ChatRequest, LlmGate, RequestMeta, RetryObserver,
};

/// Send one chat request through the endpoint's limits, with retries.
#[derive(Message)]
#[rtype(result = "Result<CallOutcome, CallFailure>")]
pub struct Complete {
    /// Shared with the caller, which records it once the call ends.
    pub request: Arc<ChatRequest>,
    pub meta: RequestMeta,
    pub cancel: CancellationToken,
    /// Told about each retry (attempt number, error, backoff), e.g. to emit progress events.
    pub on_retry: Option<RetryObserver>,
}

pub struct LlmGateway {
    gate: Arc<LlmGate>,
}

impl LlmGateway {
    pub fn new(gate: LlmGate) -> Self {
        LlmGateway {
            gate: Arc::new(gate),
        }
    }
}

impl Actor for LlmGateway {
    type Context = Context<Self>;
}

impl Handler<Complete> for LlmGateway {
    type Result = ResponseFuture<Result<CallOutcome, CallFailure>>;

    fn handle(&mut self, msg: Complete, _ctx: &mut Self::Context) -> Self::Result {
        let gate = self.gate.clone();
        Box::pin(async move {
            complete_call(&gate, msg.request, msg.meta, msg.cancel, msg.on_retry).await
        })
    }
}
