//! plan::keys — the strict key check run on the raw YAML before typed parsing, so an unknown
//! or misspelt key is reported with its full path and the closest known key (serde alone would
//! report neither).
//!
//! Owns: the list of known keys at each level ([`known_key_paths`], which the plan
//! reference must cover) and the "did you mean" suggestion.
//! Must not: check values or types (serde does, then `validate.rs`).

use serde_yaml::{Mapping, Value};

const ROOT_KEYS: &[&str] = &[
    "name",
    "max_parallel",
    "workspace",
    "vars",
    "defaults",
    "llm",
    "executor",
    "sandbox",
    "budget",
    "stages",
];
const DEFAULTS_KEYS: &[&str] = &[
    "agent",
    "max_iterations",
    "timeout",
    "retries",
    "on_failure",
    "isolate",
    "output",
];
const LLM_KEYS: &[&str] = &[
    "max_in_flight",
    "requests_per_minute",
    "request_timeout",
    "idle_timeout",
    "response_format",
    "price",
];
const EXECUTOR_KEYS: &[&str] = &[
    "type",
    "partition",
    "account",
    "time_limit",
    "sbatch_args",
    "max_array",
    "delta_path",
    "poll_interval",
];
const STAGE_KEYS: &[&str] = &[
    "id",
    "agent",
    "message",
    "output",
    "foreach",
    "needs",
    "on_failure",
    "isolate",
    "max_iterations",
    "timeout",
    "retries",
    "budget",
];
const FOREACH_KEYS: &[&str] = &["items", "files", "lines"];

/// Every key the loader accepts, as a path: `name`, `defaults.retries`,
/// `stages[].foreach.files`, ... (the plan reference must document each one).
pub fn known_key_paths() -> Vec<String> {
    let level = |prefix: &str, keys: &[&str]| -> Vec<String> {
        keys.iter().map(|key| format!("{prefix}{key}")).collect()
    };
    [
        level("", ROOT_KEYS),
        level("defaults.", DEFAULTS_KEYS),
        level("llm.", LLM_KEYS),
        level("executor.", EXECUTOR_KEYS),
        level("sandbox.", &crate::sandbox::SANDBOX_KEYS),
        level("budget.", &crate::budget::BUDGET_KEYS),
        level("stages[].", STAGE_KEYS),
        level("stages[].budget.", &crate::budget::BUDGET_KEYS),
        level("stages[].foreach.", FOREACH_KEYS),
    ]
    .concat()
}

/// An unknown key, its path, and what the user probably meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// The key's path, e.g. `stages[1].retires`.
    pub path: String,
    /// A hint naming the closest known key, or listing the keys accepted there.
    pub suggestion: String,
}

/// A structural problem found before typed parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyProblem {
    /// A key the format does not have.
    Unknown(UnknownKey),
    /// A `foreach` mapping must have exactly one of items / files / lines.
    ForeachForm {
        /// The `foreach` key's path.
        path: String,
        /// The keys it has.
        found: Vec<String>,
    },
}

