//! Errors of the engine's handles themselves (a run's own failure is a FAILED RunResult).

/// Errors of the handle itself (not of a run: those are FAILED RunResults).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the engine could not start: {0}")]
    Start(String),
    #[error("the engine has shut down")]
    Stopped,
    #[error("{0}")]
    Rejected(String),
}
