//! The handles on the engine: [`Supervisor`] owns the actix System on its own thread and
//! admits runs and plans; [`RunHandle`] awaits one run's [`RunResult`];
//! [`OrchestrationHandle`] one plan's summary; [`RunEvent`]s stream progress. The values they
//! carry are in [`crate::protocol`].
//!
//! [`SessionManager`] is the handle on shell sessions, and [`serve`] starts `delta serve`.
//!
//! No actix type crosses this module: an embedder calls it from its own tokio runtime or from
//! plain synchronous code (`*_blocking` methods). The `delta` CLI is the first embedder.

#[cfg(feature = "serve")]
pub mod serve;
mod sessions;

#[cfg(feature = "relay")]
pub use crate::runtime::relay::Relay;
pub use sessions::SessionManager;

use actix::prelude::*;
use tokio::sync::{broadcast, oneshot};

use crate::protocol::{EngineError, OrchestrationEvent, RunEvent, RunResult};
use crate::request::{OrchestrationRequest, RunRequest, SupervisorConfig};
use crate::runtime::admission::{CancelRun, SubmitRun};
use crate::runtime::supervisor::{CancelAll, RunSupervisor};

/// Awaits one run's result. Dropping it does not stop the run (use [`Supervisor::cancel`]).
pub struct RunHandle {
    /// The run's id: the request's, or the one generated for a new run.
    pub run_id: String,
    receiver: oneshot::Receiver<RunResult>,
}

impl RunHandle {
    /// Waits for the run to reach a final status. Every final status is an `Ok` (a failed run
    /// is a FAILED [`RunResult`]); [`EngineError::Stopped`] means the engine shut down first.
    pub async fn wait(self) -> Result<RunResult, EngineError> {
        self.receiver.await.map_err(|_| EngineError::Stopped)
    }

    /// Synchronous variant of [`RunHandle::wait`] for code without an async runtime (it
    /// panics if called on an async runtime's thread, as any blocking receive does).
    pub fn wait_blocking(self) -> Result<RunResult, EngineError> {
        self.receiver
            .blocking_recv()
            .map_err(|_| EngineError::Stopped)
    }
}

/// Handle on a running engine. Dropping it stops the engine (in-flight runs are interrupted).
pub struct Supervisor {
    addr: Addr<RunSupervisor>,
    events: broadcast::Sender<RunEvent>,
    system: Option<actix::System>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    /// Starts the actix System on a dedicated thread, with `config.arbiters` arbiters for runs.
    pub fn start(config: SupervisorConfig) -> Result<Supervisor, EngineError> {
        let (events, _) = broadcast::channel(config.event_capacity.max(16));
        let events_for_system = events.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("delta-supervisor".into())
            .spawn(move || {
                let system = actix::System::new();
                system.block_on(async move {
                    let addr = RunSupervisor::new(config, events_for_system).start();
                    let _ = ready_tx.send((addr, actix::System::current()));
                });
                let _ = system.run();
            })
            .map_err(|e| EngineError::Start(e.to_string()))?;
        let (addr, system) = ready_rx
            .recv()
            .map_err(|_| EngineError::Start("the actor system thread exited early".into()))?;
        Ok(Supervisor {
            addr,
            events,
            system: Some(system),
            thread: Some(thread),
        })
    }

    /// Admits a run. Returns once it is queued; the handle resolves at its final status.
    pub async fn submit(&self, request: RunRequest) -> Result<RunHandle, EngineError> {
        let (tx, rx) = oneshot::channel();
        let run_id = self
            .addr
            .send(SubmitRun { request, reply: tx })
            .await
            .map_err(|_| EngineError::Stopped)??;
        Ok(RunHandle {
            run_id,
            receiver: rx,
        })
    }

