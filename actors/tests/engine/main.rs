//! Engine-level integration tests (one binary).
mod llm;
mod store;
