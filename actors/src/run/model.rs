//! The model step of an iteration: the request built from the journal by the context
//! builder, a `pre_llm_request` override applied, the call through the model port, its
//! io/invocations record and the usage it reports.
//!
//! Must not: journal the reply (the THOUGHT is `drive.rs`'s) or run tools.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::context::{build_messages, ContextError, ContextInputs};
use crate::hooks::{apply_request_override, HookOutcome, OVERRIDABLE_FIELDS};
use crate::llm::{CallOutcome, ChatCompletion, ChatRequest, LlmError, RequestMeta, Usage};
use crate::protocol::TokenUsage;
use crate::protocol::{RunErrorKind, RunEvent};
use crate::workspace::write_invocation_record;

use super::state::{error_info, AuditKind, Halt, Run};

/// One `io/invocations/` record: the request as sent, and the provider's response as
/// received (or why the call failed), with its timings and attempts. Serialized straight to
/// the file, without an intermediate JSON tree.
#[derive(serde::Serialize)]
struct InvocationRecord<'a> {
    iteration: u32,
    request: RecordedRequest<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waited_ms: Option<u64>,
    attempts: u32,
    failed_attempts: &'a [String],
}

/// The request in its record: the very bytes sent (compact, serialized once for the wire
/// and the record), or the request itself when the run could not serialize it up front.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum RecordedRequest<'a> {
    AsSent(&'a RawValue),
    Request(&'a ChatRequest),
}

impl<'a> RecordedRequest<'a> {
    fn new(request: &'a ChatRequest, wire_body: Option<&'a WireBody>) -> Self {
        wire_body.map_or(RecordedRequest::Request(request), |body| {
            RecordedRequest::AsSent(&body.0)
        })
    }
}

/// The request serialized for the wire, shared by the HTTP body (as `Bytes`, without a copy)
/// and the record (as the `RawValue` it already is: the text is not parsed again to embed it).
#[derive(Clone)]
struct WireBody(Arc<Box<RawValue>>);

impl AsRef<[u8]> for WireBody {
    fn as_ref(&self) -> &[u8] {
        self.0.get().as_bytes()
    }
}

impl Run {
    /// The messages for this iteration, from the journal through the context builder.
    pub(super) async fn build_request(&self) -> Result<ChatRequest, Halt> {
        let agent = &self.lp.request.agent;
        let events = self.rec.borrow().snapshot();
        let secrets = self.secrets.snapshot();
        let inputs = ContextInputs {
            agent_home: &agent.home,
            work_dir: &self.lp.request.work_dir,
            run_id: &self.lp.run_id,
            run_dir: &self.paths.run_dir,
            journal_path: &self.paths.journal,
            child_env: &self.generator_env,
            folders: &self.context_folders,
        };
        let built = build_messages(
            &agent.context,
            &inputs,
            &events,
            &secrets,
            self.lp.control.token(),
        )
        .await;
        let messages = match built {
            Ok(messages) => messages,
            Err(ContextError::Cancelled) => return Err(Halt::Stopped),
            Err(e) => {
                let message = e.to_string();
                self.log(&message);
                return Err(Halt::Failed(error_info(
                    RunErrorKind::ContextError,
                    message,
                )));
            }
        };
        let llm = &agent.llm;
        let mut extra = serde_json::Map::new();
        if let Some(format) = llm.response_format {
            extra.insert("response_format".into(), format.request_value());
        }
        // No tools offered (none declared, `ask_human: false`): no `tool_choice` either.
        let tool_choice = (!self.tool_schemas.is_empty()).then(|| "auto".to_string());
        Ok(ChatRequest {
            model: llm.model.clone(),
            messages,
            temperature: llm.temperature,
            max_tokens: llm.max_tokens,
            top_p: llm.top_p,
            frequency_penalty: llm.frequency_penalty,
            presence_penalty: llm.presence_penalty,
            tools: self.tool_schemas.clone(),
            tool_choice,
            extra,
        })
    }

    /// A successful `pre_llm_request` hook's stdout may replace parts of the request.
    pub(super) fn apply_override(
        &self,
        request: &mut ChatRequest,
        outcome: &HookOutcome,
    ) -> Result<(), Halt> {
        if !outcome.succeeded() {
            return Ok(());
        }
        if !outcome.stdout_complete {
            return self.warn(format!(
                "pre_llm_request hook output ignored: it printed more than {} bytes ({})",
                crate::hooks::HOOK_OUTPUT_HEAD_BYTES,
                outcome.io_path_ref
            ));
        }
        match apply_request_override(request, &outcome.stdout) {
            Ok(report) => {
                if !report.changed.is_empty() {
                    self.log(&format!(
                        "pre_llm_request hook replaced: {}",
                        report.changed.join(", ")
                    ));
                }
                if report.ignored_keys.is_empty() {
                    return Ok(());
                }
                self.warn(format!(
                    "pre_llm_request hook: ignored key(s) {} (only {} can be replaced)",
                    report.ignored_keys.join(", "),
                    OVERRIDABLE_FIELDS.join(", ")
                ))
            }
            Err(problem) => self.warn(format!(
                "pre_llm_request hook output ignored, the request is sent unchanged: {problem} (hint: print nothing, or one JSON object with messages, model, temperature and/or max_tokens; see {})",
                outcome.io_path_ref
            )),
        }
    }

    /// One model call through the model port; its io/invocations record either way.
    pub(super) async fn call_model(
        &mut self,
        request: ChatRequest,
    ) -> Result<(ChatCompletion, Option<String>), Halt> {
        // Serialized once: the same bytes are the HTTP body and the record's request.
        let wire_body = self
            .message_json
            .wire_body(&request)
            .ok()
            .map(|(raw, _reused)| WireBody(Arc::new(raw)));
        let meta = RequestMeta {
            wire_body: wire_body
                .as_ref()
                .map(|body| bytes::Bytes::from_owner(body.clone())),
            agent_name: self.lp.request.agent.name.clone(),
            run_id: self.lp.run_id.clone(),
            timeouts: self
                .lp
                .request
                .agent
                .llm
                .timeouts
                .resolve(self.lp.config.llm_timeouts),
        };
        let events = self.events.clone();
        let run_id = self.lp.run_id.clone();
        let on_retry = Box::new(move |attempt: u32, error: &LlmError, delay: Duration| {
            let _ = events.send(RunEvent::ModelRetry {
                run_id: run_id.clone(),
                attempt,
                error: error.to_string(),
                delay_ms: delay.as_millis() as u64,
            });
        });
        let token = self.lp.control.token().clone();
        // Shared with the call, not copied: the record below needs it once the call ends.
        let request = Arc::new(request);
        let call = self
            .lp
            .model
            .complete(Arc::clone(&request), meta, token.clone(), on_retry);
        let outcome = tokio::select! {
            outcome = call => outcome,
            _ = token.cancelled() => return Err(Halt::Stopped),
        };
        let CallOutcome {
            completion,
            attempts,
            duration,
            waited,
            failed_attempts,
            failed_attempts_usage,
        } = match outcome {
            Ok(outcome) => outcome,
            Err(failure) if failure.cancelled => {
                self.count_usage(failure.failed_attempts_usage, None, &request.model);
                return Err(Halt::Stopped);
            }
            Err(failure) => {
                // Billed even though no reply came of them.
                self.count_usage(failure.failed_attempts_usage, None, &request.model);
                self.write_invocation_record(&InvocationRecord {
                    iteration: self.iteration,
                    request: RecordedRequest::new(&request, wire_body.as_ref()),
                    response: None,
                    error: Some(failure.error.to_string()),
                    duration_ms: None,
                    waited_ms: None,
                    attempts: failure.attempts,
                    failed_attempts: &failure.failed_attempts,
                })?;
                let message = format!(
                    "model call failed after {} attempt(s): {}",
                    failure.attempts, failure.error
                );
                self.log(&message);
                let kind = match failure.error {
                    LlmError::Timeout { .. } => RunErrorKind::LlmTimeout,
                    _ => RunErrorKind::LlmError,
                };
                return Err(Halt::Failed(error_info(kind, message)));
            }
        };
        self.timings.model += duration.saturating_sub(waited);
        self.timings.queue += waited;
        let record_ref = self.write_invocation_record(&InvocationRecord {
            iteration: self.iteration,
            request: RecordedRequest::new(&request, wire_body.as_ref()),
            response: Some(&completion.raw),
            error: None,
            duration_ms: Some(duration.as_millis() as u64),
            waited_ms: Some(waited.as_millis() as u64),
            attempts,
            failed_attempts: &failed_attempts,
        })?;
        self.count_usage(
            failed_attempts_usage,
            completion.model.as_deref(),
            &request.model,
        );
        if let Some(usage) = completion.usage {
            self.count_usage(usage, completion.model.as_deref(), &request.model);
        }
        Ok((completion, record_ref))
    }

    /// Adds tokens the provider reported to this driving's usage, under the model that
    /// answered (or the one asked for). Every attempt counts, failed ones too: the
    /// provider bills them.
    fn count_usage(&mut self, usage: Usage, answered_by: Option<&str>, asked_for: &str) {
        if usage == Usage::default() {
            return;
        }
        let used = TokenUsage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
        };
        self.usage.add(used);
        let model = answered_by.unwrap_or(asked_for).to_string();
        self.model_usage.entry(model).or_default().add(used);
    }

    /// io/invocations keeps the request as sent and the response as received, except
    /// sensitive answers (kept only in the run's 0600 secrets files). Best effort: an audit
    /// record never fails a run.
    /// Returns the record's reference for the THOUGHT (`io/invocations/<file>`).
    fn write_invocation_record(
        &self,
        record: &InvocationRecord<'_>,
    ) -> Result<Option<String>, Halt> {
        let (path, written) = write_invocation_record(
            &self.paths,
            self.iteration,
            record,
            &self.secrets.snapshot(),
        );
        if let Err(e) = written {
            self.audit_write_failed(AuditKind::Invocation, e.to_string())?;
        }
        Ok(path
            .file_name()
            .map(|n| format!("io/invocations/{}", n.to_string_lossy())))
    }

    /// `post_llm_response` payload: the provider's response body (synthesised in its shape when
    /// the backend kept none) and the iteration.
    pub(super) fn completion_payload(&self, iteration: u32, completion: &ChatCompletion) -> Value {
        let response = if completion.raw.is_null() {
            completion.to_openai_json(chrono::Utc::now().timestamp())
        } else {
            completion.raw.clone()
        };
        json!({"iteration": iteration, "response": response})
    }
}
