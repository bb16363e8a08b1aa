//! Spending caps (issue 33 item 2): a [`Budget`] in dollars and/or tokens, what was spent
//! against it ([`Spending`]), and the decision taken before each model call
//! ([`decide`] → [`BudgetDecision`]: go on, go on with the 80 % warning, or stop). The
//! [`BudgetLedger`] (`ledger.rs`) is the shared running total the runs of one scope (a
//! `delta run`, a plan, a stage) charge and consult.
//!
//! Spending is what the provider billed: every attempt's tokens at the price that makes
//! `cost_usd` (docs/cost.md). A call is let through only when the spending so far plus an
//! estimate of that call (its prompt-token estimate and its output limit, priced) stays
//! within the budget; calls already in flight are not counted, so a budget is overshot by
//! at most the calls in flight at the moment it runs out.
//!
//! Must not: do I/O, import actix, or read a price itself (callers price the estimate and
//! the spending with `llm::price`).

mod ledger;
mod plan;

pub use ledger::{write_remaining, BudgetLedger, BudgetScope};
pub use plan::PlanBudgets;

use serde::{Deserialize, Serialize};

/// The largest dollar budget accepted: far above any batch, far below where sums lose
/// their cents.
pub const MAX_BUDGET_USD: f64 = 1_000_000_000.0;
/// The largest token budget accepted.
pub const MAX_BUDGET_TOKENS: u64 = 1_000_000_000_000_000;
/// The share of a budget whose spending warns once.
pub const WARN_FRACTION: f64 = 0.8;
/// The keys of a plan's `budget:` (at the top and in a stage).
pub const BUDGET_KEYS: [&str; 2] = ["usd", "tokens"];
/// The words every "a cap ran out" message holds (a summary's note, a run's reason).
pub const EXHAUSTED_WORDS: &str = "budget exhausted";
/// "budget exhausted (spent $X of $Y)" out of a longer text (a run's error that quotes a
/// relay's refusal), for the orchestration's note; with the `"stage <id>: "` before it when a
/// stage's cap ran out.
pub fn exhausted_note(text: &str) -> Option<String> {
    let rest = &text[exhausted_start(text)?..];
    let end = rest.find(')').map_or(rest.len(), |i| i + 1);
    Some(rest[..end].to_string())
}

/// Where the words of a cap that ran out start in `text`: at `"stage <id>: "` when a stage's
/// cap is named right before [`EXHAUSTED_WORDS`], else at the words.
pub fn exhausted_start(text: &str) -> Option<usize> {
    const STAGE: &str = "stage ";
    let start = text.find(EXHAUSTED_WORDS)?;
    let named = text[..start].strip_suffix(": ").and_then(|head| {
        let stage = head.rfind(STAGE)?;
        let id = &head[stage + STAGE.len()..];
        (!id.is_empty() && !id.contains(char::is_whitespace)).then_some(stage)
    });
    Some(named.unwrap_or(start))
}

/// The `max_tokens` an estimate assumes for a request that sets none: a reply may be this
/// long before most servers cut it.
pub const DEFAULT_OUTPUT_ESTIMATE: u64 = 4096;

/// A spending cap: dollars, tokens (input + output, every attempt), or both; a call that
/// would pass either stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Dollars, priced as `total_cost_usd` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// Tokens billed (prompt + completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

impl Budget {
    /// Whether neither cap is set (a `budget: {}` caps nothing).
    pub fn is_empty(&self) -> bool {
        self.usd.is_none() && self.tokens.is_none()
    }

    /// The first value out of range, as `(key, message)`: `usd` must be finite and in
    /// `(0, MAX_BUDGET_USD]`, `tokens` in `1..=MAX_BUDGET_TOKENS`.
    pub fn invalid(&self) -> Option<(&'static str, String)> {
        if let Some(usd) = self.usd {
            if !(usd.is_finite() && usd > 0.0 && usd <= MAX_BUDGET_USD) {
                return Some((
                    "usd",
                    format!(
                        "{usd} is out of range (allowed: more than 0, at most {MAX_BUDGET_USD})"
                    ),
                ));
            }
        }
        if let Some(tokens) = self.tokens {
            if !(1..=MAX_BUDGET_TOKENS).contains(&tokens) {
                return Some((
                    "tokens",
                    format!("{tokens} is out of range (allowed 1..={MAX_BUDGET_TOKENS})"),
                ));
            }
        }
        None
    }

