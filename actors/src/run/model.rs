//! The model step of an iteration: the request built from the journal by the context
//! builder, a `pre_llm_request` override applied, the call through the model port, its
//! io/invocations record, the usage it reports (or an estimate, marked so, when it reports
//! none; an absurd one is the provider's error, recorded as a WARNING and not summed), and
//! the announcement of what the endpoint taught during the call.
//!
//! Must not: journal the reply (the THOUGHT is `drive.rs`'s) or run tools.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::hooks::{apply_request_override, HookOutcome, OVERRIDABLE_FIELDS};
use crate::journal::Event;
use crate::llm::usage::{call_usage, CallUsage};
use crate::llm::{
    CallFailure, CallOutcome, ChatCompletion, ChatRequest, FirstTokenClock, LlmError, RequestMeta,
    RetryObserver, TextSink, Usage, WireOptions,
};
use crate::protocol::TokenUsage;
use crate::protocol::{RunErrorKind, RunEvent};
use crate::workspace::live_reply::partial_reply_path;
use crate::workspace::{write_attempt_record, write_invocation_record};

use super::call_event::{CallEnding, CallFigures};
use super::live_reply::{FinishOnDrop, LiveReply};

use super::state::{error_info, AuditKind, Halt, Run};

/// One `io/invocations/` record: the request as sent, and the provider's response as
/// received (or why the call failed), with its timings and attempts. Serialized straight to
/// the file, without an intermediate JSON tree.
#[derive(serde::Serialize)]
struct InvocationRecord<'a> {
    iteration: u32,
    /// A failed attempt's own record: which attempt it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    request: RecordedRequest<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waited_ms: Option<u64>,
    /// A failed attempt's record: the wait before the next attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_in_ms: Option<u64>,
    /// The reply came as a stream (assembled into `response`).
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_attempts: Option<&'a [String]>,
}

