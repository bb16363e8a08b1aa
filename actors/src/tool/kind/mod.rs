//! The tool-kind port. Every tool a run offers the model belongs to one *kind*, and the kind
//! decides what a call to one of its tools becomes ([`KindCall`]):
//! - a **process job**: the agent's own `exec:`, `shell:` and legacy tools (`process.rs`);
//! - an **answer computed in the engine**: an MCP server's tool (`tool::mcp`), run as a job
//!   through the same tool port, journal, hooks, timeout and audit record as a process;
//! - a **question for a person**: the built-in `ask_human` (`tool::ask_human`), answered on
//!   a terminal or after the run pauses.
//!
//! A run opens its [`Toolbox`](crate::tool::call::Toolbox) once (`registry.rs` is the one
//! place that lists the kinds), offers the model what its kinds offer, and plans each call
//! through it. A new kind is a folder of its own and one line in `registry.rs`.
//!
//! Must not: start processes, talk to servers or write files (kinds describe and plan;
//! `tool::job` runs the job).

pub mod ask_human;
mod owner;
pub mod process;
pub mod registry;

pub use owner::ToolOwner;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value as Json};
use tokio_util::sync::CancellationToken;

use super::ask_human::AskHumanArgs;
use super::compile::{ArgumentError, EngineVars, Invocation};

/// The kinds of tools, as `delta tool expand` and audit records name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum KindName {
    /// A program started per call (`exec:`, `shell:`, legacy `command:`).
    #[serde(rename = "process")]
    Process,
    /// Built into the engine (`ask_human`).
    #[serde(rename = "built-in")]
    BuiltIn,
    /// A tool of a Model Context Protocol server listed in the agent's `mcp:`.
    #[serde(rename = "mcp")]
    Mcp,
}

impl KindName {
    /// `process`, `built-in` or `mcp`.
    pub fn as_str(self) -> &'static str {
        match self {
            KindName::Process => "process",
            KindName::BuiltIn => "built-in",
            KindName::Mcp => "mcp",
        }
    }
}

/// One tool as the model is offered it.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// The name the model calls it by (unique in the run).
    pub name: String,
    /// Its kind.
    pub kind: KindName,
    /// The OpenAI function definition.
    pub schema: Json,
    /// Where it comes from (for `delta tool expand`).
    pub origin: ToolOrigin,
}

/// Where an offered tool comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOrigin {
    /// Defined in this YAML file of the agent.
    File(std::path::PathBuf),
    /// Built into the engine.
    BuiltIn,
    /// Listed by an MCP server of the agent's `mcp:`.
    McpServer {
        /// The server's name in `mcp:`.
        server: String,
        /// The tool's own name on the server.
        tool: String,
    },
}

/// What one call becomes.
pub enum KindCall {
    /// A program to start with this argv and stdin.
    Process {
        /// The argv and stdin built from the arguments.
        invocation: Invocation,
        /// The tool's own time limit in ms (`None`: the engine's default).
        timeout_ms: Option<u64>,
    },
    /// An answer the engine computes (an MCP call).
    Engine(EngineCall),
    /// A question for a person.
    Human(AskHumanArgs),
}

impl std::fmt::Debug for KindCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KindCall::Process { invocation, .. } => {
                f.debug_tuple("Process").field(&invocation.argv).finish()
            }
            KindCall::Engine(call) => f.debug_tuple("Engine").field(&call.rendered).finish(),
            KindCall::Human(question) => f.debug_tuple("Human").field(question).finish(),
        }
    }
}

/// A call answered in the engine: the tool, its validated arguments, and how it is shown.
#[derive(Clone)]
pub struct EngineCall {
    /// What answers the call.
    pub tool: Arc<dyn EngineTool>,
    /// The model's arguments, as given.
    pub arguments: Map<String, Json>,
    /// The journal's `resolved_command` (e.g. `mcp everything echo {"message":"hi"}`).
    pub rendered: String,
    /// The tool's own time limit in ms (`None`: the engine's default).
    pub timeout_ms: Option<u64>,
}

/// Something in the engine that answers calls (an MCP server's tool).
pub trait EngineTool: Send + Sync {
    /// The kind it belongs to (named in its audit records).
    fn kind(&self) -> KindName;

    /// Answers one call within `timeout`; ends early, [`EngineEnding::Cancelled`], when
    /// `cancel` fires.
    fn call(
        &self,
        arguments: Map<String, Json>,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, EngineAnswer>;

    /// What the audit record and the `pre_tool_execution` hook are told the call goes to
    /// (e.g. `{"server": "fs", "tool": "read_file"}`).
    fn target(&self) -> Json;
}

/// How an engine call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineEnding {
    /// The tool answered (its answer may still report an error: see `success`).
    Answered,
    /// No answer could be had (the server did not start, died, or answered nonsense).
    Failed,
    /// No answer within the time limit.
    TimedOut,
    /// The run stopped while the call was in flight.
    Cancelled,
}

/// The answer of an engine call, before it is cut for the model.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineAnswer {
    /// The whole text for the model (the job cuts it to head + tail, with the rest on disk).
    pub text: String,
    /// True when the tool answered and reported no error.
    pub success: bool,
    /// How the call ended.
    pub ending: EngineEnding,
    /// Kind-specific facts for the audit record (e.g. the server's exit, a protocol error).
    pub details: Json,
}

/// Why a call to a tool of a kind cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The arguments do not fit the tool.
    BadArguments(ArgumentError),
    /// The tool belongs to the kind but cannot be called now (its MCP server did not start).
    Unavailable(String),
}

impl From<ArgumentError> for PlanError {
    fn from(error: ArgumentError) -> Self {
        PlanError::BadArguments(error)
    }
}

/// One kind of tool, as a run sees it once opened.
pub trait ToolKind: Send + Sync {
    /// The kind's name.
    fn kind(&self) -> KindName;

    /// Its tools, in the order the model is offered them.
    fn offered(&self) -> Vec<OfferedTool>;

    /// Plans a call to `name` with the model's `args`; `None` when `name` is not this kind's.
    fn plan(
        &self,
        name: &str,
        args: &Map<String, Json>,
        vars: &EngineVars,
    ) -> Option<Result<KindCall, PlanError>>;
}
