//! Planning the calls of a model reply: each tool call is classified by the domain's
//! `tool::plan_call` and becomes a process job, an immediate error observation (unknown
//! tool, bad arguments, a second ask_human) or an ask_human question, and gets its
//! ACTION_REQUEST (call ids made safe and unique first). Also the per-reply bookkeeping types
//! that `act.rs` drives.
//!
//! Invariant: every tool call of a reply is answered by exactly one ACTION_RESULT (unknown
//! tools, unparsable arguments and skipped calls get error observations).
//! Must not: start processes (that is `act.rs`) or talk to the model.

use std::collections::HashSet;

use actix::prelude::*;
use serde_json::Value;

use crate::api::InteractionInfo;
use crate::journal::{ActionStatus, Event, ToolCallRecord};
use crate::runtime::tool::ToolJob;
use crate::tool::compile::EngineVars;
use crate::tool::{plan_call, CallPlan};
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
            let (args_value, call_plan) =
                plan_call(&agent.tools, &call.name, &call.arguments, &vars);
            let resolved_command = call_plan.resolved_command();
            let plan = match call_plan {
                CallPlan::Ask(_) if asked => Planned::Immediate {
                    observation: "Error: only one ask_human call per reply is answered; ask again after this answer.".into(),
                },
                CallPlan::Ask(question) => {
                    asked = true;
                    Planned::Ask {
                        prompt: question.prompt,
                        input_type: question.input_type.as_str().to_string(),
                        sensitive: question.sensitive,
                    }
                }
                CallPlan::Run { tool, invocation } => Planned::Process(Box::new(ToolJob {
                    tool_name: tool.name.clone(),
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
                    record_path: tool_record_path(&self.paths, &tool.name),
                    display_root: self.paths.run_dir.clone(),
                    // Taken when the process starts (see `start_process`).
                    secrets: Default::default(),
                })),
                other => Planned::Immediate {
                    observation: other.error_observation().unwrap_or_default(),
                },
            };
            let resolved_command = match &plan {
                Planned::Immediate { .. } => String::new(),
                _ => resolved_command,
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

pub(super) fn summarize_argv(argv: &[String]) -> String {
    let joined = shell_words::join(argv);
    if joined.chars().count() > 120 {
        let cut: String = joined.chars().take(117).collect();
        format!("{cut}...")
    } else {
        joined
    }
}
