//! The calls of one model reply: planned through the run's toolbox (each becomes a tool job —
//! a process or an engine call such as an MCP tool —, an immediate error observation, or a
//! question for a person) with their ACTION_REQUESTs journaled, then run — one at a time, or
//! all at once with `parallel_tool_calls` — each job between its `pre_tool_execution` (may
//! skip it) and `post_tool_execution` hooks, with results journaled strictly in reply order.
//!
//! Invariant: every call of a reply is answered by exactly one ACTION_RESULT (unknown tools,
//! unparsable arguments, skipped calls and calls not started because of a stop get error or
//! hook observations), except an async ask_human, whose answer comes with `delta continue`.
//! Must not: talk to the model.

use std::time::Instant;

use futures_util::stream::{FuturesOrdered, StreamExt};
use serde_json::{json, Value};

use crate::agent::HookName;
use crate::hooks::{parse_tool_control, HookOutcome, ToolControl};
use crate::journal::PendingQuestion;
use crate::journal::{ActionStatus, Event, ToolCallRecord};
use crate::protocol::{InteractionInfo, RunErrorKind, RunEvent};
use crate::tool::call::CallPlan;
use crate::tool::compile::EngineVars;
use crate::tool::job::{JobWork, ProcessWork, ToolExecution, ToolJob};
use crate::tool::kind::KindCall;

use super::state::{error_info, AuditKind, Halt, HookVars, Run};

const NOT_RUN_INTERRUPTED: &str =
    "Error: not run: the run was interrupted before this call started.";

/// One call of the reply being acted on.
pub(super) struct PlannedCall {
    pub action_id: String,
    pub tool_name: String,
    pub tool_args: Value,
    pub resolved_command: String,
    pub plan: Planned,
}

/// What a call becomes.
pub(super) enum Planned {
    /// A job through the tool port: a process or an engine call.
    Tool(Box<ToolJob>),
    Immediate {
        observation: String,
    },
    Ask {
        prompt: String,
        input_type: String,
        sensitive: bool,
    },
}

/// A call's result as the journal records it.
struct Recorded {
    observation: String,
    status: ActionStatus,
    exit_code: Option<i32>,
    duration_ms: u64,
    execution_ref: Option<String>,
}

impl Recorded {
    fn error(observation: &str) -> Recorded {
        Recorded {
            observation: observation.to_string(),
            status: ActionStatus::Error,
            exit_code: None,
            duration_ms: 0,
            execution_ref: None,
        }
    }
}

/// How a call ended, waiting to be journaled in reply order.
enum Settled {
    Result(Recorded),
    /// Answered on the terminal: HUMAN_INPUT_RECEIVED and the result.
    Answered(PendingQuestion, Result<String, String>),
    /// No terminal to ask on: the run pauses once the reply's other calls have run.
    Deferred(PendingQuestion, InteractionInfo),
}

/// The question an iteration pauses on.
pub(super) type Pause = (PendingQuestion, InteractionInfo);

