//! The ledgers of one orchestration: the plan's cap (`budget:` at the top of plan.yaml, or
//! `delta orchestrate --budget-usd/--budget-tokens`) and each stage's (`budget:` in the
//! stage), seeded with what earlier invocations of the same orchestration spent, so a
//! resume counts the whole batch. A run charges the plan's ledger and its stage's.
//!
//! Must not: do I/O (the spending of earlier invocations comes in), or import actix.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Budget, BudgetLedger, BudgetScope, Spending};

/// The caps of one orchestration and what each has spent.
#[derive(Debug, Default)]
pub struct PlanBudgets {
    plan: Option<Arc<BudgetLedger>>,
    stages: BTreeMap<String, Arc<BudgetLedger>>,
}

impl PlanBudgets {
    /// Ledgers for `plan` (the plan's cap) and `stages` (each stage's id and cap), given
    /// what each stage spent in earlier invocations (`spent_before`, by stage id).
    pub fn new<'a>(
        plan: Option<Budget>,
        stages: impl IntoIterator<Item = (&'a str, Option<Budget>)>,
        spent_before: &BTreeMap<String, Spending>,
    ) -> PlanBudgets {
        let total = spent_before
            .values()
            .fold(Spending::default(), |sum, spent| sum.plus(spent));
        PlanBudgets {
            plan: plan
                .filter(|budget| !budget.is_empty())
                .map(|budget| Arc::new(BudgetLedger::new(BudgetScope::Plan, budget, total))),
            stages: stages
                .into_iter()
                .filter_map(|(id, budget)| {
                    let budget = budget.filter(|budget| !budget.is_empty())?;
                    let spent = spent_before.get(id).copied().unwrap_or_default();
                    let scope = BudgetScope::Stage(id.to_string());
                    Some((
                        id.to_string(),
                        Arc::new(BudgetLedger::new(scope, budget, spent)),
                    ))
                })
                .collect(),
        }
    }

    /// The ledgers a run of `stage` charges: the plan's, then the stage's.
    pub fn for_stage(&self, stage: &str) -> Vec<Arc<BudgetLedger>> {
        self.plan
            .iter()
            .chain(self.stages.get(stage))
            .cloned()
            .collect()
    }

    /// The plan's ledger, when the plan has a cap.
    pub fn plan(&self) -> Option<&Arc<BudgetLedger>> {
        self.plan.as_ref()
    }

    /// Every ledger: the plan's, then the stages' by id.
    pub fn ledgers(&self) -> impl Iterator<Item = &Arc<BudgetLedger>> {
        self.plan.iter().chain(self.stages.values())
    }

    /// Why no run may start any more: the first exhausted ledger's message.
    pub fn exhausted(&self) -> Option<String> {
        self.ledgers()
            .find(|ledger| ledger.is_exhausted())
            .map(|ledger| ledger.exhausted_message())
    }

    /// The 80 % warning of the first ledger past it.
    pub fn warning(&self) -> Option<String> {
        self.ledgers()
            .find(|ledger| ledger.past_warning())
            .map(|ledger| ledger.warning_message())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_counts_what_earlier_invocations_spent() {
        let mut before = BTreeMap::new();
        before.insert(
            "map".to_string(),
            Spending {
                usd: 0.3,
                tokens: 10,
            },
        );
        before.insert(
            "reduce".to_string(),
            Spending {
                usd: 0.2,
                tokens: 5,
            },
        );
        let cap = |usd| {
            Some(Budget {
                usd: Some(usd),
                tokens: None,
            })
        };
        let budgets = PlanBudgets::new(cap(1.0), [("map", cap(0.5)), ("reduce", None)], &before);
        let map = budgets.for_stage("map");
        assert_eq!(map.len(), 2);
        assert!((map[0].spent().usd - 0.5).abs() < 1e-12);
        assert!((map[1].spent().usd - 0.3).abs() < 1e-12);
        assert_eq!(budgets.for_stage("reduce").len(), 1);
        assert!(budgets.exhausted().is_none());
        map[1].check(&Spending {
            usd: 0.3,
            tokens: 0,
        });
        assert_eq!(
            budgets.exhausted().as_deref(),
            Some("stage map: budget exhausted (spent $0.30 of $0.50)")
        );
    }
}
