//! Classifying one tool call of a model reply: [`plan_call`] turns the tool name and the
//! arguments text into a [`CallPlan`]: run a known tool with its built invocation, ask the
//! human a validated question, or answer at once with an error (unknown tool, arguments that
//! are not a JSON object, arguments the tool refuses).
//!
//! Must not: start processes, pause runs or write the journal (the run actor does that with
//! the plan).

use serde_json::{Map, Value as Json};

use super::ask_human::{self, AskHumanArgs, ASK_HUMAN};
use super::compile::{CompiledTool, EngineVars, Invocation};

/// What to do with one tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallPlan<'a> {
    /// A tool of the agent, with the argv/stdin built from the arguments.
    Run {
        tool: &'a CompiledTool,
        invocation: Invocation,
    },
    /// The built-in `ask_human`, with its validated question.
    Ask(AskHumanArgs),
    /// The model named a tool that does not exist.
    UnknownTool {
        name: String,
        /// Every tool the model may call, the built-in last.
        available: Vec<String>,
    },
    /// The arguments text is not a JSON object.
    MalformedArguments { tool: String, message: String },
    /// The tool refused the arguments (unknown or missing key, wrong type...).
    BadArguments { tool: String, message: String },
}

impl CallPlan<'_> {
    /// The observation the model reads when the call cannot run; `None` for runnable calls.
    pub fn error_observation(&self) -> Option<String> {
        match self {
            CallPlan::Run { .. } | CallPlan::Ask(_) => None,
            CallPlan::UnknownTool { name, available } => Some(format!(
                "Error: unknown tool '{name}'. Available tools: {}.",
                available.join(", ")
            )),
            CallPlan::MalformedArguments { tool, message } => Some(format!(
                "Error: the arguments for tool '{tool}' are not valid JSON ({message}). Call it again with a JSON object matching its parameters."
            )),
            CallPlan::BadArguments { tool, message } => Some(format!(
                "Error: invalid arguments for tool '{tool}': {message}"
            )),
        }
    }

    /// The journal's `resolved_command`: the command line for a run, the question for
    /// ask_human, empty for calls that do not run.
    pub fn resolved_command(&self) -> String {
        match self {
            CallPlan::Run { invocation, .. } => CompiledTool::render_command(invocation),
            CallPlan::Ask(question) => question.rendered(),
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

/// Classifies the call `name(arguments)` against the agent's `tools` (and the built-in
/// `ask_human` when `ask_human_offered`: an agent with `ask_human: false` treats a call to
/// it as an unknown tool). Returns the arguments as journaled (see [`parse_arguments`]) and
/// the plan.
pub fn plan_call<'a>(
    tools: &'a [CompiledTool],
    ask_human_offered: bool,
    name: &str,
    arguments: &str,
    vars: &EngineVars,
) -> (Json, CallPlan<'a>) {
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
    let bad = |e: super::compile::ArgumentError| CallPlan::BadArguments {
        tool: name.to_string(),
        message: e.to_string(),
    };
    let plan = if name == ASK_HUMAN && ask_human_offered {
        ask_human::parse(&args).map_or_else(bad, CallPlan::Ask)
    } else {
        match tools.iter().find(|t| t.name == name) {
            None => CallPlan::UnknownTool {
                name: name.to_string(),
                available: tools
                    .iter()
                    .map(|t| t.name.clone())
                    .chain(ask_human_offered.then(|| ASK_HUMAN.to_string()))
                    .collect(),
            },
            Some(tool) => tool
                .build_invocation(&args, vars)
                .map_or_else(bad, |invocation| CallPlan::Run { tool, invocation }),
        }
    };
    (journaled, plan)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::tool::ask_human::InputType;
    use crate::tool::compile::compile_tool;

    fn tools() -> Vec<CompiledTool> {
        let value: serde_yaml::Value =
            serde_yaml::from_str("name: greet\nexec: echo ${who}\n").unwrap();
        let mut warnings = Vec::new();
        vec![compile_tool(&value, 0, Path::new("agent.yaml"), &mut warnings).unwrap()]
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
        let tools = tools();
        let (journaled, plan) = plan_call(&tools, true, "greet", r#"{"who":"Ada"}"#, &vars());
        assert_eq!(journaled, serde_json::json!({"who": "Ada"}));
        match &plan {
            CallPlan::Run { tool, invocation } => {
                assert_eq!(tool.name, "greet");
                assert_eq!(invocation.argv, ["echo", "Ada"]);
            }
            other => panic!("expected a run, got {other:?}"),
        }
        assert_eq!(plan.error_observation(), None);
        assert_eq!(plan.resolved_command(), "echo Ada");
    }

    #[test]
    fn ask_human_is_parsed_into_a_question() {
        let tools = tools();
        let (_, plan) = plan_call(
            &tools,
            true,
            "ask_human",
            r#"{"prompt":"Go?","input_type":"confirmation"}"#,
            &vars(),
        );
        match &plan {
            CallPlan::Ask(q) => {
                assert_eq!(q.prompt, "Go?");
                assert_eq!(q.input_type, InputType::Confirmation);
            }
            other => panic!("expected a question, got {other:?}"),
        }
        assert_eq!(plan.resolved_command(), "ask_human \"Go?\"");
    }

    #[test]
    fn ask_human_with_a_wrong_key_is_bad_arguments_not_a_question() {
        let tools = tools();
        let (journaled, plan) =
            plan_call(&tools, true, "ask_human", r#"{"question":"Go?"}"#, &vars());
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
        let tools = tools();
        let (_, plan) = plan_call(&tools, false, "ask_human", r#"{"prompt":"Go?"}"#, &vars());
        assert_eq!(
            plan.error_observation().unwrap(),
            "Error: unknown tool 'ask_human'. Available tools: greet."
        );
    }

    #[test]
    fn unknown_tool_lists_the_available_ones() {
        let tools = tools();
        let (_, plan) = plan_call(&tools, true, "nope", "{}", &vars());
        assert_eq!(
            plan.error_observation().unwrap(),
            "Error: unknown tool 'nope'. Available tools: greet, ask_human."
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_are_malformed() {
        let tools = tools();
        for text in ["[1]", "{not json", "\"x\""] {
            let (_, plan) = plan_call(&tools, true, "greet", text, &vars());
            assert!(
                matches!(plan, CallPlan::MalformedArguments { .. }),
                "{text}: {plan:?}"
            );
            assert!(plan.error_observation().unwrap().contains("not valid JSON"));
        }
        let (journaled, plan) = plan_call(&tools, true, "greet", "{oops", &vars());
        assert_eq!(journaled, serde_json::json!("{oops"));
        assert!(matches!(plan, CallPlan::MalformedArguments { .. }));
    }

    #[test]
    fn bad_arguments_for_a_known_tool_name_the_problem() {
        let tools = tools();
        let (_, plan) = plan_call(&tools, true, "greet", r#"{"whom":"x"}"#, &vars());
        let observation = plan.error_observation().unwrap();
        assert!(
            observation.contains("unknown argument `whom`"),
            "{observation}"
        );
        let (_, empty) = plan_call(&tools, true, "greet", "", &vars());
        assert!(empty
            .error_observation()
            .unwrap()
            .contains("missing required argument `who`"));
    }
}
