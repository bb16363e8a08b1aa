//! Errors of the engine's handles themselves (a run's own failure is a FAILED RunResult).

/// Errors of the handle itself (not of a run: those are FAILED RunResults).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The actor system's thread, or a runtime for a `*_blocking` call, could not be
    /// created (the text says why, e.g. the thread limit).
    #[error("the engine could not start: {0}")]
    Start(String),
    /// The engine stopped (shut down, or its actor system died) before answering; a handle
    /// whose run or plan was abandoned answers this too.
    #[error("the engine has shut down")]
    Stopped,
    /// The request was refused before anything ran, with the reason and a hint: an invalid
    /// or missing run id, a run or plan already driven by this process, an LLM endpoint that
    /// cannot be set up.
    #[error("{0}")]
    Rejected(String),
}
