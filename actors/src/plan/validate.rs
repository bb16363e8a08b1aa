//! plan::validate — turns `plan.yaml` (or a [`PlanFile`] built in code) into one immutable
//! [`ResolvedPlan`]: defaults applied, paths resolved relative to the plan file, ids, needs,
//! cycles, durations, `foreach` forms and templates checked.
//!
//! Owns: every rule a plan must satisfy before anything runs, and the wording of those errors
//! (file + key path + hint).
//! Must not: load agents (it keeps agent PATHS and only checks they exist), start runs, or
//! read the process environment.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::limits::{self, out_of_range, NAME_LEN, PLAN_BYTES};
use super::model::{DurationValue, ForeachSpec, PlanFile, PREVIOUS};
use super::needs::resolve_needs;
use super::parse::{input_error, parse_plan};
use super::resolved::{ResolvedForeach, ResolvedPlan, ResolvedStage};
use super::stage_checks::{check_stage_templates, stage_items};
use super::PlanError;
use crate::duration::{parse_duration, DURATION_HINT};
use crate::input::{read_bounded, InputError};
use crate::llm::timeouts::check_llm_timeout;
use crate::llm::LlmTimeoutSettings;
use crate::protocol::STAGE_ID_LEN;

/// Runs in flight when the plan does not say.
pub const DEFAULT_MAX_PARALLEL: usize = 8;

/// Reads and validates `path`; `var_overrides` (from `--var k=v`) replace or add vars.
pub fn load_plan(
    path: &Path,
    var_overrides: &[(String, String)],
) -> Result<ResolvedPlan, PlanError> {
    load_plan_with_vars(path, &serde_json::Map::new(), var_overrides)
}

/// [`load_plan`] for a resume: `saved` (the vars the orchestration started with) replace
/// the file's, then `var_overrides` apply, so a resume expands the same messages.
pub fn load_plan_with_vars(
    path: &Path,
    saved: &serde_json::Map<String, serde_json::Value>,
    var_overrides: &[(String, String)],
) -> Result<ResolvedPlan, PlanError> {
    let text = read_bounded(path, PLAN_BYTES).map_err(|error| match error {
        InputError::Io(error) => PlanError::Read {
            file: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            message: error.to_string(),
        },
        other => input_error(path, &other),
    })?;
    let mut model = parse_plan(&text, path)?;
    for (name, value) in saved {
        model.vars.insert(name.clone(), value.clone());
    }
    resolve_plan(model, path, var_overrides)
}

/// Validates plan text as if it were the file at `path` (relative paths resolve against
/// `path`'s directory).
pub fn load_plan_str(
    text: &str,
    path: &Path,
    var_overrides: &[(String, String)],
) -> Result<ResolvedPlan, PlanError> {
    resolve_plan(parse_plan(text, path)?, path, var_overrides)
}

