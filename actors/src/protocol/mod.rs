//! The engine's vocabulary: plain value types that cross the public API — results, events,
//! statuses, orchestration summaries and error kinds. Everything here is data: no actix, no
//! files, no processes; the handles that carry these values are in [`crate::api`], the actors
//! that act on them in the runtime.
//!
//! The ground floor: it imports no other module of the engine (the `layering` engine test
//! checks it). Requests, which carry compiled agents and resolved plans, are one floor up in
//! [`crate::request`].

mod cost;
mod error;
mod event;
mod result;
mod status;
mod summary;
mod trace;

/// Longest stage id (it is part of every run id of the stage, and of the handoff files an
/// executor reads back). Plans are validated against it (`plan::limits`).
pub const STAGE_ID_LEN: usize = 48;

pub use cost::{unknown_cost_note, CostTally};
pub use error::EngineError;
pub use event::{ModelCallContent, OrchestrationEvent, RunEvent};
pub use result::{
    InteractionInfo, RecordedError, RunErrorInfo, RunErrorKind, RunMetrics, RunResult,
    RunResultMetadata, UsageReport,
};
pub use status::{RunStatus, TokenUsage};
pub use summary::{
    OrchestrationStatus, OrchestrationSummary, RunCounts, RunRow, StageStatus, StageSummary, Totals,
};
pub use trace::{TraceSpan, TRACE_ENV_VARS, TRACE_STATE_MAX_LEN};
