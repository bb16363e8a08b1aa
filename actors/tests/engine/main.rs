//! Engine-level integration tests (one binary).
mod agent_loading;
