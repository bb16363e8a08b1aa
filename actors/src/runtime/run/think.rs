//! The model step of an iteration, as a chain of continuations on the RunActor:
//! `think` (cap check, `on_iteration_start`) → `build_request` (context builder) →
//! `pre_llm_request` (may override the request) → `call_model` (through the gateway) →
//! `on_model_reply` (io/invocations record, usage) → `post_llm_response` → `record_thought`
//! (THOUGHT, then the calls, or the final answer; a reply cut at the output limit without a
//! call fails the run `truncated`).
//!
//! Must not: run tools (that is `act.rs`) or write the journal except through the actor.

use std::sync::Arc;

use actix::prelude::*;
use serde_json::{json, Value};

use crate::agent::HookName;
use crate::api::{RunEvent, RunRequest};
use crate::context::{build_messages, ContextError, ContextInputs};
use crate::hooks::redact_json;
use crate::journal::Event;
use crate::llm::{ChatCompletion, ChatRequest, RequestMeta};
use crate::protocol::{RunStatus, TokenUsage};
use crate::runtime::gateway::{CallFailure, CallOutcome, Complete};
use crate::tool::compile::{ask_human_schema, CompiledTool};
use crate::workspace::{invocation_record_path, write_json_file};

use super::hooks::{AuditKind, HookVars};
use super::{error_info, RunActor};

type ModelResult = Result<CallOutcome, CallFailure>;

/// The finish reason of a reply cut at the output limit (`max_tokens`).
pub(super) const TRUNCATED: &str = "length";

impl RunActor {
    pub(super) fn think(&mut self, ctx: &mut Context<Self>) {
        if self.halted(ctx) {
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
        self.fire_hook(
            HookName::OnIterationStart,
            |act| json!({"iteration": act.iteration, "max_iterations": act.max_iterations}),
            HookVars::default(),
            ctx,
            |act, _, ctx| {
                if !act.halted(ctx) {
                    act.build_request(ctx);
                }
            },
        );
    }

    /// Builds the messages from the journal through the context builder.
    fn build_request(&mut self, ctx: &mut Context<Self>) {
        let agent = self.request.agent.clone();
        let events = self.events.clone();
        let secrets = self.secrets.clone();
        let generator_env = self.generator_env.clone();
        let cancel = self.cancel.clone();
        let run_id = self.run_id.clone();
        let work_dir = self.request.work_dir.clone();
        let run_dir = self.paths.run_dir.clone();
        let journal_path = self.paths.journal.clone();
        let tools = self.tool_schemas.clone();
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
            Ok(ChatRequest {
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
            })
        };
        let handle = ctx.spawn(fut.into_actor(self).map(
            |built: Result<ChatRequest, ContextError>, act, ctx| {
                act.model_call = None;
                act.on_request_built(built, ctx);
            },
        ));
        self.model_call = Some(handle);
    }