    /// `$Y` and/or `N tokens`, as the messages say the cap.
    pub fn describe(&self) -> String {
        match (self.usd, self.tokens) {
            (Some(usd), Some(tokens)) => format!("{} or {tokens} tokens", dollars(usd)),
            (Some(usd), None) => dollars(usd),
            (None, Some(tokens)) => format!("{tokens} tokens"),
            (None, None) => "no budget".to_string(),
        }
    }
}

/// Dollars spent and tokens billed so far (or estimated for one call).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spending {
    /// Dollars.
    pub usd: f64,
    /// Tokens (prompt + completion).
    pub tokens: u64,
}

impl Spending {
    /// `self` and `other` together (saturating; dollars stay finite).
    pub fn plus(&self, other: &Spending) -> Spending {
        let usd = self.usd + other.usd;
        Spending {
            usd: if usd.is_finite() { usd } else { f64::MAX },
            tokens: self.tokens.saturating_add(other.tokens),
        }
    }

    /// "spent $X of $Y" (or tokens), as the summary and the journal say it.
    pub fn against(&self, budget: &Budget) -> String {
        match (budget.usd, budget.tokens) {
            (Some(usd), Some(tokens)) => format!(
                "spent {} of {}, {} of {tokens} tokens",
                dollars(self.usd),
                dollars(usd),
                self.tokens
            ),
            (Some(usd), None) => format!("spent {} of {}", dollars(self.usd), dollars(usd)),
            (None, Some(tokens)) => format!("spent {} of {tokens} tokens", self.tokens),
            (None, None) => format!("spent {}", dollars(self.usd)),
        }
    }
}

/// Refuses a dollar cap over a model nothing prices (its cost is unknown, so the cap
/// could not be enforced): the error names the model, who runs it (`agent`) and
/// `llm.price`. A tokens-only cap needs no price.
pub fn check_priced(
    budget: &Budget,
    agent: &crate::agent::ResolvedAgent,
    llm: &crate::llm::LlmTarget,
) -> Result<(), String> {
    if budget.usd.is_none() {
        return Ok(());
    }
    let model = &agent.llm.model;
    match crate::llm::price::price_of(agent.llm.price.as_ref(), model, llm.base_url()) {
        Some(_) => Ok(()),
        None => Err(format!(
            "a dollar budget cannot be enforced: nothing prices model {model} (agent {}), so its cost is unknown; set `llm.price` in its agent.yaml or the plan's `llm:` (docs/cost.md), or cap tokens instead (`--budget-tokens`, `budget: {{tokens: N}}`)",
            agent.home.display()
        )),
    }
}

/// Dollars as the messages show them: cents, or six decimals below a cent.
pub fn dollars(usd: f64) -> String {
    if usd >= 0.01 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.6}")
    }
}

/// What to do about the next model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetDecision {
    /// Within the budget.
    Proceed,
    /// Within the budget, and the spending so far has reached 80 % of it: warn (once).
    Warn80,
    /// The call would pass the budget: do not make it.
    Exhausted,
}

