//! The iteration itself: think (context + model call), plan the reply's tool calls, run them
//! in `ToolActor`s, journal their results in reply order, and loop.
//!
//! Invariants kept here: every tool call of a reply is answered by exactly one ACTION_RESULT
//! (unknown tools, unparsable arguments and skipped calls get error observations); results are
//! journaled in reply order even when calls run concurrently; an async ask_human pauses the
//! run only after the reply's other calls have run.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Map, Value};

use crate::api::{InteractionInfo, RunEvent, RunRequest, SupervisorConfig};
use crate::context::{build_messages, ContextError, ContextInputs};
use crate::journal::{ActionStatus, Event, ToolCallRecord};
use crate::llm::{ChatRequest, RequestMeta};
use crate::protocol::{RunStatus, TokenUsage};
use crate::runtime::gateway::{CallFailure, CallOutcome, Complete};
use crate::runtime::tool::{Execute, ToolActor, ToolExecution, ToolJob};
use crate::tool::compile::{ask_human_schema, CompiledTool, EngineVars};
use crate::tool::process::build_child_env;
use crate::workspace::{invocation_record_path, tool_record_path, write_json_file, RunPaths};

use super::human::{record_answer, write_request};
use super::setup::PendingQuestion;
use super::{error_info, RunActor};

