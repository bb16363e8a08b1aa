//! # delta-actors: the delta engine as a library
//!
//! An embedder starts one [`Supervisor`] (it owns the actix System on its own threads), submits
//! a [`RunRequest`] (one agent run: a new task or a continuation) or an
//! [`OrchestrationRequest`] (a whole `plan.yaml`), follows [`RunEvent`]s and
//! [`OrchestrationEvent`]s, and awaits a [`RunResult`] or the plan's summary. Shell sessions go
//! through [`SessionManager`]. The `delta` CLI uses exactly this surface; `examples/embed.rs`
//! is a complete offline program. Everything a run does is appended to
//! `<work_dir>/.delta/<run_id>/journal.jsonl`, so a killed run can be continued.
//!
//! Layers, from the bottom up (a layer imports only from the layers below it):
//! - **Ground floor**: [`clock`] (the one timestamp format), typed YAML field access, bounds
//!   on user input files and on template rendering.
//! - **Domain** (no actix): [`agent`] loads an agent folder into one immutable
//!   [`agent::ResolvedAgent`]; [`tool`] compiles tool templates and runs processes;
//!   [`journal`], [`metadata`] and [`workspace`] own the on-disk contracts, and [`redact`]
//!   keeps sensitive answers out of everything they write; [`context`] turns a journal into
//!   chat messages; [`llm`] speaks the OpenAI-compatible protocol and hosts the scripted
//!   model; [`session`] owns shell and PTY sessions; [`plan`] models `plan.yaml` and
//!   schedules it ([`plan::Scheduler`]: events in, effects out); [`janitor`] finds runs whose
//!   owner died. Crate-private beside them: the run loop (one async function over a model
//!   port and a tool port), lifecycle hooks, and the `delta serve` model.
//! - **Runtime** (crate-private): actix actors that own state and mailboxes and call the
//!   domain: `RunSupervisor`, `RunActor`, `ToolActor`, `LlmGateway`, `OrchestrationActor`,
//!   `SessionActor`, `JanitorActor`, and for `delta serve` `ServeManager`, `WorkerActor` and
//!   the actix-web routes.
//! - **API**: [`api`] holds the handles ([`Supervisor`], [`SessionManager`], [`api::serve`]);
//!   [`protocol`] the plain values they carry (requests, results, events, statuses, error
//!   kinds), re-exported here. No actix type crosses it.
//!
//! The library never prints: user-facing text is the binary's job.
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![warn(missing_docs)]

#[allow(missing_docs)] // documented module by module
pub mod agent;
pub mod api;
pub(crate) mod blocking;
pub mod clock;
#[allow(missing_docs)] // documented module by module
pub mod context;
pub(crate) mod hooks;
pub(crate) mod input;
pub mod janitor;
#[allow(missing_docs)] // documented module by module
pub mod journal;
#[allow(missing_docs)] // documented module by module
pub mod llm;
pub mod metadata;
#[allow(missing_docs)] // documented module by module
pub mod plan;
pub mod protocol;
pub mod redact;
pub(crate) mod run;
mod runtime;
#[allow(missing_docs)] // documented module by module
pub(crate) mod serve;
#[allow(missing_docs)] // documented module by module
pub mod session;
pub(crate) mod template_bounds;
#[allow(missing_docs)] // documented module by module
pub mod tool;
pub mod workspace;
pub(crate) mod yaml;

pub use api::{OrchestrationHandle, RunHandle, SessionManager, Supervisor};
pub use protocol::{
    EngineError, HumanPrompter, InteractionInfo, LlmTarget, OrchestrationEvent,
    OrchestrationRequest, RecordedError, RunErrorInfo, RunErrorKind, RunEvent, RunMetrics,
    RunRequest, RunResult, RunResultMetadata, RunStart, RunStatus, SupervisorConfig, TokenUsage,
    UsageReport,
};
