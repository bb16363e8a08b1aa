//! [`EngineMetrics`]: Prometheus metrics of one engine, counted from the events it emits
//! (runs by status, model calls by outcome, tokens by model, latency and time-to-first-token
//! histograms, retries, waits for a slot, tool calls by exit) and written as OpenMetrics for
//! `delta orchestrate --metrics-listen`.
//!
//! Counted as the events are emitted (through the engine's observer, never lossy) under one
//! short lock: a counter update is a map lookup.
//!
//! Must not: read anything but events (no second bookkeeping), or do I/O.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::budget::{write_remaining, PlanBudgets};

use crate::openmetrics::{Histogram, Kind, MetricsText, LATENCY_BUCKETS};
use crate::protocol::{OrchestrationEvent, RunEvent};

/// The counters and histograms of one engine.
#[derive(Debug, Default)]
pub struct EngineMetrics {
    state: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    runs_started: BTreeMap<String, u64>,
    runs_finished: BTreeMap<String, u64>,
    model_calls: BTreeMap<(String, String, String), u64>,
    retries: BTreeMap<String, u64>,
    tokens: BTreeMap<(String, &'static str), u64>,
    /// Filled once prices are known (each call's `cost_usd`); empty until then.
    cost_usd: BTreeMap<String, f64>,
    call_seconds: BTreeMap<String, Histogram>,
    first_token_seconds: BTreeMap<String, Histogram>,
    waits: BTreeMap<String, (u64, f64)>,
    tool_calls: BTreeMap<(String, &'static str, String), u64>,
    plan_runs: BTreeMap<(String, String), u64>,
    stages: BTreeMap<String, u64>,
    progress: Option<[usize; 4]>,
    /// The orchestration's spending caps, read at each scrape for what is left of them.
    budgets: Option<Arc<PlanBudgets>>,
}

impl EngineMetrics {
    /// Nothing counted yet.
    pub fn new() -> EngineMetrics {
        EngineMetrics::default()
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts what a run's event says.
    pub fn run_event(&self, event: &RunEvent) {
        match event {
            RunEvent::RunStarted { agent_name, .. } => {
                *self
                    .counts()
                    .runs_started
                    .entry(agent_name.clone())
                    .or_default() += 1;
            }
            RunEvent::RunFinished { status, .. } => {
                *self
                    .counts()
                    .runs_finished
                    .entry(status.to_string())
                    .or_default() += 1;
            }
            RunEvent::ModelCallFinished {
                model,
                provider,
                attempts,
                duration_ms,
                waited_ms,
                time_to_first_token_ms,
                usage,
                cost_usd,
                error_type,
                ..
            } => {
                let mut counts = self.counts();
                let outcome = match error_type.as_deref() {
                    None => "ok",
                    Some("cancelled") => "cancelled",
                    Some(_) => "error",
                };
                let key = (
                    model.clone(),
                    outcome.to_string(),
                    error_type.clone().unwrap_or_default(),
                );
                *counts.model_calls.entry(key).or_default() += 1;
                let _ = provider;
                if *attempts > 1 {
                    *counts.retries.entry(model.clone()).or_default() += u64::from(attempts - 1);
                }
                for (kind, n) in [
                    ("input", usage.input_tokens),
                    ("output", usage.output_tokens),
                ] {
                    if n > 0 {
                        *counts.tokens.entry((model.clone(), kind)).or_default() += n;
                    }
                }
                if let Some(cost) = cost_usd {
                    *counts.cost_usd.entry(model.clone()).or_default() += cost;
                }
                if error_type.is_none() {
                    counts
                        .call_seconds
                        .entry(model.clone())
                        .or_insert_with(|| Histogram::new(LATENCY_BUCKETS))
                        .observe(seconds(duration_ms.saturating_sub(*waited_ms)));
                }
                if let Some(ttft) = time_to_first_token_ms {
                    counts
                        .first_token_seconds
                        .entry(model.clone())
                        .or_insert_with(|| Histogram::new(LATENCY_BUCKETS))
                        .observe(seconds(*ttft));
                }
                if *waited_ms > 0 {
                    let wait = counts.waits.entry(model.clone()).or_default();
                    wait.0 += 1;
                    wait.1 += seconds(*waited_ms);
                }
            }
            RunEvent::ToolFinished {
                tool_name,
                success,
                exit_code,
                ..
            } => {
                let outcome = if *success { "success" } else { "failure" };
                let exit = exit_code.map_or_else(|| "none".to_string(), |c| c.to_string());
                *self
                    .counts()
                    .tool_calls
                    .entry((tool_name.clone(), outcome, exit))
                    .or_default() += 1;
            }
            _ => {}
        }
    }

    /// Counts what an orchestration's event says; `budgets` are its spending caps (kept
    /// for the gauges of what is left of them).
    pub fn orchestration_event(
        &self,
        budgets: Option<&Arc<PlanBudgets>>,
        event: &OrchestrationEvent,
    ) {
        if let Some(budgets) = budgets {
            let mut counts = self.counts();
            if !counts
                .budgets
                .as_ref()
                .is_some_and(|kept| Arc::ptr_eq(kept, budgets))
            {
                counts.budgets = Some(Arc::clone(budgets));
            }
        }
        match event {
            OrchestrationEvent::RunFinished { stage, status, .. } => {
                *self
                    .counts()
                    .plan_runs
                    .entry((stage.clone(), status.to_string()))
                    .or_default() += 1;
            }
            OrchestrationEvent::StageFinished { status, .. } => {
                let status = serde_json::to_value(status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                *self.counts().stages.entry(status).or_default() += 1;
            }
            OrchestrationEvent::Progress {
                total,
                done,
                running,
                failed,
            } => self.counts().progress = Some([*total, *done, *running, *failed]),
            _ => {}
        }
    }

    /// Every metric, as OpenMetrics samples appended to `text`.
    pub fn write(&self, text: &mut MetricsText) {
        let counts = self.counts();
        counter(
            text,
            "delta_runs_started",
            "Runs started or continued, by agent.",
            &counts.runs_started,
            |agent| vec![("agent", agent.as_str())],
        );
        counter(
            text,
            "delta_runs_finished",
            "Runs that reached a final status (each start or continuation once), by status.",
            &counts.runs_finished,
            |status| vec![("status", status.as_str())],
        );
        let started: u64 = counts.runs_started.values().sum();
        let finished: u64 = counts.runs_finished.values().sum();
        text.family("delta_runs_running", Kind::Gauge, "Runs being driven now.");
        text.sample(
            "delta_runs_running",
            &[],
            started.saturating_sub(finished) as f64,
        );
        counter(text, "delta_model_calls", "Model calls that ended, by model and outcome (ok, error, cancelled) with the error's type.", &counts.model_calls, |(model, outcome, error)| vec![("model", model.as_str()), ("outcome", outcome.as_str()), ("error_type", error.as_str())]);
        counter(
            text,
            "delta_model_retries",
            "Model call attempts that failed and were tried again, by model.",
            &counts.retries,
            |model| vec![("model", model.as_str())],
        );
        counter(
            text,
            "delta_model_tokens",
            "Tokens the provider reported (every attempt), by model and type (input, output).",
            &counts.tokens,
            |(model, kind)| vec![("model", model.as_str()), ("type", kind)],
        );
        if !counts.cost_usd.is_empty() {
            text.family(
                "delta_model_cost_usd",
                Kind::Counter,
                "What model calls cost, in US dollars, by model.",
            );
            for (model, cost) in &counts.cost_usd {
                text.sample("delta_model_cost_usd_total", &[("model", model)], *cost);
            }
        }
        histograms(
            text,
            "delta_model_call_duration_seconds",
            "Time answered model calls took, waits for a slot and backoff left out, by model.",
            &counts.call_seconds,
        );
        histograms(text, "delta_model_time_to_first_token_seconds", "Time from a streamed call's answering attempt to the first piece of its reply, by model.", &counts.first_token_seconds);
        text.family("delta_model_call_waits", Kind::Counter, "Model calls that waited for an in-flight place, a rate-limit slot, Retry-After or a backoff, by model.");
        for (model, (n, _)) in &counts.waits {
            text.sample(
                "delta_model_call_waits_total",
                &[("model", model)],
                *n as f64,
            );
        }
        text.family(
            "delta_model_call_wait_seconds",
            Kind::Counter,
            "Time model calls spent so waiting, by model.",
        );
        for (model, (_, s)) in &counts.waits {
            text.sample(
                "delta_model_call_wait_seconds_total",
                &[("model", model)],
                *s,
            );
        }
        counter(
            text,
            "delta_tool_calls",
            "Tool calls that ended, by tool, outcome and exit code (none: killed, or no process).",
            &counts.tool_calls,
            |(tool, outcome, exit)| {
                vec![
                    ("tool", tool.as_str()),
                    ("outcome", *outcome),
                    ("exit_code", exit.as_str()),
                ]
            },
        );
        counter(
            text,
            "delta_orchestration_runs",
            "Plan runs that ended (each attempt), by stage and status.",
            &counts.plan_runs,
            |(stage, status)| vec![("stage", stage.as_str()), ("status", status.as_str())],
        );
        counter(
            text,
            "delta_orchestration_stages",
            "Plan stages that ended, by status.",
            &counts.stages,
            |status| vec![("status", status.as_str())],
        );
        if let Some([total, done, running, failed]) = counts.progress {
            text.family("delta_orchestration_progress", Kind::Gauge, "The plan's runs: known (total), with a final outcome (done), in flight (running), not completed (failed).");
            for (state, n) in [
                ("total", total),
                ("done", done),
                ("running", running),
                ("failed", failed),
            ] {
                text.sample(
                    "delta_orchestration_progress",
                    &[("state", state)],
                    n as f64,
                );
            }
        }
        if let Some(budgets) = &counts.budgets {
            write_remaining(text, budgets.ledgers().map(|ledger| &**ledger));
        }
    }
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// A counter family (samples `<name>_total`), one sample per key.
fn counter<K>(
    text: &mut MetricsText,
    name: &str,
    help: &str,
    values: &BTreeMap<K, u64>,
    labels: impl Fn(&K) -> Vec<(&'static str, &str)>,
) {
    text.family(name, Kind::Counter, help);
    let total = format!("{name}_total");
    for (key, value) in values {
        text.sample(&total, &labels(key), *value as f64);
    }
}

/// A histogram family with one histogram per model.
fn histograms(
    text: &mut MetricsText,
    name: &str,
    help: &str,
    values: &BTreeMap<String, Histogram>,
) {
    text.family(name, Kind::Histogram, help);
    for (model, histogram) in values {
        text.histogram(name, &[("model", model)], histogram);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::protocol::{RunStatus, TokenUsage};

    fn call(model: &str, attempts: u32, error_type: Option<&str>) -> RunEvent {
        RunEvent::ModelCallFinished {
            run_id: "r".into(),
            iteration: 1,
            model: model.into(),
            response_model: None,
            response_id: None,
            provider: "openai".into(),
            server_address: None,
            server_port: None,
            attempts,
            duration_ms: 1500,
            waited_ms: 500,
            time_to_first_token_ms: Some(200),
            usage: TokenUsage {
                input_tokens: 10,
                output_tokens: 4,
                total_tokens: 14,
                estimated: false,
            },
            finish_reason: None,
            cost_usd: None,
            error_type: error_type.map(str::to_string),
            error: None,
            content: None,
        }
    }

    #[test]
    fn events_become_counters_and_histograms() {
        let metrics = EngineMetrics::new();
        metrics.run_event(&RunEvent::RunStarted {
            run_id: "r".into(),
            agent_name: "a".into(),
            work_dir: "/w".into(),
            resumed: false,
            trace: None,
            previous_trace: None,
        });
        metrics.run_event(&call("m", 3, None));
        metrics.run_event(&call("m", 1, Some("http_500")));
        metrics.run_event(&RunEvent::ToolFinished {
            run_id: "r".into(),
            iteration: 1,
            action_id: "c".into(),
            tool_name: "ls".into(),
            success: false,
            exit_code: Some(2),
            duration_ms: 3,
            preview: String::new(),
        });
        metrics.run_event(&RunEvent::RunFinished {
            run_id: "r".into(),
            status: RunStatus::Completed,
            duration_ms: 9,
            error: None,
        });
        let mut text = MetricsText::new();
        metrics.write(&mut text);
        let text = text.finish();
        for line in [
            "delta_runs_started_total{agent=\"a\"} 1",
            "delta_runs_finished_total{status=\"COMPLETED\"} 1",
            "delta_runs_running 0",
            "delta_model_calls_total{model=\"m\",outcome=\"ok\",error_type=\"\"} 1",
            "delta_model_calls_total{model=\"m\",outcome=\"error\",error_type=\"http_500\"} 1",
            "delta_model_retries_total{model=\"m\"} 2",
            "delta_model_tokens_total{model=\"m\",type=\"input\"} 20",
            "delta_model_tokens_total{model=\"m\",type=\"output\"} 8",
            "delta_model_call_duration_seconds_bucket{model=\"m\",le=\"1\"} 1",
            "delta_model_call_duration_seconds_count{model=\"m\"} 1",
            "delta_model_time_to_first_token_seconds_count{model=\"m\"} 2",
            "delta_model_call_waits_total{model=\"m\"} 2",
            "delta_model_call_wait_seconds_total{model=\"m\"} 1",
            "delta_tool_calls_total{tool=\"ls\",outcome=\"failure\",exit_code=\"2\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        // No price known: no cost is claimed.
        assert!(!text.contains("cost_usd"), "{text}");
    }

    #[test]
    fn what_is_left_of_the_plans_budgets_follows_the_spending() {
        use crate::budget::{Budget, Spending};
        let budgets = Arc::new(PlanBudgets::new(
            Some(Budget {
                usd: Some(2.0),
                tokens: None,
            }),
            [(
                "map",
                Some(Budget {
                    usd: None,
                    tokens: Some(1000),
                }),
            )],
            &std::collections::BTreeMap::new(),
        ));
        let metrics = EngineMetrics::new();
        let scrape = || {
            let mut text = MetricsText::new();
            metrics.write(&mut text);
            text.finish()
        };
        assert!(
            !scrape().contains("delta_budget_remaining"),
            "no caps seen yet"
        );
        metrics.orchestration_event(
            Some(&budgets),
            &OrchestrationEvent::Progress {
                total: 2,
                done: 0,
                running: 2,
                failed: 0,
            },
        );
        for ledger in budgets.for_stage("map") {
            ledger.charge(&Spending {
                usd: 0.5,
                tokens: 300,
            });
        }
        let text = scrape();
        for line in [
            "delta_budget_remaining_usd{scope=\"plan\"} 1.5",
            "delta_budget_remaining_tokens{scope=\"stage:map\"} 700",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }
}
