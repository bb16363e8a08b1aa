//! Counting a request's tokens without a tokenizer, and the budget they are held to.
//!
//! The provider's `prompt_tokens` is exact for what was sent. Each THOUGHT records the size
//! of its request (bytes as `view::message_bytes` counts them, plus the tool list)
//! beside that count, so the next request is estimated as the last one's exact count plus
//! only what changed, converted at the run's own bytes per token ([`Calibration`]). Before
//! the first answer, four bytes make a token. A tokenizer is not shipped: the OpenAI ones
//! (tiktoken's tables) weigh 2–4 MB, against a 25 MB installed binary, and only fit OpenAI's
//! models; the calibrated estimate is within a few percent on every model (docs/context.md).
//!
//! The budget of a request ([`request_budget`]): context.yaml's `total_max_tokens`, else
//! the model's window less the reply's cap (`llm.max_tokens`, else an eighth of the window
//! up to 4,096) and a margin for the estimate's error ([`margin`]).
//!
//! Must not: read anything but the events it is given.

use crate::journal::{Event, JournalEvent, PromptSize};

/// Bytes per token before the run has a provider's count to calibrate with.
pub const DEFAULT_BYTES_PER_TOKEN: f64 = 4.0;
/// Bytes per token of a source's `max_tokens` cap: fixed, so a cut source is the same text
/// from one request to the next (the prefix a provider's prompt cache keys on).
pub const SOURCE_BYTES_PER_TOKEN: u64 = 4;
/// The calibrated ratio is kept within these bounds (a tiny first request, a reply counted
/// oddly, must not make every later estimate absurd).
const RATIO_BOUNDS: (f64, f64) = (1.0, 12.0);
/// Two counts closer than this say too little about how new text counts.
const MIN_GROWTH_BYTES: u64 = 64;

/// A provider's count of a request, and the request's size: the next estimate's base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calibration {
    /// The request's size.
    pub bytes: u64,
    /// Its prompt tokens, as the provider counted them.
    pub tokens: u64,
    /// What changed between the two latest counts (bytes, tokens), when they moved the same
    /// way: the rate at which new text counts, without the fixed part of every request that
    /// delta does not see (a server's template may add ~150 tokens of tool instructions).
    pub growth: Option<(u64, u64)>,
}

impl Calibration {
    /// The latest count in `events` (a THOUGHT's request, or a refused one's), with the
    /// growth since the count before it.
    pub fn from_events(events: &[JournalEvent]) -> Option<Calibration> {
        let mut counts = events.iter().rev().filter_map(|e| {
            let size = match &e.event {
                Event::Thought { prompt, .. } => prompt.as_ref(),
                Event::ContextCompacted { refused, .. } => refused.as_ref(),
                _ => None,
            }?;
            Calibration::of(size)
        });
        let mut latest = counts.next()?;
        if let Some(before) = counts.next() {
            let bytes = latest.bytes.abs_diff(before.bytes);
            let tokens = latest.tokens.abs_diff(before.tokens);
            let same_way = (latest.bytes >= before.bytes) == (latest.tokens >= before.tokens);
            if same_way && bytes >= MIN_GROWTH_BYTES && tokens > 0 {
                latest.growth = Some((bytes, tokens));
            }
        }
        Some(latest)
    }

    /// The calibration a measured request gives, when the provider counted it.
    pub fn of(size: &PromptSize) -> Option<Calibration> {
        let tokens = size.tokens.filter(|t| *t > 0)?;
        (size.bytes > 0).then_some(Calibration {
            bytes: size.bytes,
            tokens,
            growth: None,
        })
    }

    /// The run's bytes per token of new text: the growth between the two latest counts, else
    /// the latest request's whole size over its count.
    pub fn ratio(&self) -> f64 {
        let (bytes, tokens) = self.growth.unwrap_or((self.bytes, self.tokens));
        (bytes as f64 / tokens as f64).clamp(RATIO_BOUNDS.0, RATIO_BOUNDS.1)
    }
}

/// The estimated prompt tokens of a request of `bytes`.
pub fn estimate(calibration: Option<Calibration>, bytes: u64) -> u64 {
    let tokens = match calibration {
        Some(base) => base.tokens as f64 + (bytes as f64 - base.bytes as f64) / base.ratio(),
        None => bytes as f64 / DEFAULT_BYTES_PER_TOKEN,
    };
    tokens.ceil().max(0.0) as u64
}

/// The bytes that many tokens stand for, at the run's ratio.
pub fn bytes_for(calibration: Option<Calibration>, tokens: u64) -> u64 {
    let ratio = calibration.map_or(DEFAULT_BYTES_PER_TOKEN, |c| c.ratio());
    (tokens as f64 * ratio).floor() as u64
}

/// The room kept below the window for the estimate's error: 3 % of it, at least 64 tokens.
pub fn margin(window: u64) -> u64 {
    (window * 3 / 100).max(64)
}

