//! `--budget-usd` / `--budget-tokens`, shared by `delta run` (the run's cap) and `delta
//! orchestrate` (the plan's cap, replacing plan.yaml's `budget:`): parsed and range-checked
//! by clap (a bad value is a usage error, exit 2), turned into a [`Budget`] here.
//!
//! Must not: enforce anything (the engine does, docs/cost.md) or print.

use clap::Args;
use delta_actors::budget::{Budget, MAX_BUDGET_TOKENS};

/// The spending-cap flags.
#[derive(Debug, Clone, Default, Args)]
pub struct BudgetArgs {
    /// Stop at this many US dollars spent (every attempt's tokens at the model's price;
    /// docs/cost.md). Before each model call, what was spent plus an estimate of that call
    /// is checked against it: a call that would pass it is not made, the run ends
    /// INTERRUPTED with `budget_exhausted` (continue it later with a bigger budget). The
    /// model must have a price (`llm.price` or the catalogue's).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub budget_usd: Option<f64>,
    /// Stop at this many tokens billed (prompt + completion, every attempt), checked like
    /// --budget-usd.
    #[arg(long, value_name = "TOKENS",
          value_parser = clap::value_parser!(u64).range(1..=MAX_BUDGET_TOKENS))]
    pub budget_tokens: Option<u64>,
}

impl BudgetArgs {
    /// The cap the flags give, `None` without either.
    pub fn budget(&self) -> Option<Budget> {
        let budget = Budget {
            usd: self.budget_usd,
            tokens: self.budget_tokens,
        };
        (!budget.is_empty()).then_some(budget)
    }

    /// `over` with the flags' values replacing its own (each flag separately).
    pub fn over(&self, over: Option<Budget>) -> Option<Budget> {
        let base = over.unwrap_or_default();
        let budget = Budget {
            usd: self.budget_usd.or(base.usd),
            tokens: self.budget_tokens.or(base.tokens),
        };
        (!budget.is_empty()).then_some(budget)
    }
}

/// A dollar amount: finite, above 0, at most `MAX_BUDGET_USD`.
fn parse_usd(text: &str) -> Result<f64, String> {
    let usd: f64 = text
        .trim()
        .trim_start_matches('$')
        .parse()
        .map_err(|_| format!("'{text}' is not a number of dollars (e.g. 5 or 0.25)"))?;
    let budget = Budget {
        usd: Some(usd),
        tokens: None,
    };
    match budget.invalid() {
        Some((_, message)) => Err(message),
        None => Ok(usd),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_are_checked_up_front() {
        assert_eq!(parse_usd("0.25"), Ok(0.25));
        assert_eq!(parse_usd("$5"), Ok(5.0));
        for bad in ["0", "-1", "inf", "NaN", "1e12", "five"] {
            assert!(parse_usd(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_flag_replaces_the_plans_value_of_its_own() {
        let plan = Some(Budget {
            usd: Some(1.0),
            tokens: Some(100),
        });
        let flags = BudgetArgs {
            budget_usd: Some(3.0),
            budget_tokens: None,
        };
        assert_eq!(
            flags.over(plan),
            Some(Budget {
                usd: Some(3.0),
                tokens: Some(100)
            })
        );
        assert_eq!(BudgetArgs::default().over(None), None);
    }
}
