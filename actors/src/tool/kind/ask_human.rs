//! The built-in kind: `ask_human`, offered after the agent's own tools unless agent.yaml
//! says `ask_human: false`. A call becomes a question for a person (validated like any
//! tool's arguments); the run asks it on a terminal or pauses for it.
//!
//! Must not: prompt anyone or pause the run (the run loop does, with the question).

use serde_json::{Map, Value as Json};

use super::{KindCall, KindName, OfferedTool, PlanError, ToolKind, ToolOrigin};
use crate::tool::ask_human::{self, ASK_HUMAN};
use crate::tool::compile::EngineVars;

/// The built-in `ask_human` tool.
pub struct AskHumanKind;

impl ToolKind for AskHumanKind {
    fn kind(&self) -> KindName {
        KindName::BuiltIn
    }

    fn offered(&self) -> Vec<OfferedTool> {
        vec![OfferedTool {
            name: ASK_HUMAN.to_string(),
            kind: KindName::BuiltIn,
            schema: ask_human::schema(),
            origin: ToolOrigin::BuiltIn,
        }]
    }

    fn plan(
        &self,
        name: &str,
        args: &Map<String, Json>,
        _vars: &EngineVars,
    ) -> Option<Result<KindCall, PlanError>> {
        (name == ASK_HUMAN).then(|| {
            ask_human::parse(args)
                .map(KindCall::Human)
                .map_err(PlanError::from)
        })
    }
}
