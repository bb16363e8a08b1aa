//! [`LlmGate`]: everything that stands between a run and one endpoint, as plain tokio code
//! that every run of the endpoint shares (behind an `Arc`) and calls from its own thread: a
//! cap on requests in flight, the shared requests-per-minute limiter, the endpoint-wide
//! Retry-After barrier, the whole-request limit on each attempt, and retries with jittered
//! backoff (a timed-out attempt is retried like a 5xx).
//!
//! No actix here. The gate never holds a permit while sleeping a backoff, and reserves a
//! rate slot only once it holds a permit (so queued callers cannot burst past the limit).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::endpoint::{ChatBackend, LlmError, RequestMeta};
use super::rate::RateLimiter;
use super::retry::{RetryNotice, RetryPolicy};
use super::timeouts::TimeoutPhase;
use super::types::{ChatCompletion, ChatRequest};
use super::window::ContextWindow;

/// Limits for one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateConfig {
    /// Requests in flight at once; 0 means unlimited.
    pub max_in_flight: usize,
    /// `None` (or 0) means unlimited.
    pub requests_per_minute: Option<u32>,
    /// Attempts and backoff of each call.
    pub retry: RetryPolicy,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            max_in_flight: 64,
            requests_per_minute: None,
            retry: RetryPolicy::default(),
        }
    }
}

/// A successful call and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct GateOutcome {
    /// The model's reply.
    pub completion: ChatCompletion,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// Time spent queued for a permit, waiting for a rate slot or Retry-After, and backing off.
    pub waited: Duration,
    /// How the successful attempt was written (it differs from the caller's when the
    /// endpoint taught the backend another form during the call).
    pub wire: super::WireOptions,
}

/// A caller let through a gate's limits — an in-flight place, then a rate slot — to send one
/// request itself ([`LlmGate::admit`]; the relay's pass-through). The place is held until
/// the pass is dropped.
#[derive(Debug)]
pub struct GatePass {
    _permit: tokio::sync::OwnedSemaphorePermit,
    /// Time spent queued for the place and waiting for the slot.
    pub waited: Duration,
}

/// One gate per endpoint, shared (behind an `Arc`) by every run that uses it.
pub struct LlmGate {
    backend: Arc<dyn ChatBackend>,
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    limiter: Mutex<RateLimiter>,
    retry: RetryPolicy,
    /// Context windows the endpoint told, by model: asked once per process, however many
    /// runs start at once.
    windows: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Option<ContextWindow>>>>>,
}

