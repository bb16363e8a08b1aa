//! # delta-actors: the delta engine as a library
//!
//! Start here: [`Supervisor`] runs agents ([`Supervisor::submit`] one run,
//! [`Supervisor::orchestrate`] a whole plan), [`SessionManager`] keeps shell sessions, and
//! [`api::serve`] starts `delta serve`. What they take and give back — [`RunRequest`],
//! [`RunResult`], [`RunEvent`], [`OrchestrationRequest`], [`OrchestrationSummary`]... — is
//! re-exported here from [`protocol`] and [`request`]. No actix type crosses this surface:
//! call it from your own tokio runtime or from plain synchronous code (`*_blocking`).
//!
//! # Layout, from the ground up
//! - **Values** ([`protocol`], [`clock`], [`duration`]): results, events, statuses,
//!   orchestration summaries and error kinds as plain serde types, importing nothing of the
//!   engine; one timestamp format; the duration grammar. [`bounded_read`]: the one way files
//!   a tool may have replaced are read (regular files only, no blocking open, size caps);
//!   `private_file`: the one way delta's own files are written (mode 0600, no links).
//! - **Domain** (no actix, unit-tested without an actor system): [`agent`] loads an agent
//!   folder into one immutable [`agent::ResolvedAgent`]; [`tool`] compiles tool templates,
//!   classifies a model's calls and runs processes (through a small spawner process when the
//!   engine is big); [`journal`], [`metadata`] and [`workspace`] own the on-disk contracts,
//!   and [`redact`] keeps sensitive answers out of everything written; [`context`] turns a
//!   journal into chat messages; [`llm`] speaks the OpenAI-compatible protocol (limits,
//!   retries, timeouts) and hosts the scripted model; [`plan`] loads `plan.yaml` and decides
//!   its schedule ([`plan::Scheduler`]: events in, effects out); [`session`] owns shell and
//!   PTY sessions. Inside the crate: the run loop (`run`: one async function over a model
//!   port and a tool port), hooks, and the `delta serve` model.
//! - **Requests** ([`request`]): what an embedder asks for — the engine's settings, a run (a
//!   compiled agent, a model target), a plan (a resolved plan and its agents) — between the
//!   domain whose values they carry and the runtime that carries them out.
//! - **Runtime** (private): actix actors that own mailboxes and state and call the domain:
//!   `RunSupervisor` (admission, arbiter pool), `RunActor` (a run's mailbox around the run
//!   loop), `ToolActor`, `OrchestrationActor` (carries out
//!   the scheduler's effects), `JanitorActor`, `SessionActor`, and `delta serve`'s
//!   `ServeManager`, `WorkerActor` and web routes.
//! - **Handles** ([`api`]): [`Supervisor`], [`SessionManager`], [`api::serve`].
//!
//! No file imports a file that imports it back, the top-level modules form no import cycle,
//! [`protocol`] imports no other module, and the domain imports neither the runtime nor actix
//! (all checked by the `layering` engine test).
//!
//! The library never prints: user-facing text is the binary's job.
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![warn(missing_docs)]
// Without `serve` (which turns on `relay`), links to `api::serve`, `api::Relay` and the PTY
// holder dangle; they resolve in the default build, the documented one.
#![cfg_attr(not(feature = "serve"), allow(rustdoc::broken_intra_doc_links))]

pub mod agent;
pub mod api;
pub(crate) mod blocking;
pub mod bounded_read;
pub mod budget;
pub mod clock;
pub mod cluster;
pub mod context;
pub mod duration;
pub(crate) mod hooks;
pub(crate) mod input;
pub mod janitor;
pub mod journal;
pub mod llm;
pub mod metadata;
pub mod openmetrics;
pub mod plan;
pub(crate) mod private_file;
pub mod protocol;
pub mod redact;
pub mod relay;
pub mod request;
pub(crate) mod run;
mod runtime;
pub mod sandbox;
#[cfg(feature = "serve")]
pub(crate) mod serve;
pub mod session;
pub(crate) mod template_bounds;
pub(crate) mod template_names;
// Without a server (feature `relay`), only the relay module's token maker uses it.
pub mod telemetry;
#[cfg_attr(not(feature = "relay"), allow(dead_code))]
pub(crate) mod token;
pub mod tool;
pub mod workspace;
pub(crate) mod yaml;
pub(crate) mod yaml_errors;

pub use api::{OrchestrationHandle, RunHandle, SessionManager, Supervisor};
pub use llm::LlmTarget;
pub use protocol::{
    EngineError, InteractionInfo, OrchestrationEvent, OrchestrationSummary, RecordedError,
    RunErrorInfo, RunErrorKind, RunEvent, RunMetrics, RunResult, RunResultMetadata, RunStatus,
    TokenUsage, UsageReport,
};
pub use request::{HumanPrompter, OrchestrationRequest, RunRequest, RunStart, SupervisorConfig};
/// The executor port: where an orchestration's runs execute (docs/scale-out.md).
pub mod executor {
    pub use crate::runtime::executor::*;
    /// Running a plan on Slurm in one call.
    #[cfg(feature = "cluster")]
    pub use crate::runtime::slurm::launch as slurm;
}
