//! Engine-level integration tests (one binary).
mod agent_loading;
mod executor_port;
mod faults;
mod harness;
mod hooks;
mod http2;
mod layering;
mod llm;
#[cfg(feature = "mcp")]
mod mcp;
mod orchestrate;
mod plan;
mod process;
mod run;
mod run_outcomes;
mod sandbox;
mod sandbox_runs;
mod secrets;
mod session;
mod spawner_host;
mod store;
#[cfg(feature = "otel")]
mod telemetry;
mod tool_spawner;
mod trace_context;
