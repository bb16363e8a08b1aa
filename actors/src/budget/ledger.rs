//! The running total of one budget's scope, shared (`Arc`) by every run that charges it: a
//! `delta run`, a plan (all its runs) or one stage. Runs consult it before each model call
//! ([`BudgetLedger::check`]) and charge each call's billed tokens and dollars after it
//! ([`BudgetLedger::charge`]); the orchestration reads it to stop starting runs.
//!
//! Once a check says exhausted, the ledger stays exhausted: every later check says so too,
//! so runs in flight stop at their next call and no run starts, until a new invocation (a
//! resume with a bigger budget) makes a new ledger.
//!
//! Must not: block (the lock is held for a few arithmetic steps), do I/O, or import actix.

use std::sync::{Mutex, PoisonError};

use super::{decide, Budget, BudgetDecision, Spending, WARN_FRACTION};

/// Whose budget a ledger keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetScope {
    /// One `delta run` (`--budget-usd`, `--budget-tokens`).
    Run,
    /// A whole plan (`budget:` at the top of plan.yaml, `delta orchestrate --budget-usd`).
    Plan,
    /// One stage of a plan (`budget:` in the stage).
    Stage(String),
}

impl BudgetScope {
    /// "the run's", "the plan's", "stage X's", as messages name the budget.
    pub fn owner(&self) -> String {
        match self {
            BudgetScope::Run => "the run's".to_string(),
            BudgetScope::Plan => "the plan's".to_string(),
            BudgetScope::Stage(id) => format!("stage {id}'s"),
        }
    }
}

#[derive(Debug, Default)]
struct LedgerState {
    spent: Spending,
    warned: bool,
    exhausted: bool,
}

/// One budget and what its scope has spent.
#[derive(Debug)]
pub struct BudgetLedger {
    scope: BudgetScope,
    budget: Budget,
    state: Mutex<LedgerState>,
}

impl BudgetLedger {
    /// A ledger of `budget` for `scope` that has already spent `spent_before` (an earlier
    /// invocation of the same plan).
    pub fn new(scope: BudgetScope, budget: Budget, spent_before: Spending) -> BudgetLedger {
        BudgetLedger {
            scope,
            budget,
            state: Mutex::new(LedgerState {
                spent: spent_before,
                ..LedgerState::default()
            }),
        }
    }

    /// The cap.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Whose cap it is.
    pub fn scope(&self) -> &BudgetScope {
        &self.scope
    }

    /// What the scope has spent so far.
    pub fn spent(&self) -> Spending {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spent
    }

    /// Whether a check found the budget exhausted.
    pub fn is_exhausted(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .exhausted
    }

    /// Whether the spending has reached 80 % of a cap.
    pub fn past_warning(&self) -> bool {
        let spent = self.spent();
        self.budget
            .usd
            .is_some_and(|cap| spent.usd >= cap * WARN_FRACTION)
            || self
                .budget
                .tokens
                .is_some_and(|cap| spent.tokens as f64 >= cap as f64 * WARN_FRACTION)
    }

    /// The decision for a call estimated at `estimate`. [`BudgetDecision::Warn80`] is
    /// answered once per ledger (the first check past 80 %); after an
    /// [`BudgetDecision::Exhausted`], every check is exhausted.
    pub fn check(&self, estimate: &Spending) -> BudgetDecision {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.exhausted {
            return BudgetDecision::Exhausted;
        }
        match decide(&self.budget, &state.spent, estimate) {
            BudgetDecision::Exhausted => {
                state.exhausted = true;
                BudgetDecision::Exhausted
            }
            BudgetDecision::Warn80 if !state.warned => {
                state.warned = true;
                BudgetDecision::Warn80
            }
            _ => BudgetDecision::Proceed,
        }
    }

    /// Adds one call's billed spending (every attempt); true when this charge is the first
    /// to reach 80 % of a cap (the caller warns, once per ledger).
    pub fn charge(&self, spending: &Spending) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.spent = state.spent.plus(spending);
        let past = self
            .budget
            .usd
            .is_some_and(|cap| state.spent.usd >= cap * WARN_FRACTION)
            || self
                .budget
                .tokens
                .is_some_and(|cap| state.spent.tokens as f64 >= cap as f64 * WARN_FRACTION);
        if past && !state.warned {
            state.warned = true;
            return true;
        }
        false
    }

    /// "budget exhausted (spent $X of $Y)", as the run's reason and the summary say it.
    pub fn exhausted_message(&self) -> String {
        let spent = self.spent().against(&self.budget);
        match &self.scope {
            BudgetScope::Stage(id) => format!("stage {id}: budget exhausted ({spent})"),
            _ => format!("budget exhausted ({spent})"),
        }
    }

    /// `delta_budget_remaining_usd` / `delta_budget_remaining_tokens{scope}` of this cap
    /// (see [`write_remaining`]).
    pub fn write_metrics(&self, text: &mut crate::openmetrics::MetricsText) {
        write_remaining(text, [self]);
    }

    /// The `scope` label of this cap's gauges: `run`, `plan`, `stage:<id>`.
    fn metric_scope(&self) -> String {
        match &self.scope {
            BudgetScope::Run => "run".to_string(),
            BudgetScope::Plan => "plan".to_string(),
            BudgetScope::Stage(id) => format!("stage:{id}"),
        }
    }

    /// The 80 % warning's text.
    pub fn warning_message(&self) -> String {
        format!(
            "80% of {} budget spent ({}): the batch stops starting model calls when it runs out",
            self.scope.owner(),
            self.spent().against(&self.budget)
        )
    }
}

