//! One spending cap across every caller of a relay — all the jobs of a Slurm batch — so a
//! plan's `budget:` caps the whole batch. Before a request goes to its endpoint, the
//! spending so far plus an estimate of it (its body's bytes / 4 as prompt tokens, plus its
//! `max_tokens`, priced at its route's price) is checked against the cap; past it, the
//! relay answers a typed refusal (HTTP 402, error type [`REFUSAL_TYPE`]), which the calling
//! run records as INTERRUPTED `budget_exhausted` (not a retryable failure). Each answer's
//! billed tokens (its `usage`) are charged at the route's price.
//!
//! Must not: do I/O, import actix, or read request bodies beyond the numbers given.

use std::collections::HashMap;
use std::sync::Arc;

use crate::budget::{BudgetDecision, BudgetLedger, Spending, DEFAULT_OUTPUT_ESTIMATE};
use crate::llm::price::{call_cost_usd, Price};
use crate::llm::Usage;

/// The error `type` and `code` of the relay's refusal, and the start of its message: what
/// a run recognises as "the batch's budget ran out".
pub const REFUSAL_TYPE: &str = "budget_exhausted";
/// The HTTP status of the refusal (Payment Required: never retried).
pub const REFUSAL_STATUS: u16 = 402;

/// The relay's cap and the prices of its routes.
#[derive(Debug)]
pub struct RelayBudget {
    ledger: Arc<BudgetLedger>,
    /// Dollars per million tokens by route name; a route without one is charged tokens only
    /// (a dollar cap over an unpriced model is refused before the relay starts).
    prices: HashMap<String, Price>,
}

impl RelayBudget {
    /// `ledger` charged at `prices` (by route name).
    pub fn new(ledger: Arc<BudgetLedger>, prices: HashMap<String, Price>) -> RelayBudget {
        RelayBudget { ledger, prices }
    }

    /// The shared ledger.
    pub fn ledger(&self) -> &Arc<BudgetLedger> {
        &self.ledger
    }

    fn spending(&self, route: &str, usage: &Usage) -> Spending {
        Spending {
            usd: self
                .prices
                .get(route)
                .map_or(0.0, |price| call_cost_usd(usage, price)),
            tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
        }
    }

    /// `Some(message)` when a request to `route` of `body_bytes` bytes asking for at most
    /// `max_tokens` would pass the cap: the refusal's message.
    pub fn refusal(
        &self,
        route: &str,
        body_bytes: usize,
        max_tokens: Option<u64>,
    ) -> Option<String> {
        let prompt = (body_bytes as u64).div_ceil(4);
        let output = max_tokens.unwrap_or(DEFAULT_OUTPUT_ESTIMATE);
        let estimate = self.spending(
            route,
            &Usage {
                prompt_tokens: prompt,
                completion_tokens: output,
                total_tokens: prompt.saturating_add(output),
                cached_prompt_tokens: 0,
            },
        );
        match self.ledger.check(&estimate) {
            BudgetDecision::Exhausted => Some(format!(
                "{REFUSAL_TYPE}: {} (the batch's budget, shared through the relay): this call was not sent",
                self.ledger.exhausted_message()
            )),
            BudgetDecision::Warn80 | BudgetDecision::Proceed => None,
        }
    }

    /// Charges an answer's billed tokens.
    pub fn charge(&self, route: &str, usage: &Usage) {
        if self.ledger.charge(&self.spending(route, usage)) {
            tracing::warn!(target: "delta::relay", "relay: {}", self.ledger.warning_message());
        }
    }
}

/// The refusal's JSON body, in OpenAI's error form.
pub fn refusal_body(message: &str) -> serde_json::Value {
    serde_json::json!({"error": {"message": message, "type": REFUSAL_TYPE, "code": REFUSAL_TYPE}})
}

/// Whether a model call's HTTP failure is a relay's budget refusal.
pub fn is_refusal(status: u16, message: &str) -> bool {
    status == REFUSAL_STATUS && message.starts_with(REFUSAL_TYPE)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::budget::{Budget, BudgetScope};

    #[test]
    fn the_relay_refuses_once_the_batch_would_pass_its_cap() {
        let ledger = Arc::new(BudgetLedger::new(
            BudgetScope::Plan,
            Budget {
                usd: None,
                tokens: Some(1000),
            },
            Spending::default(),
        ));
        let budget = RelayBudget::new(ledger, HashMap::new());
        assert_eq!(budget.refusal("a0", 400, Some(100)), None);
        budget.charge(
            "a0",
            &Usage {
                prompt_tokens: 700,
                completion_tokens: 100,
                total_tokens: 800,
                cached_prompt_tokens: 0,
            },
        );
        // 800 billed + (800 bytes / 4 + 100) estimated > 1000.
        let message = budget.refusal("a0", 800, Some(100)).unwrap();
        assert!(is_refusal(REFUSAL_STATUS, &message), "{message}");
        assert!(message.contains("spent 800 of 1000 tokens"), "{message}");
    }
}
