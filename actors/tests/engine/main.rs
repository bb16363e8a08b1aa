//! Engine-level integration tests (one binary).
mod llm;
mod plan;
mod process;
mod store;
