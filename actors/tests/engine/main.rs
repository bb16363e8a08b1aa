//! Engine-level integration tests (one binary).
mod plan;
mod process;