/// `delta_budget_remaining_usd` / `delta_budget_remaining_tokens{scope}` of `ledgers`: what
/// is left of each cap they have (never below 0), each family written once whatever the
/// number of ledgers (a plan's cap beside its stages').
pub fn write_remaining<'a>(
    text: &mut crate::openmetrics::MetricsText,
    ledgers: impl IntoIterator<Item = &'a BudgetLedger>,
) {
    use crate::openmetrics::Kind;
    let (mut usd, mut tokens) = (Vec::new(), Vec::new());
    for ledger in ledgers {
        let spent = ledger.spent();
        if let Some(cap) = ledger.budget.usd {
            usd.push((ledger.metric_scope(), (cap - spent.usd).max(0.0)));
        }
        if let Some(cap) = ledger.budget.tokens {
            tokens.push((
                ledger.metric_scope(),
                cap.saturating_sub(spent.tokens) as f64,
            ));
        }
    }
    for (name, help, samples) in [
        (
            "delta_budget_remaining_usd",
            "Dollars left of a spending cap (docs/cost.md).",
            usd,
        ),
        (
            "delta_budget_remaining_tokens",
            "Tokens left of a spending cap (docs/cost.md).",
            tokens,
        ),
    ] {
        if samples.is_empty() {
            continue;
        }
        text.family(name, Kind::Gauge, help);
        for (scope, left) in samples {
            text.sample(name, &[("scope", &scope)], left);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn usd(v: f64) -> Spending {
        Spending { usd: v, tokens: 0 }
    }

    #[test]
    fn what_is_left_is_a_gauge() {
        let ledger = BudgetLedger::new(
            BudgetScope::Plan,
            Budget {
                usd: None,
                tokens: Some(1000),
            },
            Spending {
                usd: 0.0,
                tokens: 250,
            },
        );
        let mut text = crate::openmetrics::MetricsText::new();
        ledger.write_metrics(&mut text);
        let text = text.finish();
        assert!(
            text.contains("delta_budget_remaining_tokens{scope=\"plan\"} 750"),
            "{text}"
        );
        assert!(!text.contains("remaining_usd"), "{text}");
    }

    #[test]
    fn a_plan_and_its_stages_share_one_family_each() {
        let cap = |usd, tokens| Budget { usd, tokens };
        let plan = BudgetLedger::new(BudgetScope::Plan, cap(Some(2.0), None), usd(0.5));
        let stage = BudgetLedger::new(
            BudgetScope::Stage("map".into()),
            cap(Some(1.0), Some(100)),
            Spending {
                usd: 1.5,
                tokens: 40,
            },
        );
        let mut text = crate::openmetrics::MetricsText::new();
        write_remaining(&mut text, [&plan, &stage]);
        let text = text.finish();
        assert_eq!(
            text.matches("# TYPE delta_budget_remaining_usd gauge")
                .count(),
            1,
            "{text}"
        );
        assert!(
            text.contains("delta_budget_remaining_usd{scope=\"plan\"} 1.5"),
            "{text}"
        );
        // Overspent: left is 0, never negative.
        assert!(
            text.contains("delta_budget_remaining_usd{scope=\"stage:map\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("delta_budget_remaining_tokens{scope=\"stage:map\"} 60"),
            "{text}"
        );
    }

    #[test]
    fn warns_once_then_stays_exhausted() {
        let ledger = BudgetLedger::new(
            BudgetScope::Plan,
            Budget {
                usd: Some(1.0),
                tokens: None,
            },
            usd(0.5),
        );
        assert_eq!(ledger.check(&usd(0.1)), BudgetDecision::Proceed);
        // The charge that reaches 80 % says so, once.
        assert!(ledger.charge(&usd(0.35)));
        assert!(ledger.past_warning());
        assert!(!ledger.charge(&usd(0.0)));
        assert_eq!(ledger.check(&usd(0.1)), BudgetDecision::Proceed);
        assert_eq!(ledger.check(&usd(0.5)), BudgetDecision::Exhausted);
        // A smaller call afterwards does not sneak through.
        assert_eq!(ledger.check(&usd(0.0)), BudgetDecision::Exhausted);
        assert!(ledger.is_exhausted());
        assert_eq!(
            ledger.exhausted_message(),
            "budget exhausted (spent $0.85 of $1.00)"
        );
    }
}
