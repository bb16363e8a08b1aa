//! A process-wide pool for blocking file work that actors must not do on their own threads
//! (context source files, generator outputs), awaited so that cancellation always wins.
//!
//! An actix arbiter is one thread: a read that never returns (a FIFO, a hung network file
//! system) would freeze every run on it, and with them the run timeout and Ctrl-C. Work sent
//! here runs on a pool thread instead; the caller awaits it next to its cancellation token and
//! walks away when the token fires, leaving a stuck thread behind rather than a stuck run.
//!
//! The pool lives in a static and is never shut down: shutting a tokio runtime down waits for
//! its blocking tasks, and an abandoned read must not hold the process open at exit.
//!
//! Work whose result must not be lost (a run's first files, the fsyncs of a status change)
//! goes through [`run_to_end`] instead, which never walks away: it moves the wait off the
//! arbiter (one run waits, not every run of the thread) without changing what is written.
//!
//! Must not: run anything that needs the actor system, or hand [`run_blocking`] work whose
//! result must not be lost (abandoned work keeps running, but nobody reads its result).

use std::sync::OnceLock;

use tokio::runtime::{Builder, Runtime};
use tokio_util::sync::CancellationToken;

/// Threads the pool may start; reads stuck for good each keep one.
const MAX_POOL_THREADS: usize = 256;

/// Why blocking work produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockingError {
    #[error("cancelled")]
    Cancelled,
    #[error("the blocking task failed: {0}")]
    Failed(String),
}

fn pool() -> Option<&'static Runtime> {
    static POOL: OnceLock<Option<Runtime>> = OnceLock::new();
    POOL.get_or_init(|| {
        // A current-thread runtime starts no worker thread: only its blocking pool is used.
        Builder::new_current_thread()
            .thread_name("delta-blocking")
            .max_blocking_threads(MAX_POOL_THREADS)
            .build()
            .ok()
    })
    .as_ref()
}

/// Runs `work` on the pool and waits for it, or for `cancel`, whichever comes first. On
/// cancellation the work is abandoned (it finishes, or stays stuck, on its own thread).
/// Without a pool (the process cannot start threads) the work runs inline.
pub async fn run_blocking<T, F>(work: F, cancel: &CancellationToken) -> Result<T, BlockingError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if cancel.is_cancelled() {
        return Err(BlockingError::Cancelled);
    }
    let Some(pool) = pool() else {
        return Ok(work());
    };
    let task = pool.spawn_blocking(work);
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(BlockingError::Cancelled),
        done = task => done.map_err(|e| BlockingError::Failed(e.to_string())),
    }
}

/// Runs `work` on the pool and waits for it to finish, whatever happens meanwhile (no
/// cancellation: for writes that must complete, such as fsyncs at a status change). Without a
/// pool the work runs inline. An error only if the work panicked.
pub async fn run_to_end<T, F>(work: F) -> Result<T, BlockingError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let Some(pool) = pool() else {
        return Ok(work());
    };
    pool.spawn_blocking(work)
        .await
        .map_err(|e| BlockingError::Failed(e.to_string()))
}

/// Runs `work` on a thread of its own and waits for it at most `deadline`: `None` when it
/// did not finish in time (or the thread could not start, or the work panicked). The thread
/// is detached: work stuck for good (a read from a file system that stopped answering) keeps
/// its thread, but neither its caller nor the process's exit waits for it (a tokio runtime
/// being shut down waits for its `spawn_blocking` tasks; this is not one).
#[cfg(feature = "serve")]
pub async fn run_detached<T, F>(name: &str, work: F, deadline: std::time::Duration) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (done, result) = tokio::sync::oneshot::channel();
    let started = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _ = done.send(work());
        });
    if started.is_err() {
        return None;
    }
    tokio::time::timeout(deadline, result).await.ok()?.ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Regression (issue 24): a workspace scan stuck in a read froze `delta serve`'s runs
    /// view, and SIGTERM then hung the server: shutting its runtime down waited for the
    /// stuck blocking task. Detached work is given up at its deadline, and a runtime that
    /// ran it shuts down at once.
    #[cfg(feature = "serve")]
    #[test]
    fn detached_work_is_given_up_at_its_deadline_and_does_not_hold_the_runtime() {
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome = runtime.block_on(run_detached(
            "stuck-scan",
            move || stuck.recv().is_ok(),
            Duration::from_millis(50),
        ));
        assert_eq!(outcome, None);
        let (dropped_tx, dropped_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(runtime);
            let _ = dropped_tx.send(());
        });
        assert!(
            dropped_rx.recv_timeout(Duration::from_secs(5)).is_ok(),
            "the runtime waited for the stuck work"
        );
        drop(release);
        let fast = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(run_detached("scan", || 7, Duration::from_secs(5)));
        assert_eq!(fast, Some(7));
    }

    #[tokio::test]
    async fn work_runs_off_the_caller_thread_and_returns_its_result() {
        let caller = std::thread::current().id();
        let (value, thread) = run_blocking(
            || (21 * 2, std::thread::current().id()),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(value, 42);
        assert_ne!(thread, caller);
    }

    #[tokio::test]
    async fn work_run_to_its_end_happens_off_the_caller_thread() {
        let caller = std::thread::current().id();
        let (value, thread) = run_to_end(|| (7, std::thread::current().id()))
            .await
            .unwrap();
        assert_eq!(value, 7);
        assert_ne!(thread, caller);
    }

    /// The FIFO hang: work that never returns must not keep its caller waiting once the
    /// caller is cancelled.
    #[tokio::test]
    async fn cancellation_abandons_work_that_never_returns() {
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let cancel = CancellationToken::new();
        let waiting = tokio::spawn({
            let cancel = cancel.clone();
            async move {
                run_blocking(
                    move || {
                        let _ = started_tx.send(());
                        // Blocks until the test ends (the sender is dropped then).
                        let _ = stuck.recv();
                    },
                    &cancel,
                )
                .await
            }
        });
        started_rx.await.unwrap();
        cancel.cancel();
        let outcome = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the caller is released as soon as it is cancelled")
            .unwrap();
        assert_eq!(outcome, Err(BlockingError::Cancelled));
        drop(release);
    }

    #[tokio::test]
    async fn an_already_cancelled_caller_does_not_start_the_work() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let outcome = run_blocking(
            move || flag.store(true, std::sync::atomic::Ordering::SeqCst),
            &cancel,
        )
        .await;
        assert_eq!(outcome, Err(BlockingError::Cancelled));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
