//! A run's context builder: the request of each iteration, its size, and the decision to
//! compact it, with the conversation kept between requests so each one measures and converts
//! only what is new (the per-iteration cost does not grow with the journal).
//!
//! One request is built in two steps: the sources (async: files, generators; see
//! [`super::build_sources`]) and then [`ContextBuilder::build`] (sync), which places the
//! conversation among them, measures the request and, when a budget is given, decides whether
//! it must be compacted first ([`super::compact::decide`]). A plan is carried out by the run:
//! it writes the summary if the plan needs one, journals the CONTEXT_COMPACTED event, and
//! builds again; the journal then holds the compaction, so every reader sees it.
//!
//! Must not: write the journal or call a model.

use crate::agent::Compaction;
use crate::journal::{JournalEvent, PromptSize};
use crate::llm::ChatMessage;
use crate::redact::SecretSet;

use super::budget::{bytes_for, estimate, Calibration};
use super::compact::{decide, Plan, Request};
use super::sources::SourceParts;
use super::summary::summary_messages;
use super::view::{message_bytes, ConversationCache};

/// What the budget needs for one decision.
#[derive(Debug, Clone, Copy)]
pub struct Budgeting<'a> {
    /// The most prompt tokens of the request.
    pub budget: u64,
    /// The journal source's settings.
    pub settings: &'a Compaction,
    /// How many times the server refused this iteration's request as too long (see
    /// `compact::Request::refusals`).
    pub refusals: u32,
}

/// One built request, or the compaction it needs first.
#[derive(Debug, Clone, Default)]
pub struct Built {
    /// The messages (empty when `plan` is set: build again once it is journaled).
    pub messages: Vec<ChatMessage>,
    /// The request's size and estimate (without `tokens`: the provider's count comes later).
    pub size: PromptSize,
    /// The compaction to carry out before sending.
    pub plan: Option<Plan>,
    /// The summary call's messages, when the plan needs a summary.
    pub summary_request: Option<Vec<ChatMessage>>,
}

/// A run's builder (one per driving).
#[derive(Debug, Default)]
pub struct ContextBuilder {
    conversation: ConversationCache,
    /// Bytes of the tool list sent with every request.
    tools_bytes: u64,
}

impl ContextBuilder {
    /// A builder for a run whose requests carry a tool list of `tools_bytes` bytes.
    pub fn new(tools_bytes: u64) -> ContextBuilder {
        ContextBuilder {
            conversation: ConversationCache::default(),
            tools_bytes,
        }
    }

    /// Bytes of the tool list sent with every request.
    pub fn tools_bytes(&self) -> u64 {
        self.tools_bytes
    }

    /// The request for `events` with the sources `parts`, measured and estimated with
    /// `calibration` (the run's, [`Calibration::from_events`]), or the compaction it needs
    /// first (only with a `budgeting`).
    pub fn build(
        &mut self,
        parts: &SourceParts,
        events: &[JournalEvent],
        secrets: &SecretSet,
        calibration: Option<Calibration>,
        budgeting: Option<Budgeting<'_>>,
    ) -> Built {
        let view = self
            .conversation
            .update(events, parts.max_iterations, secrets);
        let other_bytes = self.tools_bytes + parts.messages.iter().map(message_bytes).sum::<u64>();
        let bytes = other_bytes + view.bytes();
        let size = PromptSize {
            bytes,
            estimate: estimate(calibration, bytes),
            tokens: None,
        };
        let plan = budgeting.and_then(|b| {
            decide(&Request {
                view,
                other_bytes,
                budget: b.budget,
                settings: b.settings,
                calibration,
                refusals: b.refusals,
            })
        });
        let Some(plan) = plan else {
            return Built {
                messages: parts.assemble(&view.messages),
                size,
                plan: None,
                summary_request: None,
            };
        };
        let summary_request = match (&plan.summarize, budgeting) {
            (Some(span), Some(b)) => {
                // The transcript gets what the budget leaves beside the prompt and the reply.
                let room = b
                    .budget
                    .saturating_sub(u64::from(b.settings.summary_max_tokens))
                    .saturating_sub(500);
                let max_bytes = usize::try_from(bytes_for(calibration, room)).unwrap_or(usize::MAX);
                Some(summary_messages(
                    view,
                    span.messages.clone(),
                    b.settings.summary_prompt.as_deref(),
                    max_bytes,
                ))
            }
            _ => None,
        };
        Built {
            messages: Vec::new(),
            size,
            plan: Some(plan),
            summary_request,
        }
    }
}
