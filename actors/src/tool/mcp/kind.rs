//! The MCP kind: the tools of an agent's `mcp:` servers as a run offers them
//! (`<server>__<tool>`, the server's own description and input schema), and each call an
//! engine call to the shared server (restarted first if it died).
//!
//! A server that does not start is not offered; a call to a name in its namespace gets an
//! error result saying why, and the run goes on.
//!
//! Must not: start or keep servers (`pool.rs`) or speak the protocol (`connection.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Map, Value as Json};
use tokio_util::sync::CancellationToken;

use super::config::{expand_placeholders, exposed_names, McpServerConfig};
use super::connection::ServerLaunch;
use super::limits::SCHEMA_WARNING_BYTES;
use super::listing::{over_cap_reason, Listed};
use super::pool::McpPool;
use crate::tool::compile::EngineVars;
use crate::tool::kind::{
    EngineAnswer, EngineCall, EngineEnding, EngineTool, KindCall, KindName, OfferedTool, PlanError,
    ToolKind, ToolOrigin,
};

/// Limit of a server's start when its `startup_timeout_ms` is unset.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The MCP tools of one run.
pub struct McpTools {
    servers: Vec<OpenedServer>,
    /// WARNING texts for the run's journal (the offered tools are large).
    warnings: Vec<String>,
}

struct OpenedServer {
    prefix: String,
    tools: Result<Vec<ExposedTool>, String>,
}

struct ExposedTool {
    name: String,
    schema: Json,
    tool: Arc<McpTool>,
}

/// One tool of one server, as an engine call.
pub struct McpTool {
    pool: McpPool,
    launch: ServerLaunch,
    server: String,
    tool: String,
    timeout_ms: Option<u64>,
}

/// One server's tools as the model sees them, or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerListing {
    /// The server's name in `mcp:`.
    pub server: String,
    /// (name offered to the model, the server's own name, OpenAI function definition).
    pub tools: Result<Vec<(String, String, Json)>, String>,
}

impl McpTools {
    /// Starts (or joins) the agent's servers, all at once, and lists their tools. A server
    /// that cannot be started is kept with its reason (see [`McpTools::listings`]).
    pub async fn open(
        servers: &[McpServerConfig],
        pool: &McpPool,
        agent_home: &Path,
        work_dir: &Path,
        server_env: &[(String, String)],
        sandbox: Option<&Arc<crate::sandbox::RunSandbox>>,
    ) -> McpTools {
        let opening = servers.iter().map(|config| {
            let mut launch = launch_of(config, agent_home, work_dir, server_env);
            launch.sandbox = sandbox.cloned();
            open_server(config, launch, pool.clone())
        });
        let servers = futures_util::future::join_all(opening).await;
        let warnings = schema_size_warning(&servers, pool).into_iter().collect();
        McpTools { servers, warnings }
    }

    /// WARNING texts for the run's journal: the tool definitions it offers from its servers
    /// are large (each is sent with every model request).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Each server's offered tools, or why it has none.
    pub fn listings(&self) -> Vec<ServerListing> {
        self.servers
            .iter()
            .map(|s| ServerListing {
                server: s
                    .prefix
                    .trim_end_matches(super::config::NAME_SEPARATOR)
                    .to_string(),
                tools: s.tools.as_ref().map_err(Clone::clone).map(|tools| {
                    tools
                        .iter()
                        .map(|t| (t.name.clone(), t.tool.tool.clone(), t.schema.clone()))
                        .collect()
                }),
            })
            .collect()
    }
}

