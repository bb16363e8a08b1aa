//! A run's own time, which its time limit (a plan stage's `timeout`) counts: the wall time
//! since the run started, less the time its model calls waited in their endpoint's queue
//! (for an in-flight place under `max_in_flight`, or a rate slot under
//! `requests_per_minute` or a Retry-After). Model replies, backoffs after the run's own
//! failed attempts, tools, hooks and context all count.
//!
//! With `max_in_flight: 1`, five runs of a stage queue behind one another: a wall-clock
//! limit cut four of five runs of a first real batch that would each have finished in time.
//!
//! Must not: import actix (the run actor arms [`OwnTime::expiry`] on its context), or poll:
//! the expiry sleeps until the limit could be reached, and while a call waits in the queue it
//! sleeps until the call is let through.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
// Tokio's clock, so that tests with paused time see the waits they make.
use tokio::time::Instant;

use crate::llm::{QueueEvent, QueueSink};

/// The clock of one run: started when the run starts, paused while its calls wait.
#[derive(Debug)]
pub struct OwnTime {
    started: Instant,
    queue: Mutex<Queued>,
    /// Calls waiting right now: the expiry waits for 0 before it looks at the clock again.
    waiting: watch::Sender<u32>,
}

/// Time spent in the queue so far.
#[derive(Debug, Default)]
struct Queued {
    /// Finished waits, summed.
    total: Duration,
    /// When the current wait began (the first of the waiting calls).
    since: Option<Instant>,
    /// Calls waiting now.
    calls: u32,
}

impl OwnTime {
    /// A clock that starts now.
    pub fn start() -> Arc<OwnTime> {
        Arc::new(OwnTime {
            started: Instant::now(),
            queue: Mutex::new(Queued::default()),
            waiting: watch::channel(0).0,
        })
    }

    /// The sink a model call tells its queue waits to (see [`crate::llm::RequestMeta`]).
    pub fn queue_sink(self: &Arc<OwnTime>) -> QueueSink {
        let clock = Arc::clone(self);
        QueueSink::new(move |event| clock.on_queue(event))
    }

    fn on_queue(&self, event: QueueEvent) {
        let now = Instant::now();
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            QueueEvent::Waiting => {
                if queue.calls == 0 {
                    queue.since = Some(now);
                }
                queue.calls += 1;
            }
            QueueEvent::Admitted => {
                queue.calls = queue.calls.saturating_sub(1);
                if queue.calls == 0 {
                    if let Some(since) = queue.since.take() {
                        queue.total += now.saturating_duration_since(since);
                    }
                }
            }
        }
        self.waiting.send_replace(queue.calls);
    }

    /// The run's own time at `now`: wall time less every wait in the queue (the current one
    /// included).
    pub fn elapsed_at(&self, now: Instant) -> Duration {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let waiting_now = queue
            .since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        now.saturating_duration_since(self.started)
            .saturating_sub(queue.total + waiting_now)
    }

    /// Resolves once the run's own time reaches `limit`.
    pub async fn expiry(self: Arc<OwnTime>, limit: Duration) {
        let mut waiting = self.waiting.subscribe();
        loop {
            let own = self.elapsed_at(Instant::now());
            if own >= limit {
                return;
            }
            tokio::time::sleep(limit - own).await;
            // A call that waits in the queue stops the clock: sleep until it is let through.
            if waiting.wait_for(|calls| *calls == 0).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn time_in_the_queue_is_not_the_runs_own() {
        let clock = OwnTime::start();
        let sink = clock.queue_sink();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let wait = sink.waiting();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(clock.elapsed_at(Instant::now()), Duration::from_secs(2));
        drop(wait);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(clock.elapsed_at(Instant::now()), Duration::from_secs(3));
    }

    /// The limit is reached after `limit` of own time however long the queue held the run,
    /// and not before.
    #[tokio::test(start_paused = true)]
    async fn the_expiry_waits_out_the_queue_and_then_the_rest_of_the_limit() {
        let clock = OwnTime::start();
        let sink = clock.queue_sink();
        let began = tokio::time::Instant::now();
        let expiry = tokio::spawn(Arc::clone(&clock).expiry(Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let wait = sink.waiting();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!expiry.is_finished(), "the queue does not use up the limit");
        drop(wait);
        expiry.await.unwrap();
        assert_eq!(began.elapsed(), Duration::from_secs(35));
    }

    /// Two waits of one run at once (parallel calls) are one pause of its clock.
    #[tokio::test(start_paused = true)]
    async fn overlapping_waits_pause_the_clock_once() {
        let clock = OwnTime::start();
        let sink = clock.queue_sink();
        let first = sink.waiting();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = sink.waiting();
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(second);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(clock.elapsed_at(Instant::now()), Duration::from_secs(4));
    }
}
