//! The actix runtime: actors that own state and mailboxes and call the domain modules.
//!
//! # Topology
//! ```text
//! Supervisor (handle, api/) ──> RunSupervisor ──spawns──> RunActor (one per run_id, on an arbiter of the pool)
//!                                   │    │                    │ calls ─> LlmGate (per endpoint, shared)
//!                                   │    │                    │ ask ──> ToolActor (one per tool call)
//!                                   │    │                    │ runs ─> lifecycle hooks (futures on the actor)
//!                                   │    │                    └ appends ──> journal.jsonl, metadata.json, io/
//!                                   │    └──> OrchestrationActor (one per plan) ──submit──> its executor (the port, executor.rs):
//!                                   │           LocalExecutor's actor ──SubmitRun──> RunSupervisor, or SlurmExecutor (sbatch), or an embedder's
//!                                   └──> JanitorActor (orphaned runs; periodic inside orchestrations)
//! SessionActor (one per session) — used by the sessions CLIs and by embedders
//! serve/ (delta serve, every actor of it):
//!   ServeManager ──> WorkerActor (one per worker epoch, on a pool of 2 arbiters)
//!        └── RunsWatcher (polls the shown workspaces)      web/ (actix-web routes) asks all three
//! tool spawner (a `delta __spawner` process, not an actor): started by the RunSupervisor
//!   before anything else when `SupervisorConfig::tool_spawner` is set; tools, hooks and
//!   context generators start through it (`tool::spawner`)
//! ```
//!
//! # Messages
//! | message | to | reply | meaning |
//! |---|---|---|---|
//! | `SubmitRun` | RunSupervisor | `Result<run_id>` | queue a run; its RunResult arrives on the oneshot inside |
//! | `CancelRun` / `CancelAll` | RunSupervisor | `()` | interrupt one / every run (queued runs finish INTERRUPTED unstarted) |
//! | `CancelRunActor` | RunActor | `()` | stop at the next safe point |
//! | `StartOrchestration` | RunSupervisor | `Result<()>` | start a plan's state machine; its summary arrives on the oneshot inside |
//! | `Submit` / `Cancel` / `Flush` / `StopExecutor` | a built-in executor's actor, through the port's private adapter (`executor.rs`) | `()` | run a planned run (its `RunEnd` on the oneshot inside) / interrupt it / the batch is over / the orchestration ended |
//! | `CancelOrchestration` | OrchestrationActor | `()` | stop submitting, interrupt the plan's runs, finish INTERRUPTED |
//! | `Sweep` / `StopJanitor` | JanitorActor | actions / `()` | mark orphaned RUNNING runs INTERRUPTED now / stop sweeping |
//! | `ExecCommand` / `EndSession` | SessionActor | outcome | one shell exec (serialized by the mailbox) / end the session |
//! | `Execute` | ToolActor | `ToolExecution` | run one tool call; the actor stops after answering |
//! | `CreateSession` … `RestartWorker`, `FindWorker` | ServeManager | `Result<_, ServeError>` | the `delta serve` REST calls (see `serve/manager/messages.rs`) |
//! | `WorkerNotice` | ServeManager | `()` | a worker's activity changed, its program exited, or its holder is gone (revive) |
//! | `Attach` / `Detach` / `Resync` | WorkerActor | viewer id / `()` | a viewer joins (its snapshot is queued first), leaves, or caught up after lagging |
//! | `Input` / `Resize` / `History` / `StopWorker` | WorkerActor | … | keystrokes to the holder, PTY size, the screen to carry into a new epoch, stop (close code 1000 or 4001) |
//!
//! # Guarantees
//! - Journal order: a run's events are appended by its RunActor alone, so `seq` is strictly
//!   increasing; tool results are journaled in reply order even when calls run concurrently.
//! - Every submitted run gets exactly one RunResult, for every final status.
//! - An actor panic: actix runs each actor as a task, so a panic ends that actor only. The
//!   RunSupervisor sees the run's result channel close without a result, marks the run FAILED
//!   (`engine_panic`) in metadata and journal, and answers with that result. The process survives.
//! - Shutdown (Ctrl-C): `CancelAll` → every RunActor cancels its token, which kills its
//!   running tool process groups and aborts its model call; each run journals INTERRUPTED and
//!   answers. The CLI waits for every answer, then exits 130.
//! - Hooks never stop a run: a failing or timed-out hook is recorded (HOOK_EXECUTED with its
//!   reason) and the loop goes on; `on_run_end` runs after ENGINE_END with a bounded timeout.
//! - Orchestrations: at most `max_parallel` of a plan's runs are in flight; a stage starts
//!   only when its needs finished; run ids are deterministic, so a resumed plan reuses
//!   COMPLETED runs and continues the others instead of running an item twice. The
//!   OrchestrationActor decides none of this itself: it carries out the effects of the pure
//!   `plan::schedule::Scheduler`, in the order returned.
//! - `delta serve`: a worker's viewers see its output in log order with byte offsets and no gap
//!   (attach queues the snapshot and registers the viewer in one handler); a viewer more than
//!   2 MiB behind gets a fresh snapshot instead; the PTY lives in a holder process, so the
//!   server may stop at any instant and re-attach later.
//! - Tool processes die with the engine: each runs in its own process group, killed as a
//!   group on timeout, cancellation and Ctrl-C by the engine; when the engine is gone
//!   (`kill -9` included) the tool spawner SIGKILLs the group of every tool still running.
//!   A spawner that died is replaced by in-process starts, with one warning.
//! - Handlers never block: processes go through the tool spawner (a `sendmsg` that never
//!   waits: a full socket queues the request for the spawner's sender thread) or
//!   `tokio::process`, blocking prompts through
//!   `spawn_blocking`, context files and generator outputs through `crate::blocking` (a
//!   static pool a cancelled run walks away from, so a read that never returns cannot hold
//!   the run's timeout, Ctrl-C or the process's exit); journal appends are short
//!   synchronous writes.
//! - Model calls: every attempt is bounded by the run's `llm.request_timeout` (and, over
//!   HTTP, `llm.idle_timeout`); a timed-out attempt is retried like a 5xx.

pub mod admission;
pub mod executor;
pub mod janitor;
pub mod orchestrator;
#[cfg(feature = "relay")]
pub mod relay;
pub mod run;
#[cfg(feature = "serve")]
pub mod serve;
pub mod session;
#[cfg(feature = "cluster")]
pub mod slurm;
pub mod supervisor;
pub mod tool;