/// The room kept for the reply: `llm.max_tokens`, else an eighth of the window (at most
/// 4,096 tokens).
pub fn reply_reserve(window: u64, max_tokens: Option<u32>) -> u64 {
    max_tokens.map_or((window / 8).min(4096), u64::from)
}

/// The most prompt tokens of one request: `total_max_tokens` when set, else the window less
/// the reply and the margin; `None` when neither is known (no budget: nothing is compacted).
pub fn request_budget(
    total_max_tokens: Option<u64>,
    window: Option<u64>,
    max_tokens: Option<u32>,
) -> Option<u64> {
    if let Some(total) = total_max_tokens {
        return Some(match window {
            // A budget the window cannot hold would be refused at every call.
            Some(window) => total.min(window.saturating_sub(reply_reserve(window, max_tokens))),
            None => total,
        });
    }
    let window = window?;
    let budget = window
        .saturating_sub(reply_reserve(window, max_tokens))
        .saturating_sub(margin(window));
    Some(budget.max(1))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_the_window_less_the_reply_and_a_margin() {
        assert_eq!(
            request_budget(None, Some(4096), Some(200)),
            Some(4096 - 200 - 122)
        );
        assert_eq!(margin(1000), 64);
        assert_eq!(
            request_budget(None, Some(128_000), None),
            Some(128_000 - 4096 - 3840)
        );
        assert_eq!(
            request_budget(Some(3000), Some(4096), Some(200)),
            Some(3000)
        );
        assert_eq!(
            request_budget(Some(8000), Some(4096), Some(200)),
            Some(3896)
        );
        assert_eq!(request_budget(Some(8000), None, None), Some(8000));
        assert_eq!(request_budget(None, None, Some(200)), None);
    }

    #[test]
    fn the_estimate_is_the_last_count_plus_the_new_bytes_at_the_runs_ratio() {
        assert_eq!(estimate(None, 4000), 1000);
        let base = Calibration {
            bytes: 10_000,
            tokens: 2_000,
            growth: None,
        };
        assert_eq!(base.ratio(), 5.0);
        assert_eq!(estimate(Some(base), 10_000), 2_000);
        assert_eq!(estimate(Some(base), 12_500), 2_500);
        assert_eq!(estimate(Some(base), 5_000), 1_000);
        assert_eq!(bytes_for(Some(base), 100), 500);
        let odd = Calibration {
            bytes: 10,
            tokens: 1_000,
            growth: None,
        };
        assert_eq!(odd.ratio(), 1.0);
    }

    #[test]
    fn the_latest_count_in_the_journal_calibrates() {
        let measured = |seq: u64, tokens: Option<u64>| JournalEvent {
            seq,
            timestamp: String::new(),
            event: Event::Thought {
                iteration: 1,
                content: None,
                tool_calls: vec![],
                llm_invocation_ref: None,
                finish_reason: None,
                usage: None,
                prompt: Some(PromptSize {
                    bytes: seq * 1000,
                    estimate: 0,
                    tokens,
                }),
            },
        };
        let events = vec![measured(1, Some(300)), measured(2, None)];
        assert_eq!(
            Calibration::from_events(&events),
            Some(Calibration {
                bytes: 1000,
                tokens: 300,
                growth: None,
            })
        );
        assert_eq!(Calibration::from_events(&events[1..]), None);
    }

    /// New text is converted at the rate the two latest counts grew by, not at the whole
    /// request's: a server's template adds a fixed part delta does not see (llama.cpp's
    /// function-calling one: the tool list and instructions, ~150 tokens), which would
    /// otherwise make every new byte count double.
    #[test]
    fn new_text_counts_at_the_rate_the_last_two_counts_grew_by() {
        let measured = |seq: u64, bytes: u64, tokens: u64| JournalEvent {
            seq,
            timestamp: String::new(),
            event: Event::Thought {
                iteration: 1,
                content: None,
                tool_calls: vec![],
                llm_invocation_ref: None,
                finish_reason: None,
                usage: None,
                prompt: Some(PromptSize {
                    bytes,
                    estimate: 0,
                    tokens: Some(tokens),
                }),
            },
        };
        // 150 tokens of template, then 4 bytes a token.
        let events = vec![measured(1, 400, 250), measured(2, 1200, 450)];
        let calibration = Calibration::from_events(&events).unwrap();
        assert_eq!(calibration.growth, Some((800, 200)));
        assert_eq!(calibration.ratio(), 4.0);
        assert_eq!(estimate(Some(calibration), 2000), 650);
        // One count alone: the whole request's ratio.
        assert_eq!(Calibration::from_events(&events[..1]).unwrap().ratio(), 1.6);
        // Counts too close, or moving apart (bytes down, tokens up), say nothing of it.
        let close = vec![measured(1, 400, 250), measured(2, 450, 260)];
        assert_eq!(Calibration::from_events(&close).unwrap().growth, None);
        let apart = vec![measured(1, 4000, 250), measured(2, 1200, 450)];
        assert_eq!(Calibration::from_events(&apart).unwrap().growth, None);
    }
}
