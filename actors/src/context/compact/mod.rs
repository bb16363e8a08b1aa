//! The decision to compact: a pure function of the view, the budget and the calibration.
//!
//! Nothing is done while the request fits its budget: a run that fits sends what it always
//! sent. A request over it (or one the server refused) is brought down to `compact_to` of the
//! budget, well below it, so the next compaction is many calls away and the request's prefix
//! stays the same between them (what a provider's prompt cache keys on). In order:
//!
//! 1. **mask** (`mask`, `mask_then_summarize`): the oldest tool results outside the last
//!    `keep_last` iterations become stubs, oldest first, until the request fits the target;
//! 2. **summarize** (`summarize`, and `mask_then_summarize` when masking was not enough, that
//!    is, left the request above halfway from the target to the budget): the
//!    iterations outside the last `keep_last` are replaced by a summary a model call writes
//!    (the run makes the call, see [`Plan::summarize`]);
//!    **drop** (`mask` when masking was not enough): the oldest iterations are left out, with
//!    a note, until it fits;
//! 3. **cut**: still over the budget (a result larger than the budget itself), the largest
//!    results kept are cut head and tail.
//!
//! The task (the first user message) is never touched, and a call always keeps its result.
//! Must not: do I/O or call a model.

use crate::agent::{Compaction, CompactionStrategy};
use crate::journal::CutResult;

use super::budget::{bytes_for, estimate, Calibration};
use super::view::{MessageKind, View, MESSAGE_FRAME_BYTES};

/// The least of a cut result the model still sees.
pub const MIN_CUT_KEEP_BYTES: u64 = 1024;
/// What a cut adds beside what it keeps (its marker line).
const CUT_MARKER_BYTES: u64 = 160;
/// What the note or summary header standing for left-out iterations adds.
const PREFACE_BYTES: u64 = 260;

/// What a compaction is asked to do.
pub struct Request<'a> {
    /// The conversation as it stands (earlier compactions applied).
    pub view: &'a View,
    /// Everything else the request carries: system blocks and the tool list.
    pub other_bytes: u64,
    /// The most prompt tokens of one request.
    pub budget: u64,
    /// The journal's compaction settings.
    pub settings: &'a Compaction,
    /// The run's calibration.
    pub calibration: Option<Calibration>,
    /// How many times the server refused this iteration's request as too long: once,
    /// compact even if it seems to fit; again after a compaction (the server counts what
    /// delta's estimate does not, e.g. a template that leaves tool results out), leave out
    /// (or summarize) every iteration but the last `keep_last`, or, when they are all that
    /// is left, one more of them at each refusal.
    pub refusals: u32,
}

/// A summary to write: the events it replaces, and which iterations they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummarySpan {
    /// The events up to this seq (the task excepted) are replaced.
    pub through: u64,
    /// View messages (indices) whose text the summary is written from.
    pub messages: std::ops::Range<usize>,
}

/// What to do to the view: the content of a CONTEXT_COMPACTED event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Results to show as stubs.
    pub masked: Vec<String>,
    /// Results to cut head and tail.
    pub cut: Vec<CutResult>,
    /// Events up to this seq to leave out (without a summary: a note says so).
    pub dropped_through: Option<u64>,
    /// A summary the run must write first (its events are then left out).
    pub summarize: Option<SummarySpan>,
    /// The request's estimated tokens before the compaction.
    pub tokens_before: u64,
    /// And after it (with a summary at its reply cap).
    pub tokens_after: u64,
}

/// A run of the view's messages that is one iteration: a reply and its results.
struct Group {
    /// First and one-past-last message index.
    start: usize,
    end: usize,
}