    /// Synchronous variant of [`Supervisor::submit`].
    pub fn submit_blocking(&self, request: RunRequest) -> Result<RunHandle, EngineError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| EngineError::Start(e.to_string()))?;
        rt.block_on(self.submit(request))
    }

    /// Every run's progress events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.events.subscribe()
    }

    /// Asks one run to stop at its next safe point (INTERRUPTED).
    pub fn cancel(&self, run_id: &str) {
        self.addr.do_send(CancelRun {
            run_id: run_id.to_string(),
            reason: "cancelled by the embedding program".into(),
        });
    }

    /// Asks every run to stop (Ctrl-C): running tool groups are killed, runs go INTERRUPTED.
    pub fn cancel_all(&self, reason: &str) {
        self.addr.do_send(CancelAll {
            reason: reason.to_string(),
        });
    }

    /// Kills every tool process group still running, now (SIGKILL), without waiting for the
    /// runs: for a program about to exit on a second Ctrl-C, so no tool outlives it. A run
    /// left driving sees its tool killed by signal 9; one the program abandons by exiting
    /// stays RUNNING on disk until the janitor marks it INTERRUPTED (`delta continue` and
    /// `delta list-runs` run it). The tool registry is the process's, so this reaches the
    /// tools of every engine in the process. Returns how many groups were signalled.
    pub fn kill_running_tools(&self) -> usize {
        crate::tool::process::kill_all_live_groups()
    }

    /// Stops the actor system and joins its thread. Runs still in flight are abandoned
    /// (call [`Supervisor::cancel_all`] and wait for their handles first for a clean stop).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(system) = self.system.take() {
            system.stop();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Awaits one orchestration's summary and streams its events.
pub struct OrchestrationHandle {
    /// The request's orchestration id.
    pub orchestration_id: String,
    /// This plan's progress, from its first event on (4096 buffered; a slower reader gets
    /// `Lagged` and misses events, never the summary).
    pub events: broadcast::Receiver<OrchestrationEvent>,
    receiver: oneshot::Receiver<crate::protocol::OrchestrationSummary>,
}

impl OrchestrationHandle {
    /// Waits for the plan to end and returns its summary (every final status is an `Ok`);
    /// [`EngineError::Stopped`] means the engine shut down first.
    pub async fn wait(self) -> Result<crate::protocol::OrchestrationSummary, EngineError> {
        self.receiver.await.map_err(|_| EngineError::Stopped)
    }

    /// Synchronous variant of [`OrchestrationHandle::wait`] for code without an async
    /// runtime.
    pub fn wait_blocking(self) -> Result<crate::protocol::OrchestrationSummary, EngineError> {
        self.receiver
            .blocking_recv()
            .map_err(|_| EngineError::Stopped)
    }
}

impl Supervisor {
    /// Starts a plan: stages fan out into runs driven by this engine, at most
    /// `request.max_parallel` at a time.
    pub async fn orchestrate(
        &self,
        request: OrchestrationRequest,
    ) -> Result<OrchestrationHandle, EngineError> {
        self.start_orchestration(request, None).await
    }

    /// [`Supervisor::orchestrate`] on another executor: the plan's runs are handed to
    /// `executor` (the port of [`crate::executor`]) instead of being run in this process.
    /// Slurm's is built by `executor::slurm::start_slurm`; an embedder's own implements
    /// [`crate::executor::Executor`].
    pub async fn orchestrate_on(
        &self,
        request: OrchestrationRequest,
        executor: std::sync::Arc<dyn crate::runtime::executor::Executor>,
    ) -> Result<OrchestrationHandle, EngineError> {
        self.start_orchestration(request, Some(executor)).await
    }

    async fn start_orchestration(
        &self,
        request: OrchestrationRequest,
        executor: Option<std::sync::Arc<dyn crate::runtime::executor::Executor>>,
    ) -> Result<OrchestrationHandle, EngineError> {
        let (events_tx, events) = broadcast::channel(4096);
        let (tx, receiver) = oneshot::channel();
        let orchestration_id = request.orchestration_id.clone();
        self.addr
            .send(crate::runtime::supervisor::StartOrchestration {
                request,
                events: events_tx,
                reply: tx,
                executor,
            })
            .await
            .map_err(|_| EngineError::Stopped)??;
        Ok(OrchestrationHandle {
            orchestration_id,
            events,
            receiver,
        })
    }

    /// Synchronous variant of [`Supervisor::orchestrate`].
    pub fn orchestrate_blocking(
        &self,
        request: OrchestrationRequest,
    ) -> Result<OrchestrationHandle, EngineError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| EngineError::Start(e.to_string()))?;
        rt.block_on(self.orchestrate(request))
    }
}
