//! One model call as the run sees it: through an endpoint's [`LlmGate`] (limits, retries),
//! ended early by the run's cancellation token, with every failed attempt kept for the
//! run's io/invocations record.
//!
//! Must not: import actix (the run actor's model port calls [`complete_call`] on the
//! endpoint's shared gate).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::endpoint::{LlmError, RequestMeta};
use super::gate::LlmGate;
use super::retry::RetryNotice;
use super::types::{ChatCompletion, ChatRequest, Usage};

/// Told about each retry: attempt number, the error, the backoff before the next attempt.
pub type RetryObserver = Box<dyn Fn(u32, &LlmError, Duration) + Send>;

/// A successful model call and how it went.
#[derive(Debug)]
pub struct CallOutcome {
    pub completion: ChatCompletion,
    pub attempts: u32,
    pub duration: Duration,
    /// Time spent waiting for admission and in backoff (not model latency).
    pub waited: Duration,
    pub failed_attempts: Vec<String>,
    /// Tokens the provider reported for attempts that failed before this one (a reply
    /// that was cut or refused after generating): billed, so the run counts them. Zero
    /// until the endpoint layer reports them.
    pub failed_attempts_usage: Usage,
    /// How the successful attempt was written.
    pub wire: super::WireOptions,
}

/// A model call that failed for good, or was cancelled.
#[derive(Debug)]
pub struct CallFailure {
    pub error: LlmError,
    pub attempts: u32,
    pub failed_attempts: Vec<String>,
    /// Tokens the provider reported for the failed attempts (see
    /// [`CallOutcome::failed_attempts_usage`]).
    pub failed_attempts_usage: Usage,
    pub cancelled: bool,
}

/// Sends `request` through `gate`; a cancelled `cancel` ends the call at once with a
/// cancelled [`CallFailure`].
pub async fn complete_call(
    gate: &LlmGate,
    request: Arc<ChatRequest>,
    meta: RequestMeta,
    cancel: CancellationToken,
    on_retry: Option<RetryObserver>,
) -> Result<CallOutcome, CallFailure> {
    let started = Instant::now();
    let failed = Arc::new(Mutex::new(Vec::new()));
    let failed_in_notice = failed.clone();
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
        r = gate.complete(request, meta, notice) => Some(r),
        _ = cancel.cancelled() => None,
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
            failed_attempts_usage: Usage::default(),
            wire: outcome.wire,
        }),
        Some(Err(error)) => Err(CallFailure {
            attempts: {
                failed_attempts.push(error.to_string());
                failed_attempts.len() as u32
            },
            error,
            failed_attempts,
            failed_attempts_usage: Usage::default(),
            cancelled: false,
        }),
        None => Err(CallFailure {
            error: LlmError::Transport("cancelled".into()),
            attempts: failed_attempts.len() as u32 + 1,
            failed_attempts,
            failed_attempts_usage: Usage::default(),
            cancelled: true,
        }),
    }
}