/// The plan for `request`, or `None` when the request fits (or nothing can be done).
pub fn decide(request: &Request<'_>) -> Option<Plan> {
    let settings = request.settings;
    if settings.strategy == CompactionStrategy::Off {
        return None;
    }
    let view = request.view;
    let calibration = request.calibration;
    let mut bytes = request.other_bytes + view.bytes();
    let tokens_before = estimate(calibration, bytes);
    let escalate = request.refusals > 1;
    if tokens_before <= request.budget && request.refusals == 0 {
        return None;
    }
    let target = request.budget * u64::from(settings.compact_to_percent) / 100;
    // Halfway from the target to the budget: masking that cannot reach the target but gets
    // this far is enough (stubs of a long run add up; leaving iterations out, or a summary
    // call, is kept for when masking cannot free enough room).
    let good_enough = (target + request.budget) / 2;
    let fits = |bytes: u64| estimate(calibration, bytes) <= target;
    let groups = groups(view);
    let mut keep_last = settings.keep_last as usize;
    if escalate && groups.len() <= keep_last {
        // Refused again with nothing outside the last `keep_last` left: one more goes at each
        // refusal, down to the task and the messages after the last reply, rather than a run
        // the server will never answer (the journal keeps them all).
        keep_last = groups.len().saturating_sub(1);
    }
    let protected_from = groups.len().saturating_sub(keep_last);
    // Messages before the first protected reply may be masked, summarized or dropped.
    let open_end = groups
        .get(protected_from)
        .map_or(view.messages.len(), |g| g.start);
    let mut plan = Plan {
        masked: Vec::new(),
        cut: Vec::new(),
        dropped_through: None,
        summarize: None,
        tokens_before,
        tokens_after: tokens_before,
    };
    let mask_first = !escalate
        && matches!(
            settings.strategy,
            CompactionStrategy::Mask | CompactionStrategy::MaskThenSummarize
        );
    if mask_first {
        for meta in &view.meta[..open_end] {
            if fits(bytes) {
                break;
            }
            if let MessageKind::ToolResult {
                action_id,
                stub_bytes,
                masked: false,
                ..
            } = &meta.kind
            {
                if meta.bytes > *stub_bytes {
                    bytes -= meta.bytes - stub_bytes;
                    plan.masked.push(action_id.clone());
                }
            }
        }
    }
    let open_groups = &groups[..protected_from];
    let masked_enough = mask_first && estimate(calibration, bytes) <= good_enough;
    if (escalate || !fits(bytes)) && !masked_enough && !open_groups.is_empty() {
        match settings.strategy {
            CompactionStrategy::Summarize | CompactionStrategy::MaskThenSummarize => {
                let (keep_index, keep_seq) = keep_from(view, open_end);
                let span_start = open_groups[0].start;
                let span_bytes = bytes_between(view, &plan, span_start, keep_index);
                let summary_bytes = bytes_for(calibration, u64::from(settings.summary_max_tokens));
                bytes = bytes - span_bytes + summary_bytes + PREFACE_BYTES;
                plan.summarize = Some(SummarySpan {
                    through: keep_seq - 1,
                    messages: span_start..keep_index,
                });
                plan.dropped_through = Some(keep_seq - 1);
            }
            CompactionStrategy::Mask => {
                // Whole iterations, oldest first, until the rest and the note fit; the user
                // messages right before the first kept reply stay with it.
                let mut kept_from = None;
                let mut from = open_groups[0].start;
                for i in 0..open_groups.len() {
                    let next = open_groups.get(i + 1).map_or(open_end, |g| g.start);
                    let (keep_index, keep_seq) = keep_from(view, next);
                    bytes -= bytes_between(view, &plan, from, keep_index);
                    from = keep_index;
                    kept_from = Some(keep_seq);
                    if !escalate && fits(bytes + PREFACE_BYTES) {
                        break;
                    }
                }
                if let Some(seq) = kept_from {
                    bytes += PREFACE_BYTES;
                    plan.dropped_through = Some(seq - 1);
                }
            }
            CompactionStrategy::Off => {}
        }
    }
    if estimate(calibration, bytes) > request.budget {
        cut_largest(view, &mut plan, &mut bytes, calibration, target);
    }
    // Results masked inside a left-out span need no stub.
    if let Some(through) = plan.dropped_through {
        let dropped: std::collections::HashSet<&str> = view
            .meta
            .iter()
            .filter(|m| m.seq <= through)
            .filter_map(|m| match &m.kind {
                MessageKind::ToolResult { action_id, .. } => Some(action_id.as_str()),
                _ => None,
            })
            .collect();
        plan.masked.retain(|id| !dropped.contains(id.as_str()));
    }
    if plan.masked.is_empty()
        && plan.cut.is_empty()
        && plan.dropped_through.is_none()
        && plan.summarize.is_none()
    {
        return None;
    }
    plan.tokens_after = estimate(calibration, bytes);
    Some(plan)
}

