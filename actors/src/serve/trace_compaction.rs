//! The run inspector's entry for a context compaction (`CONTEXT_COMPACTED`, issue 32): the
//! point from which the model's requests no longer carry some of the run, and what they
//! carry instead (stubs, cut results, a summary or a note).
//!
//! Must not: read files, or say more than the event records (the page shows it as written).

use super::run_files::clip;
use super::trace::{TraceEntry, MAX_ENTRY_TEXT};
use crate::journal::CutResult;

/// What one compaction event holds, borrowed from it.
pub(super) struct Compaction<'a> {
    pub iteration: u32,
    pub strategy: &'a str,
    pub reason: &'a str,
    pub masked: &'a [String],
    pub cut: &'a [CutResult],
    pub dropped_through: Option<u64>,
    pub summary: Option<&'a str>,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// `entry` (seq and time filled in) as the compaction's entry.
pub(super) fn compaction_entry(compaction: &Compaction<'_>, entry: TraceEntry) -> TraceEntry {
    let mut lines = Vec::new();
    if compaction.reason == "refusal" {
        lines.push("The server refused the request as longer than the model's window.".to_string());
    }
    if !compaction.masked.is_empty() {
        lines.push(format!(
            "{} tool result(s) shown as a one-line stub.",
            compaction.masked.len()
        ));
    }
    if !compaction.cut.is_empty() {
        lines.push(format!(
            "{} tool result(s) cut head and tail.",
            compaction.cut.len()
        ));
    }
    if let Some(through) = compaction.dropped_through {
        lines.push(match compaction.summary {
            Some(summary) => {
                format!("Events up to #{through} replaced by this summary:\n{summary}")
            }
            None => format!("Events up to #{through} left out."),
        });
    }
    TraceEntry {
        kind: "compaction",
        title: format!(
            "Context compacted: {} → {} tokens ({})",
            compaction.tokens_before, compaction.tokens_after, compaction.strategy
        ),
        text: clip(&lines.join("\n"), MAX_ENTRY_TEXT),
        iteration: Some(compaction.iteration),
        ..entry
    }
}
