//! The engine's vocabulary: plain value types that cross the public API — requests, results,
//! events, statuses and error kinds. Everything here is data: no actix, no files, no
//! processes; the handles that carry these values are in [`crate::api`], the actors that act
//! on them in the runtime.

mod error;
mod event;
mod request;
mod result;
mod status;
mod summary;

pub use error::EngineError;
pub use event::{OrchestrationEvent, RunEvent};
pub use request::{
    HumanPrompter, LlmTarget, OrchestrationRequest, RunRequest, RunStart, SupervisorConfig,
};
pub use result::{
    InteractionInfo, RecordedError, RunErrorInfo, RunErrorKind, RunMetrics, RunResult,
    RunResultMetadata, UsageReport,
};
pub use status::{RunStatus, TokenUsage};
pub use summary::{
    OrchestrationStatus, OrchestrationSummary, RunCounts, RunRow, StageStatus, StageSummary, Totals,
};