    fn on_request_built(
        &mut self,
        built: Result<ChatRequest, ContextError>,
        ctx: &mut Context<Self>,
    ) {
        if self.finished {
            return;
        }
        let request = match built {
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
            Ok(request) => request,
        };
        let payload = if self.has_hook(HookName::PreLlmRequest) {
            serde_json::to_value(&request).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        self.fire_hook(
            HookName::PreLlmRequest,
            move |_| payload,
            HookVars::default(),
            ctx,
            move |act, outcome, ctx| {
                if act.halted(ctx) {
                    return;
                }
                let mut request = request;
                if let Some(outcome) = outcome {
                    act.apply_override(&mut request, &outcome, ctx);
                }
                if !act.finished {
                    act.call_model(request, ctx);
                }
            },
        );
    }

    fn call_model(&mut self, request: ChatRequest, ctx: &mut Context<Self>) {
        let gateway = self.gateway.clone();
        let cancel = self.cancel.clone();
        let events_tx = self.events_tx.clone();
        let meta = RequestMeta {
            agent_name: self.request.agent.name.clone(),
            run_id: self.run_id.clone(),
            timeouts: self
                .request
                .agent
                .llm
                .timeouts
                .resolve(self.config.llm_timeouts),
        };
        let retry_run_id = self.run_id.clone();
        let sent = request.clone();
        let fut = async move {
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
            gateway
                .send(Complete {
                    request: sent,
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
                })
        };
        let handle = ctx.spawn(fut.into_actor(self).map(|outcome: ModelResult, act, ctx| {
            act.model_call = None;
            act.on_model_reply(request, outcome, ctx);
        }));
        self.model_call = Some(handle);
    }

    fn on_model_reply(
        &mut self,
        request: ChatRequest,
        outcome: ModelResult,
        ctx: &mut Context<Self>,
    ) {
        if self.finished {
            return;
        }
        let record_path = invocation_record_path(&self.paths, self.iteration);
        let record_ref = record_path
            .file_name()
            .map(|n| format!("io/invocations/{}", n.to_string_lossy()));
        let outcome = match outcome {
            Err(failure) => {
                let written = self.write_invocation_record(
                    &record_path,
                    json!({
                        "iteration": self.iteration,
                        "request": request,
                        "error": failure.error.to_string(),
                        "attempts": failure.attempts,
                        "failed_attempts": failure.failed_attempts,
                    }),
                );
                if let Err(e) = written {
                    self.audit_write_failed(AuditKind::Invocation, e.to_string(), ctx);
                }
                if failure.cancelled {
                    self.interrupt_now(ctx);
                } else {
                    let message = format!(
                        "model call failed after {} attempt(s): {}",
                        failure.attempts, failure.error
                    );
                    self.log.line(&message);
                    let kind = match failure.error {
                        crate::llm::LlmError::Timeout { .. } => "llm_timeout",
                        _ => "llm_error",
                    };
                    self.finish(
                        RunStatus::Failed,
                        None,
                        Some(error_info(kind, message)),
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
        let written = self.write_invocation_record(
            &record_path,
            json!({
                "iteration": self.iteration,
                "request": request,
                "response": completion.raw,
                "duration_ms": outcome.duration.as_millis() as u64,
                "waited_ms": outcome.waited.as_millis() as u64,
                "attempts": outcome.attempts,
                "failed_attempts": outcome.failed_attempts,
            }),
        );
        if let Err(e) = written {
            self.audit_write_failed(AuditKind::Invocation, e.to_string(), ctx);
        }
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
        let payload = if self.has_hook(HookName::PostLlmResponse) {
            completion_payload(self.iteration, &completion)
        } else {
            Value::Null
        };
        self.fire_hook(
            HookName::PostLlmResponse,
            move |_| payload,
            HookVars::default(),
            ctx,
            move |act, _, ctx| {
                if !act.halted(ctx) {
                    act.record_thought(completion, record_ref, ctx);
                }
            },
        );
    }

    /// io/invocations keeps the request as sent, except sensitive answers (kept only in the
    /// run's 0600 secrets files).
    fn write_invocation_record(
        &self,
        path: &std::path::Path,
        mut record: Value,
    ) -> Result<(), crate::workspace::WorkspaceError> {
        if !self.secrets.is_empty() {
            let secrets: Vec<String> = self.secrets.values().cloned().collect();
            redact_json(&mut record, &secrets);
        }
        write_json_file(path, &record)
    }

    fn record_thought(
        &mut self,
        completion: ChatCompletion,
        record_ref: Option<String>,
        ctx: &mut Context<Self>,
    ) {
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
        if calls.is_empty() && completion.finish_reason.as_deref() == Some(TRUNCATED) {
            let message = self.truncation_message(text.is_some());
            self.log.line(&message);
            self.finish(
                RunStatus::Failed,
                None,
                Some(error_info("truncated", message)),
                None,
                ctx,
            );
            return;
        }
        if calls.is_empty() {
            // The final answer ends the iteration (and the run).
            self.fire_hook(
                HookName::OnIterationEnd,
                |act| act.iteration_end_payload(true),
                HookVars::default(),
                ctx,
                move |act, _, ctx| {
                    if !act.halted(ctx) {
                        act.finish(
                            RunStatus::Completed,
                            Some(text.unwrap_or_default()),
                            None,
                            None,
                            ctx,
                        );
                    }
                },
            );
            return;
        }
        self.plan(calls, ctx);
    }

    /// A reply cut at the output limit with no tool call is not an answer: presenting it as
    /// COMPLETED (possibly empty) would hide the cut. The run fails with a way forward.
    fn truncation_message(&self, partial: bool) -> String {
        let limit = match self.request.agent.llm.max_tokens {
            Some(n) => format!("raise `llm.max_tokens` in agent.yaml (now {n})"),
            None => "set `llm.max_tokens` in agent.yaml (the provider's default limit applied)"
                .to_string(),
        };
        format!(
            "the model's reply was cut off at its output limit (finish_reason: length) before it gave an answer or a tool call{}; hint: {limit}, then continue the run with `delta continue --run-id {} -w {} -m \"...\"`",
            if partial { " (the partial reply is in the journal)" } else { "" },
            self.run_id,
            self.request.work_dir.display()
        )
    }

    /// `on_iteration_end` payload: the iteration and the results journaled in it.
    pub(super) fn iteration_end_payload(&self, final_answer: bool) -> Value {
        let results: Vec<Value> = self
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Event::ActionResult {
                    iteration,
                    action_id,
                    tool_name,
                    status,
                    exit_code,
                    ..
                } if *iteration == self.iteration => Some(json!({
                    "action_id": action_id,
                    "tool_name": tool_name,
                    "status": status,
                    "exit_code": exit_code,
                })),
                _ => None,
            })
            .collect();
        json!({
            "iteration": self.iteration,
            "final_answer": final_answer,
            "results": results,
        })
    }
}

/// The tools offered to the model: the agent's, then the built-in ask_human (built once per
/// run).
pub(super) fn tool_schemas(request: &RunRequest) -> Arc<Vec<Value>> {
    let mut schemas: Vec<Value> = request
        .agent
        .tools
        .iter()
        .map(CompiledTool::openai_schema)
        .collect();
    schemas.push(ask_human_schema());
    Arc::new(schemas)
}

/// `post_llm_response` payload: the provider's response body (synthesised in its shape when
/// the backend kept none) and the iteration.
fn completion_payload(iteration: u32, completion: &ChatCompletion) -> Value {
    let response = if completion.raw.is_null() {
        completion.to_openai_json(chrono::Utc::now().timestamp())
    } else {
        completion.raw.clone()
    };
    json!({"iteration": iteration, "response": response})
}