impl Run {
    /// Tool call ids become journal keys and file names: make them safe and unique in the run.
    pub(super) fn normalize_calls(&self, calls: Vec<crate::llm::ToolCall>) -> Vec<ToolCallRecord> {
        let rec = self.rec.borrow();
        // A scan per call rather than a set of every id the run used: a reply has a call or
        // two, and building the set hashed the whole history at every iteration.
        let used = |id: &str| {
            rec.events().iter().any(|e| {
                matches!(&e.event, Event::Thought { tool_calls, .. }
                    if tool_calls.iter().any(|c| c.id == id))
            })
        };
        let mut fresh: Vec<String> = Vec::new();
        let mut out = Vec::with_capacity(calls.len());
        for (k, call) in calls.into_iter().enumerate() {
            let safe = !call.id.is_empty()
                && call.id.len() <= 128
                && call
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            let id = if safe && !fresh.contains(&call.id) && !used(&call.id) {
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

    /// Plans each call and journals its ACTION_REQUEST.
    pub(super) fn plan_calls(&self, calls: Vec<ToolCallRecord>) -> Result<Vec<PlannedCall>, Halt> {
        let mut planned = Vec::with_capacity(calls.len());
        let mut asked = false;
        for call in calls {
            let (tool_args, plan, resolved_command) = self.plan_call(&call, &mut asked);
            self.append(Event::ActionRequest {
                iteration: self.iteration,
                action_id: call.id.clone(),
                tool_name: call.name.clone(),
                tool_args: tool_args.clone(),
                resolved_command: resolved_command.clone(),
            })?;
            planned.push(PlannedCall {
                action_id: call.id,
                tool_name: call.name,
                tool_args,
                resolved_command,
                plan,
            });
        }
        Ok(planned)
    }

    /// Classifies one call through the run's toolbox and turns it into what the tool phase
    /// runs; only the reply's first question for a person is asked.
    fn plan_call(&self, call: &ToolCallRecord, asked: &mut bool) -> (Value, Planned, String) {
        let agent = &self.lp.request.agent;
        let vars = EngineVars {
            agent_home: agent.home.clone(),
            cwd: self.lp.request.work_dir.clone(),
            run_id: self.lp.run_id.clone(),
        };
        let (tool_args, call_plan) = self.toolbox.plan_call(&call.name, &call.arguments, &vars);
        let resolved_command = call_plan.resolved_command();
        let plan = match call_plan {
            CallPlan::Call(KindCall::Human(_)) if *asked => Planned::Immediate {
                observation: "Error: only one ask_human call per reply is answered; ask again after this answer.".into(),
            },
            CallPlan::Call(KindCall::Human(question)) => {
                *asked = true;
                Planned::Ask {
                    prompt: question.prompt,
                    input_type: question.input_type.as_str().to_string(),
                    sensitive: question.sensitive,
                }
            }
            CallPlan::Call(KindCall::Process {
                invocation,
                timeout_ms,
            }) => {
                let work = JobWork::Process(ProcessWork {
                    argv: invocation.argv,
                    stdin: invocation.stdin,
                    cwd: self.lp.request.work_dir.clone(),
                    env: super::env::tool_call_environment(
                        &self.child_env,
                        self.lp.request.trace.as_ref(),
                        &call.id,
                    ),
                    programs: Some(self.programs.clone()),
                    sandbox: self.toolbox.sandbox().cloned(),
                });
                Planned::Tool(Box::new(self.job(&call.name, work, timeout_ms)))
            }
            CallPlan::Call(KindCall::Engine(engine)) => {
                let timeout_ms = engine.timeout_ms;
                Planned::Tool(Box::new(self.job(
                    &call.name,
                    JobWork::Engine(engine),
                    timeout_ms,
                )))
            }
            other => Planned::Immediate {
                observation: other.error_observation().unwrap_or_default(),
            },
        };
        let resolved_command = match &plan {
            Planned::Immediate { .. } => String::new(),
            _ => resolved_command,
        };
        (tool_args, plan, resolved_command)
    }

    /// A job for a call of `tool_name`, with the run's limits and a fresh record name.
    fn job(&self, tool_name: &str, work: JobWork, timeout_ms: Option<u64>) -> ToolJob {
        let config = &self.lp.config;
        ToolJob {
            tool_name: tool_name.to_string(),
            work,
            timeout: timeout_ms
                .map(std::time::Duration::from_millis)
                .unwrap_or(config.default_tool_timeout),
            head_bytes: config.observation_head_bytes,
            tail_bytes: config.observation_tail_bytes,
            file_cap: config.tool_output_file_cap,
            record: self.tool_records.borrow_mut().next(&self.paths, tool_name),
            display_root: self.paths.run_dir.clone(),
            // Taken when the job starts (see `run_tool`).
            secrets: Default::default(),
        }
    }

    /// The tool phase: runs the planned calls and journals their results in reply order.
    /// Returns the question to pause on, if an async ask_human was among the calls.
    pub(super) async fn act(&mut self, calls: Vec<PlannedCall>) -> Result<Option<Pause>, Halt> {
        let started = Instant::now();
        let mut pause = None;
        {
            let run = &*self;
            if run.lp.request.agent.parallel_tool_calls {
                let mut settling: FuturesOrdered<_> =
                    calls.into_iter().map(|call| run.settle(call)).collect();
                while let Some((call, settled)) = settling.next().await {
                    run.record(call, settled?, &mut pause)?;
                }
            } else {
                for call in calls {
                    let (call, settled) = run.settle(call).await;
                    run.record(call, settled?, &mut pause)?;
                }
            }
        }
        self.timings.tools += started.elapsed();
        self.save_progress();
        self.checkpoint()?;
        Ok(pause)
    }

    /// Runs one call to its result (not journaled yet).
    async fn settle(&self, mut call: PlannedCall) -> (PlannedCall, Result<Settled, Halt>) {
        let plan = std::mem::replace(
            &mut call.plan,
            Planned::Immediate {
                observation: String::new(),
            },
        );
        let settled = if self.lp.control.is_stopping() {
            Ok(Settled::Result(Recorded::error(NOT_RUN_INTERRUPTED)))
        } else {
            match plan {
                Planned::Immediate { observation } => {
                    Ok(Settled::Result(Recorded::error(&observation)))
                }
                Planned::Tool(job) => self.run_tool(&call, *job).await.map(Settled::Result),
                Planned::Ask {
                    prompt,
                    input_type,
                    sensitive,
                } => self.ask(&call, prompt, input_type, sensitive).await,
            }
        };
        (call, settled)
    }

    /// A job (process or engine call) between its tool hooks.
    async fn run_tool(&self, call: &PlannedCall, mut job: ToolJob) -> Result<Recorded, Halt> {
        let iteration = self.iteration;
        let vars = HookVars {
            tool_name: Some(call.tool_name.clone()),
            ..HookVars::default()
        };
        let pre = self
            .fire(
                HookName::PreToolExecution,
                || {
                    let (key, value) = job.hook_field();
                    let mut payload = json!({
                        "iteration": iteration,
                        "action_id": call.action_id,
                        "tool_name": call.tool_name,
                        "tool_args": call.tool_args,
                        "resolved_command": call.resolved_command,
                    });
                    payload[key] = value;
                    payload
                },
                vars,
            )
            .await?;
        if self.lp.control.is_stopping() {
            return Ok(Recorded::error(NOT_RUN_INTERRUPTED));
        }
        if let ToolControl::Skip { observation } = self.tool_control(pre)? {
            self.log(&format!(
                "pre_tool_execution hook skipped call {} ({})",
                call.action_id, job.tool_name
            ));
            return Ok(Recorded {
                observation,
                status: ActionStatus::Success,
                exit_code: None,
                duration_ms: 0,
                execution_ref: None,
            });
        }
        let (mcp_server, mcp_tool) = mcp_target(&job);
        self.emit(RunEvent::ToolStarted {
            run_id: self.lp.run_id.clone(),
            iteration,
            action_id: call.action_id.clone(),
            tool_name: call.tool_name.clone(),
            summary: job.summary(),
            mcp_server,
            mcp_tool,
        });
        // Answers given since the reply was planned (an earlier ask_human of it) count too.
        job.secrets = self.secrets.snapshot();
        let cancel = self.lp.control.token().child_token();
        let execution = self.lp.tools.execute(job, cancel).await;
        if let Some(problem) = execution.as_ref().and_then(|e| e.record_error.clone()) {
            self.audit_write_failed(AuditKind::ToolExecution, problem)?;
        }
        let recorded = recorded_execution(execution);
        let vars = HookVars {
            tool_name: Some(call.tool_name.clone()),
            tool_result: Some(recorded.observation.clone()),
            ..HookVars::default()
        };
        self.fire(
            HookName::PostToolExecution,
            || {
                json!({
                    "iteration": iteration,
                    "action_id": call.action_id,
                    "tool_name": call.tool_name,
                    "tool_args": call.tool_args,
                    "status": recorded.status,
                    "exit_code": recorded.exit_code,
                    "duration_ms": recorded.duration_ms,
                    "observation": recorded.observation,
                    "execution_ref": recorded.execution_ref,
                })
            },
            vars,
        )
        .await?;
        Ok(recorded)
    }

    /// What the `pre_tool_execution` hook said: run the tool (also when its output is not a
    /// control object, with a WARNING), or skip it.
    fn tool_control(&self, outcome: Option<HookOutcome>) -> Result<ToolControl, Halt> {
        let Some(outcome) = outcome.filter(HookOutcome::succeeded) else {
            return Ok(ToolControl::Run);
        };
        match parse_tool_control(&outcome.stdout) {
            Ok(control) => Ok(control),
            Err(problem) => {
                self.warn(format!(
                    "pre_tool_execution hook output ignored, the tool runs: {problem} (hint: print nothing, or {{\"action\":\"skip\",\"observation\":\"...\"}}; see {})",
                    outcome.io_path_ref
                ))?;
                Ok(ToolControl::Run)
            }
        }
    }

    /// ask_human: on the terminal through the request's prompter, or deferred to a pause.
    async fn ask(
        &self,
        call: &PlannedCall,
        prompt: String,
        input_type: String,
        sensitive: bool,
    ) -> Result<Settled, Halt> {
        let question = PendingQuestion {
            iteration: self.iteration,
            action_id: call.action_id.clone(),
            sensitive,
        };
        let Some(prompter) = self.lp.request.prompter.clone() else {
            let info = InteractionInfo {
                prompt,
                input_type,
                sensitive,
            };
            return Ok(Settled::Deferred(question, info));
        };
        self.append(Event::HumanInputRequest {
            iteration: question.iteration,
            action_id: question.action_id.clone(),
            prompt: prompt.clone(),
            input_type: input_type.clone(),
            sensitive,
        })?;
        let asked =
            tokio::task::spawn_blocking(move || prompter.ask(&prompt, &input_type, sensitive));
        let answer = tokio::select! {
            answer = asked => answer.unwrap_or_else(|e| Err(format!("the prompt failed: {e}"))),
            // The blocking prompt cannot be interrupted; the run stops without its answer.
            _ = self.lp.control.token().cancelled() => return Err(Halt::Stopped),
        };
        Ok(Settled::Answered(question, answer))
    }

    /// Journals one settled call (its turn in reply order has come).
    fn record(
        &self,
        call: PlannedCall,
        settled: Settled,
        pause: &mut Option<Pause>,
    ) -> Result<(), Halt> {
        match settled {
            Settled::Deferred(question, info) => {
                *pause = Some((question, info));
                Ok(())
            }
            Settled::Answered(_, Err(message)) => Err(Halt::Failed(error_info(
                RunErrorKind::HumanInputError,
                format!("no answer to ask_human: {message}"),
            ))),
            Settled::Answered(question, Ok(answer)) => self
                .rec
                .borrow_mut()
                .record_answer(&self.paths, &question, &answer, &self.secrets)
                .map_err(|e| Halt::Failed(error_info(RunErrorKind::JournalError, e))),
            Settled::Result(r) => {
                let preview: String = r.observation.chars().take(200).collect();
                let success = r.status == ActionStatus::Success;
                self.append(Event::ActionResult {
                    iteration: self.iteration,
                    action_id: call.action_id.clone(),
                    tool_name: call.tool_name.clone(),
                    status: r.status,
                    observation_content: r.observation,
                    exit_code: r.exit_code,
                    execution_ref: r.execution_ref,
                })?;
                self.emit(RunEvent::ToolFinished {
                    run_id: self.lp.run_id.clone(),
                    iteration: self.iteration,
                    action_id: call.action_id,
                    tool_name: call.tool_name,
                    success,
                    exit_code: r.exit_code,
                    duration_ms: r.duration_ms,
                    preview,
                });
                Ok(())
            }
        }
    }
}

/// The MCP server and tool an engine call goes to (`{"server": .., "tool": ..}`), for the
/// call's `ToolStarted`; `(None, None)` for a process.
fn mcp_target(job: &ToolJob) -> (Option<String>, Option<String>) {
    let JobWork::Engine(call) = &job.work else {
        return (None, None);
    };
    let target = call.tool.target();
    let text = |key: &str| target.get(key).and_then(Value::as_str).map(str::to_string);
    (text("server"), text("tool"))
}

fn recorded_execution(execution: Option<ToolExecution>) -> Recorded {
    let Some(e) = execution else {
        return Recorded::error("Error: the tool's actor stopped before reporting a result.");
    };
    Recorded {
        observation: if e.cancelled {
            format!(
                "{}\n(The run was interrupted while this tool ran; its process group was killed.)",
                e.observation
            )
        } else {
            e.observation
        },
        status: if e.success {
            ActionStatus::Success
        } else {
            ActionStatus::Failed
        },
        exit_code: e.exit_code,
        duration_ms: e.duration.as_millis() as u64,
        execution_ref: e
            .record_path
            .file_name()
            .map(|n| format!("io/tool_executions/{}", n.to_string_lossy())),
    }
}