/// One planned call of the current reply.
enum Planned {
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

enum Slot {
    Pending,
    InFlight,
    Done(Recorded),
    Deferred,
    Recorded,
}

struct Recorded {
    observation: String,
    status: ActionStatus,
    exit_code: Option<i32>,
    duration_ms: u64,
    execution_ref: Option<String>,
}

struct CallInfo {
    action_id: String,
    tool_name: String,
}

/// The calls of the reply being acted on.
pub(super) struct Acting {
    iteration: u32,
    started: std::time::Instant,
    calls: Vec<CallInfo>,
    planned: Vec<Planned>,
    slots: Vec<Slot>,
    next_start: usize,
    next_record: usize,
    in_flight: usize,
    processes_in_flight: usize,
    pause: Option<(PendingQuestion, InteractionInfo)>,
}

impl Acting {
    pub(super) fn has_processes_in_flight(&self) -> bool {
        self.processes_in_flight > 0
    }
}

/// Environment for tools (complete, secrets removed) and for context generators.
pub(super) fn child_environments(
    run_id: &str,
    request: &RunRequest,
    config: &SupervisorConfig,
    paths: &RunPaths,
) -> (Vec<(String, String)>, BTreeMap<String, String>) {
    let mut secrets = vec!["DELTA_API_KEY".to_string()];
    if let Some(name) = &request.agent.llm.api_key_env {
        secrets.push(name.clone());
    }
    let home = request.agent.home.to_string_lossy().into_owned();
    let cwd = request.work_dir.to_string_lossy().into_owned();
    let extra = vec![
        ("DELTA_RUN_ID".to_string(), run_id.to_string()),
        (
            "DELTA_RUN_DIR".to_string(),
            paths.run_dir.to_string_lossy().into_owned(),
        ),
        ("DELTA_AGENT_HOME".to_string(), home.clone()),
        ("DELTA_CWD".to_string(), cwd),
        ("AGENT_HOME".to_string(), home),
    ];
    let tools = build_child_env(
        &request.env,
        &secrets,
        &extra,
        config.tool_path_dir.as_deref(),
    );
    let generators: BTreeMap<String, String> =
        build_child_env(&request.env, &secrets, &[], config.tool_path_dir.as_deref())
            .into_iter()
            .collect();
    (tools, generators)
}

type ModelStep = Result<(ChatRequest, Result<CallOutcome, CallFailure>), ContextError>;

impl RunActor {
    pub(super) fn think(&mut self, ctx: &mut Context<Self>) {
        if self.finished {
            return;
        }
        if self.stop.is_some() {
            self.interrupt_now(ctx);
            return;
        }
        if self.iterations_this_start >= self.max_iterations {
            let message = format!(
                "the run reached its iteration cap ({}) without a final answer; continue it with `delta continue --run-id {} -w {} -m \"...\"` or raise --max-iterations",
                self.max_iterations,
                self.run_id,
                self.request.work_dir.display()
            );
            self.finish(
                RunStatus::Failed,
                None,
                Some(error_info("max_iterations", message)),
                None,
                ctx,
            );
            return;
        }
        self.iteration += 1;
        self.iterations_this_start += 1;
        self.log.line(&format!("iteration {}", self.iteration));
        self.emit(RunEvent::IterationStarted {
            run_id: self.run_id.clone(),
            iteration: self.iteration,
            max_iterations: self.max_iterations,
        });

        let agent = self.request.agent.clone();
        let events = self.events.clone();
        let secrets = self.secrets.clone();
        let generator_env = self.generator_env.clone();
        let gateway = self.gateway.clone();
        let cancel = self.cancel.clone();
        let events_tx = self.events_tx.clone();
        let run_id = self.run_id.clone();
        let work_dir = self.request.work_dir.clone();
        let run_dir = self.paths.run_dir.clone();
        let journal_path = self.paths.journal.clone();
        let tools = self.tool_schemas();
        let fut = async move {
            let inputs = ContextInputs {
                agent_home: &agent.home,
                work_dir: &work_dir,
                run_id: &run_id,
                run_dir: &run_dir,
                journal_path: &journal_path,
                child_env: &generator_env,
            };
            let messages =
                build_messages(&agent.context, &inputs, &events, &secrets, &cancel).await?;
            let llm = &agent.llm;
            let request = ChatRequest {
                model: llm.model.clone(),
                messages,
                temperature: llm.temperature,
                max_tokens: llm.max_tokens,
                top_p: llm.top_p,
                frequency_penalty: llm.frequency_penalty,
                presence_penalty: llm.presence_penalty,
                tools: (*tools).clone(),
                tool_choice: Some("auto".to_string()),
                extra: Default::default(),
            };
            let meta = RequestMeta {
                agent_name: agent.name.clone(),
                run_id: run_id.clone(),
            };
            let retry_run_id = run_id.clone();
            let on_retry = Box::new(
                move |attempt: u32, error: &crate::llm::LlmError, delay: std::time::Duration| {
                    let _ = events_tx.send(RunEvent::ModelRetry {
                        run_id: retry_run_id.clone(),
                        attempt,
                        error: error.to_string(),
                        delay_ms: delay.as_millis() as u64,
                    });
                },
            );
            let outcome = gateway
                .send(Complete {
                    request: request.clone(),
                    meta,
                    cancel: cancel.clone(),
                    on_retry: Some(on_retry),
                })
                .await
                .unwrap_or_else(|_| {
                    Err(CallFailure {
                        error: crate::llm::LlmError::Transport(
                            "the model gateway has stopped".into(),
                        ),
                        attempts: 0,
                        failed_attempts: Vec::new(),
                        cancelled: cancel.is_cancelled(),
                    })
                });
            Ok((request, outcome))
        };
        let handle = ctx.spawn(fut.into_actor(self).map(|step: ModelStep, act, ctx| {
            act.model_call = None;
            act.on_model_reply(step, ctx);
        }));
        self.model_call = Some(handle);
    }

    fn tool_schemas(&self) -> Arc<Vec<Value>> {
        let mut schemas: Vec<Value> = self
            .request
            .agent
            .tools
            .iter()
            .map(CompiledTool::openai_schema)
            .collect();
        schemas.push(ask_human_schema());
        Arc::new(schemas)
    }

