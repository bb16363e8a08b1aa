//! The registration of tool kinds: the one place that lists which kinds a run offers, in
//! which order — the agent's own tools (process), its MCP servers' tools, then the built-in
//! `ask_human` — and the engine services they share ([`ToolServices`]). A new kind is one
//! line here.
//!
//! Must not: plan calls (each kind does) or run anything itself.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::ask_human::AskHumanKind;
use super::process::ProcessTools;
use super::{ToolKind, ToolOwner};
use crate::sandbox::RunSandbox;
use crate::tool::call::Toolbox;
use crate::tool::process::build_child_env;

/// What tool kinds share across the runs of one engine (a supervisor): the MCP servers.
/// Cheap to clone; [`ToolServices::shutdown`] ends what they started.
#[derive(Clone, Default)]
pub struct ToolServices {
    #[cfg(feature = "mcp")]
    mcp: crate::tool::mcp::McpPool,
}

impl ToolServices {
    /// Services with nothing started yet.
    pub fn new() -> ToolServices {
        ToolServices::default()
    }

    /// The engine's MCP servers.
    #[cfg(feature = "mcp")]
    pub fn mcp(&self) -> &crate::tool::mcp::McpPool {
        &self.mcp
    }

    /// Stops what the kinds started (kills the MCP servers).
    pub fn shutdown(&self) {
        #[cfg(feature = "mcp")]
        self.mcp.shutdown();
    }
}

/// The environment an MCP server of `agent` starts with: what the agent's tools get from
/// `env` (the same scrubbing by `build_child_env`, the same `PATH` in front), plus
/// `DELTA_AGENT_HOME` and `AGENT_HOME`; nothing of one run, since servers are shared by runs.
pub fn server_environment<A: ToolOwner + ?Sized>(
    agent: &A,
    env: &BTreeMap<String, String>,
    tool_path_dir: Option<&Path>,
) -> Vec<(String, String)> {
    let home = agent.home().to_string_lossy().into_owned();
    let extra = [
        ("DELTA_AGENT_HOME".to_string(), home.clone()),
        ("AGENT_HOME".to_string(), home),
    ];
    build_child_env(env, &agent.hidden_env_names(), &extra, tool_path_dir)
}

/// Where a run opens its tools: its agent, its workspace, the environment servers start
/// with (the tools' cleaned one: [`server_environment`]).
pub struct OpenContext<'a, A: ToolOwner> {
    /// The run's agent.
    pub agent: &'a Arc<A>,
    /// The run's workspace (`${CWD}`).
    pub work_dir: &'a Path,
    /// The environment MCP servers start with.
    pub server_env: &'a [(String, String)],
}

/// The tools a run offers, by kind, and a WARNING text for each kind's tools that cannot be
/// offered (an MCP server that did not start). Nothing is confined (`delta tool expand`);
/// a run opens its tools with [`open_confined_toolbox`].
pub async fn open_toolbox<A: ToolOwner>(
    services: &ToolServices,
    ctx: &OpenContext<'_, A>,
) -> (Toolbox, Vec<String>) {
    open_confined_toolbox(services, ctx, None).await
}

/// [`open_toolbox`] for a run whose tools and MCP servers start in `sandbox`.
pub async fn open_confined_toolbox<A: ToolOwner>(
    services: &ToolServices,
    ctx: &OpenContext<'_, A>,
    sandbox: Option<&Arc<RunSandbox>>,
) -> (Toolbox, Vec<String>) {
    let agent = ctx.agent;
    let mut kinds: Vec<Box<dyn ToolKind>> = vec![Box::new(ProcessTools::new(Arc::clone(agent)))];
    #[cfg_attr(not(feature = "mcp"), allow(unused_mut))]
    let mut warnings = Vec::new();
    #[cfg(feature = "mcp")]
    if !agent.mcp_servers().is_empty() {
        let tools = crate::tool::mcp::McpTools::open(
            agent.mcp_servers(),
            services.mcp(),
            agent.home(),
            ctx.work_dir,
            ctx.server_env,
            sandbox,
        )
        .await;
        for listing in tools.listings() {
            if let Err(reason) = listing.tools {
                warnings.push(format!(
                    "{reason}; its tools are not offered, and a call to one gets an error result"
                ));
            }
        }
        warnings.extend_from_slice(tools.warnings());
        kinds.push(Box::new(tools));
    }
    #[cfg(not(feature = "mcp"))]
    let _ = (services, ctx.work_dir, ctx.server_env);
    if agent.offers_ask_human() {
        kinds.push(Box::new(AskHumanKind));
    }
    (Toolbox::new(kinds).confined(sandbox.cloned()), warnings)
}

/// The tools a run of `agent` offers without starting anything: its own and the built-in
/// (what [`open_toolbox`] gives an agent without MCP servers).
pub fn local_toolbox<A: ToolOwner>(agent: &Arc<A>) -> Toolbox {
    let mut kinds: Vec<Box<dyn ToolKind>> = vec![Box::new(ProcessTools::new(Arc::clone(agent)))];
    if agent.offers_ask_human() {
        kinds.push(Box::new(AskHumanKind));
    }
    Toolbox::new(kinds)
}
