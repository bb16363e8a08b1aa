//! Planning the calls of a model reply: each tool call becomes a process job, an immediate
//! error observation (unknown tool, bad arguments) or an ask_human question, and gets its
//! ACTION_REQUEST (call ids made safe and unique first). Also the per-reply bookkeeping types
//! that `act.rs` drives.
//!
//! Invariant: every tool call of a reply is answered by exactly one ACTION_RESULT (unknown
//! tools, unparsable arguments and skipped calls get error observations).
//! Must not: start processes (that is `act.rs`) or talk to the model.

use std::collections::HashSet;

use actix::prelude::*;
use serde_json::{Map, Value};

use crate::api::InteractionInfo;
use crate::journal::{ActionStatus, Event, ToolCallRecord};
use crate::runtime::tool::ToolJob;
use crate::tool::compile::{CompiledTool, EngineVars};
use crate::workspace::tool_record_path;

use super::setup::PendingQuestion;
use super::RunActor;

/// One planned call of the current reply.
pub(super) enum Planned {
    Process(Box<ToolJob>),
    Immediate {
        observation: String,
    },
    Ask {
        prompt: String,
        input_type: String,
        sensitive: bool,
    },
    Taken,
}

pub(super) enum Slot {
    Pending,
    InFlight,
    Done(Recorded),
    Deferred,
    Recorded,
}

pub(super) struct Recorded {
    pub(super) observation: String,
    pub(super) status: ActionStatus,
    pub(super) exit_code: Option<i32>,
    pub(super) duration_ms: u64,
    pub(super) execution_ref: Option<String>,
}

pub(super) struct CallInfo {
    pub(super) action_id: String,
    pub(super) tool_name: String,
    pub(super) tool_args: Value,
    pub(super) resolved_command: String,
}

/// The calls of the reply being acted on.
pub(super) struct Acting {
    pub(super) iteration: u32,
    pub(super) started: std::time::Instant,
    pub(super) calls: Vec<CallInfo>,
    pub(super) planned: Vec<Planned>,
    pub(super) slots: Vec<Slot>,
    pub(super) next_start: usize,
    pub(super) next_record: usize,
    pub(super) in_flight: usize,
    pub(super) processes_in_flight: usize,
    pub(super) pause: Option<(PendingQuestion, InteractionInfo)>,
}

impl Acting {
    pub(super) fn has_processes_in_flight(&self) -> bool {
        self.processes_in_flight > 0
    }
}

