//! # delta-actors: the delta engine as a library
//!
//! Layers, from the bottom up:
//! - **Domain** (no actix): [`agent`] loads an agent folder into one immutable
//!   [`agent::ResolvedAgent`]; [`tool`] compiles tool templates and runs processes;
//!   [`journal`], [`metadata`] and [`workspace`] own the on-disk contracts, and [`redact`]
//!   keeps sensitive answers out of everything they write; [`context`]
//!   turns a journal into chat messages; [`llm`] speaks the OpenAI-compatible protocol and
//!   hosts the scripted model; [`session`] owns shell and PTY sessions; [`plan`] models
//!   `plan.yaml` and schedules it ([`plan::Scheduler`]: events in, effects out);
//!   [`blocking`] runs blocking file reads where they cannot stall an actor; [`serve`] is
//!   the `delta serve` model (sessions, workers, persistence, activity detection, the runs
//!   view).
//! - **Runtime** ([`runtime`]): actix actors that own state and mailboxes and call the
//!   domain functions: `RunSupervisor`, `RunActor`, `ToolActor`, `LlmGateway`,
//!   `SessionActor`, `JanitorActor`, and for `delta serve` `ServeManager`, `WorkerActor` and
//!   the actix-web routes (`runtime::web`).
//! - **API** ([`api`], [`protocol`]): the [`api::Supervisor`] handle that embedders and the
//!   `delta` CLI use. No actix type crosses it.
//!
//! The library never prints: user-facing text is the binary's job.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod agent;
pub mod api;
pub mod blocking;
pub mod cluster;
pub mod context;
pub mod hooks;
pub mod input;
pub mod janitor;
pub mod journal;
pub mod llm;
pub mod metadata;
pub mod plan;
pub mod protocol;
pub mod redact;
pub mod relay;
pub mod run;
pub mod runtime;
pub mod serve;
pub mod session;
pub mod template_bounds;
pub mod tool;
pub mod workspace;
pub(crate) mod yaml;

pub use api::{OrchestrationHandle, RunHandle, Supervisor};
pub use protocol::{
    EngineError, HumanPrompter, InteractionInfo, LlmTarget, OrchestrationEvent,
    OrchestrationRequest, RunErrorInfo, RunEvent, RunMetrics, RunRequest, RunResult,
    RunResultMetadata, RunStart, RunStatus, SupervisorConfig, TokenUsage, UsageReport,
};