/// The decision for a call estimated at `estimate` after `spent`: [`BudgetDecision::Exhausted`]
/// when `spent + estimate` passes a cap, else [`BudgetDecision::Warn80`] when `spent` has
/// reached [`WARN_FRACTION`] of one, else [`BudgetDecision::Proceed`].
pub fn decide(budget: &Budget, spent: &Spending, estimate: &Spending) -> BudgetDecision {
    let after = spent.plus(estimate);
    let over_usd = budget.usd.is_some_and(|cap| after.usd > cap);
    let over_tokens = budget.tokens.is_some_and(|cap| after.tokens > cap);
    if over_usd || over_tokens {
        return BudgetDecision::Exhausted;
    }
    let warn_usd = budget
        .usd
        .is_some_and(|cap| spent.usd >= cap * WARN_FRACTION);
    let warn_tokens = budget
        .tokens
        .is_some_and(|cap| spent.tokens as f64 >= cap as f64 * WARN_FRACTION);
    if warn_usd || warn_tokens {
        BudgetDecision::Warn80
    } else {
        BudgetDecision::Proceed
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_note_of_a_refusal_keeps_the_stage_whose_cap_ran_out() {
        let relay = "model call failed after 1 attempt(s): HTTP 402: budget_exhausted: stage \
                     map: budget exhausted (spent 11100 of 12000 tokens) (the batch's budget)";
        assert_eq!(
            exhausted_note(relay).as_deref(),
            Some("stage map: budget exhausted (spent 11100 of 12000 tokens)")
        );
        let plan = "budget_exhausted: budget exhausted (spent $1.00 of $1.00) (the batch's)";
        assert_eq!(
            exhausted_note(plan).as_deref(),
            Some("budget exhausted (spent $1.00 of $1.00)")
        );
        // Words before the cap that are not a stage's name stay out.
        assert_eq!(
            exhausted_start("the stage is big: budget exhausted (spent 1 of 1 tokens)"),
            Some(18)
        );
        assert_eq!(exhausted_start("all went well"), None);
    }

    fn spent(usd: f64, tokens: u64) -> Spending {
        Spending { usd, tokens }
    }

    #[test]
    fn a_call_that_would_pass_the_cap_is_refused() {
        let budget = Budget {
            usd: Some(1.0),
            tokens: None,
        };
        assert_eq!(
            decide(&budget, &spent(0.5, 0), &spent(0.2, 0)),
            BudgetDecision::Proceed
        );
        assert_eq!(
            decide(&budget, &spent(0.5, 0), &spent(0.6, 0)),
            BudgetDecision::Exhausted
        );
        // Exactly at the cap is still within it.
        assert_eq!(
            decide(&budget, &spent(0.5, 0), &spent(0.5, 0)),
            BudgetDecision::Proceed
        );
    }

    #[test]
    fn eighty_percent_spent_warns() {
        let budget = Budget {
            usd: None,
            tokens: Some(1000),
        };
        assert_eq!(
            decide(&budget, &spent(0.0, 799), &spent(0.0, 1)),
            BudgetDecision::Proceed
        );
        assert_eq!(
            decide(&budget, &spent(0.0, 800), &spent(0.0, 1)),
            BudgetDecision::Warn80
        );
        assert_eq!(
            decide(&budget, &spent(0.0, 800), &spent(0.0, 201)),
            BudgetDecision::Exhausted
        );
    }

    #[test]
    fn either_cap_stops() {
        let budget = Budget {
            usd: Some(10.0),
            tokens: Some(100),
        };
        assert_eq!(
            decide(&budget, &spent(0.0, 90), &spent(0.0, 11)),
            BudgetDecision::Exhausted
        );
        assert_eq!(
            decide(&budget, &spent(9.0, 0), &spent(1.5, 0)),
            BudgetDecision::Exhausted
        );
    }

    #[test]
    fn out_of_range_values_are_named() {
        for usd in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_BUDGET_USD * 2.0] {
            let budget = Budget {
                usd: Some(usd),
                tokens: None,
            };
            assert_eq!(budget.invalid().map(|(key, _)| key), Some("usd"), "{usd}");
        }
        let budget = Budget {
            usd: None,
            tokens: Some(0),
        };
        assert_eq!(budget.invalid().map(|(key, _)| key), Some("tokens"));
        let fine = Budget {
            usd: Some(0.5),
            tokens: Some(10),
        };
        assert_eq!(fine.invalid(), None);
    }

    #[test]
    fn spending_reads_against_its_budget() {
        let budget = Budget {
            usd: Some(2.0),
            tokens: None,
        };
        assert_eq!(spent(1.234, 5).against(&budget), "spent $1.23 of $2.00");
        assert_eq!(dollars(0.000123), "$0.000123");
    }
}