impl RunActor {
    /// Tool call ids become journal keys and file names: make them safe and unique in the run.
    pub(super) fn normalize_calls(&self, calls: Vec<crate::llm::ToolCall>) -> Vec<ToolCallRecord> {
        let used: HashSet<&str> = self
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::Thought { tool_calls, .. } => Some(tool_calls.iter().map(|c| c.id.as_str())),
                _ => None,
            })
            .flatten()
            .collect();
        let mut fresh: Vec<String> = Vec::new();
        let mut out = Vec::with_capacity(calls.len());
        for (k, call) in calls.into_iter().enumerate() {
            let safe = !call.id.is_empty()
                && call.id.len() <= 128
                && call
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            let id = if safe && !used.contains(call.id.as_str()) && !fresh.contains(&call.id) {
                call.id
            } else {
                format!("call_{}_{}", self.iteration, k)
            };
            fresh.push(id.clone());
            out.push(ToolCallRecord {
                id,
                name: call.function.name,
                arguments: call.function.arguments,
            });
        }
        out
    }

    pub(super) fn plan(&mut self, calls: Vec<ToolCallRecord>, ctx: &mut Context<Self>) {
        let agent = self.request.agent.clone();
        let vars = EngineVars {
            agent_home: agent.home.clone(),
            cwd: self.request.work_dir.clone(),
            run_id: self.run_id.clone(),
        };
        let mut infos = Vec::with_capacity(calls.len());
        let mut planned = Vec::with_capacity(calls.len());
        let mut asked = false;
        for call in &calls {
            let (args_value, parsed) = parse_arguments(&call.arguments);
            let (plan, resolved_command) = match (call.name.as_str(), parsed) {
                (_, Err(message)) => (
                    Planned::Immediate {
                        observation: format!(
                            "Error: the arguments for tool '{}' are not valid JSON ({message}). Call it again with a JSON object matching its parameters.",
                            call.name
                        ),
                    },
                    String::new(),
                ),
                ("ask_human", Ok(args)) => {
                    if asked {
                        (
                            Planned::Immediate {
                                observation: "Error: only one ask_human call per reply is answered; ask again after this answer.".into(),
                            },
                            String::new(),
                        )
                    } else {
                        asked = true;
                        let prompt = args.get("prompt").and_then(Value::as_str).unwrap_or("").to_string();
                        let input_type = match args.get("input_type").and_then(Value::as_str) {
                            Some(t @ ("text" | "password" | "confirmation")) => t.to_string(),
                            _ => "text".to_string(),
                        };
                        let sensitive = matches!(args.get("sensitive"), Some(Value::Bool(true)))
                            || args.get("sensitive").and_then(Value::as_str) == Some("true")
                            || input_type == "password";
                        let shown = format!("ask_human {prompt:?}");
                        (
                            Planned::Ask {
                                prompt,
                                input_type,
                                sensitive,
                            },
                            shown,
                        )
                    }
                }
                (name, Ok(args)) => match agent.tools.iter().find(|t| t.name == name) {
                    None => {
                        let mut names: Vec<&str> = agent.tools.iter().map(|t| t.name.as_str()).collect();
                        names.push("ask_human");
                        (
                            Planned::Immediate {
                                observation: format!(
                                    "Error: unknown tool '{name}'. Available tools: {}.",
                                    names.join(", ")
                                ),
                            },
                            String::new(),
                        )
                    }
                    Some(tool) => match tool.build_invocation(&args, &vars) {
                        Err(e) => (
                            Planned::Immediate {
                                observation: format!("Error: invalid arguments for tool '{name}': {e}"),
                            },
                            String::new(),
                        ),
                        Ok(invocation) => {
                            let resolved = CompiledTool::render_command(&invocation);
                            let job = ToolJob {
                                tool_name: name.to_string(),
                                argv: invocation.argv,
                                stdin: invocation.stdin,
                                cwd: self.request.work_dir.clone(),
                                env: (*self.child_env).clone(),
                                timeout: tool
                                    .timeout_ms
                                    .map(std::time::Duration::from_millis)
                                    .unwrap_or(self.config.default_tool_timeout),
                                head_bytes: self.config.observation_head_bytes,
                                tail_bytes: self.config.observation_tail_bytes,
                                file_cap: self.config.tool_output_file_cap,
                                record_path: tool_record_path(&self.paths, name),
                                display_root: self.paths.run_dir.clone(),
                                // Taken when the process starts (see `start_process`).
                                secrets: Default::default(),
                            };
                            (Planned::Process(Box::new(job)), resolved)
                        }
                    },
                },
            };
            let request_event = Event::ActionRequest {
                iteration: self.iteration,
                action_id: call.id.clone(),
                tool_name: call.name.clone(),
                tool_args: args_value.clone(),
                resolved_command: resolved_command.clone(),
            };
            if !self.append(request_event, ctx) {
                return;
            }
            infos.push(CallInfo {
                action_id: call.id.clone(),
                tool_name: call.name.clone(),
                tool_args: args_value,
                resolved_command,
            });
            planned.push(plan);
        }
        let n = planned.len();
        self.acting = Some(Acting {
            iteration: self.iteration,
            started: std::time::Instant::now(),
            calls: infos,
            planned,
            slots: (0..n).map(|_| Slot::Pending).collect(),
            next_start: 0,
            next_record: 0,
            in_flight: 0,
            processes_in_flight: 0,
            pause: None,
        });
        self.pump(ctx);
    }
}

pub(super) fn error_result(observation: &str) -> Recorded {
    Recorded {
        observation: observation.to_string(),
        status: ActionStatus::Error,
        exit_code: None,
        duration_ms: 0,
        execution_ref: None,
    }
}

/// The model's arguments text as a JSON value for the journal, and as an object for the tool.
/// An empty text means no arguments.
fn parse_arguments(text: &str) -> (Value, Result<Map<String, Value>, String>) {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return (Value::Object(Map::new()), Ok(Map::new()));
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::Object(map)) => (Value::Object(map.clone()), Ok(map)),
        Ok(other) => (other, Err("expected a JSON object".to_string())),
        Err(e) => (Value::String(text.to_string()), Err(e.to_string())),
    }
}

pub(super) fn summarize_argv(argv: &[String]) -> String {
    let joined = shell_words::join(argv);
    if joined.chars().count() > 120 {
        let cut: String = joined.chars().take(117).collect();
        format!("{cut}...")
    } else {
        joined
    }
}
