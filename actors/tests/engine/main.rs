//! Engine-level integration tests (one binary).
mod harness;
mod llm;
mod plan;
mod process;
mod run;
mod store;
mod agent_loading;
