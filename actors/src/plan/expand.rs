//! plan::expand — turns one stage of a [`ResolvedPlan`] plus the outputs of finished stages
//! into [`PlannedRun`]s: items, rendered messages, deterministic run ids, sub-workspaces.
//!
//! Owns: the template context (`vars`, `item`, `index`, `stages.<id>.output|results|runs`),
//! run id format `<orchestration_id>-<stage>-<index zero-padded to the width of the count>`,
//! orchestration ids, parsing of `output: json` results.
//! Must not: start runs, read journals, or decide retries and failure policy.

use std::path::PathBuf;
use std::time::Duration;

use minijinja::Value as TemplateValue;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::json_output::parse_json_output;

use super::limits::EXPANSION_TIME;
use super::model::OutputKind;
use super::resolved::{ResolvedPlan, ResolvedStage};
use super::stage_checks::{stage_items, template_error};
use super::templates::{environment, failure};
use super::PlanError;
use crate::protocol::RunStatus;
use crate::template_bounds::render_bounded;

/// One finished run as later stages see it (`stages.<id>.runs[i]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub run_id: String,
    /// Its final status.
    pub status: RunStatus,
    /// The run's final answer (raw text).
    pub result: Option<String>,
    /// Its error, `"<kind>: <message>"`, when it did not complete.
    pub error: Option<String>,
}

/// The outputs of finished stages plus the orchestration id, for expanding later stages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageContext {
    /// The orchestration the runs belong to (it starts their ids).
    pub orchestration_id: String,
    stages: serde_json::Map<String, Value>,
}

impl StageContext {
    /// A context with no finished stage yet.
    pub fn new(orchestration_id: impl Into<String>) -> Self {
        Self {
            orchestration_id: orchestration_id.into(),
            stages: serde_json::Map::new(),
        }
    }

    /// Records a finished stage; `runs` are in item order. For `output: json` stages each
    /// COMPLETED result is parsed (text that does not parse stays a string); a failed run's
    /// result is `null`. `output` is the single result of a stage without `foreach`, else the
    /// list of results.
    pub fn record_stage(&mut self, stage: &ResolvedStage, runs: &[RunRecord]) {
        let results: Vec<Value> = runs
            .iter()
            .map(|run| match (&run.result, run.status) {
                (Some(text), RunStatus::Completed) => match stage.output {
                    OutputKind::Json => {
                        parse_json_output(text).unwrap_or_else(|_| Value::String(text.clone()))
                    }
                    OutputKind::Text => Value::String(text.clone()),
                },
                _ => Value::Null,
            })
            .collect();
        let records: Vec<Value> = runs
            .iter()
            .zip(&results)
            .map(|(run, result)| {
                serde_json::json!({
                    "run_id": run.run_id,
                    "status": run.status,
                    "result": result,
                    "error": run.error,
                })
            })
            .collect();
        let output = if stage.foreach.is_some() {
            Value::Array(results.clone())
        } else {
            results.first().cloned().unwrap_or(Value::Null)
        };
        self.stages.insert(
            stage.id.clone(),
            serde_json::json!({ "output": output, "results": results, "runs": records }),
        );
    }

    /// What templates see as `stages.<id>`.
    pub fn stage(&self, id: &str) -> Option<&Value> {
        self.stages.get(id)
    }

    /// What templates see as `stages`.
    pub fn stages_value(&self) -> Value {
        Value::Object(self.stages.clone())
    }
}

/// One run to start.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    /// The stage's id.
    pub stage_id: String,
    /// The item's position in the stage's fan-out, 0-based (0 without `foreach`).
    pub index: usize,
    /// `null` for a stage without `foreach`.
    pub item: Value,
    /// The rendered task of the run.
    pub message: String,
    /// The agent folder (absolute).
    pub agent: PathBuf,
    /// The iteration cap; `None` = the agent's own.
    pub max_iterations: Option<u32>,
    /// Wall-clock limit of each attempt; `None` = none.
    pub timeout: Option<Duration>,
    /// How many times a FAILED attempt is tried again.
    pub retries: u32,
    /// `<orchestration_id>-<stage>-<index zero-padded to the width of the count>`.
    pub run_id: String,
    /// `isolate: true` => `<stage>/<index>` under the shared workspace.
    pub work_dir_suffix: Option<PathBuf>,
}

/// Expands `stage_id` into its runs. Templates see `vars`, `item`, `index` and the finished
/// stages recorded in `ctx`.
pub fn expand_stage(
    plan: &ResolvedPlan,
    stage_id: &str,
    ctx: &StageContext,
) -> Result<Vec<PlannedRun>, PlanError> {
    expand_within(plan, stage_id, ctx, EXPANSION_TIME)
}

