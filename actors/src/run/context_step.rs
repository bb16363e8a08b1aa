//! The context step of an iteration: the model's window and the request's budget (found once
//! per driving), the sources, the request built from the journal, and the compaction the
//! builder asks for carried out: the summary call when the plan needs one, the
//! CONTEXT_COMPACTED event, the progress line. A request the server refused as too long is
//! compacted (the refusal teaches the window) and sent again, once.
//!
//! Where the window comes from, first found wins: `llm.context_window` (agent.yaml, or
//! `DELTA_CONTEXT_WINDOW`), the server's refusal recorded in the journal (the truth, when
//! smaller), the server's own answer (`llm::window::probe`, asked only once a request passes
//! [`PROBE_ABOVE_TOKENS`], so a short run costs the server nothing), delta's model catalogue.
//! It is recorded in metadata.json.
//!
//! Must not: decide what to compact (`context::compact`), or send the iteration's request
//! (`model.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::context::budget::{request_budget, Calibration};
use crate::context::compact::Plan;
use crate::context::{build_sources, task_of, Budgeting, ContextError, ContextInputs, SourceParts};
use crate::journal::{Event, PromptSize};
use crate::llm::window::refusal_facts;
use crate::llm::{ChatMessage, ChatRequest, ContextWindow, Messages, RequestMeta, Usage};
use crate::protocol::{RunErrorInfo, RunErrorKind, RunEvent, TokenUsage};
use crate::workspace::write_invocation_record;

use super::env::generator_environment;
use super::state::{
    error_info, AuditKind, Halt, Refused, Run, MAX_REFUSALS_PER_ITERATION, PROBE_ABOVE_TOKENS,
};