/// A failed attempt of the call in progress, as the gate reported it.
struct FailedAttempt {
    attempt: u32,
    error: String,
    delay: Duration,
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
    /// The messages for this iteration, from the journal through the context builder
    /// (compacted first when the budget says so: `context_step.rs`).
    pub(super) async fn build_request(&mut self) -> Result<ChatRequest, Halt> {
        let messages = self.context_messages().await?;
        let agent = &self.lp.request.agent;
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

    /// One model call through the model port; its io/invocations record either way, and a
    /// record and an engine.log line for each failed attempt as it fails (a run stopped in
    /// the middle of retries keeps them). Returns the reply, its record's reference and the
    /// tokens it was counted for.
    pub(super) async fn call_model(
        &mut self,
        request: ChatRequest,
    ) -> Result<(ChatCompletion, Option<String>, TokenUsage), Halt> {
        // Serialized once: the same bytes are the HTTP body and the record's request.
        let wire = self.lp.model.wire_options(&request.model);
        let wire_body = self.serialize_for_wire(&request, &wire);
        // The reply as it streams, for a separate process to watch (`io/reply.partial`);
        // finished (marked complete) however this step ends.
        let live = self.live_reply();
        let _finish_live = live.clone().map(FinishOnDrop);
        let timeouts = self
            .lp
            .request
            .agent
            .llm
            .timeouts
            .resolve(self.lp.config.llm_timeouts);
        let started = std::time::Instant::now();
        // Only an observed engine reads the clock (the call's span, its metrics).
        let first_token = self.lp.config.observer.is_some().then(FirstTokenClock::new);
        let meta = RequestMeta {
            wire_body: wire_body
                .as_ref()
                .map(|body| bytes::Bytes::from_owner(body.clone())),
            agent_name: self.lp.request.agent.name.clone(),
            run_id: self.lp.run_id.clone(),
            timeouts,
            wire,
            on_text: self.reply_text_sink(live.clone()),
            // Set by the model port that keeps the run's time (the run actor's).
            on_queue: None,
            traceparent: self.chat_span().map(|span| span.traceparent()),
            first_token: first_token.clone(),
        };
        self.emit(RunEvent::ModelCallStarted {
            run_id: self.lp.run_id.clone(),
            iteration: self.iteration,
            streamed: wire.stream,
            request_timeout_ms: u64::try_from(timeouts.request.as_millis()).unwrap_or(u64::MAX),
        });
        let (on_retry, mut failed_rx) = self.retry_observer(live);
        let token = self.lp.control.token().clone();
        // Shared with the call, not copied: the record below needs it once the call ends.
        let request = Arc::new(request);
        let call = self
            .lp
            .model
            .complete(Arc::clone(&request), meta, token.clone(), on_retry);
        tokio::pin!(call);
        let outcome = loop {
            tokio::select! {
                outcome = &mut call => break outcome,
                Some(failed) = failed_rx.recv() => self.record_failed_attempt(&request, wire_body.as_ref(), &failed)?,
                _ = token.cancelled() => {
                    let mut attempts = 1;
                    while let Ok(failed) = failed_rx.try_recv() {
                        attempts += 1;
                        self.record_failed_attempt(&request, wire_body.as_ref(), &failed)?;
                    }
                    return Err(self.settle_cancelled_call(&request, attempts, started, Usage::default()));
                }
            }
        };
        while let Ok(failed) = failed_rx.try_recv() {
            self.record_failed_attempt(&request, wire_body.as_ref(), &failed)?;
        }
        self.announce_adaptations();
        let answered = match outcome {
            Ok(outcome) => outcome,
            Err(failure) if failure.cancelled => {
                return Err(self.settle_cancelled_call(
                    &request,
                    failure.attempts,
                    started,
                    failure.failed_attempts_usage,
                ));
            }
            Err(failure) => {
                return Err(self.settle_failed_call(
                    &request,
                    wire_body.as_ref(),
                    failure,
                    started,
                )?);
            }
        };
        self.settle_answered_call(&request, wire, wire_body, answered, first_token.as_ref())
    }

    /// The end of a call that was answered: its io/invocations record (with the bytes the
    /// successful attempt sent), its time, its tokens counted (every attempt's, as billed;
    /// estimated from the bytes when the provider reported none or an impossible count) and
    /// reported. Returns the reply, its record's reference and the tokens counted for it.
    fn settle_answered_call(
        &mut self,
        request: &ChatRequest,
        wire: WireOptions,
        wire_body: Option<WireBody>,
        answered: CallOutcome,
        first_token: Option<&FirstTokenClock>,
    ) -> Result<(ChatCompletion, Option<String>, TokenUsage), Halt> {
        let CallOutcome {
            completion,
            attempts,
            duration,
            waited,
            failed_attempts,
            failed_attempts_usage,
            wire: sent_wire,
        } = answered;
        // The endpoint taught the backend another form during the call: the record keeps
        // the bytes the successful attempt sent.
        let sent_body = if sent_wire == wire {
            wire_body
        } else {
            self.serialize_for_wire(request, &sent_wire)
        };
        self.timings.model += duration.saturating_sub(waited);
        self.timings.queue += waited;
        let record_ref = self.write_invocation_record(&InvocationRecord {
            iteration: self.iteration,
            attempt: None,
            request: RecordedRequest::new(request, sent_body.as_ref()),
            response: Some(&completion.raw),
            error: None,
            duration_ms: Some(duration.as_millis() as u64),
            waited_ms: Some(waited.as_millis() as u64),
            retry_in_ms: None,
            stream: Some(sent_wire.stream),
            attempts: Some(attempts),
            failed_attempts: Some(&failed_attempts),
        })?;
        self.count_usage(
            exact(failed_attempts_usage),
            completion.model.as_deref(),
            &request.model,
        );
        let sent_bytes = match &sent_body {
            Some(body) => body.as_ref().len(),
            None => serde_json::to_vec(request).map_or(0, |bytes| bytes.len()),
        };
        let used = call_usage(&completion, sent_bytes);
        if let CallUsage::Absurd {
            reported, reason, ..
        } = &used
        {
            // The provider's error: recorded, and not summed (the estimate counts).
            let message = format!(
                "the endpoint reported an impossible token usage for iteration {} ({reason}; it sent prompt_tokens {}, completion_tokens {}, total_tokens {}): it is not counted, and the call's tokens are estimated from its bytes",
                self.iteration, reported.prompt_tokens, reported.completion_tokens, reported.total_tokens
            );
            self.log(&format!("warning: {message}"));
            self.append(Event::Warning { message })?;
        }
        let (counted, estimated) = used.counted();
        // The call's span and metrics carry every attempt's tokens, as billed.
        let call_usage = failed_attempts_usage.saturating_add(counted);
        self.report_model_call(
            request,
            CallEnding::Answered(&completion),
            CallFigures {
                attempts,
                duration,
                waited,
                first_token: first_token.and_then(FirstTokenClock::read),
                usage: call_usage,
                estimated,
            },
        );
        let used = token_usage(counted, estimated);
        self.count_usage(used, completion.model.as_deref(), &request.model);
        Ok((completion, record_ref, used))
    }

    /// What the gate calls at each failed attempt: the live reply starts again, a
    /// `ModelRetry` event goes out (not for a refusal answered by writing the request
    /// another way), and the attempt is handed to the run through the receiver, which
    /// records it as it fails.
    fn retry_observer(
        &self,
        live: Option<Arc<LiveReply>>,
    ) -> (
        RetryObserver,
        tokio::sync::mpsc::UnboundedReceiver<FailedAttempt>,
    ) {
        let events = self.events.clone();
        let run_id = self.lp.run_id.clone();
        let (failed_tx, failed_rx) = tokio::sync::mpsc::unbounded_channel();
        let on_retry = Box::new(move |attempt: u32, error: &LlmError, delay: Duration| {
            if let Some(live) = &live {
                live.restart();
            }
            // A refusal answered by writing the request another way is no failure to show:
            // the lesson is announced once, in one line, when the call ends.
            if !matches!(error, LlmError::Adjusted { .. }) {
                events.send(RunEvent::ModelRetry {
                    run_id: run_id.clone(),
                    attempt,
                    error: error.to_string(),
                    delay_ms: delay.as_millis() as u64,
                });
            }
            let _ = failed_tx.send(FailedAttempt {
                attempt,
                error: error.to_string(),
                delay,
            });
        });
        (on_retry, failed_rx)
    }

    /// Announces, once each, what the endpoint taught during the call (see
    /// [`crate::llm::Adaptation`]): a line in engine.log and a `ModelAdapted` event.
    fn announce_adaptations(&self) {
        for adaptation in self.lp.model.take_adaptations() {
            let message = adaptation.announcement();
            self.log(&message);
            self.emit(RunEvent::ModelAdapted {
                run_id: self.lp.run_id.clone(),
                message,
            });
        }
    }

    /// Adds a call's tokens to this driving's usage, under the model that answered (or the
    /// one asked for). Every attempt counts, failed ones too: the provider bills them.
    fn count_usage(&mut self, used: TokenUsage, answered_by: Option<&str>, asked_for: &str) {
        if used.is_zero() {
            return;
        }
        self.usage.add(used);
        let model = answered_by.unwrap_or(asked_for).to_string();
        self.model_usage.entry(model).or_default().add(used);
    }

    /// A call the run's stop ended: the tokens its failed attempts were billed counted, its
    /// end reported as cancelled; the halt that stops the run.
    fn settle_cancelled_call(
        &mut self,
        request: &ChatRequest,
        attempts: u32,
        started: std::time::Instant,
        billed: Usage,
    ) -> Halt {
        self.count_usage(exact(billed), None, &request.model);
        self.report_model_call(
            request,
            CallEnding::Cancelled,
            CallFigures {
                attempts,
                duration: started.elapsed(),
                waited: Duration::ZERO,
                first_token: None,
                usage: billed,
                estimated: false,
            },
        );
        Halt::Stopped
    }

    /// A call that failed for good: its attempts' tokens counted (billed though no reply
    /// came of them), its end reported, its invocation record written, and the halt that
    /// fails the run; an error only when the record cannot be written.
    fn settle_failed_call(
        &mut self,
        request: &ChatRequest,
        wire_body: Option<&WireBody>,
        failure: CallFailure,
        started: std::time::Instant,
    ) -> Result<Halt, Halt> {
        // Billed even though no reply came of them.
        self.count_usage(exact(failure.failed_attempts_usage), None, &request.model);
        self.report_model_call(
            request,
            CallEnding::Failed(&failure.error),
            CallFigures {
                attempts: failure.attempts,
                duration: started.elapsed(),
                waited: Duration::ZERO,
                first_token: None,
                usage: failure.failed_attempts_usage,
                estimated: false,
            },
        );
        self.write_invocation_record(&InvocationRecord {
            iteration: self.iteration,
            attempt: None,
            request: RecordedRequest::new(request, wire_body),
            response: None,
            error: Some(failure.error.to_string()),
            duration_ms: None,
            waited_ms: None,
            retry_in_ms: None,
            stream: None,
            attempts: Some(failure.attempts),
            failed_attempts: Some(&failure.failed_attempts),
        })?;
        let message = format!(
            "model call failed after {} attempt(s): {}",
            failure.attempts, failure.error
        );
        self.log(&message);
        let kind = match &failure.error {
            LlmError::Timeout { .. } => RunErrorKind::LlmTimeout,
            // The relay's one ledger for a batch ran out (crate::relay::budget).
            LlmError::Http {
                status, message, ..
            } if crate::relay::budget::is_refusal(*status, message) => {
                RunErrorKind::BudgetExhausted
            }
            _ => RunErrorKind::LlmError,
        };
        Ok(Halt::Failed(error_info(kind, message)))
    }

    /// The request as the endpoint wants it written, reusing the JSON of the messages the
    /// previous request shared. `None` when it cannot be serialized (the backend then
    /// serializes it and reports the failure).
    fn serialize_for_wire(
        &mut self,
        request: &ChatRequest,
        wire: &WireOptions,
    ) -> Option<WireBody> {
        self.message_json
            .wire_body(request, wire)
            .ok()
            .map(|(raw, _reused)| WireBody(Arc::new(raw)))
    }

    /// The live copy of this call's reply, when the supervisor keeps one
    /// (`SupervisorConfig::partial_reply_file`).
    fn live_reply(&self) -> Option<Arc<LiveReply>> {
        self.lp
            .config
            .partial_reply_file
            .then(|| LiveReply::new(partial_reply_path(&self.paths.run_dir), self.iteration))
    }

    /// Where a streamed reply's text goes as it arrives: a `ReplyText` event, when the
    /// supervisor was asked for them (`delta run` on a terminal), and the live copy `live`.
    fn reply_text_sink(&self, live: Option<Arc<LiveReply>>) -> Option<TextSink> {
        let send_events = self.lp.config.reply_text_events;
        if !send_events && live.is_none() {
            return None;
        }
        let events = self.events.clone();
        let run_id = self.lp.run_id.clone();
        let iteration = self.iteration;
        let secrets = self.secrets.snapshot();
        // A sensitive answer the model repeats may be cut across two chunks: the redactors
        // hold back the last few bytes until they can tell (the whole reply follows as a
        // Thought anyway).
        let redactors = (!secrets.is_empty())
            .then(|| std::sync::Mutex::new((secrets.stream(), secrets.stream())));
        Some(TextSink::new(move |text| {
            let (content, reasoning) = match &redactors {
                None => (text.content.to_owned(), text.reasoning.to_owned()),
                Some(redactors) => {
                    let mut redactors = redactors
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let content = redactors.0.feed(text.content.as_bytes());
                    let reasoning = redactors.1.feed(text.reasoning.as_bytes());
                    (
                        String::from_utf8_lossy(&content).into_owned(),
                        String::from_utf8_lossy(&reasoning).into_owned(),
                    )
                }
            };
            if content.is_empty() && reasoning.is_empty() {
                return;
            }
            if let Some(live) = &live {
                live.push(&content, &reasoning);
            }
            if !send_events {
                return;
            }
            events.send(RunEvent::ReplyText {
                run_id: run_id.clone(),
                iteration,
                content,
                reasoning,
            });
        }))
    }

    /// A failed attempt, as it fails: a line in engine.log and its own io/invocations record
    /// (`<time>_<iteration>_attempt<N>.json`, with the request as sent).
    fn record_failed_attempt(
        &self,
        request: &ChatRequest,
        wire_body: Option<&WireBody>,
        failed: &FailedAttempt,
    ) -> Result<(), Halt> {
        self.log(&format!(
            "model call attempt {} failed: {}; retrying in {} ms",
            failed.attempt,
            failed.error,
            failed.delay.as_millis()
        ));
        let record = InvocationRecord {
            iteration: self.iteration,
            attempt: Some(failed.attempt),
            request: RecordedRequest::new(request, wire_body),
            response: None,
            error: Some(failed.error.clone()),
            duration_ms: None,
            waited_ms: None,
            retry_in_ms: Some(failed.delay.as_millis() as u64),
            stream: None,
            attempts: None,
            failed_attempts: None,
        };
        let (_, written) = write_attempt_record(
            &self.paths,
            self.iteration,
            failed.attempt,
            &record,
            &self.secrets.snapshot(),
        );
        if let Err(e) = written {
            self.audit_write_failed(AuditKind::Invocation, e.to_string())?;
        }
        Ok(())
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

/// The provider's `usage` as the run counts it.
fn token_usage(usage: Usage, estimated: bool) -> TokenUsage {
    TokenUsage {
        input_tokens: usage.prompt_tokens,
        output_tokens: usage.completion_tokens,
        total_tokens: usage.total_tokens,
        estimated,
    }
}

/// Usage the provider reported for failed attempts (exact, when there is any).
fn exact(usage: Usage) -> TokenUsage {
    match crate::llm::usage::implausible(&usage) {
        None => token_usage(usage, false),
        Some(_) => TokenUsage::default(),
    }
}