/// [`expand_stage`], rendering the messages for at most `limit` in all.
fn expand_within(
    plan: &ResolvedPlan,
    stage_id: &str,
    ctx: &StageContext,
    limit: Duration,
) -> Result<Vec<PlannedRun>, PlanError> {
    let Some(stage) = plan.stage(stage_id) else {
        let ids: Vec<&str> = plan.stages.iter().map(|s| s.id.as_str()).collect();
        return Err(PlanError::invalid(
            &plan.file,
            "stages",
            format!("no stage `{stage_id}`"),
            format!("stage ids: {}", ids.join(", ")),
        ));
    };
    let stages = ctx.stages_value();
    let items = stage_items(plan, stage, Some(&stages))?.unwrap_or_else(|| vec![Value::Null]);
    let width = items.len().to_string().len();
    let env = environment();
    let message_key = format!("stages.{}.message", stage.id);
    let template = env.template_from_str(&stage.message).map_err(|error| {
        template_error(
            plan,
            message_key.clone(),
            failure(&stage.message, &error),
            "fix the template syntax",
        )
    })?;
    // minijinja values are reference counted: converting once keeps per-item cost flat.
    let vars = TemplateValue::from_serialize(&plan.vars);
    let stages = TemplateValue::from_serialize(&stages);
    let mut runs = Vec::with_capacity(items.len());
    let started = std::time::Instant::now();
    for (index, item) in items.into_iter().enumerate() {
        // Each render is bounded; so is their sum, or 100,000 costly items could take hours.
        if started.elapsed() > limit {
            return Err(PlanError::invalid(
                &plan.file,
                message_key,
                format!(
                    "rendering the messages took more than {} s (stopped at item {index})",
                    limit.as_secs()
                ),
                "make the message template cheaper, or split the items over several stages",
            ));
        }
        let context = minijinja::context! {
            vars => vars.clone(),
            stages => stages.clone(),
            item => TemplateValue::from_serialize(&item),
            index => index,
        };
        let message = render_bounded(&template, context).map_err(|error| {
            template_error(
                plan,
                message_key.clone(),
                failure(&stage.message, &error),
                &format!("while rendering item {index} ({})", short_json(&item)),
            )
        })?;
        runs.push(PlannedRun {
            stage_id: stage.id.clone(),
            index,
            item,
            message,
            agent: stage.agent.clone(),
            max_iterations: stage.max_iterations,
            timeout: stage.timeout,
            retries: stage.retries,
            run_id: format!("{}-{}-{index:0width$}", ctx.orchestration_id, stage.id),
            work_dir_suffix: stage
                .isolate
                .then(|| PathBuf::from(&stage.id).join(index.to_string())),
        });
    }
    Ok(runs)
}

fn short_json(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 60 {
        return text;
    }
    let short: String = text.chars().take(57).collect();
    format!("{short}...")
}

/// `<name>-YYYYMMDD-HHMMSS-xxxx` (UTC, 4 random hex digits); `plan` when the plan has no
/// name. The id is a directory name, so characters other than `[A-Za-z0-9_-]` in the name
/// become `-`.
pub fn orchestration_id(plan_name: Option<&str>) -> String {
    let name: String = plan_name
        .filter(|name| !name.is_empty())
        .unwrap_or("plan")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!(
        "{name}-{}-{:04x}",
        chrono::Utc::now().format("%Y%m%d-%H%M%S"),
        fastrand::u16(..)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn orchestration_id_shape() {
        let id = orchestration_id(Some("nightly"));
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts[0], "nightly");
        assert_eq!(parts[1].len(), 8);
        assert_eq!(parts[2].len(), 6);
        assert_eq!(parts[3].len(), 4);
        assert!(orchestration_id(None).starts_with("plan-"));
        assert!(orchestration_id(Some("../x y")).starts_with("---x-y-"));
    }

    #[test]
    fn expanding_a_stage_stops_at_its_time_limit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("agent")).unwrap();
        let plan = crate::plan::load_plan_str(
            "stages:\n  - { id: work, agent: agent, foreach: { items: [1, 2] }, message: \"{{ item }}\" }\n",
            &dir.path().join("plan.yaml"),
            &[],
        )
        .unwrap();
        let ctx = StageContext::new("o");
        assert_eq!(
            expand_within(&plan, "work", &ctx, EXPANSION_TIME)
                .unwrap()
                .len(),
            2
        );
        let error = expand_within(&plan, "work", &ctx, Duration::ZERO).unwrap_err();
        assert_eq!(error.key(), "stages.work.message");
        assert!(error.to_string().contains("stopped at item 0"), "{error}");
    }
}