/// The context_summary record in io/invocations.
#[derive(serde::Serialize)]
struct SummaryRecord<'a> {
    iteration: u32,
    purpose: &'static str,
    request: &'a ChatRequest,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Run {
    /// Finds the model's window and the request's budget, once per driving (before the
    /// first request), and records the window in metadata.json.
    pub(super) async fn resolve_context(&mut self) {
        if self.context.resolved {
            return;
        }
        self.context.resolved = true;
        let agent = Arc::clone(&self.lp.request.agent);
        let llm = &agent.llm;
        let configured = llm.context_window.map(|tokens| {
            let source = if llm.context_window_from_env {
                "DELTA_CONTEXT_WINDOW"
            } else {
                "agent.yaml"
            };
            ContextWindow::new(tokens, source, Some("llm.context_window".into()))
        });
        let refused = self.refused_window();
        let mut window = match (configured, refused) {
            (Some(configured), Some(refused)) if refused.tokens < configured.tokens => {
                Some(refused)
            }
            (Some(configured), _) => Some(configured),
            (None, refused) => refused,
        };
        // Known for sure: the server is not asked.
        self.context.probed = window.is_some();
        if window.is_none() {
            let catalogue = crate::llm::catalogue::catalogue();
            window = catalogue
                .lookup(&llm.model, self.lp.request.llm.base_url())
                .map(|info| {
                    ContextWindow::new(
                        info.context_window,
                        "catalogue",
                        Some(format!("{} ({})", info.name, catalogue.source())),
                    )
                });
        }
        self.set_window(window);
    }

    /// Asks the server for the model's window (once per driving, and only once a request
    /// passes [`PROBE_ABOVE_TOKENS`]: a short run never asks); its answer wins over the
    /// catalogue's. Whether the window changed.
    async fn probe_window(&mut self, estimate: u64) -> bool {
        if self.context.probed || estimate <= PROBE_ABOVE_TOKENS {
            return false;
        }
        self.context.probed = true;
        let model = self.lp.request.agent.llm.model.clone();
        let probe = self.lp.model.context_window(&model);
        let found = tokio::select! {
            found = probe => found,
            () = self.lp.control.token().cancelled() => None,
        };
        match found {
            Some(window) if self.context.window.as_ref() != Some(&window) => {
                self.set_window(Some(window));
                true
            }
            _ => false,
        }
    }

    /// The window a refusal taught, as the journal recorded it (latest first).
    fn refused_window(&self) -> Option<ContextWindow> {
        self.rec
            .borrow()
            .events()
            .iter()
            .rev()
            .find_map(|e| match &e.event {
                Event::ContextCompacted {
                    window: Some(window),
                    ..
                } if window.source == "refusal" => Some(window.clone()),
                _ => None,
            })
    }

    fn set_window(&mut self, window: Option<ContextWindow>) {
        let agent = &self.lp.request.agent;
        self.context.budget = request_budget(
            agent.context.total_max_tokens,
            window.as_ref().map(|w| w.tokens),
            agent.llm.max_tokens,
        );
        if let Some(window) = &window {
            self.log(&format!("context window: {}", window.describe()));
        }
        self.meta.context_window.clone_from(&window);
        self.context.window = window;
        let removed: u64 = self
            .rec
            .borrow()
            .events()
            .iter()
            .map(|e| match &e.event {
                Event::ContextCompacted {
                    tokens_before,
                    tokens_after,
                    ..
                } => tokens_before.saturating_sub(*tokens_after),
                _ => 0,
            })
            .sum();
        self.context.removed_per_request = removed;
    }

    /// The messages of this iteration's request, compacted first when the builder says so.
    pub(super) async fn context_messages(&mut self) -> Result<Messages, Halt> {
        self.resolve_context().await;
        let parts = self.sources().await?;
        let refused = self.context.refused.take();
        let refusals = refused.as_ref().map_or(0, |r| r.count);
        let mut built = self.build(&parts, refusals);
        if self.probe_window(built.size.estimate).await {
            built = self.build(&parts, refusals);
        }
        if let (None, Some(Refused { error, .. })) = (&built.plan, &refused) {
            // Nothing left to take out (the task and the system blocks alone are too long):
            // sending it again would only be refused again.
            let mut error = error.clone();
            error.message = format!(
                "{}; hint: nothing of the conversation is left to compact (the task, the system prompt and the context files alone are longer than the model's window): shorten them, or set `max_tokens` on the large context sources",
                error.message
            );
            return Err(Halt::Failed(error));
        }
        if let Some(plan) = built.plan.take() {
            let summary = match built.summary_request.take() {
                Some(request) => self.write_summary(request).await?,
                None => None,
            };
            self.journal_compaction(plan, summary, refused.map(|r| r.size))?;
            built = self.build(&parts, 0);
        }
        self.context.tokens_saved += self.context.removed_per_request;
        self.context.last_size = Some(built.size);
        Ok(built.messages)
    }

    /// The environment the recipe's generators and `env_set` conditions see: built once,
    /// and only for a recipe that reads it (an empty one otherwise, which nothing reads).
    fn generator_env(&self) -> &BTreeMap<String, String> {
        static UNREAD: BTreeMap<String, String> = BTreeMap::new();
        if !self.lp.request.agent.context.reads_child_environment() {
            return &UNREAD;
        }
        self.generator_env
            .get_or_init(|| generator_environment(&self.lp.request, &self.lp.config))
    }

    /// Runs the recipe's sources; a failure is the run's (it names the source).
    async fn sources(&self) -> Result<SourceParts, Halt> {
        let agent = &self.lp.request.agent;
        let events = self.rec.borrow().snapshot();
        let inputs = ContextInputs {
            agent_home: &agent.home,
            work_dir: &self.lp.request.work_dir,
            run_id: &self.lp.run_id,
            run_dir: &self.paths.run_dir,
            journal_path: &self.paths.journal,
            child_env: self.generator_env(),
            folders: &self.context_folders,
        };
        let built = build_sources(
            &agent.context,
            &inputs,
            task_of(&events),
            self.lp.control.token(),
        )
        .await;
        let parts = match built {
            Ok(parts) => parts,
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
        for outcome in &parts.cache {
            self.append(Event::ContextCache {
                source: outcome.source.clone(),
                hit: outcome.hit,
                key: outcome.key.chars().take(16).collect(),
            })?;
        }
        Ok(parts)
    }

    /// The request from the journal as it stands; a compaction plan when one is due
    /// (`refusals`: how many times the server refused this iteration's request).
    fn build(&mut self, parts: &SourceParts, refusals: u32) -> crate::context::Built {
        let events = self.rec.borrow().snapshot();
        let secrets = self.secrets.snapshot();
        let calibration = Calibration::from_events(&events);
        let settings = self.lp.request.agent.context.compaction();
        let budgeting = self.context.budget.map(|budget| Budgeting {
            budget,
            settings: &settings,
            refusals,
        });
        self.context
            .builder
            .build(parts, &events, &secrets, calibration, budgeting)
    }

    /// Journals what `plan` changes (with the summary, when one was written), tells the
    /// watchers and counts it.
    fn journal_compaction(
        &mut self,
        plan: Plan,
        summary: Option<String>,
        refused: Option<PromptSize>,
    ) -> Result<(), Halt> {
        let strategy = self.lp.request.agent.context.compaction().strategy;
        let done = if plan.summarize.is_some() && summary.is_some() {
            strategy.as_str()
        } else if plan.masked.is_empty() && plan.dropped_through.is_none() {
            "cut"
        } else {
            "mask"
        };
        let reason = if refused.is_some() {
            "refusal"
        } else {
            "budget"
        };
        let tokens_after = plan.tokens_after;
        self.append(Event::ContextCompacted {
            iteration: self.iteration,
            strategy: done.to_string(),
            reason: reason.to_string(),
            masked: plan.masked,
            cut: plan.cut,
            dropped_through: plan.dropped_through,
            summary,
            tokens_before: plan.tokens_before,
            tokens_after,
            budget: self.context.budget.unwrap_or_default(),
            window: self.context.window.clone(),
            refused,
        })?;
        let removed = plan.tokens_before.saturating_sub(tokens_after);
        self.context.removed_per_request += removed;
        self.context.compactions += 1;
        self.log(&format!(
            "compacted context ({done}, {reason}): {} → {tokens_after} tokens",
            plan.tokens_before
        ));
        self.emit(RunEvent::ContextCompacted {
            run_id: self.lp.run_id.clone(),
            iteration: self.iteration,
            strategy: done.to_string(),
            reason: reason.to_string(),
            tokens_before: plan.tokens_before,
            tokens_after,
        });
        Ok(())
    }

    /// Asks the model for a summary (the summary model, at most `summary_max_tokens`); its
    /// io/invocations record either way. A failed call is not the run's failure: the
    /// iterations are left out with a note instead (and a WARNING says why).
    async fn write_summary(&mut self, messages: Vec<ChatMessage>) -> Result<Option<String>, Halt> {
        let agent = Arc::clone(&self.lp.request.agent);
        let settings = agent.context.compaction();
        let model = settings
            .summary_model
            .clone()
            .unwrap_or_else(|| agent.llm.model.clone());
        let request = Arc::new(ChatRequest {
            model: model.clone(),
            messages: messages.into(),
            temperature: agent.llm.temperature,
            max_tokens: Some(settings.summary_max_tokens),
            top_p: None,
            frequency_penalty: None,
            presence_penalty: None,
            tools: Default::default(),
            tool_choice: None,
            extra: serde_json::Map::new(),
        });
        let meta = RequestMeta {
            agent_name: agent.name.clone(),
            run_id: self.lp.run_id.clone(),
            timeouts: agent.llm.timeouts.resolve(self.lp.config.llm_timeouts),
            wire_body: None,
            wire: self.lp.model.wire_options(&model),
            on_text: None,
            // The run actor's model port sets it (a run's time limit does not count the queue).
            on_queue: None,
            traceparent: self.chat_span().map(|span| span.traceparent()),
            first_token: None,
        };
        let token = self.lp.control.token().clone();
        let call =
            self.lp
                .model
                .complete(Arc::clone(&request), meta, token, Box::new(|_, _, _| {}));
        let outcome = call.await;
        let (response, error) = match &outcome {
            Ok(outcome) => (Some(&outcome.completion.raw), None),
            Err(failure) if failure.cancelled => return Err(Halt::Stopped),
            Err(failure) => (None, Some(failure.error.to_string())),
        };
        let record = SummaryRecord {
            iteration: self.iteration,
            purpose: "context_summary",
            request: &request,
            response,
            error: error.clone(),
        };
        let (_, written) = write_invocation_record(
            &self.paths,
            self.iteration,
            &record,
            &self.secrets.snapshot(),
        );
        if let Err(e) = written {
            self.audit_write_failed(AuditKind::Invocation, e.to_string())?;
        }
        match outcome {
            Ok(outcome) => {
                self.add_usage(outcome.failed_attempts_usage, &model);
                if let Some(usage) = outcome.completion.usage {
                    self.add_usage(usage, &model);
                }
                let text = outcome.completion.message.content.unwrap_or_default();
                if text.trim().is_empty() {
                    self.warn("the context summary came back empty: the iterations it was to replace are left out with a note instead".into())?;
                    return Ok(None);
                }
                Ok(Some(text))
            }
            Err(failure) => {
                self.add_usage(failure.failed_attempts_usage, &model);
                self.warn(format!(
                    "the context summary failed ({}): the iterations it was to replace are left out with a note instead",
                    failure.error
                ))?;
                Ok(None)
            }
        }
    }

    fn add_usage(&mut self, usage: Usage, model: &str) {
        if usage == Usage::default() {
            return;
        }
        let used = TokenUsage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
            estimated: false,
        };
        self.usage.add(used);
        self.model_usage
            .entry(model.to_string())
            .or_default()
            .add(used);
    }

    /// A model call that failed because its request was longer than the model's window,
    /// refused `before` times already this iteration: learns what the refusal said, and
    /// whether the request is to be compacted and sent again (at most
    /// [`MAX_REFUSALS_PER_ITERATION`] times).
    pub(super) fn context_refusal(&mut self, error: &RunErrorInfo, before: u32) -> bool {
        if before >= MAX_REFUSALS_PER_ITERATION || error.kind != RunErrorKind::LlmError {
            return false;
        }
        let strategy = self.lp.request.agent.context.compaction().strategy;
        if strategy == crate::agent::CompactionStrategy::Off {
            return false;
        }
        let Some(facts) = refusal_facts(&error.message) else {
            return false;
        };
        let reply = self.lp.request.agent.llm.max_tokens;
        let learned = facts.window.map(|tokens| {
            ContextWindow::new(
                tokens,
                "refusal",
                Some("the server's context-length refusal".into()),
            )
        });
        let window = match (learned, self.context.window.take()) {
            (Some(learned), Some(known)) if known.tokens <= learned.tokens => Some(known),
            (Some(learned), _) => Some(learned),
            // No number in the words: the request that was refused is more than the window.
            (None, known) => known.or_else(|| {
                self.context.last_size.map(|size| {
                    let tokens = size.estimate.saturating_sub(1) + u64::from(reply.unwrap_or(0));
                    ContextWindow::new(
                        tokens,
                        "refusal",
                        Some("below the refused request's size".into()),
                    )
                })
            }),
        };
        self.set_window(window);
        let mut size = self.context.last_size.unwrap_or_default();
        size.tokens = facts.prompt_tokens;
        self.context.refused = Some(Refused {
            size,
            error: error.clone(),
            count: before + 1,
        });
        self.log(&format!(
            "the server refused the request as longer than the model's context window; it is compacted and sent again ({})",
            error.message
        ));
        true
    }

    /// The request's size after a `pre_llm_request` hook replaced parts of it.
    pub(super) fn remeasure(&mut self, request: &ChatRequest) {
        let bytes = self.context.builder.tools_bytes()
            + request
                .messages
                .iter()
                .map(crate::context::view::message_bytes)
                .sum::<u64>();
        let calibration = Calibration::from_events(self.rec.borrow().events());
        if let Some(size) = self.context.last_size.as_mut() {
            size.bytes = bytes;
            size.estimate = crate::context::budget::estimate(calibration, bytes);
        }
    }

    /// The THOUGHT's record of its request: the size measured when it was built, and the
    /// provider's count.
    pub(super) fn prompt_size(&self, usage: Option<Usage>) -> Option<PromptSize> {
        self.context.budget?;
        let mut size = self.context.last_size?;
        size.tokens = usage.map(|u| u.prompt_tokens).filter(|t| *t > 0);
        Some(size)
    }
}
