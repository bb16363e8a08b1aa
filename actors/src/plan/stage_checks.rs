//! plan::stage_checks — the template and item rules of one stage, shared by validation (before
//! running: everything that can be checked without earlier stages' outputs) and expansion
//! (when the stage starts).
//!
//! Owns: which variables a template may read (`vars.<known>`, `item`/`index` only under
//! `foreach`, `stages.<ancestor>.output|results|runs`), producing a stage's items from its
//! `foreach` form, and turning template failures into [`PlanError::Template`].
//! Must not: decide run ids or failure policy (`expand.rs`, the supervisor).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::glob_walk::bounded_glob;
use super::limits::FOREACH_ITEMS;
use super::resolved::{ResolvedForeach, ResolvedPlan, ResolvedStage};
use super::templates::{environment, evaluate_list, render, variables_read, TemplateFailure};
use super::PlanError;
use crate::input::read_bounded;

/// Largest file a `foreach: {lines: ...}` reads.
const LINES_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// minijinja globals a template may call without them being plan variables.
const TEMPLATE_GLOBALS: &[&str] = &[
    "range",
    "dict",
    "namespace",
    "debug",
    "loop",
    "self",
    "lipsum",
    "cycler",
    "joiner",
];
const STAGE_FIELDS: &[&str] = &["output", "results", "runs"];

pub(crate) fn template_error(
    plan: &ResolvedPlan,
    key: String,
    failure: TemplateFailure,
    hint: &str,
) -> PlanError {
    PlanError::Template {
        file: plan.file.clone(),
        key,
        expression: failure.expression,
        message: failure.message,
        hint: hint.to_owned(),
    }
}

/// The stage's items when they do not depend on earlier stages (`None` when they do, or when
/// the stage has no `foreach`). With `stages` given (at expansion time) templates see them.
pub(crate) fn stage_items(
    plan: &ResolvedPlan,
    stage: &ResolvedStage,
    stages: Option<&Value>,
) -> Result<Option<Vec<Value>>, PlanError> {
    let key = format!("stages.{}.foreach", stage.id);
    let Some(foreach) = &stage.foreach else {
        return Ok(None);
    };
    let items = match foreach {
        ResolvedForeach::Items(items) => items.clone(),
        ResolvedForeach::Files { pattern } => bounded_glob(pattern, FOREACH_ITEMS)
            .map_err(|error| {
                PlanError::invalid(
                    &plan.file,
                    format!("{key}.files"),
                    format!("`{pattern}`: {error}"),
                    "e.g. data/*.json (paths are relative to the plan file)",
                )
            })?
            .into_iter()
            .map(Value::String)
            .collect(),
        ResolvedForeach::Lines(path) => {
            let text = read_bounded(path, LINES_FILE_BYTES).map_err(|error| {
                PlanError::invalid(
                    &plan.file,
                    format!("{key}.lines"),
                    format!("{}: {error}", path.display()),
                    "paths are relative to the plan file",
                )
            })?;
            text.lines()
                .map(str::trim_end)
                .filter(|line| !line.trim().is_empty())
                .map(|line| Value::String(line.to_owned()))
                .collect()
        }
        ResolvedForeach::Template(source) => {
            let env = environment();
            let read = variables_read(&env, source).map_err(|failure| {
                template_error(
                    plan,
                    key.clone(),
                    failure,
                    "fix the template's syntax, or the name of its filter or test",
                )
            })?;
            let needs_stages = read.iter().any(|path| root(path) == "stages");
            let stages = match (needs_stages, stages) {
                (true, None) => return Ok(None),
                (_, Some(stages)) => stages.clone(),
                (false, None) => json!({}),
            };
            let context = json!({ "vars": plan.vars, "stages": stages });
            evaluate_list(&env, source, &context).map_err(|failure| {
                template_error(
                    plan,
                    key.clone(),
                    failure,
                    "`foreach` must yield a list, e.g. \"{{ stages.plan.output.steps }}\"",
                )
            })?
        }
    };
    if items.len() > FOREACH_ITEMS {
        return Err(PlanError::invalid(
            &plan.file,
            key,
            format!(
                "{} items, more than the {FOREACH_ITEMS} one stage may have",
                items.len()
            ),
            "split the items over several stages, or batch several items per run",
        ));
    }
    Ok(Some(items))
}

/// How many runs `stage` will fan out to, when that is known before anything runs (`None`
/// when its items come from an earlier stage's output, or when it has no `foreach`): what
/// `delta orchestrate --dry-run` shows. Globs and line files are read (bounded, as at
/// expansion).
pub fn planned_runs(
    plan: &ResolvedPlan,
    stage: &ResolvedStage,
) -> Result<Option<usize>, PlanError> {
    Ok(stage_items(plan, stage, None)?.map(|items| items.len()))
}

