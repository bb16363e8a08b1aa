//! MCP tools: an agent's `mcp:` lists Model Context Protocol servers (programs speaking MCP
//! over stdio), and their tools are offered to the model next to the agent's own as
//! `<server>__<tool>`. A call goes through the run's tool port like any tool (journal,
//! `pre_tool_execution` / `post_tool_execution` hooks, time limit, io/ record, redaction).
//!
//! # Layout
//! - `config`: the `mcp:` schema and tool naming (always built, so agent files read the
//!   same with or without the `mcp` feature);
//! - `connection` (feature `mcp`): one server started and spoken to with the official SDK,
//!   `rmcp`;
//! - `pool` (feature `mcp`): the servers of one engine, shared by its runs;
//! - `kind` (feature `mcp`): the tool kind a run opens over its agent's servers;
//! - `limits` and `listing` (feature `mcp`): the bounds on what a server sends (one message,
//!   its tools, the pages of its list, the size of what a run offers) and the tool list
//!   read within them.
//!
//! Servers are started like tools (own process group, the tools' cleaned environment,
//! through the tool spawner), so a `kill -9` of the engine ends them too
//! (`docs/tool-spawner.md`). Details and the reasons for sharing: `docs/mcp.md`.

pub mod config;
#[cfg(feature = "mcp")]
mod connection;
#[cfg(feature = "mcp")]
mod kind;
#[cfg(feature = "mcp")]
pub mod limits;
#[cfg(feature = "mcp")]
mod listing;
#[cfg(feature = "mcp")]
mod pool;

pub use config::McpServerConfig;
#[cfg(feature = "mcp")]
pub use connection::ServerLaunch;
#[cfg(feature = "mcp")]
pub use kind::{McpTool, McpTools, ServerListing, DEFAULT_STARTUP_TIMEOUT};
#[cfg(feature = "mcp")]
pub use pool::McpPool;
