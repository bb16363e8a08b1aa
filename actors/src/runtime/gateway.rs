//! `LlmGateway`: one actor per model endpoint. It owns the endpoint's admission state, the
//! in-flight cap (a semaphore) and the requests-per-minute limiter, including the
//! "nobody sends before T" deadline set by a `Retry-After`, so every run of a batch shares
//! one budget.
//!
//! The gateway admits; it does not carry the HTTP traffic. A run asks for an [`Admission`],
//! performs the call on its own arbiter while holding the permit, and reports a `Retry-After`
//! back with [`Defer`]. That keeps HTTP parsing spread over the arbiter pool instead of
//! funnelled through one thread. [`call_with_retry`] is the loop runs use.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::llm::{
    backoff_delay, ChatBackend, ChatCompletion, ChatRequest, LlmError, RateLimiter, RequestMeta,
    RetryPolicy,
};

/// Ask for the right to send one request. Resolves when the rate limit and the in-flight
/// cap allow it; dropping the permit frees the in-flight slot.
#[derive(Message)]
#[rtype(result = "Admission")]
pub struct Admit;

/// The right to send one request now.
pub struct Admission {
    pub permit: Option<OwnedSemaphorePermit>,
    pub waited: Duration,
}

/// A provider said `Retry-After`: hold every caller of this endpoint until `until`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Defer {
    pub until: Instant,
}

pub struct LlmGateway {
    in_flight: Arc<Semaphore>,
    limiter: RateLimiter,
}

impl LlmGateway {
    pub fn new(max_in_flight: usize, requests_per_minute: Option<u32>) -> Self {
        LlmGateway {
            in_flight: Arc::new(Semaphore::new(max_in_flight.max(1))),
            limiter: RateLimiter::new(requests_per_minute),
        }
    }
}

impl Actor for LlmGateway {
    type Context = Context<Self>;
}

impl Handler<Admit> for LlmGateway {
    type Result = ResponseFuture<Admission>;

    fn handle(&mut self, _msg: Admit, _ctx: &mut Self::Context) -> Self::Result {
        let started = Instant::now();
        // Reserving the rate slot here, in the actor, keeps reservations strictly ordered.
        let wait = self.limiter.reserve(started);
        let semaphore = self.in_flight.clone();
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let permit = semaphore.acquire_owned().await.ok();
            Admission {
                permit,
                waited: started.elapsed(),
            }
        })
    }
}

impl Handler<Defer> for LlmGateway {
    type Result = ();

    fn handle(&mut self, msg: Defer, _ctx: &mut Self::Context) {
        self.limiter.defer_until(msg.until);
    }
}

/// What a run needs to call its endpoint: the gateway for admission, the backend for the
/// call itself, and the retry policy.
#[derive(Clone)]
pub struct GatewayHandle {
    pub addr: Addr<LlmGateway>,
    pub backend: Arc<dyn ChatBackend>,
    pub policy: RetryPolicy,
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

/// A model call that failed for good.
#[derive(Debug)]
pub struct CallFailure {
    pub error: LlmError,
    pub attempts: u32,
    pub failed_attempts: Vec<String>,
    pub cancelled: bool,
}

/// Sends `request`, retrying retryable failures with jittered exponential backoff and
/// honouring `Retry-After` across the whole endpoint. `on_retry(attempt, error, delay)` is
/// told about each retry (for progress events).
pub async fn call_with_retry(
    gateway: &GatewayHandle,
    request: ChatRequest,
    meta: RequestMeta,
    cancel: &CancellationToken,
    mut on_retry: impl FnMut(u32, &LlmError, Duration),
) -> Result<CallOutcome, CallFailure> {
    let started = Instant::now();
    let mut failed_attempts = Vec::new();
    let mut waited = Duration::ZERO;
    let max_attempts = gateway.policy.max_attempts.max(1);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let admission = tokio::select! {
            a = gateway.addr.send(Admit) => a,
            _ = cancel.cancelled() => return Err(cancelled(attempt - 1, failed_attempts)),
        };
        let admission = match admission {
            Ok(a) => a,
            Err(_) => {
                return Err(CallFailure {
                    error: LlmError::Transport("the model gateway has stopped".into()),
                    attempts: attempt,
                    failed_attempts,
                    cancelled: false,
                })
            }
        };
        waited += admission.waited;
        let result = tokio::select! {
            r = gateway.backend.complete(request.clone(), meta.clone()) => r,
            _ = cancel.cancelled() => return Err(cancelled(attempt, failed_attempts)),
        };
        drop(admission);
        match result {
            Ok(completion) => {
                return Ok(CallOutcome {
                    completion,
                    attempts: attempt,
                    duration: started.elapsed(),
                    waited,
                    failed_attempts,
                })
            }
            Err(error) => {
                failed_attempts.push(error.to_string());
                if !error.is_retryable() || attempt >= max_attempts {
                    return Err(CallFailure {
                        error,
                        attempts: attempt,
                        failed_attempts,
                        cancelled: false,
                    });
                }
                let retry_after = error.retry_after();
                if let Some(ra) = retry_after {
                    gateway.addr.do_send(Defer {
                        until: Instant::now() + ra,
                    });
                }
                let delay = backoff_delay(&gateway.policy, attempt, retry_after);
                on_retry(attempt, &error, delay);
                waited += delay;
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {},
                    _ = cancel.cancelled() => return Err(cancelled(attempt, failed_attempts)),
                }
            }
        }
    }
}

fn cancelled(attempts: u32, failed_attempts: Vec<String>) -> CallFailure {
    CallFailure {
        error: LlmError::Transport("cancelled".into()),
        attempts,
        failed_attempts,
        cancelled: true,
    }
}