    fn on_model_reply(&mut self, step: ModelStep, ctx: &mut Context<Self>) {
        if self.finished {
            return;
        }
        let (request, outcome) = match step {
            Err(ContextError::Cancelled) => {
                self.interrupt_now(ctx);
                return;
            }
            Err(e) => {
                let message = e.to_string();
                self.log.line(&message);
                self.finish(
                    RunStatus::Failed,
                    None,
                    Some(error_info("context_error", message)),
                    None,
                    ctx,
                );
                return;
            }
            Ok(pair) => pair,
        };
        let record_path = invocation_record_path(&self.paths, self.iteration);
        let record_ref = record_path
            .file_name()
            .map(|n| format!("io/invocations/{}", n.to_string_lossy()));
        let outcome = match outcome {
            Err(failure) => {
                let _ = write_json_file(
                    &record_path,
                    &json!({
                        "iteration": self.iteration,
                        "request": request,
                        "error": failure.error.to_string(),
                        "attempts": failure.attempts,
                        "failed_attempts": failure.failed_attempts,
                    }),
                );
                if failure.cancelled {
                    self.interrupt_now(ctx);
                } else {
                    let message = format!(
                        "model call failed after {} attempt(s): {}",
                        failure.attempts, failure.error
                    );
                    self.log.line(&message);
                    self.finish(
                        RunStatus::Failed,
                        None,
                        Some(error_info("llm_error", message)),
                        None,
                        ctx,
                    );
                }
                return;
            }
            Ok(outcome) => outcome,
        };
        self.timings.model += outcome.duration.saturating_sub(outcome.waited);
        self.timings.queue += outcome.waited;
        let completion = outcome.completion;
        let _ = write_json_file(
            &record_path,
            &json!({
                "iteration": self.iteration,
                "request": request,
                "response": completion.raw,
                "duration_ms": outcome.duration.as_millis() as u64,
                "waited_ms": outcome.waited.as_millis() as u64,
                "attempts": outcome.attempts,
                "failed_attempts": outcome.failed_attempts,
            }),
        );
        if let Some(usage) = &completion.usage {
            let used = TokenUsage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                total_tokens: usage.total_tokens,
            };
            self.usage.add(used);
            let model = completion
                .model
                .clone()
                .unwrap_or_else(|| request.model.clone());
            self.model_usage.entry(model).or_default().add(used);
        }

        let text = completion.message.content.clone().filter(|t| !t.is_empty());
        let calls = self.normalize_calls(completion.message.tool_calls.unwrap_or_default());
        let thought = Event::Thought {
            iteration: self.iteration,
            content: text.clone(),
            tool_calls: calls.clone(),
            llm_invocation_ref: record_ref,
            finish_reason: completion.finish_reason.clone(),
        };
        if !self.append(thought, ctx) {
            return;
        }
        if let Some(t) = &text {
            self.emit(RunEvent::Thought {
                run_id: self.run_id.clone(),
                iteration: self.iteration,
                text: t.clone(),
            });
        }
        if calls.is_empty() {
            self.finish(
                RunStatus::Completed,
                Some(text.unwrap_or_default()),
                None,
                None,
                ctx,
            );
            return;
        }
        self.plan(calls, ctx);
    }

    /// Tool call ids become journal keys and file names: make them safe and unique in the run.
    fn normalize_calls(&self, calls: Vec<crate::llm::ToolCall>) -> Vec<ToolCallRecord> {
        let mut used: HashSet<&str> = self
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
        used.clear();
        out
    }

