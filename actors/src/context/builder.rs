//! A run's context builder: the request of each iteration, its size, and the decision to
//! compact it, with the conversation kept between requests so each one measures and converts
//! only what is new, and shared with the request rather than copied into it (the
//! per-iteration cost does not grow with the journal).
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
use crate::llm::{ChatMessage, Messages};
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
    /// The messages (empty when `plan` is set: build again once it is journaled), sharing
    /// the conversation's chunks with the builder and the run's other requests.
    pub messages: Messages,
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
            messages: Messages::new(),
            size,
            plan: Some(plan),
            summary_request,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::context::journal_to_messages;
    use crate::journal::{ActionStatus, Event, ToolCallRecord};

    /// The task and `iterations` iterations of one call each, whose results are 1.8 KB
    /// pages (the issue-32 agent).
    fn page_journal(iterations: u32) -> Vec<JournalEvent> {
        let mut events = vec![Event::UserMessage {
            content: "Read the book.".into(),
        }];
        for i in 1..=iterations {
            let id = format!("call_{i}");
            events.push(Event::Thought {
                iteration: i,
                content: None,
                tool_calls: vec![ToolCallRecord {
                    id: id.clone(),
                    name: "read_page".into(),
                    arguments: format!("{{\"page\":{i}}}"),
                }],
                llm_invocation_ref: None,
                finish_reason: None,
                usage: None,
                prompt: None,
            });
            events.push(Event::ActionResult {
                iteration: i,
                action_id: id,
                tool_name: "read_page".into(),
                status: ActionStatus::Success,
                observation_content: format!("Page {i}\n{}", "text ".repeat(360)),
                exit_code: Some(0),
                execution_ref: None,
            });
        }
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| JournalEvent {
                seq: i as u64 + 1,
                timestamp: String::new(),
                event,
            })
            .collect()
    }

    /// Issue 32 (performance): building the next request copies a bounded number of
    /// messages however long the journal is. Every message of the conversation is the very
    /// one (the same memory) the request before held; only the recipe's blocks are copied,
    /// and the new iteration converted. The request is still the whole conversation.
    #[test]
    fn the_next_request_shares_the_conversation_with_the_one_before() {
        let secrets = SecretSet::default();
        let parts = SourceParts {
            messages: vec![ChatMessage::system(
                "# Context Block: system_prompt\n\nRead.",
            )],
            journal_at: Some(1),
            ..SourceParts::default()
        };
        for iterations in [40u32, 400] {
            let events = page_journal(iterations + 1);
            let mut builder = ContextBuilder::new(0);
            let before = &events[..events.len() - 2];
            let first = builder.build(&parts, before, &secrets, None, None).messages;
            let next = builder
                .build(&parts, &events, &secrets, None, None)
                .messages;
            let mut whole = parts.messages.clone();
            whole.extend(journal_to_messages(&events, None, &secrets));
            assert_eq!(next, whole, "after {iterations} iterations");
            let shared = next
                .iter()
                .zip(first.iter())
                .filter(|(a, b)| std::ptr::eq(*a, *b))
                .count();
            let copied = next.len() - shared;
            // The recipe's blocks, and the messages new since the last request.
            let bound = parts.messages.len() + 2;
            assert!(
                copied <= bound,
                "after {iterations} iterations {copied} of {} messages were copied (at most {bound})",
                next.len()
            );
        }
    }
}