/// The server's launch for a run: placeholders expanded, paths from the agent folder, the
/// cleaned tool environment plus the server's `env:`.
fn launch_of(
    config: &McpServerConfig,
    agent_home: &Path,
    work_dir: &Path,
    server_env: &[(String, String)],
) -> ServerLaunch {
    let expand = |text: &str| expand_placeholders(text, agent_home, work_dir);
    let mut program = expand(&config.command);
    if program.contains('/') && !program.starts_with('/') {
        program = agent_home.join(&program).to_string_lossy().into_owned();
    }
    let argv = std::iter::once(program)
        .chain(config.args.iter().map(|a| expand(a)))
        .collect();
    let mut env: std::collections::BTreeMap<String, String> = server_env.iter().cloned().collect();
    for (name, value) in &config.env {
        env.insert(name.clone(), expand(value));
    }
    let cwd = match &config.cwd {
        Some(cwd) => agent_home.join(expand(cwd)),
        None => agent_home.to_path_buf(),
    };
    ServerLaunch {
        name: config.name.clone(),
        argv,
        env: env.into_iter().collect(),
        cwd,
        startup_timeout: config
            .startup_timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_STARTUP_TIMEOUT),
        sandbox: None,
    }
}

async fn open_server(
    config: &McpServerConfig,
    launch: ServerLaunch,
    pool: McpPool,
) -> OpenedServer {
    let prefix = config.tool_prefix();
    let unavailable = |reason: String| OpenedServer {
        prefix: prefix.clone(),
        tools: Err(format!(
            "MCP server `{}` is not available: {reason}",
            config.name
        )),
    };
    let conn = match pool.connect(launch.clone()).await {
        Ok(conn) => conn,
        Err(reason) => return unavailable(reason),
    };
    let listed: Vec<rmcp::model::Tool> = match (&conn.listing, &config.tools) {
        (Listed::All(tools), filter) => tools
            .iter()
            .filter(|t| {
                filter
                    .as_ref()
                    .is_none_or(|allowed| allowed.iter().any(|a| a == t.name.as_ref()))
            })
            .cloned()
            .collect(),
        (Listed::OverCap, None) => return unavailable(over_cap_reason(&config.name)),
        // Over the cap, but the agent names what it needs: those are read again.
        (Listed::OverCap, Some(names)) => {
            let (conn, names) = (Arc::clone(&conn), names.clone());
            match pool
                .on_pool_thread(async move { conn.tools_named(&names).await })
                .await
                .unwrap_or_else(Err)
            {
                Ok(tools) => tools.as_ref().clone(),
                Err(reason) => return unavailable(reason),
            }
        }
    };
    let originals: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    let names = exposed_names(&config.name, &originals);
    let tools = listed
        .iter()
        .zip(names)
        .map(|(tool, name)| ExposedTool {
            schema: schema_of(&name, tool, &config.name),
            tool: Arc::new(McpTool {
                pool: pool.clone(),
                launch: launch.clone(),
                server: config.name.clone(),
                tool: tool.name.to_string(),
                timeout_ms: config.timeout_ms,
            }),
            name,
        })
        .collect();
    OpenedServer {
        prefix,
        tools: Ok(tools),
    }
}

/// A WARNING when the tool definitions a run offers from its MCP servers are over
/// [`SCHEMA_WARNING_BYTES`] of JSON, naming each server's share; logged (stderr) the first
/// time in this engine, given to every run's journal.
fn schema_size_warning(servers: &[OpenedServer], pool: &McpPool) -> Option<String> {
    let shares: Vec<(String, usize, usize)> = servers
        .iter()
        .filter_map(|s| {
            let tools = s.tools.as_ref().ok()?;
            let bytes = tools
                .iter()
                .map(|t| serde_json::to_vec(&t.schema).map_or(0, |json| json.len()))
                .sum();
            let name = s.prefix.trim_end_matches(super::config::NAME_SEPARATOR);
            Some((name.to_string(), tools.len(), bytes))
        })
        .collect();
    let total: usize = shares.iter().map(|(_, _, bytes)| bytes).sum();
    if total <= SCHEMA_WARNING_BYTES {
        return None;
    }
    let each: Vec<String> = shares
        .iter()
        .map(|(name, count, bytes)| format!("`{name}`: {count} tools, {} KiB", bytes / 1024))
        .collect();
    let warning = format!(
        "the tools offered from MCP servers take {} KiB of JSON ({}), more than the {} KiB \
         delta warns at: they are sent with every model request, which makes each one slower \
         and dearer and may pass the model's context; name the tools the agent needs with \
         `tools:` under each server in agent.yaml (see docs/mcp.md, \"Keys of one server\")",
        total / 1024,
        each.join(", "),
        SCHEMA_WARNING_BYTES / 1024
    );
    let servers: Vec<&str> = shares.iter().map(|(name, ..)| name.as_str()).collect();
    if pool.first_time(&format!("schema size: {}", servers.join(","))) {
        tracing::warn!("{warning}");
    }
    Some(warning)
}

