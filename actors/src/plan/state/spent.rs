//! What earlier invocations of an orchestration spent, per stage, read from its scheduling
//! journal: each run's last `RUN_FINISHED` (its tokens and dollars over its whole life), so
//! a resumed orchestration's budget counts the whole batch, not just this invocation.
//!
//! Must not: write anything, or fail: an unreadable journal spent nothing known.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::{OrchestrationState, SchedulingEvent, SchedulingRecord};
use crate::budget::Spending;

impl OrchestrationState {
    /// Tokens billed and dollars spent so far by each stage's runs (by stage id), as the
    /// scheduling journal in `dir` recorded their last outcomes.
    pub fn spent_so_far(dir: &Path) -> BTreeMap<String, Spending> {
        let mut last: HashMap<String, (String, Spending)> = HashMap::new();
        if let Ok(text) = Self::read_journal(dir) {
            for line in text.lines() {
                if let Ok(SchedulingRecord {
                    event:
                        SchedulingEvent::RunFinished {
                            stage,
                            run_id,
                            usage,
                            cost,
                            ..
                        },
                    ..
                }) = serde_json::from_str::<SchedulingRecord>(line)
                {
                    let spent = Spending {
                        usd: cost.and_then(|c| c.total_usd()).unwrap_or(0.0),
                        tokens: usage.input_tokens.saturating_add(usage.output_tokens),
                    };
                    last.insert(run_id, (stage, spent));
                }
            }
        }
        let mut by_stage: BTreeMap<String, Spending> = BTreeMap::new();
        for (stage, spent) in last.into_values() {
            let sum = by_stage.entry(stage).or_default();
            *sum = sum.plus(&spent);
        }
        by_stage
    }
}
