//! Classifying one tool call of a model reply against the run's [`Toolbox`] (the kinds it
//! opened, see `tool::kind`): [`Toolbox::plan_call`] turns the tool name and the arguments
//! text into a [`CallPlan`]: what the tool's kind makes of the call (a process job, an
//! engine call, a question), or an error answered at once (unknown tool, a tool that cannot
//! be called now, arguments that are not a JSON object, arguments the tool refuses).
//!
//! Must not: start processes, pause runs or write the journal (the run loop does that with
//! the plan).

use std::sync::Arc;

use serde_json::{Map, Value as Json};

use crate::sandbox::RunSandbox;

use super::compile::{CompiledTool, EngineVars};
use super::kind::{KindCall, OfferedTool, PlanError, ToolKind};

/// The tools one run offers the model, by kind, in the order they are offered, and the
/// sandbox its tool processes run in.
pub struct Toolbox {
    kinds: Vec<Box<dyn ToolKind>>,
    offered: Vec<OfferedTool>,
    sandbox: Option<Arc<RunSandbox>>,
}

impl Toolbox {
    /// A toolbox over `kinds` (their tools are offered in this order; a name is looked up in
    /// the first kind that has it).
    pub fn new(kinds: Vec<Box<dyn ToolKind>>) -> Toolbox {
        let offered = kinds.iter().flat_map(|kind| kind.offered()).collect();
        Toolbox {
            kinds,
            offered,
            sandbox: None,
        }
    }

    /// The same toolbox, its processes confined by `sandbox`.
    pub fn confined(mut self, sandbox: Option<Arc<RunSandbox>>) -> Toolbox {
        self.sandbox = sandbox;
        self
    }

    /// The sandbox the run's tool processes start in (`None`: unconfined).
    pub fn sandbox(&self) -> Option<&Arc<RunSandbox>> {
        self.sandbox.as_ref()
    }

    /// Every tool the model is offered, in order.
    pub fn offered(&self) -> &[OfferedTool] {
        &self.offered
    }

    /// Every tool as an OpenAI function definition, in order.
    pub fn schemas(&self) -> Vec<Json> {
        self.offered.iter().map(|t| t.schema.clone()).collect()
    }

    /// Classifies the call `name(arguments)`. Returns the arguments as journaled (see
    /// [`parse_arguments`]) and the plan.
    pub fn plan_call(&self, name: &str, arguments: &str, vars: &EngineVars) -> (Json, CallPlan) {
        let (journaled, parsed) = parse_arguments(arguments);
        let args = match parsed {
            Ok(args) => args,
            Err(message) => {
                let plan = CallPlan::MalformedArguments {
                    tool: name.to_string(),
                    message,
                };
                return (journaled, plan);
            }
        };
        let planned = self
            .kinds
            .iter()
            .find_map(|kind| kind.plan(name, &args, vars));
        let plan = match planned {
            None => CallPlan::UnknownTool {
                name: name.to_string(),
                available: self.offered.iter().map(|t| t.name.clone()).collect(),
            },
            Some(Ok(call)) => CallPlan::Call(call),
            Some(Err(PlanError::BadArguments(e))) => CallPlan::BadArguments {
                tool: name.to_string(),
                message: e.to_string(),
            },
            Some(Err(PlanError::Unavailable(message))) => CallPlan::Unavailable {
                tool: name.to_string(),
                message,
            },
        };
        (journaled, plan)
    }
}

/// What to do with one tool call.
#[derive(Debug)]
pub enum CallPlan {
    /// What the tool's kind makes of it: a process job, an engine call or a question.
    Call(KindCall),
    /// The model named a tool that does not exist.
    UnknownTool {
        /// The name the model used.
        name: String,
        /// Every tool the model may call, in the order offered.
        available: Vec<String>,
    },
    /// The tool exists but cannot be called now (its MCP server did not start).
    Unavailable {
        /// The tool's name.
        tool: String,
        /// Why, for the model.
        message: String,
    },
    /// The arguments text is not a JSON object.
    MalformedArguments {
        /// The tool's name.
        tool: String,
        /// The JSON parser's message.
        message: String,
    },
    /// The tool refused the arguments (unknown or missing key, wrong type...).
    BadArguments {
        /// The tool's name.
        tool: String,
        /// What is wrong, for the model.
        message: String,
    },
}

impl CallPlan {
    /// The observation the model reads when the call cannot run; `None` for runnable calls.
    pub fn error_observation(&self) -> Option<String> {
        match self {
            CallPlan::Call(_) => None,
            CallPlan::UnknownTool { name, available } => Some(format!(
                "Error: unknown tool '{name}'. Available tools: {}.",
                available.join(", ")
            )),
            CallPlan::Unavailable { tool, message } => Some(format!(
                "Error: tool '{tool}' cannot be called now: {message}"
            )),
            CallPlan::MalformedArguments { tool, message } => Some(format!(
                "Error: the arguments for tool '{tool}' are not valid JSON ({message}). Call it again with a JSON object matching its parameters."
            )),
            CallPlan::BadArguments { tool, message } => Some(format!(
                "Error: invalid arguments for tool '{tool}': {message}"
            )),
        }
    }

    /// The journal's `resolved_command`: the command line of a process, the target of an
    /// engine call, the question for ask_human, empty for calls that do not run.
    pub fn resolved_command(&self) -> String {
        match self {
            CallPlan::Call(KindCall::Process { invocation, .. }) => {
                CompiledTool::render_command(invocation)
            }
            CallPlan::Call(KindCall::Engine(call)) => call.rendered.clone(),
            CallPlan::Call(KindCall::Human(question)) => question.rendered(),
            _ => String::new(),
        }
    }
}