impl std::fmt::Debug for LlmGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmGate")
            .field("max_in_flight", &self.max_in_flight)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl LlmGate {
    /// A gate in front of `backend` with `config`'s limits (its rate limiter starts empty).
    pub fn new(backend: Arc<dyn ChatBackend>, config: GateConfig) -> Self {
        let max_in_flight = if config.max_in_flight == 0 {
            Semaphore::MAX_PERMITS
        } else {
            config.max_in_flight
        };
        LlmGate {
            backend,
            permits: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            limiter: Mutex::new(RateLimiter::new(config.requests_per_minute)),
            retry: config.retry,
            windows: Mutex::default(),
        }
    }

    /// How a request to `model` is written now (see [`ChatBackend::wire_options`]).
    pub fn wire_options(&self, model: &str) -> super::WireOptions {
        self.backend.wire_options(model)
    }

    /// The lessons the backend learned about the endpoint since it was last asked (see
    /// [`ChatBackend::take_adaptations`]).
    pub fn take_adaptations(&self) -> Vec<super::Adaptation> {
        self.backend.take_adaptations()
    }

    /// `model`'s context window as the endpoint tells it (see
    /// [`super::window::probe`]): asked the first time, then remembered.
    pub async fn context_window(&self, model: &str) -> Option<ContextWindow> {
        let cell = {
            let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(windows.entry(model.to_string()).or_default())
        };
        cell.get_or_init(|| self.backend.context_window(model))
            .await
            .clone()
    }

    /// Requests currently being sent or answered through this gate.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight - self.permits.available_permits()
    }

    /// Waits for an in-flight place, then for a rate slot (and any Retry-After barrier), for
    /// a request the caller sends itself, once. Dropping the future while it waits for the
    /// place gives nothing up; dropping it while it waits for the slot spends the slot.
    pub async fn admit(&self) -> Result<GatePass, LlmError> {
        let queued_at = Instant::now();
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| LlmError::Transport("the LLM gate was shut down".to_owned()))?;
        let slot_wait = self.lock_limiter().reserve(Instant::now());
        if !slot_wait.is_zero() {
            tokio::time::sleep(slot_wait).await;
        }
        Ok(GatePass {
            _permit: permit,
            waited: queued_at.elapsed(),
        })
    }

    /// The endpoint answered with Retry-After: hold every caller of the gate back that long
    /// (at most the retry policy's longest delay).
    pub fn hold_back(&self, retry_after: Duration) {
        self.lock_limiter()
            .defer_until(Instant::now() + retry_after.min(self.retry.max_delay));
    }

    /// Sends `req` with admission, rate limiting and retries. `on_retry` is told before
    /// every backoff. Dropping the future abandons the call and frees its permit.
    pub async fn complete(
        &self,
        req: impl Into<Arc<ChatRequest>>,
        meta: RequestMeta,
        mut on_retry: impl FnMut(&RetryNotice) + Send,
    ) -> Result<GateOutcome, LlmError> {
        let req = req.into();
        let mut meta = meta;
        let mut waited = Duration::ZERO;
        let mut failures = 0;
        loop {
            let queued_at = Instant::now();
            let result = {
                // Told to whoever keeps the caller's time (a run's time limit leaves the
                // queue out); `Admitted` also when this future is dropped while waiting.
                let in_queue = meta.on_queue.as_ref().map(super::QueueSink::waiting);
                let _permit =
                    self.permits.acquire().await.map_err(|_| {
                        LlmError::Transport("the LLM gate was shut down".to_owned())
                    })?;
                let slot_wait = self.lock_limiter().reserve(Instant::now());
                if !slot_wait.is_zero() {
                    tokio::time::sleep(slot_wait).await;
                }
                drop(in_queue);
                waited += queued_at.elapsed();
                // The backend may have learned another way to write requests (from this
                // call's refusal, or another run's): a body written the old way is dropped.
                let wire = self.backend.wire_options(&req.model);
                if wire != meta.wire {
                    meta.wire = wire;
                    meta.wire_body = None;
                }
                self.attempt(&req, &meta).await
            };
            let error = match result {
                Ok(completion) => {
                    return Ok(GateOutcome {
                        completion,
                        attempts: failures + 1,
                        waited,
                        wire: meta.wire,
                    })
                }
                Err(error) => error,
            };
            failures += 1;
            if let Some(retry_after) = error.retry_after() {
                // The provider spoke for the whole endpoint: hold every caller back.
                self.hold_back(retry_after);
            }
            let Some(wait) = self.retry.next_delay(failures, &error) else {
                return Err(error);
            };
            on_retry(&RetryNotice {
                failed_attempt: failures,
                error,
                wait,
            });
            tokio::time::sleep(wait).await;
            waited += wait;
        }
    }

    /// One attempt, bounded by the whole-request limit whatever the backend (the HTTP
    /// backend also applies it, plus the idle limit, itself).
    async fn attempt(
        &self,
        req: &Arc<ChatRequest>,
        meta: &RequestMeta,
    ) -> Result<ChatCompletion, LlmError> {
        let limit = meta.timeouts.request;
        let attempt = self.backend.complete_shared(Arc::clone(req), meta.clone());
        match tokio::time::timeout(limit, attempt).await {
            Ok(result) => result,
            Err(_) => Err(LlmError::Timeout {
                target: self.backend.target(),
                phase: TimeoutPhase::Request,
                limit,
            }),
        }
    }

    fn lock_limiter(&self) -> std::sync::MutexGuard<'_, RateLimiter> {
        self.limiter.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::scripted::{Script, ScriptedBackend};
    use crate::llm::types::ChatMessage;

    fn gate(yaml: &str, config: GateConfig) -> LlmGate {
        let script = Arc::new(Script::from_yaml_str(yaml, "gate.yaml").unwrap());
        LlmGate::new(Arc::new(ScriptedBackend::new(script)), config)
    }

    fn req() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("t")].into(),
            ..Default::default()
        }
    }

    fn quick(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(200),
        }
    }

    #[tokio::test]
    async fn retries_until_success_and_reports_attempts() {
        let g = gate(
            "steps: [{fail: 500, times: 2, then: {answer: ok}}]",
            GateConfig {
                retry: quick(5),
                ..GateConfig::default()
            },
        );
        let mut notices = 0;
        let out = g
            .complete(req(), RequestMeta::new("a", "r"), |_| notices += 1)
            .await
            .unwrap();
        assert_eq!(out.attempts, 3);
        assert_eq!(notices, 2);
        assert_eq!(out.completion.message.content.as_deref(), Some("ok"));
        assert_eq!(g.in_flight(), 0);
    }

    #[tokio::test]
    async fn client_errors_fail_at_once_with_the_message() {
        let g = gate(
            "steps: [{fail: 422, message: \"bad schema\"}]",
            GateConfig {
                retry: quick(5),
                ..GateConfig::default()
            },
        );
        let err = g
            .complete(req(), RequestMeta::default(), |_| {
                panic!("no retry for 422")
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("bad schema"), "{err}");
    }

    #[tokio::test]
    async fn retry_after_holds_back_other_callers() {
        let g = Arc::new(gate(
            r#"
rules:
  - agent: first
    steps: [{fail: 429, times: 1, retry_after: 0.3, then: {answer: a}}]
  - steps: [{answer: b}]
"#,
            GateConfig {
                retry: RetryPolicy {
                    max_delay: Duration::from_secs(1),
                    ..quick(3)
                },
                ..GateConfig::default()
            },
        ));
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel();
        let mut failed_tx = Some(failed_tx);
        let first = {
            let g = Arc::clone(&g);
            tokio::spawn(async move {
                g.complete(req(), RequestMeta::new("first", "r1"), move |_| {
                    if let Some(tx) = failed_tx.take() {
                        let _ = tx.send(Instant::now());
                    }
                })
                .await
            })
        };
        let failed_at = failed_rx.await.unwrap();
        let other = g
            .complete(req(), RequestMeta::new("second", "r2"), |_| {})
            .await
            .unwrap();
        // The barrier was set (for 300 ms) just before the failure was announced.
        assert!(failed_at.elapsed() >= Duration::from_millis(250));
        assert_eq!(other.attempts, 1);
        assert!(
            other.waited >= Duration::from_millis(250),
            "{:?}",
            other.waited
        );
        assert_eq!(first.await.unwrap().unwrap().attempts, 2);
    }

    #[tokio::test]
    async fn requests_per_minute_spaces_calls() {
        let g = gate(
            "steps: [{answer: x}]",
            GateConfig {
                requests_per_minute: Some(600),
                ..GateConfig::default()
            },
        );
        let started = Instant::now();
        for i in 0..4 {
            g.complete(req(), RequestMeta::new("a", format!("r{i}")), |_| {})
                .await
                .unwrap();
        }
        // Slots at 0, 100, 200 and 300 ms.
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    /// The relay's pass-through: a pass holds an in-flight place until dropped, a queued
    /// `admit` dropped before its turn takes nothing, and Retry-After holds the next one back.
    #[tokio::test]
    async fn admit_holds_a_place_until_the_pass_is_dropped() {
        let g = gate(
            "steps: [{answer: x}]",
            GateConfig {
                max_in_flight: 1,
                retry: quick(1),
                ..GateConfig::default()
            },
        );
        let pass = g.admit().await.unwrap();
        assert_eq!(g.in_flight(), 1);
        let queued = tokio::time::timeout(Duration::from_millis(50), g.admit()).await;
        assert!(queued.is_err(), "the second caller waits for the place");
        drop(pass);
        assert_eq!(g.in_flight(), 0);
        g.hold_back(Duration::from_millis(150));
        let pass = g.admit().await.unwrap();
        assert!(
            pass.waited >= Duration::from_millis(100),
            "{:?}",
            pass.waited
        );
    }

    /// Issue 31 item 14: a call tells its meta's queue sink when it waits behind the
    /// in-flight cap and when it is let through (a run's time limit leaves that wait out);
    /// a call admitted at once says both at once, a dropped waiting call says `Admitted`.
    #[tokio::test]
    async fn a_call_says_when_it_waits_in_the_queue_and_when_it_is_let_through() {
        use crate::llm::{QueueEvent, QueueSink};
        let g = Arc::new(gate(
            "steps: [{answer: x, latency: 200}]",
            GateConfig {
                max_in_flight: 1,
                ..GateConfig::default()
            },
        ));
        let told = Arc::new(Mutex::new(Vec::new()));
        let meta = |run: &str| {
            let told = Arc::clone(&told);
            let run = run.to_owned();
            RequestMeta {
                on_queue: Some(QueueSink::new(move |event| {
                    told.lock()
                        .unwrap()
                        .push((run.clone(), event, Instant::now()))
                })),
                ..RequestMeta::new("a", "r")
            }
        };
        let first = {
            let (g, meta) = (Arc::clone(&g), meta("first"));
            tokio::spawn(async move { g.complete(req(), meta, |_| {}).await })
        };
        while g.in_flight() == 0 {
            tokio::task::yield_now().await;
        }
        let began = Instant::now();
        g.complete(req(), meta("second"), |_| {}).await.unwrap();
        first.await.unwrap().unwrap();
        let told = told.lock().unwrap().clone();
        let of = |run: &str| -> Vec<(QueueEvent, Instant)> {
            told.iter()
                .filter(|(r, _, _)| r == run)
                .map(|(_, e, at)| (*e, *at))
                .collect()
        };
        let first_events: Vec<QueueEvent> = of("first").iter().map(|(e, _)| *e).collect();
        assert_eq!(first_events, [QueueEvent::Waiting, QueueEvent::Admitted]);
        let second = of("second");
        assert_eq!(
            second.iter().map(|(e, _)| *e).collect::<Vec<_>>(),
            [QueueEvent::Waiting, QueueEvent::Admitted]
        );
        assert!(
            second[1].1.duration_since(began) >= Duration::from_millis(150),
            "admitted only once the first call let go of the place"
        );

        // A call dropped while it waits still says it left the queue.
        let pass = g.admit().await.unwrap();
        let dropped = Arc::new(Mutex::new(Vec::new()));
        let sink = {
            let dropped = Arc::clone(&dropped);
            QueueSink::new(move |event| dropped.lock().unwrap().push(event))
        };
        let waiting = g.complete(
            req(),
            RequestMeta {
                on_queue: Some(sink),
                ..RequestMeta::new("a", "r3")
            },
            |_| {},
        );
        assert!(tokio::time::timeout(Duration::from_millis(50), waiting)
            .await
            .is_err());
        drop(pass);
        assert_eq!(
            *dropped.lock().unwrap(),
            [QueueEvent::Waiting, QueueEvent::Admitted]
        );
    }

    /// Any backend's attempt is bounded by the whole-request limit, and retried like a 5xx.
    #[tokio::test]
    async fn a_slow_attempt_times_out_and_is_retried() {
        let g = gate(
            "steps: [{answer: late, latency: 5000}]",
            GateConfig {
                retry: quick(3),
                ..GateConfig::default()
            },
        );
        let mut meta = RequestMeta::new("a", "r");
        meta.timeouts.request = Duration::from_millis(150);
        let mut notices = 0;
        let err = g.complete(req(), meta, |_| notices += 1).await.unwrap_err();
        assert!(
            matches!(
                err,
                LlmError::Timeout {
                    phase: TimeoutPhase::Request,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(notices, 2, "3 attempts, 2 retries");
        assert!(err.to_string().contains("150 ms"), "{err}");
        assert_eq!(g.in_flight(), 0);
    }
}
