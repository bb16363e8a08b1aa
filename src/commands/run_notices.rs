//! The few run events `delta orchestrate`'s progress display shows (a model call retried,
//! a request adapted to the endpoint, a run waiting for its workspace), handed to it by an
//! engine observer that keeps only those. A subscription to the broadcast channel of every
//! run event woke the display's thread for each of the ~5 events of every model call of
//! every run, to drop all but these: at 1,000 runs @ 1,000 that was ~28,000 wake-ups per
//! 6,000 model calls (BENCHMARKS.md, "The path a user runs").
//!
//! Must not: block or do I/O on the thread that emits an event (it only matches the event
//! and `try_send`s the rare notice), nor hide any event from the observer it wraps.

use delta_actors::protocol::OrchestrationEvent;
use delta_actors::request::{EngineObserver, ObservedOrchestration, ObserverHandle};
use delta_actors::{RunEvent, SupervisorConfig};
use tokio::sync::mpsc;

/// Notices kept for the display before further ones are dropped (as a lagging broadcast
/// receiver drops them): the display rate-limits retry lines anyway.
const NOTICE_BACKLOG: usize = 1024;

/// Forwards notices to the display and every event to the observer it wraps (trace and
/// metric export), if any.
struct NoticeObserver {
    inner: Option<ObserverHandle>,
    notices: mpsc::Sender<RunEvent>,
}

/// Whether the progress display shows `event`.
fn is_notice(event: &RunEvent) -> bool {
    matches!(
        event,
        RunEvent::ModelRetry { .. } | RunEvent::ModelAdapted { .. } | RunEvent::Waiting { .. }
    )
}

impl EngineObserver for NoticeObserver {
    fn run_event(&self, event: &RunEvent) {
        if let Some(inner) = &self.inner {
            inner.run_event(event);
        }
        if is_notice(event) {
            let _ = self.notices.try_send(event.clone());
        }
    }

    fn orchestration_event(
        &self,
        orchestration: ObservedOrchestration<'_>,
        event: &OrchestrationEvent,
    ) {
        if let Some(inner) = &self.inner {
            inner.0.orchestration_event(orchestration, event);
        }
    }
}

/// Makes `config`'s engine hand the notices of every run to the returned receiver, keeping
/// the observer it already has (call after trace and metric export were attached).
pub fn attach(config: &mut SupervisorConfig) -> mpsc::Receiver<RunEvent> {
    let (notices, receiver) = mpsc::channel(NOTICE_BACKLOG);
    let observer = NoticeObserver {
        inner: config.observer.take(),
        notices,
    };
    config.observer = Some(ObserverHandle(std::sync::Arc::new(observer)));
    receiver
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl EngineObserver for Counting {
        fn run_event(&self, _: &RunEvent) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }

        fn orchestration_event(&self, _: ObservedOrchestration<'_>, _: &OrchestrationEvent) {
            self.0.fetch_add(100, Ordering::SeqCst);
        }
    }

    #[test]
    fn only_notices_reach_the_display_and_every_event_the_wrapped_observer() {
        let counting = Arc::new(Counting::default());
        let mut config = SupervisorConfig {
            observer: Some(ObserverHandle(counting.clone())),
            ..SupervisorConfig::default()
        };
        let mut notices = attach(&mut config);
        let observer = config.observer.clone().unwrap();
        observer.run_event(&RunEvent::IterationStarted {
            run_id: "r1".into(),
            iteration: 1,
            max_iterations: 6,
        });
        observer.run_event(&RunEvent::Waiting {
            run_id: "r1".into(),
            message: "waiting for the workspace's creation lock".into(),
        });
        assert_eq!(counting.0.load(Ordering::SeqCst), 2);
        // Orchestration events (the plan's and stages' spans) reach the wrapped observer too.
        observer.0.orchestration_event(
            ObservedOrchestration {
                id: "plan-1",
                plan_name: "plan",
                trace: None,
                budgets: None,
            },
            &OrchestrationEvent::RunStarted {
                stage: "map".into(),
                index: 0,
                run_id: "r1".into(),
                attempt: 1,
            },
        );
        assert_eq!(counting.0.load(Ordering::SeqCst), 102);
        match notices.try_recv() {
            Ok(RunEvent::Waiting { run_id, .. }) => assert_eq!(run_id, "r1"),
            other => panic!("expected the Waiting notice, got {other:?}"),
        }
        assert!(notices.try_recv().is_err(), "IterationStarted is no notice");
    }
}