    fn plan(&mut self, calls: Vec<ToolCallRecord>, ctx: &mut Context<Self>) {
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
                tool_args: args_value,
                resolved_command,
            };
            if !self.append(request_event, ctx) {
                return;
            }
            infos.push(CallInfo {
                action_id: call.id.clone(),
                tool_name: call.name.clone(),
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

    /// Starts whatever may start now, then journals whatever is ready in order.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let parallel = self.request.agent.parallel_tool_calls;
        let stopping = self.stop.is_some();
        loop {
            let Some(acting) = self.acting.as_mut() else {
                return;
            };
            if acting.next_start >= acting.planned.len() || (!parallel && acting.in_flight > 0) {
                break;
            }
            let i = acting.next_start;
            acting.next_start += 1;
            let plan = std::mem::replace(&mut acting.planned[i], Planned::Taken);
            if stopping {
                acting.slots[i] = Slot::Done(error_result(
                    "Error: not run: the run was interrupted before this call started.",
                ));
                continue;
            }
            match plan {
                Planned::Taken => {}
                Planned::Immediate { observation } => {
                    acting.slots[i] = Slot::Done(error_result(&observation))
                }
                Planned::Process(job) => {
                    acting.slots[i] = Slot::InFlight;
                    acting.in_flight += 1;
                    acting.processes_in_flight += 1;
                    let iteration = acting.iteration;
                    let action_id = acting.calls[i].action_id.clone();
                    let tool_name = acting.calls[i].tool_name.clone();
                    let summary = summarize_argv(&job.argv);
                    self.emit(RunEvent::ToolStarted {
                        run_id: self.run_id.clone(),
                        iteration,
                        action_id,
                        tool_name,
                        summary,
                    });
                    let tool = ToolActor.start();
                    let cancel = self.cancel.child_token();
                    tool.send(Execute { job: *job, cancel })
                        .into_actor(self)
                        .map(move |res, act, ctx| act.on_tool_done(i, res.ok(), ctx))
                        .spawn(ctx);
                }
                Planned::Ask {
                    prompt,
                    input_type,
                    sensitive,
                } => self.start_question(i, prompt, input_type, sensitive, ctx),
            }
        }
        self.flush_results(ctx);
    }

    fn start_question(
        &mut self,
        i: usize,
        prompt: String,
        input_type: String,
        sensitive: bool,
        ctx: &mut Context<Self>,
    ) {
        let Some(acting) = self.acting.as_mut() else {
            return;
        };
        let question = PendingQuestion {
            iteration: acting.iteration,
            action_id: acting.calls[i].action_id.clone(),
            sensitive,
        };
        let info = InteractionInfo {
            prompt: prompt.clone(),
            input_type: input_type.clone(),
            sensitive,
        };
        let Some(prompter) = self.request.prompter.clone() else {
            acting.slots[i] = Slot::Deferred;
            acting.pause = Some((question, info));
            return;
        };
        acting.slots[i] = Slot::InFlight;
        acting.in_flight += 1;
        let request = Event::HumanInputRequest {
            iteration: question.iteration,
            action_id: question.action_id.clone(),
            prompt: prompt.clone(),
            input_type: input_type.clone(),
            sensitive,
        };
        if !self.append(request, ctx) {
            return;
        }
        let ask =
            tokio::task::spawn_blocking(move || prompter.ask(&prompt, &input_type, sensitive));
        ask.into_actor(self)
            .map(move |answer, act, ctx| {
                let answer = answer.unwrap_or_else(|e| Err(format!("the prompt failed: {e}")));
                act.on_answer(i, question, answer, ctx);
            })
            .spawn(ctx);
    }

    fn on_answer(
        &mut self,
        i: usize,
        question: PendingQuestion,
        answer: Result<String, String>,
        ctx: &mut Context<Self>,
    ) {
        if self.finished {
            return;
        }
        let answer = match answer {
            Ok(a) => a,
            Err(message) => {
                self.finish(
                    RunStatus::Failed,
                    None,
                    Some(error_info(
                        "human_input_error",
                        format!("no answer to ask_human: {message}"),
                    )),
                    None,
                    ctx,
                );
                return;
            }
        };
        let Some(journal) = self.journal.as_mut() else {
            return;
        };
        match record_answer(journal, &self.paths, &question, &answer) {
            Ok(events) => {
                Arc::make_mut(&mut self.events).extend(events);
                if question.sensitive {
                    Arc::make_mut(&mut self.secrets).insert(question.action_id.clone(), answer);
                }
            }
            Err(e) => {
                self.finish(
                    RunStatus::Failed,
                    None,
                    Some(error_info(
                        "journal_error",
                        format!("cannot write the journal: {e}"),
                    )),
                    None,
                    ctx,
                );
                return;
            }
        }
        if let Some(acting) = self.acting.as_mut() {
            // The answer's ACTION_RESULT is already journaled by record_answer.
            acting.slots[i] = Slot::Recorded;
            acting.in_flight -= 1;
        }
        self.pump(ctx);
    }

    fn on_tool_done(
        &mut self,
        i: usize,
        execution: Option<ToolExecution>,
        ctx: &mut Context<Self>,
    ) {
        if self.finished {
            return;
        }
        let Some(acting) = self.acting.as_mut() else {
            return;
        };
        let recorded = match execution {
            Some(e) => Recorded {
                observation: if e.cancelled {
                    format!("{}\n(The run was interrupted while this tool ran; its process group was killed.)", e.observation)
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
            },
            None => error_result("Error: the tool's actor stopped before reporting a result."),
        };
        acting.slots[i] = Slot::Done(recorded);
        acting.in_flight -= 1;
        acting.processes_in_flight -= 1;
        self.pump(ctx);
    }

    fn flush_results(&mut self, ctx: &mut Context<Self>) {
        loop {
            let Some(acting) = self.acting.as_mut() else {
                return;
            };
            if acting.next_record >= acting.slots.len() {
                break;
            }
            let i = acting.next_record;
            match std::mem::replace(&mut acting.slots[i], Slot::Recorded) {
                Slot::Done(r) => {
                    acting.next_record += 1;
                    let iteration = acting.iteration;
                    let action_id = acting.calls[i].action_id.clone();
                    let tool_name = acting.calls[i].tool_name.clone();
                    let preview: String = r.observation.chars().take(200).collect();
                    let success = r.status == ActionStatus::Success;
                    let event = Event::ActionResult {
                        iteration,
                        action_id: action_id.clone(),
                        tool_name: tool_name.clone(),
                        status: r.status,
                        observation_content: r.observation,
                        exit_code: r.exit_code,
                        execution_ref: r.execution_ref,
                    };
                    if !self.append(event, ctx) {
                        return;
                    }
                    self.emit(RunEvent::ToolFinished {
                        run_id: self.run_id.clone(),
                        iteration,
                        action_id,
                        tool_name,
                        success,
                        exit_code: r.exit_code,
                        duration_ms: r.duration_ms,
                        preview,
                    });
                }
                Slot::Deferred | Slot::Recorded => acting.next_record += 1,
                other @ (Slot::Pending | Slot::InFlight) => {
                    acting.slots[i] = other;
                    break;
                }
            }
        }
        let done = self
            .acting
            .as_ref()
            .is_some_and(|a| a.next_record >= a.slots.len() && a.in_flight == 0);
        if done {
            self.end_iteration(ctx);
        }
    }

    fn end_iteration(&mut self, ctx: &mut Context<Self>) {
        let Some(acting) = self.acting.take() else {
            return;
        };
        self.timings.tools += acting.started.elapsed();
        self.save_metadata(false);
        if self.stop.is_some() {
            self.interrupt_now(ctx);
            return;
        }
        if let Some((question, info)) = acting.pause {
            self.pause_for_human(question, info, ctx);
            return;
        }
        self.think(ctx);
    }

    fn pause_for_human(
        &mut self,
        question: PendingQuestion,
        info: InteractionInfo,
        ctx: &mut Context<Self>,
    ) {
        let request_id = uuid::Uuid::new_v4().to_string();
        if let Err(e) = write_request(
            &self.paths,
            &request_id,
            &info.prompt,
            &info.input_type,
            info.sensitive,
        ) {
            self.finish(
                RunStatus::Failed,
                None,
                Some(error_info(
                    "setup_error",
                    format!("cannot write interaction/request.json: {e}"),
                )),
                None,
                ctx,
            );
            return;
        }
        let event = Event::HumanInputRequest {
            iteration: question.iteration,
            action_id: question.action_id,
            prompt: info.prompt.clone(),
            input_type: info.input_type.clone(),
            sensitive: info.sensitive,
        };
        if !self.append(event, ctx) {
            return;
        }
        self.finish(RunStatus::WaitingForInput, None, None, Some(info), ctx);
    }
}

fn error_result(observation: &str) -> Recorded {
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

fn summarize_argv(argv: &[String]) -> String {
    let joined = shell_words::join(argv);
    if joined.chars().count() > 120 {
        let cut: String = joined.chars().take(117).collect();
        format!("{cut}...")
    } else {
        joined
    }
}
