//! [`ToolOwner`]: what the tool kinds need of the agent whose run opens them — its own
//! compiled tools, its folder, its MCP servers, whether it offers `ask_human`, and the
//! variables its children must not see. `agent::ResolvedAgent` implements it.
//!
//! The kinds ask through this trait rather than naming the agent type because agent loading
//! compiles tools and reads MCP settings (`agent` imports `tool`): naming the agent here
//! would make the two modules import each other.
//!
//! Must not: load or validate anything (agent loading does).

use std::path::Path;
use std::sync::Arc;

use crate::tool::compile::CompiledTool;
use crate::tool::mcp::McpServerConfig;

/// The agent side of a run's tools, as the kinds see it.
pub trait ToolOwner: Send + Sync + 'static {
    /// The agent's own compiled tools (imported and local, merged), in the order the model
    /// is offered them.
    fn own_tools(&self) -> &[CompiledTool];
    /// The agent's folder (`${AGENT_HOME}`): MCP servers start with it in their environment.
    fn home(&self) -> &Path;
    /// The Model Context Protocol servers the agent lists (`mcp:`), in order.
    fn mcp_servers(&self) -> &[McpServerConfig];
    /// Whether the built-in `ask_human` tool is offered.
    fn offers_ask_human(&self) -> bool;
    /// The environment variables no child of the agent (tool, MCP server) may see.
    fn hidden_env_names(&self) -> Vec<String>;
}

impl<T: ToolOwner + ?Sized> ToolOwner for Arc<T> {
    fn own_tools(&self) -> &[CompiledTool] {
        (**self).own_tools()
    }
    fn home(&self) -> &Path {
        (**self).home()
    }
    fn mcp_servers(&self) -> &[McpServerConfig] {
        (**self).mcp_servers()
    }
    fn offers_ask_human(&self) -> bool {
        (**self).offers_ask_human()
    }
    fn hidden_env_names(&self) -> Vec<String> {
        (**self).hidden_env_names()
    }
}