/// The model's arguments text as a JSON value (what the journal records, even when it is
/// not an object) and as an object for the tool. An empty text or `null` means no arguments.
pub fn parse_arguments(text: &str) -> (Json, Result<Map<String, Json>, String>) {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return (Json::Object(Map::new()), Ok(Map::new()));
    }
    match serde_json::from_str::<Json>(trimmed) {
        Ok(Json::Object(map)) => (Json::Object(map.clone()), Ok(map)),
        Ok(other) => (other, Err("expected a JSON object".to_string())),
        Err(e) => (Json::String(text.to_string()), Err(e.to_string())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::tool::ask_human::InputType;
    use crate::tool::compile::compile_tool;
    use crate::tool::kind::ask_human::AskHumanKind;
    use crate::tool::kind::process::ProcessTools;

    fn toolbox(ask_human: bool) -> Toolbox {
        let value: serde_yaml::Value =
            serde_yaml::from_str("name: greet\nexec: echo ${who}\n").unwrap();
        let mut warnings = Vec::new();
        let greet = compile_tool(&value, 0, Path::new("agent.yaml"), &mut warnings).unwrap();
        let mut kinds: Vec<Box<dyn ToolKind>> =
            vec![Box::new(ProcessTools::from_tools(vec![greet]))];
        if ask_human {
            kinds.push(Box::new(AskHumanKind));
        }
        Toolbox::new(kinds)
    }

    fn plan_call(ask_human: bool, name: &str, arguments: &str) -> (Json, CallPlan) {
        toolbox(ask_human).plan_call(name, arguments, &vars())
    }

    fn vars() -> EngineVars {
        EngineVars {
            agent_home: PathBuf::from("/agent"),
            cwd: PathBuf::from("/work"),
            run_id: "r1".into(),
        }
    }

    #[test]
    fn a_known_tool_with_good_arguments_runs() {
        let (journaled, plan) = plan_call(true, "greet", r#"{"who":"Ada"}"#);
        assert_eq!(journaled, serde_json::json!({"who": "Ada"}));
        match &plan {
            CallPlan::Call(KindCall::Process { invocation, .. }) => {
                assert_eq!(invocation.argv, ["echo", "Ada"]);
            }
            other => panic!("expected a run, got {other:?}"),
        }
        assert_eq!(plan.error_observation(), None);
        assert_eq!(plan.resolved_command(), "echo Ada");
    }

    #[test]
    fn ask_human_is_parsed_into_a_question() {
        let (_, plan) = plan_call(
            true,
            "ask_human",
            r#"{"prompt":"Go?","input_type":"confirmation"}"#,
        );
        match &plan {
            CallPlan::Call(KindCall::Human(q)) => {
                assert_eq!(q.prompt, "Go?");
                assert_eq!(q.input_type, InputType::Confirmation);
            }
            other => panic!("expected a question, got {other:?}"),
        }
        assert_eq!(plan.resolved_command(), "ask_human \"Go?\"");
    }

    #[test]
    fn ask_human_with_a_wrong_key_is_bad_arguments_not_a_question() {
        let (journaled, plan) = plan_call(true, "ask_human", r#"{"question":"Go?"}"#);
        assert_eq!(journaled, serde_json::json!({"question": "Go?"}));
        let observation = plan.error_observation().unwrap();
        assert!(
            observation.starts_with("Error: invalid arguments for tool 'ask_human'"),
            "{observation}"
        );
        assert!(observation.contains("`question`"), "{observation}");
        assert_eq!(plan.resolved_command(), "");
    }

    #[test]
    fn ask_human_off_makes_a_call_to_it_an_unknown_tool_not_a_question() {
        let (_, plan) = plan_call(false, "ask_human", r#"{"prompt":"Go?"}"#);
        assert_eq!(
            plan.error_observation().unwrap(),
            "Error: unknown tool 'ask_human'. Available tools: greet."
        );
    }

    #[test]
    fn unknown_tool_lists_the_available_ones() {
        let (_, plan) = plan_call(true, "nope", "{}");
        assert_eq!(
            plan.error_observation().unwrap(),
            "Error: unknown tool 'nope'. Available tools: greet, ask_human."
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_are_malformed() {
        for text in ["[1]", "{not json", "\"x\""] {
            let (_, plan) = plan_call(true, "greet", text);
            assert!(
                matches!(plan, CallPlan::MalformedArguments { .. }),
                "{text}: {plan:?}"
            );
            assert!(plan.error_observation().unwrap().contains("not valid JSON"));
        }
        let (journaled, plan) = plan_call(true, "greet", "{oops");
        assert_eq!(journaled, serde_json::json!("{oops"));
        assert!(matches!(plan, CallPlan::MalformedArguments { .. }));
    }

    #[test]
    fn bad_arguments_for_a_known_tool_name_the_problem() {
        let (_, plan) = plan_call(true, "greet", r#"{"whom":"x"}"#);
        let observation = plan.error_observation().unwrap();
        assert!(
            observation.contains("unknown argument `whom`"),
            "{observation}"
        );
        let (_, empty) = plan_call(true, "greet", "");
        assert!(empty
            .error_observation()
            .unwrap()
            .contains("missing required argument `who`"));
    }
}
