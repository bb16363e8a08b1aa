//! The actix runtime: actors that own state and mailboxes and call the domain modules.
//!
//! # Topology
//! ```text
//! Supervisor (handle, api.rs) ──> RunSupervisor ──spawns──> RunActor (one per run_id, on an arbiter of the pool)
//!                                      │                      │ ask ──> LlmGateway (one per endpoint: admission)
//!                                      │                      │ ask ──> ToolActor (one per tool call)
//!                                      │                      └ appends ──> journal.jsonl, metadata.json, io/
//!                                      └──> JanitorActor (orphaned runs)
//! SessionActor (one per session) — used by the sessions CLIs and by embedders
//! ```
//!
//! # Messages
//! | message | to | reply | meaning |
//! |---|---|---|---|
//! | `SubmitRun` | RunSupervisor | `Result<run_id>` | queue a run; its RunResult arrives on the oneshot inside |
//! | `CancelRun` / `CancelAll` | RunSupervisor | `()` | interrupt one / every run (queued runs finish INTERRUPTED unstarted) |
//! | `CancelRunActor` | RunActor | `()` | stop at the next safe point |
//! | `Admit` | LlmGateway | `Admission` | wait for the endpoint's rate limit and in-flight cap |
//! | `Defer` | LlmGateway | `()` | a `Retry-After` was seen: hold every caller until then |
//! | `Execute` | ToolActor | `ToolExecution` | run one tool call; the actor stops after answering |
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
//! - Handlers never block: processes go through `tokio::process`, blocking prompts through
//!   `spawn_blocking`; journal appends are short synchronous writes.

pub mod gateway;
pub mod janitor;
pub mod orchestrator;
pub mod run;
pub mod supervisor;
pub mod tool;
