//! plan::parse — plan text to the typed model, with errors worded for people: size and
//! nesting are checked before the YAML parser (slow on deep nesting), unknown keys before
//! serde (which names neither the path nor the closest key), and serde's own messages are
//! rewritten where they say nothing useful (untagged enums, numbers beyond 64 bits).
//!
//! Must not: apply defaults or check cross-field rules (`validate.rs`).

use std::path::Path;

use super::keys::{check_keys, KeyProblem};
use super::limits::{PLAN_BYTES, PLAN_DEPTH};
use super::model::PlanFile;
use super::PlanError;
use crate::input::{check_size, check_yaml_depth, InputError};

pub(crate) fn input_error(path: &Path, error: &InputError) -> PlanError {
    PlanError::invalid(
        path,
        "<document>",
        error.to_string(),
        format!(
            "a plan is a small YAML file: at most {PLAN_BYTES} bytes, collections nested at most \
             {PLAN_DEPTH} deep"
        ),
    )
}

/// Size and nesting first (before the YAML parser, which is slow on deep nesting), then
/// the key check, then the typed model.
pub(crate) fn parse_plan(text: &str, path: &Path) -> Result<PlanFile, PlanError> {
    check_size(text, PLAN_BYTES).map_err(|error| input_error(path, &error))?;
    check_yaml_depth(text, PLAN_DEPTH).map_err(|error| input_error(path, &error))?;
    let document: serde_yaml::Value = serde_yaml::from_str(text).map_err(|error| {
        match key_path(&error.to_string()) {
            // A value even a YAML value cannot hold (an integer beyond 128 bits) at a key.
            Some(_) => yaml_error(path, &serde_yaml::Value::Null, &error),
            None => syntax_error(path, text, &error),
        }
    })?;
    match check_keys(&document) {
        Ok(()) => {}
        Err(KeyProblem::Unknown(unknown)) => {
            return Err(PlanError::invalid(
                path,
                by_stage_id(&document, &unknown.path),
                format!("unknown key ({})", unknown.suggestion),
                "fix its spelling, or remove it",
            ));
        }
        Err(KeyProblem::ForeachForm { path: key, found }) => {
            return Err(PlanError::invalid(
                path,
                by_stage_id(&document, &key),
                format!("expected exactly one of items, files, lines; found {}", found.join(", ")),
                "write `foreach: {items: [...]}`, `{files: \"data/*.json\"}`, `{lines: list.txt}` or a template string",
            ));
        }
    }
    // Parsed again from the text: errors from the text carry the key path and position.
    serde_yaml::from_str(text).map_err(|error| yaml_error(path, &document, &error))
}

/// serde_yaml prefixes type errors with the key path (`stages[0].output: ...`): the path and
/// the rest of the message.
fn key_path(text: &str) -> Option<(&str, &str)> {
    text.split_once(": ").filter(|(key, _)| {
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.[]".contains(c))
    })
}

/// The key path in the form every plan error uses: a stage by its id (`stages.work.output`)
/// rather than its position (`stages[0].output`), when it has a usable id.
pub(crate) fn by_stage_id(document: &serde_yaml::Value, key: &str) -> String {
    let Some(rest) = key.strip_prefix("stages[") else {
        return key.to_owned();
    };
    let Some((index, after)) = rest.split_once(']') else {
        return key.to_owned();
    };
    let id = index
        .parse::<usize>()
        .ok()
        .and_then(|index| document.get("stages")?.get(index)?.get("id")?.as_str());
    match id {
        Some(id) if is_stage_id(id) => format!("stages.{id}{after}"),
        _ => key.to_owned(),
    }
}

/// Text that passes as a stage id in a key path (validation checks the id itself).
fn is_stage_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Text that is not YAML at all: the position once, a tab named as such.
fn syntax_error(path: &Path, text: &str, error: &serde_yaml::Error) -> PlanError {
    let syntax = crate::yaml_errors::syntax_error(text, error);
    PlanError::invalid(
        path,
        syntax.position.unwrap_or_else(|| "<document>".to_owned()),
        syntax.message,
        if syntax.tab {
            crate::yaml_errors::TAB_HINT
        } else {
            "plan.yaml is a YAML mapping with `stages:` (a list of {id, message, ...})"
        },
    )
}

fn yaml_error(path: &Path, document: &serde_yaml::Value, error: &serde_yaml::Error) -> PlanError {
    let text = error.to_string();
    match key_path(&text) {
        Some((key, message)) => PlanError::invalid(
            path,
            by_stage_id(document, &untagged_field(key, message)),
            readable_serde_message(message),
            "check the value at this key against the plan.yaml format (durations like 15m, output json|text, on_failure stop|continue)",
        ),
        None => PlanError::invalid(
            path,
            error.location().map_or_else(
                || "<document>".to_owned(),
                |location| format!("line {} column {}", location.line(), location.column()),
            ),
            crate::yaml_errors::serde_message_in_words(&text),
            "plan.yaml is a YAML mapping with `stages:` (a list of {id, message, ...})",
        ),
    }
}

/// serde_yaml reports an untagged-enum failure at the enclosing mapping; add the field.
fn untagged_field(key: &str, message: &str) -> String {
    let field = if message.contains("untagged enum ForeachSpec") {
        "foreach"
    } else if message.contains("untagged enum DurationValue") {
        "timeout"
    } else {
        return key.to_owned();
    };
    if key.ends_with(field) {
        key.to_owned()
    } else {
        format!("{key}.{field}")
    }
}

/// serde's untagged-enum failure says nothing useful; name the accepted forms instead. An
/// enum's choices are listed in words; the position goes last, in parentheses.
fn readable_serde_message(message: &str) -> String {
    let (message, location) = match message.find(" at line ") {
        Some(at) => (
            &message[..at],
            format!(" ({})", &message[at + " at ".len()..]),
        ),
        None => (message, String::new()),
    };
    if message.contains("untagged enum ForeachSpec") {
        format!("foreach must be a template string, {{items: [...]}}, {{files: \"glob\"}} or {{lines: path}}{location}")
    } else if message.contains("untagged enum DurationValue") {
        format!(
            "a duration must be text like 15m or 1h30m, or an integer of milliseconds{location}"
        )
    } else if let Some(number) = too_large_number(message) {
        format!("the number {number} is too large{location}")
    } else {
        format!(
            "{}{location}",
            crate::yaml_errors::serde_message_in_words(message)
        )
    }
}

/// The number in serde's complaint about an integer beyond 64 bits (`integer `N` as u128`).
fn too_large_number(message: &str) -> Option<&str> {
    let rest = message.split_once("integer `")?.1;
    let (number, after) = rest.split_once('`')?;
    after.starts_with(" as u128").then_some(number)
}