/// The OpenAI function definition of an MCP tool: its description (or title), and its input
/// schema as the parameters (without `$schema`, which some endpoints refuse).
fn schema_of(name: &str, tool: &rmcp::model::Tool, server: &str) -> Json {
    let description = tool
        .description
        .as_deref()
        .map(str::to_string)
        .or_else(|| tool.title.clone())
        .unwrap_or_else(|| format!("Tool `{}` of the MCP server `{server}`", tool.name));
    let mut parameters: Map<String, Json> = (*tool.input_schema).clone();
    parameters.remove("$schema");
    parameters.entry("type").or_insert_with(|| json!("object"));
    parameters.entry("properties").or_insert_with(|| json!({}));
    json!({
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": parameters,
        }
    })
}

impl ToolKind for McpTools {
    fn kind(&self) -> KindName {
        KindName::Mcp
    }

    fn offered(&self) -> Vec<OfferedTool> {
        self.servers
            .iter()
            .filter_map(|s| s.tools.as_ref().ok())
            .flatten()
            .map(|t| OfferedTool {
                name: t.name.clone(),
                kind: KindName::Mcp,
                schema: t.schema.clone(),
                origin: ToolOrigin::McpServer {
                    server: t.tool.server.clone(),
                    tool: t.tool.tool.clone(),
                },
            })
            .collect()
    }

    fn plan(
        &self,
        name: &str,
        args: &Map<String, Json>,
        _vars: &EngineVars,
    ) -> Option<Result<KindCall, PlanError>> {
        let server = self.servers.iter().find(|s| name.starts_with(&s.prefix))?;
        let tools = match &server.tools {
            Ok(tools) => tools,
            Err(reason) => return Some(Err(PlanError::Unavailable(reason.clone()))),
        };
        let tool = tools.iter().find(|t| t.name == name)?;
        let rendered = format!(
            "mcp {} {} {}",
            tool.tool.server,
            tool.tool.tool,
            Json::Object(args.clone())
        );
        Some(Ok(KindCall::Engine(EngineCall {
            tool: Arc::clone(&tool.tool) as Arc<dyn EngineTool>,
            arguments: args.clone(),
            rendered,
            timeout_ms: tool.tool.timeout_ms,
        })))
    }
}

impl EngineTool for McpTool {
    fn kind(&self) -> KindName {
        KindName::Mcp
    }

    fn call(
        &self,
        arguments: Map<String, Json>,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, EngineAnswer> {
        let (pool, launch, tool) = (self.pool.clone(), self.launch.clone(), self.tool.clone());
        Box::pin(async move {
            let on_thread = pool.clone();
            let answered = on_thread
                .on_pool_thread(async move {
                    match pool.connect_here(launch).await {
                        Ok(conn) => conn.call(&tool, arguments, timeout, cancel).await,
                        Err(reason) => EngineAnswer {
                            text: format!("Error: the MCP server is not available: {reason}"),
                            success: false,
                            ending: EngineEnding::Failed,
                            details: json!({ "error": reason }),
                        },
                    }
                })
                .await;
            answered.unwrap_or_else(|reason| EngineAnswer {
                text: format!("Error: {reason}"),
                success: false,
                ending: EngineEnding::Failed,
                details: json!({ "error": reason }),
            })
        })
    }

    fn target(&self) -> Json {
        json!({ "server": self.server, "tool": self.tool })
    }
}