/// Validates a model (parsed from YAML or built in code) as if it were the file at
/// `plan_file`.
pub fn resolve_plan(
    model: PlanFile,
    plan_file: &Path,
    var_overrides: &[(String, String)],
) -> Result<ResolvedPlan, PlanError> {
    let file = std::path::absolute(plan_file).unwrap_or_else(|_| plan_file.to_path_buf());
    let dir = file
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let invalid =
        |key: &str, message: String, hint: &str| PlanError::invalid(&file, key, message, hint);

    if let Some(name) = &model.name {
        let starts_well = name.starts_with(|c: char| c.is_ascii_alphanumeric());
        if !is_identifier(name, true) || !starts_well || name.len() > NAME_LEN {
            return Err(invalid(
                "name",
                format!("`{name}` cannot be part of an orchestration id"),
                &format!(
                    "use at most {NAME_LEN} letters, digits, `_` and `-`, starting with a letter or digit"
                ),
            ));
        }
    }
    let llm_timeout = |value: Option<&DurationValue>, key: &str| {
        let limit = resolve_timeout(value, key, &file)?;
        limit.map(check_llm_timeout).transpose().map_err(|problem| {
            invalid(
                key,
                problem,
                "write e.g. 90s or 2m, or omit it for the agents' own",
            )
        })
    };
    let llm_timeouts = LlmTimeoutSettings {
        request: llm_timeout(model.llm.request_timeout.as_ref(), "llm.request_timeout")?,
        idle: llm_timeout(model.llm.idle_timeout.as_ref(), "llm.idle_timeout")?,
    };
    if model.stages.is_empty() {
        return Err(invalid(
            "stages",
            "the plan has no stages".into(),
            "add at least one `- id: ..., message: ...`",
        ));
    }
    let ids = check_ids(&model, &file)?;
    limits::check_numbers(&model, &file)?;
    let max_parallel = model.max_parallel.unwrap_or(DEFAULT_MAX_PARALLEL);

    let mut vars = model.vars.clone();
    for (name, value) in var_overrides {
        vars.insert(name.clone(), serde_json::Value::String(value.clone()));
    }

    let sandbox = resolve_sandbox(model.sandbox.as_ref(), &file, &dir)?;
    let needs = resolve_needs(&model, &ids, &file)?;
    let default_timeout =
        resolve_timeout(model.defaults.timeout.as_ref(), "defaults.timeout", &file)?;

    let mut stages = Vec::with_capacity(model.stages.len());
    for (stage, needs) in model.stages.iter().zip(needs) {
        let key = |field: &str| format!("stages.{}.{field}", stage.id);
        let (agent_text, agent_key) = match (&stage.agent, &model.defaults.agent) {
            (Some(agent), _) => (agent, key("agent")),
            (None, Some(agent)) => (agent, "defaults.agent".to_owned()),
            (None, None) => {
                return Err(invalid(
                    &key("agent"),
                    "no agent for this stage".into(),
                    "set `agent:` on the stage or `defaults.agent`",
                ))
            }
        };
        let agent = dir.join(agent_text);
        if !agent.exists() {
            return Err(invalid(
                &agent_key,
                format!("agent `{agent_text}` does not exist ({})", agent.display()),
                &format!(
                    "paths are relative to the plan file's directory {}",
                    dir.display()
                ),
            ));
        }
        let timeout = match &stage.timeout {
            Some(value) => resolve_timeout(Some(value), &key("timeout"), &file)?,
            None => default_timeout,
        };
        let max_iterations = stage.max_iterations.or(model.defaults.max_iterations);
        let foreach = match &stage.foreach {
            None => None,
            Some(foreach) => Some(resolve_foreach(foreach, &dir, &file, &key("foreach"))?),
        };
        stages.push(ResolvedStage {
            id: stage.id.clone(),
            agent,
            message: stage.message.clone(),
            output: stage.output.or(model.defaults.output).unwrap_or_default(),
            foreach,
            needs,
            on_failure: stage
                .on_failure
                .or(model.defaults.on_failure)
                .unwrap_or_default(),
            isolate: stage.isolate.or(model.defaults.isolate).unwrap_or(false),
            max_iterations,
            timeout,
            retries: stage.retries.or(model.defaults.retries).unwrap_or(0),
            budget: stage.budget.filter(|budget| !budget.is_empty()),
        });
    }

    let plan = ResolvedPlan {
        file,
        name: model.name.clone(),
        max_parallel,
        workspace: model
            .workspace
            .as_ref()
            .map(|workspace| dir.join(workspace)),
        vars,
        llm: model.llm.clone(),
        llm_timeouts,
        stages,
        sandbox,
        budget: model.budget.filter(|budget| !budget.is_empty()),
        source: model,
        dir,
    };
    for stage in &plan.stages {
        let items = stage_items(&plan, stage, None)?;
        if let (Some(ResolvedForeach::Files { .. }), Some([])) = (&stage.foreach, items.as_deref())
        {
            let written = plan
                .source
                .stages
                .iter()
                .find(|spec| spec.id == stage.id)
                .and_then(|spec| match &spec.foreach {
                    Some(ForeachSpec::Files { files }) => Some(files.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            return Err(PlanError::invalid(
                &plan.file,
                format!("stages.{}.foreach.files", stage.id),
                format!("`{written}` matches no files"),
                format!(
                    "paths are relative to the plan file's directory {}",
                    plan.dir.display()
                ),
            ));
        }
        check_stage_templates(&plan, stage, items.as_deref())?;
    }
    Ok(plan)
}

fn check_ids<'a>(model: &'a PlanFile, file: &Path) -> Result<Vec<&'a str>, PlanError> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut ids = Vec::with_capacity(model.stages.len());
    for (index, stage) in model.stages.iter().enumerate() {
        let key = format!("stages[{index}].id");
        if !is_identifier(&stage.id, false) || stage.id.len() > STAGE_ID_LEN {
            return Err(PlanError::invalid(
                file,
                key,
                format!("`{}` is not a valid stage id", stage.id),
                format!("use at most {STAGE_ID_LEN} lowercase letters, digits, `_` and `-` (it becomes part of run ids and paths)"),
            ));
        }
        if stage.id == PREVIOUS {
            return Err(PlanError::invalid(
                file,
                key,
                format!("`{PREVIOUS}` cannot be a stage id"),
                "it is the word `needs` uses for the stage just above; rename the stage",
            ));
        }
        if !seen.insert(&stage.id) {
            return Err(PlanError::invalid(
                file,
                key,
                format!("duplicate stage id `{}`", stage.id),
                "every stage needs its own id",
            ));
        }
        ids.push(stage.id.as_str());
    }
    Ok(ids)
}

/// `sandbox:`, read by the parser of agent.yaml's (relative paths: the plan's folder).
fn resolve_sandbox(
    value: Option<&serde_yaml::Value>,
    file: &Path,
    dir: &Path,
) -> Result<Option<crate::sandbox::SandboxPolicy>, PlanError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let mut root = serde_yaml::Mapping::new();
    root.insert("sandbox".into(), value.clone());
    let root = serde_yaml::Value::Mapping(root);
    let as_plan_error = |error: crate::yaml::FieldError| match error {
        crate::yaml::FieldError::Invalid { message, hint, .. } => {
            let key = message
                .strip_prefix('`')
                .and_then(|rest| rest.split_once('`'))
                .map_or("sandbox", |(key, _)| key);
            // The list, not the position: `sandbox.allow_write`, as the other keys read.
            let key = key.split('[').next().unwrap_or(key).to_owned();
            PlanError::invalid(file, &key, message, &hint)
        }
        crate::yaml::FieldError::UnknownKey(unknown) => PlanError::invalid(
            file,
            &unknown.key,
            format!("unknown key `{}`", unknown.key),
            format!("the keys here are: {}", unknown.known.join(", ")),
        ),
    };
    let fields = crate::yaml::Fields::new(file, "", &root).map_err(as_plan_error)?;
    crate::sandbox::parse_sandbox(
        &fields,
        crate::sandbox::RelativeTo::PlanFolder(dir),
        crate::sandbox::PolicySource::Plan(file.to_path_buf()),
        crate::yaml::UnknownKeys::Refuse,
        &mut Vec::new(),
    )
    .map_err(as_plan_error)
}

