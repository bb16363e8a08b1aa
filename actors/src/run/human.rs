//! ask_human bookkeeping (spec §2.5): the pause request file, recording an answer, and
//! keeping sensitive answers out of every log. A sensitive answer lives only in a 0600 file
//! under the run's `secrets/` folder; the journal records a marker, and the context builder
//! substitutes the value into the request sent to the model.
//!
//! Must not: prompt anyone (the CLI's prompter does that) or decide run status.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

use serde_json::json;

use crate::journal::{ActionStatus, Event};
use crate::runtime::run::setup::PendingQuestion;
use crate::workspace::{now_rfc3339, RunPaths};

/// What the journal shows instead of a sensitive answer.
pub fn redaction_marker(action_id: &str) -> String {
    format!("[REDACTED: sensitive answer kept in secrets/{action_id}]")
}

/// Replaces every sensitive answer found in the strings of `value` by its redaction marker:
/// the audit copy of a model request (io/invocations) must not hold what the context
/// builder substituted into it.
pub fn redact_secrets(value: &mut serde_json::Value, secrets: &HashMap<String, String>) {
    use serde_json::Value;
    match value {
        Value::String(text) => {
            for (action_id, secret) in secrets {
                if !secret.is_empty() && text.contains(secret.as_str()) {
                    *text = text.replace(secret.as_str(), &redaction_marker(action_id));
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_secrets(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| redact_secrets(v, secrets)),
        _ => {}
    }
}

/// Writes `interaction/request.json` (spec §2.5.3).
pub fn write_request(
    paths: &RunPaths,
    request_id: &str,
    prompt: &str,
    input_type: &str,
    sensitive: bool,
) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&paths.interaction_dir)?;
    let body = json!({
        "request_id": request_id,
        "timestamp": now_rfc3339(),
        "prompt": prompt,
        "input_type": input_type,
        "sensitive": sensitive,
        "respond_with": format!("delta continue --run-id <id> -w <workspace> -m \"<answer>\" (or write {})", paths.interaction_dir.join("response.txt").display()),
    });
    let text = serde_json::to_string_pretty(&body).map_err(std::io::Error::other)?;
    std::fs::write(paths.interaction_dir.join("request.json"), text)
}

/// Journals an answer through `append`: HUMAN_INPUT_RECEIVED, then the call's ACTION_RESULT.
/// A sensitive answer is stored in the run's secrets folder first and journaled as a marker.
pub fn record_answer<E: std::fmt::Display>(
    append: &mut dyn FnMut(Event) -> Result<(), E>,
    paths: &RunPaths,
    question: &PendingQuestion,
    answer: &str,
) -> Result<(), String> {
    let (shown, redacted) = if question.sensitive {
        store_secret(paths, &question.action_id, answer).map_err(|e| {
            format!(
                "cannot store the sensitive answer in {}: {e}",
                paths.secrets_dir.display()
            )
        })?;
        (redaction_marker(&question.action_id), true)
    } else {
        (answer.to_string(), false)
    };
    append(Event::HumanInputReceived {
        iteration: question.iteration,
        action_id: question.action_id.clone(),
        response: shown.clone(),
        redacted,
    })
    .map_err(|e| e.to_string())?;
    append(Event::ActionResult {
        iteration: question.iteration,
        action_id: question.action_id.clone(),
        tool_name: "ask_human".into(),
        status: ActionStatus::Success,
        observation_content: shown,
        exit_code: Some(0),
        execution_ref: None,
    })
    .map_err(|e| e.to_string())
}

fn store_secret(paths: &RunPaths, action_id: &str, answer: &str) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&paths.secrets_dir)?;
    let name: String = action_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(paths.secrets_dir.join(name))?;
    file.write_all(answer.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn redact_secrets_replaces_every_occurrence_in_nested_strings() {
        let secrets = HashMap::from([("call_1".to_string(), "s3cret".to_string())]);
        let mut value = json!({
            "request": {"messages": [{"role": "tool", "content": "pw is s3cret, again s3cret"}]},
            "other": ["s3cret", 7, null],
        });
        redact_secrets(&mut value, &secrets);
        let text = value.to_string();
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(
            text.matches(&redaction_marker("call_1")).count(),
            3,
            "{text}"
        );
        assert_eq!(value["other"][1], 7);
    }
}
