//! The spending caps shared by every caller of a relay — all the jobs of a Slurm batch — so
//! a plan's `budget:` caps the whole batch and a stage's `budget:` that stage's jobs. A
//! stage with a cap has routes of its own (`s<j>a<i>`, the same endpoints as the agents'
//! `a<i>`), so a request's route says which caps it charges: the plan's, and its stage's
//! if the route is one of a capped stage's. Before a request goes to its endpoint, the
//! spending so far plus an estimate of it (its body's bytes / 4 as prompt tokens, plus its
//! `max_tokens`, priced at its route's price) is checked against each of those caps; past
//! one, the relay answers a typed refusal (HTTP 402, error type [`REFUSAL_TYPE`]), which
//! the calling run records as INTERRUPTED `budget_exhausted` (not a retryable failure).
//! Each answer's billed tokens (its `usage`) are charged to the same caps at the route's
//! price.
//!
//! Must not: do I/O, import actix, or read request bodies beyond the numbers given.

use std::collections::HashMap;
use std::sync::Arc;

use crate::budget::{BudgetDecision, BudgetLedger, PlanBudgets, Spending, DEFAULT_OUTPUT_ESTIMATE};
use crate::llm::price::{call_cost_usd, Price};
use crate::llm::Usage;

/// The error `type` and `code` of the relay's refusal, and the start of its message: what
/// a run recognises as "the batch's budget ran out".
pub const REFUSAL_TYPE: &str = "budget_exhausted";
/// The HTTP status of the refusal (Payment Required: never retried).
pub const REFUSAL_STATUS: u16 = 402;

/// The relay's caps and the prices of its routes.
#[derive(Debug)]
pub struct RelayBudget {
    caps: PlanBudgets,
    /// The stage whose cap a route's requests also charge, by route name (routes of stages
    /// without a cap, and the agents' own routes, charge the plan's cap only).
    stage_of_route: HashMap<String, String>,
    /// Dollars per million tokens by route name; a route without one is charged tokens only
    /// (a dollar cap over an unpriced model is refused before the relay starts).
    prices: HashMap<String, Price>,
}

impl RelayBudget {
    /// `caps` charged at `prices` (by route name); a route named in `stage_of_route` also
    /// charges that stage's cap.
    pub fn new(
        caps: PlanBudgets,
        stage_of_route: HashMap<String, String>,
        prices: HashMap<String, Price>,
    ) -> RelayBudget {
        RelayBudget {
            caps,
            stage_of_route,
            prices,
        }
    }

    /// Every cap: the plan's, then the stages' by id.
    pub fn ledgers(&self) -> impl Iterator<Item = &Arc<BudgetLedger>> {
        self.caps.ledgers()
    }

    /// The caps a request to `route` charges: the plan's, then its stage's.
    fn caps_of(&self, route: &str) -> Vec<Arc<BudgetLedger>> {
        match self.stage_of_route.get(route) {
            Some(stage) => self.caps.for_stage(stage),
            None => self.caps.plan().into_iter().cloned().collect(),
        }
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
    /// `max_tokens` would pass one of its caps: the refusal's message.
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
        let caps = self.caps_of(route);
        let exhausted = caps
            .iter()
            .find(|cap| cap.check(&estimate) == BudgetDecision::Exhausted)?;
        Some(format!(
            "{REFUSAL_TYPE}: {} (the batch's budget, shared through the relay): this call was not sent",
            exhausted.exhausted_message()
        ))
    }

    /// Charges an answer's billed tokens to every cap of `route`.
    pub fn charge(&self, route: &str, usage: &Usage) {
        let spending = self.spending(route, usage);
        for cap in self.caps_of(route) {
            if cap.charge(&spending) {
                tracing::warn!(target: "delta::relay", "relay: {}", cap.warning_message());
            }
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
    use std::collections::BTreeMap;

    use super::*;
    use crate::budget::{Budget, BudgetScope};

    fn tokens(n: u64) -> Option<Budget> {
        Some(Budget {
            usd: None,
            tokens: Some(n),
        })
    }

    fn usage(prompt: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            cached_prompt_tokens: 0,
        }
    }

    #[test]
    fn the_relay_refuses_once_the_batch_would_pass_its_cap() {
        let caps = PlanBudgets::new(tokens(1000), [], &BTreeMap::new());
        let budget = RelayBudget::new(caps, HashMap::new(), HashMap::new());
        assert_eq!(budget.refusal("a0", 400, Some(100)), None);
        budget.charge("a0", &usage(700, 100));
        // 800 billed + (800 bytes / 4 + 100) estimated > 1000.
        let message = budget.refusal("a0", 800, Some(100)).unwrap();
        assert!(is_refusal(REFUSAL_STATUS, &message), "{message}");
        assert!(message.contains("spent 800 of 1000 tokens"), "{message}");
    }

    #[test]
    fn a_stages_route_charges_and_is_refused_by_its_stages_cap_too() {
        let caps = PlanBudgets::new(
            tokens(10_000),
            [("map", tokens(1000)), ("reduce", None)],
            &BTreeMap::new(),
        );
        let stage_of_route = HashMap::from([("s0a0".to_string(), "map".to_string())]);
        let budget = RelayBudget::new(caps, stage_of_route, HashMap::new());
        budget.charge("s0a0", &usage(700, 100));
        let message = budget.refusal("s0a0", 800, Some(100)).unwrap();
        assert!(is_refusal(REFUSAL_STATUS, &message), "{message}");
        assert!(
            message.contains("stage map: budget exhausted (spent 800 of 1000 tokens)"),
            "{message}"
        );
        // The agent's own route (another stage's runs) charges the plan's cap only.
        assert_eq!(budget.refusal("a0", 800, Some(100)), None);
        budget.charge("a0", &usage(500, 0));
        let spent: Vec<(&BudgetScope, u64)> = budget
            .ledgers()
            .map(|cap| (cap.scope(), cap.spent().tokens))
            .collect();
        assert_eq!(
            spent,
            [
                (&BudgetScope::Plan, 1300),
                (&BudgetScope::Stage("map".into()), 800)
            ],
            "the plan's cap has both routes' tokens, the stage's its own route's"
        );
    }
}