/// Walks the document and returns the first unknown key (in document order).
pub fn check_keys(document: &Value) -> Result<(), KeyProblem> {
    let Value::Mapping(root) = document else {
        return Ok(()); // serde reports "expected a mapping" with a better message
    };
    check_level(root, "", ROOT_KEYS)?;
    if let Some(Value::Mapping(defaults)) = root.get("defaults") {
        check_level(defaults, "defaults.", DEFAULTS_KEYS)?;
    }
    if let Some(Value::Mapping(llm)) = root.get("llm") {
        check_level(llm, "llm.", LLM_KEYS)?;
        if let Some(Value::Mapping(price)) = llm.get("price") {
            check_level(price, "llm.price.", &crate::llm::price::PRICE_KEYS)?;
        }
    }
    if let Some(Value::Mapping(executor)) = root.get("executor") {
        check_level(executor, "executor.", EXECUTOR_KEYS)?;
    }
    if let Some(Value::Mapping(budget)) = root.get("budget") {
        check_level(budget, "budget.", &crate::budget::BUDGET_KEYS)?;
    }
    if let Some(Value::Mapping(sandbox)) = root.get("sandbox") {
        check_level(sandbox, "sandbox.", &crate::sandbox::SANDBOX_KEYS)?;
    }
    if let Some(Value::Sequence(stages)) = root.get("stages") {
        for (index, stage) in stages.iter().enumerate() {
            let Value::Mapping(stage) = stage else {
                continue;
            };
            let prefix = format!("stages[{index}].");
            check_level(stage, &prefix, STAGE_KEYS)?;
            if let Some(Value::Mapping(budget)) = stage.get("budget") {
                check_level(
                    budget,
                    &format!("{prefix}budget."),
                    &crate::budget::BUDGET_KEYS,
                )?;
            }
            if let Some(Value::Mapping(foreach)) = stage.get("foreach") {
                let foreach_prefix = format!("{prefix}foreach.");
                check_level(foreach, &foreach_prefix, FOREACH_KEYS)?;
                if foreach.len() != 1 {
                    return Err(KeyProblem::ForeachForm {
                        path: format!("{prefix}foreach"),
                        found: foreach.keys().map(key_text).collect(),
                    });
                }
            }
        }
    }
    Ok(())
}

fn check_level(map: &Mapping, prefix: &str, known: &[&str]) -> Result<(), KeyProblem> {
    for key in map.keys() {
        let name = key_text(key);
        if !known.contains(&name.as_str()) {
            return Err(KeyProblem::Unknown(UnknownKey {
                path: format!("{prefix}{name}"),
                suggestion: suggest(&name, known),
            }));
        }
    }
    Ok(())
}

fn key_text(key: &Value) -> String {
    match key {
        Value::String(text) => text.clone(),
        other => serde_yaml::to_string(other)
            .map(|text| text.trim().to_owned())
            .unwrap_or_else(|_| "?".to_owned()),
    }
}

/// "did you mean `x`?" when a known key is close, else the list of known keys.
pub fn suggest(name: &str, known: &[&str]) -> String {
    let best = known
        .iter()
        .map(|candidate| (edit_distance(name, candidate), *candidate))
        .min();
    match best {
        Some((distance, candidate)) if distance <= (name.len() / 3).max(2) => {
            format!("did you mean `{candidate}`?")
        }
        _ => format!("known keys here: {}", known.join(", ")),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn problem(yaml: &str) -> KeyProblem {
        check_keys(&serde_yaml::from_str(yaml).unwrap()).unwrap_err()
    }

    #[test]
    fn names_the_path_and_the_closest_key() {
        let KeyProblem::Unknown(unknown) = problem("stages:\n  - id: a\n    mesage: hi\n") else {
            panic!("expected an unknown key");
        };
        assert_eq!(unknown.path, "stages[0].mesage");
        assert_eq!(unknown.suggestion, "did you mean `message`?");
    }

    #[test]
    fn far_keys_list_the_known_ones() {
        let KeyProblem::Unknown(unknown) = problem("llm: { banana: 1 }\nstages: []\n") else {
            panic!("expected an unknown key");
        };
        assert_eq!(unknown.path, "llm.banana");
        assert!(unknown
            .suggestion
            .contains("max_in_flight, requests_per_minute"));
    }

    #[test]
    fn foreach_needs_exactly_one_form() {
        let found = problem("stages:\n  - id: a\n    foreach: { items: [1], lines: x }\n");
        assert!(
            matches!(found, KeyProblem::ForeachForm { ref path, .. } if path == "stages[0].foreach")
        );
        let KeyProblem::Unknown(unknown) =
            problem("stages:\n  - id: a\n    foreach: { file: x }\n")
        else {
            panic!("expected an unknown key");
        };
        assert_eq!(unknown.suggestion, "did you mean `files`?");
    }

    #[test]
    fn known_documents_pass() {
        let yaml = "name: n\ndefaults: { agent: a, timeout: 15m }\nstages:\n  - { id: a, message: m, foreach: { items: [1] } }\n";
        assert_eq!(check_keys(&serde_yaml::from_str(yaml).unwrap()), Ok(()));
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