/// Where the kept part begins when the iterations before message `boundary` are left out:
/// the user messages right before it stay (the question the next reply answers). Returns
/// that message's index and the seq of its event.
fn keep_from(view: &View, boundary: usize) -> (usize, u64) {
    let mut index = boundary;
    while index > 0 && view.meta[index - 1].kind == MessageKind::User {
        index -= 1;
    }
    // Nothing kept after the boundary: everything up to the last message goes (never later
    // events: they are kept when they come).
    let seq = view.meta.get(index).or(view.meta.last()).map_or(1, |m| {
        if index < view.meta.len() {
            m.seq
        } else {
            m.seq + 1
        }
    });
    (index, seq)
}

/// The bytes of messages `start..end` as they stand with `plan`'s masks.
fn bytes_between(view: &View, plan: &Plan, start: usize, end: usize) -> u64 {
    view.meta[start..end]
        .iter()
        .map(|meta| match &meta.kind {
            MessageKind::ToolResult {
                action_id,
                stub_bytes,
                ..
            } if plan.masked.contains(action_id) => *stub_bytes,
            _ => meta.bytes,
        })
        .sum()
}

/// The iterations of the view: each reply with the results after it.
fn groups(view: &View) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (index, meta) in view.meta.iter().enumerate() {
        match meta.kind {
            MessageKind::Assistant { .. } => groups.push(Group {
                start: index,
                end: index + 1,
            }),
            MessageKind::ToolResult { .. } => {
                if let Some(last) = groups.last_mut() {
                    last.end = index + 1;
                }
            }
            _ => {}
        }
    }
    groups
}

/// Cuts the largest results the request keeps whole, head and tail, until it fits `target`.
fn cut_largest(
    view: &View,
    plan: &mut Plan,
    bytes: &mut u64,
    calibration: Option<Calibration>,
    target: u64,
) {
    let through = plan.dropped_through.unwrap_or(0);
    let mut candidates: Vec<(u64, &str, u64)> = view
        .meta
        .iter()
        .filter(|m| m.seq > through)
        .filter_map(|m| match &m.kind {
            MessageKind::ToolResult {
                action_id,
                full_bytes,
                masked: false,
                ..
            } if !plan.masked.contains(action_id) && *full_bytes > MIN_CUT_KEEP_BYTES => {
                Some((m.bytes, action_id.as_str(), *full_bytes))
            }
            _ => None,
        })
        .collect();
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    for (message_bytes, action_id, full_bytes) in candidates {
        let over = estimate(calibration, *bytes).saturating_sub(target);
        if over == 0 {
            break;
        }
        let excess = bytes_for(calibration, over) + CUT_MARKER_BYTES;
        let kept = full_bytes.saturating_sub(excess).max(MIN_CUT_KEEP_BYTES);
        if kept >= full_bytes {
            continue;
        }
        let new_bytes = kept + CUT_MARKER_BYTES + action_id.len() as u64 + MESSAGE_FRAME_BYTES;
        *bytes = bytes.saturating_sub(message_bytes.saturating_sub(new_bytes));
        plan.cut.push(CutResult {
            action_id: action_id.to_string(),
            kept_bytes: kept,
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