fn resolve_timeout(
    value: Option<&DurationValue>,
    key: &str,
    file: &Path,
) -> Result<Option<Duration>, PlanError> {
    let duration = match value {
        None => return Ok(None),
        Some(DurationValue::Millis(0)) => {
            return Err(PlanError::invalid(
                file,
                key,
                "a zero timeout",
                DURATION_HINT,
            ))
        }
        Some(DurationValue::Millis(millis)) => Duration::from_millis(*millis),
        Some(DurationValue::Text(text)) => parse_duration(text)
            .map_err(|error| PlanError::invalid(file, key, error.to_string(), DURATION_HINT))?,
    };
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    match out_of_range(millis, &limits::TIMEOUT_MS) {
        Some(message) => Err(PlanError::invalid(
            file,
            key,
            format!("{message} milliseconds"),
            "a run's time limit is at most 30 days (30d)",
        )),
        None => Ok(Some(duration)),
    }
}

fn resolve_foreach(
    foreach: &ForeachSpec,
    dir: &Path,
    file: &Path,
    key: &str,
) -> Result<ResolvedForeach, PlanError> {
    let relative_hint = format!(
        "paths are relative to the plan file's directory {}",
        dir.display()
    );
    match foreach {
        ForeachSpec::Template(source) => Ok(ResolvedForeach::Template(source.clone())),
        ForeachSpec::Items { items } => Ok(ResolvedForeach::Items(items.clone())),
        ForeachSpec::Files { files } => {
            let pattern = dir.join(files).to_string_lossy().into_owned();
            glob::Pattern::new(&pattern).map_err(|error| {
                PlanError::invalid(
                    file,
                    format!("{key}.files"),
                    format!("bad glob `{files}`: {error}"),
                    "e.g. data/*.json",
                )
            })?;
            Ok(ResolvedForeach::Files { pattern })
        }
        ForeachSpec::Lines { lines } => {
            let path = dir.join(lines);
            if !path.is_file() {
                return Err(PlanError::invalid(
                    file,
                    format!("{key}.lines"),
                    format!("`{lines}` is not a readable file ({})", path.display()),
                    &relative_hint,
                ));
            }
            Ok(ResolvedForeach::Lines(path))
        }
    }
}

/// `[a-z0-9_-]+` (stage ids) or `[A-Za-z0-9_-]+` (plan names).
fn is_identifier(text: &str, allow_upper: bool) -> bool {
    !text.is_empty()
        && text.chars().all(|c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || c == '_'
                || c == '-'
                || (allow_upper && c.is_ascii_uppercase())
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(is_identifier("map_2-x", false));
        assert!(!is_identifier("Map", false));
        assert!(is_identifier("Nightly-1", true));
        assert!(!is_identifier("", true));
        assert!(!is_identifier("../x", true));
    }
}