/// Checks a stage's `message` and `foreach` template before running: syntax, variables that
/// cannot exist, and — when no earlier stage's output is involved — a trial render with the
/// first item.
pub(crate) fn check_stage_templates(
    plan: &ResolvedPlan,
    stage: &ResolvedStage,
    items: Option<&[Value]>,
) -> Result<(), PlanError> {
    let env = environment();
    let message_key = format!("stages.{}.message", stage.id);
    let read = variables_read(&env, &stage.message).map_err(|failure| {
        template_error(
            plan,
            message_key.clone(),
            failure,
            "fix the template's syntax, or the name of its filter or test",
        )
    })?;
    check_variables(plan, stage, &read, &message_key, stage.foreach.is_some())?;
    if let Some(ResolvedForeach::Template(source)) = &stage.foreach {
        let foreach_key = format!("stages.{}.foreach", stage.id);
        let foreach_read = variables_read(&env, source).map_err(|failure| {
            template_error(
                plan,
                foreach_key.clone(),
                failure,
                "fix the template's syntax, or the name of its filter or test",
            )
        })?;
        check_variables(plan, stage, &foreach_read, &foreach_key, false)?;
    }
    let reads_stages = read.iter().any(|path| root(path) == "stages");
    let reads_item = read
        .iter()
        .any(|path| matches!(root(path), "item" | "index"));
    let first_item = items.and_then(|items| items.first());
    if reads_stages || (reads_item && first_item.is_none()) {
        return Ok(());
    }
    let context = json!({
        "vars": plan.vars,
        "item": first_item.cloned().unwrap_or(Value::Null),
        "index": 0,
        "stages": {},
    });
    render(&env, &stage.message, &context)
        .map(|_| ())
        .map_err(|failure| {
            template_error(
                plan,
                message_key,
                failure,
                "check the variable names and filters",
            )
        })
}

fn check_variables(
    plan: &ResolvedPlan,
    stage: &ResolvedStage,
    read: &BTreeSet<String>,
    key: &str,
    item_allowed: bool,
) -> Result<(), PlanError> {
    let problem = |path: &str, message: String, hint: String| PlanError::Template {
        file: plan.file.clone(),
        key: key.to_owned(),
        expression: path.to_owned(),
        message,
        hint,
    };
    let ancestors = ancestors(plan, stage);
    for path in read {
        let mut parts = path.split('.');
        let head = parts.next().unwrap_or_default();
        match head {
            "vars" => {
                if let Some(name) = parts.next() {
                    if !plan.vars.contains_key(name) {
                        let known: Vec<&str> = plan.vars.keys().map(String::as_str).collect();
                        return Err(problem(
                            path,
                            format!("unknown variable `vars.{name}`"),
                            format!("define it under `vars:` or pass --var {name}=...; vars defined: {}", known.join(", ")),
                        ));
                    }
                }
            }
            "item" | "index" if !item_allowed => {
                return Err(problem(
                    path,
                    format!("`{head}` is only defined in a stage's message when the stage has `foreach`"),
                    "add `foreach:` to the stage or remove the reference".to_owned(),
                ));
            }
            "item" | "index" => {}
            "stages" => {
                let Some(other) = parts.next() else { continue };
                if plan.stage(other).is_none() {
                    let ids: Vec<&str> = plan.stages.iter().map(|s| s.id.as_str()).collect();
                    return Err(problem(
                        path,
                        format!("unknown stage `{other}`"),
                        format!("stage ids: {}", ids.join(", ")),
                    ));
                }
                if !ancestors.contains(other) {
                    return Err(problem(
                        path,
                        format!("stage `{other}` is not among the needs of `{}`, so it may not have finished", stage.id),
                        format!(
                            "add `needs: [{other}]` to stage `{}` (a stage without `needs` starts at once)",
                            stage.id
                        ),
                    ));
                }
                if let Some(field) = parts.next() {
                    if !STAGE_FIELDS.contains(&field) {
                        return Err(problem(
                            path,
                            format!("stages have no field `{field}`"),
                            "use stages.<id>.output, .results or .runs".to_owned(),
                        ));
                    }
                }
            }
            global if TEMPLATE_GLOBALS.contains(&global) => {}
            other => {
                return Err(problem(
                    path,
                    format!("unknown variable `{other}`"),
                    "templates see vars, item, index and stages".to_owned(),
                ));
            }
        }
    }
    Ok(())
}

/// Every stage this one waits for, directly or indirectly.
pub(crate) fn ancestors<'a>(plan: &'a ResolvedPlan, stage: &'a ResolvedStage) -> BTreeSet<&'a str> {
    let mut found: BTreeSet<&str> = BTreeSet::new();
    let mut frontier: Vec<&str> = stage.needs.iter().map(String::as_str).collect();
    // Bounded by the number of stages: each id is expanded at most once.
    while let Some(id) = frontier.pop() {
        if found.insert(id) {
            if let Some(needed) = plan.stage(id) {
                frontier.extend(needed.needs.iter().map(String::as_str));
            }
        }
    }
    found
}

fn root(path: &str) -> &str {
    path.split('.').next().unwrap_or_default()
}
