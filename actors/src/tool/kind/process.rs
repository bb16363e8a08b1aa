//! The process kind: the agent's own tools (`exec:`, `shell:`, legacy `command:`), each call
//! a program started with the argv and stdin built from the model's arguments.
//!
//! Must not: start the program (`tool::job` does) or compile templates (`tool::compile`).

use std::sync::Arc;

use serde_json::{Map, Value as Json};

use super::{KindCall, KindName, OfferedTool, PlanError, ToolKind, ToolOrigin, ToolOwner};
use crate::tool::compile::{CompiledTool, EngineVars};

/// The compiled tools of one agent (shared with the agent, not copied per run).
pub struct ProcessTools {
    source: Source,
}

enum Source {
    Agent(Arc<dyn ToolOwner>),
    Tools(Arc<[CompiledTool]>),
}

impl ProcessTools {
    /// The kind over the agent's own tools, in the order the model is offered them.
    pub fn new<A: ToolOwner>(agent: Arc<A>) -> ProcessTools {
        ProcessTools {
            source: Source::Agent(agent),
        }
    }

    /// The kind over tools compiled without an agent (a tools file).
    pub fn from_tools(tools: impl Into<Arc<[CompiledTool]>>) -> ProcessTools {
        ProcessTools {
            source: Source::Tools(tools.into()),
        }
    }

    fn tools(&self) -> &[CompiledTool] {
        match &self.source {
            Source::Agent(agent) => agent.own_tools(),
            Source::Tools(tools) => tools,
        }
    }
}

impl ToolKind for ProcessTools {
    fn kind(&self) -> KindName {
        KindName::Process
    }

    fn offered(&self) -> Vec<OfferedTool> {
        self.tools()
            .iter()
            .map(|tool| OfferedTool {
                name: tool.name.clone(),
                kind: KindName::Process,
                schema: tool.openai_schema(),
                origin: ToolOrigin::File(tool.source_file.clone()),
            })
            .collect()
    }

    fn plan(
        &self,
        name: &str,
        args: &Map<String, Json>,
        vars: &EngineVars,
    ) -> Option<Result<KindCall, PlanError>> {
        let tool = self.tools().iter().find(|t| t.name == name)?;
        Some(
            tool.build_invocation(args, vars)
                .map(|invocation| KindCall::Process {
                    invocation,
                    timeout_ms: tool.timeout_ms,
                })
                .map_err(PlanError::from),
        )
    }
}
