//! The budget check before each model call, and the charge after it (docs/cost.md): the
//! call's estimate (the context builder's prompt-token estimate of the request, plus its
//! output limit, priced as its `cost_usd` will be) against every cap the run charges; a
//! call that would pass one is not made: the run ends INTERRUPTED with `budget_exhausted`
//! (journaled as such, so `delta continue` or a resume with a bigger budget goes on from
//! there), and the first check past 80 % of a cap journals a WARNING.
//!
//! Must not: decide (`crate::budget` does), or touch the model port.

use crate::budget::{BudgetDecision, Spending, DEFAULT_OUTPUT_ESTIMATE};
use crate::journal::Event;
use crate::llm::catalogue::catalogue;
use crate::llm::price::call_cost_usd;
use crate::llm::{ChatRequest, Usage};
use crate::protocol::{RunErrorInfo, RunErrorKind};

use super::state::{error_info, Ending, Halt, Run};

impl Run {
    /// `Some(ending)` when a cap stops the run before `request` is sent; a WARNING is
    /// journaled the first time a cap is 80 % spent.
    pub(super) fn check_budgets(&mut self, request: &ChatRequest) -> Result<Option<Ending>, Halt> {
        if self.lp.request.budgets.is_empty() {
            return Ok(None);
        }
        let estimate = self.call_estimate(request);
        let budgets = self.lp.request.budgets.clone();
        for ledger in &budgets {
            match ledger.check(&estimate) {
                BudgetDecision::Proceed => {}
                BudgetDecision::Warn80 => {
                    let message = ledger.warning_message();
                    self.log(&format!("warning: {message}"));
                    self.append(Event::Warning { message })?;
                }
                BudgetDecision::Exhausted => {
                    let message = format!(
                        "{}; the next model call (estimated {}, {} tokens) was not made: continue the run with a bigger budget",
                        ledger.exhausted_message(),
                        crate::budget::dollars(estimate.usd),
                        estimate.tokens
                    );
                    self.log(&message);
                    self.append(Event::Interrupted {
                        reason: format!("budget_exhausted: {message}"),
                    })?;
                    return Ok(Some(Ending::interrupted(error_info(
                        RunErrorKind::BudgetExhausted,
                        message,
                    ))));
                }
            }
        }
        Ok(None)
    }

    /// What `request` may cost at most: its prompt estimate plus its output limit (the
    /// request's `max_tokens`, else agent.yaml's `llm.max_tokens`, else the catalogue's maximum output of the model, else
    /// [`DEFAULT_OUTPUT_ESTIMATE`]), priced; an unpriced model estimates $0 (a dollar cap on
    /// it is refused before the run starts).
    fn call_estimate(&self, request: &ChatRequest) -> Spending {
        let base_url = self.lp.request.llm.base_url();
        let prompt = self
            .context
            .last_size
            .as_ref()
            .map_or(0, |size| size.tokens.unwrap_or(0).max(size.estimate));
        let output = request
            .max_tokens
            .or(self.lp.request.agent.llm.max_tokens)
            .map(u64::from)
            .or_else(|| {
                catalogue()
                    .lookup(&request.model, base_url)
                    .and_then(|info| info.max_output_tokens)
            })
            .unwrap_or(DEFAULT_OUTPUT_ESTIMATE);
        let usage = Usage {
            prompt_tokens: prompt,
            completion_tokens: output,
            total_tokens: prompt.saturating_add(output),
            ..Usage::default()
        };
        let usd = self
            .prices
            .price_of(&request.model)
            .map_or(0.0, |price| call_cost_usd(&usage, &price));
        Spending {
            usd,
            tokens: usage.total_tokens,
        }
    }

    /// The run's end when its relay refused a call because the batch's budget ran out:
    /// INTERRUPTED `budget_exhausted`, journaled as such, like a cap of its own.
    pub(super) fn budget_refused(&mut self, mut error: RunErrorInfo) -> Result<Ending, Halt> {
        if let Some(start) = crate::budget::exhausted_start(&error.message) {
            error.message = error.message[start..].to_string();
        }
        self.log(&error.message);
        self.append(Event::Interrupted {
            reason: format!("budget_exhausted: {}", error.message),
        })?;
        Ok(Ending::interrupted(error))
    }

    /// Charges one call's billed tokens (every attempt) and dollars to every cap; the call
    /// that reaches 80 % of one journals a WARNING.
    pub(super) fn charge_budgets(&self, usage: &Usage, cost: Option<f64>) {
        let spending = Spending {
            usd: cost.unwrap_or(0.0),
            tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
        };
        for ledger in &self.lp.request.budgets {
            if ledger.charge(&spending) {
                // The call that reached 80 % of a cap says so in its run's journal, once.
                let message = ledger.warning_message();
                self.log(&format!("warning: {message}"));
                let _ = self.append(Event::Warning { message });
            }
        }
    }
}
