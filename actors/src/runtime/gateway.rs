//! `LlmGateway`: one actor per model endpoint (base URL + key), on its own arbiter. It owns
//! the endpoint's [`LlmGate`] — the in-flight cap, the requests-per-minute limiter, the
//! endpoint-wide `Retry-After` barrier and the retry policy — so every run of a batch shares
//! one budget. Runs ask it with [`Complete`]; each request is a future on the gateway's
//! arbiter that ends early when the asking run cancels.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::llm::{ChatCompletion, ChatRequest, LlmError, LlmGate, RequestMeta, RetryNotice};

/// Told about each retry: attempt number, the error, the backoff before the next attempt.
pub type RetryObserver = Box<dyn Fn(u32, &LlmError, Duration) + Send>;

/// Send one chat request through the endpoint's limits, with retries.
#[derive(Message)]
#[rtype(result = "Result<CallOutcome, CallFailure>")]
pub struct Complete {
    pub request: ChatRequest,
    pub meta: RequestMeta,
    pub cancel: CancellationToken,
    /// Told about each retry (attempt number, error, backoff), e.g. to emit progress events.
    pub on_retry: Option<RetryObserver>,
}

/// A successful model call and how it went.
#[derive(Debug)]
pub struct CallOutcome {
    pub completion: ChatCompletion,
    pub attempts: u32,
    pub duration: Duration,
    /// Time spent waiting for admission and in backoff (not model latency).
    pub waited: Duration,
    pub failed_attempts: Vec<String>,
}

/// A model call that failed for good, or was cancelled.
#[derive(Debug)]
pub struct CallFailure {
    pub error: LlmError,
    pub attempts: u32,
    pub failed_attempts: Vec<String>,
    pub cancelled: bool,
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
            let started = Instant::now();
            let failed = Arc::new(Mutex::new(Vec::new()));
            let failed_in_notice = failed.clone();
            let on_retry = msg.on_retry;
            let notice = move |n: &RetryNotice| {
                failed_in_notice
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(n.error.to_string());
                if let Some(f) = &on_retry {
                    f(n.failed_attempt, &n.error, n.wait);
                }
            };
            let result = tokio::select! {
                r = gate.complete(msg.request, msg.meta, notice) => Some(r),
                _ = msg.cancel.cancelled() => None,
            };
            let mut failed_attempts =
                std::mem::take(&mut *failed.lock().unwrap_or_else(PoisonError::into_inner));
            match result {
                Some(Ok(outcome)) => Ok(CallOutcome {
                    completion: outcome.completion,
                    attempts: outcome.attempts,
                    duration: started.elapsed(),
                    waited: outcome.waited,
                    failed_attempts,
                }),
                Some(Err(error)) => Err(CallFailure {
                    attempts: {
                        failed_attempts.push(error.to_string());
                        failed_attempts.len() as u32
                    },
                    error,
                    failed_attempts,
                    cancelled: false,
                }),
                None => Err(CallFailure {
                    error: LlmError::Transport("cancelled".into()),
                    attempts: failed_attempts.len() as u32 + 1,
                    failed_attempts,
                    cancelled: true,
                }),
            }
        })
    }
}
