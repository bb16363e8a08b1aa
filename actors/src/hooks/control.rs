//! What a hook may ask for by printing JSON on stdout (documented in docs/hooks.md):
//! `pre_tool_execution` may skip the call (`{"action":"skip","observation":"..."}`);
//! `pre_llm_request` may replace `messages`, `model`, `temperature` and `max_tokens`.
//!
//! Everything is validated; invalid output changes nothing and comes back as a problem text
//! for a WARNING event (unlike the original engine, which trusted it — reference §19 item 3).
//! Must not: run processes or touch files.

use serde_json::{Map, Value};

use crate::llm::{validate_history, ChatMessage, ChatRequest};

/// Fields of the model request a `pre_llm_request` hook may replace.
pub const OVERRIDABLE_FIELDS: [&str; 4] = ["messages", "model", "temperature", "max_tokens"];

/// Observation of a call skipped by a hook that gave none.
pub const DEFAULT_SKIP_OBSERVATION: &str = "Tool execution skipped by the pre_tool_execution hook.";

/// The decision of a `pre_tool_execution` hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolControl {
    /// Run the call (empty output, or `{"action":"continue"}`).
    Run,
    /// Do not run it; the model sees `observation` as the result.
    Skip { observation: String },
}

/// Reads a `pre_tool_execution` hook's stdout. `Err` carries the problem for a warning; the
/// call then runs as if the hook had printed nothing.
pub fn parse_tool_control(stdout: &str) -> Result<ToolControl, String> {
    let text = stdout.trim();
    if text.is_empty() {
        return Ok(ToolControl::Run);
    }
    let object = parse_object(text)?;
    match object.get("action") {
        None | Some(Value::Null) => Ok(ToolControl::Run),
        Some(Value::String(action)) if action == "continue" || action == "run" => {
            Ok(ToolControl::Run)
        }
        Some(Value::String(action)) if action == "skip" => {
            let observation = match object.get("observation") {
                None | Some(Value::Null) => DEFAULT_SKIP_OBSERVATION.to_string(),
                Some(Value::String(text)) => text.clone(),
                Some(other) => {
                    return Err(format!(
                        "`observation` must be a string, got {}",
                        kind_of(other)
                    ))
                }
            };
            Ok(ToolControl::Skip { observation })
        }
        Some(other) => Err(format!(
            "`action` must be \"skip\" or \"continue\", got {}",
            short(other)
        )),
    }
}

/// What a valid `pre_llm_request` override changed, and which printed keys were ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OverrideReport {
    pub changed: Vec<&'static str>,
    pub ignored_keys: Vec<String>,
}

/// Applies a `pre_llm_request` hook's stdout to `request`. Empty output changes nothing. Any
/// invalid field rejects the whole override (`request` is left untouched) with the problem.
/// Keys other than [`OVERRIDABLE_FIELDS`] are ignored and reported (a hook may echo the whole
/// request back).
pub fn apply_request_override(
    request: &mut ChatRequest,
    stdout: &str,
) -> Result<OverrideReport, String> {
    let text = stdout.trim();
    if text.is_empty() {
        return Ok(OverrideReport::default());
    }
    let object = parse_object(text)?;
    let mut next = request.clone();
    let mut report = OverrideReport::default();
    for (key, value) in &object {
        match key.as_str() {
            "messages" => {
                next.messages = parse_messages(value)?.into();
                report.changed.push("messages");
            }
            "model" => match value {
                Value::String(model) if !model.trim().is_empty() => {
                    next.model = model.clone();
                    report.changed.push("model");
                }
                other => {
                    return Err(format!(
                        "`model` must be a non-empty string, got {}",
                        short(other)
                    ))
                }
            },
            "temperature" => match value.as_f64() {
                Some(t) if (0.0..=2.0).contains(&t) => {
                    next.temperature = Some(t);
                    report.changed.push("temperature");
                }
                _ => {
                    return Err(format!(
                        "`temperature` must be a number from 0 to 2, got {}",
                        short(value)
                    ))
                }
            },
            "max_tokens" => match value.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n > 0 => {
                    next.max_tokens = Some(n);
                    report.changed.push("max_tokens");
                }
                _ => {
                    return Err(format!(
                        "`max_tokens` must be a positive integer, got {}",
                        short(value)
                    ))
                }
            },
            other => report.ignored_keys.push(other.to_string()),
        }
    }
    *request = next;
    Ok(report)
}

fn parse_messages(value: &Value) -> Result<Vec<ChatMessage>, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "`messages` must be an array of chat messages, got {}",
            kind_of(value)
        ));
    };
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(fields) = item else {
            return Err(format!(
                "`messages[{i}]` must be an object, got {}",
                kind_of(item)
            ));
        };
        match fields.get("role").and_then(Value::as_str) {
            Some("system" | "developer" | "user" | "assistant" | "tool") => {}
            Some(role) => {
                return Err(format!(
                    "`messages[{i}].role` is {role:?}; expected system, user, assistant or tool"
                ))
            }
            None => return Err(format!("`messages[{i}].role` is missing or not a string")),
        }
        match fields.get("content") {
            None | Some(Value::Null | Value::String(_) | Value::Array(_)) => {}
            Some(other) => {
                return Err(format!(
                    "`messages[{i}].content` must be a string or null, got {}",
                    kind_of(other)
                ))
            }
        }
        let message: ChatMessage = serde_json::from_value(item.clone())
            .map_err(|e| format!("`messages[{i}]` is not a valid chat message: {e}"))?;
        messages.push(message);
    }
    validate_history(&messages).map_err(|e| format!("`messages` is not a valid history: {e}"))?;
    Ok(messages)
}

fn parse_object(text: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(format!(
            "stdout must be one JSON object, got {}",
            kind_of(&other)
        )),
        Err(e) => Err(format!("stdout is not valid JSON ({e})")),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!("{}...", text.chars().take(57).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::llm::Role;

    fn request() -> ChatRequest {
        ChatRequest {
            model: "base".into(),
            messages: vec![ChatMessage::system("sys"), ChatMessage::user("task")].into(),
            temperature: Some(0.5),
            max_tokens: None,
            ..ChatRequest::default()
        }
    }

    #[test]
    fn empty_or_continue_output_runs_the_tool() {
        assert_eq!(parse_tool_control("  \n").unwrap(), ToolControl::Run);
        assert_eq!(
            parse_tool_control(r#"{"action":"continue"}"#).unwrap(),
            ToolControl::Run
        );
    }

    #[test]
    fn skip_carries_the_observation_or_a_default() {
        assert_eq!(
            parse_tool_control(r#"{"action":"skip","observation":"denied"}"#).unwrap(),
            ToolControl::Skip {
                observation: "denied".into()
            }
        );
        assert_eq!(
            parse_tool_control(r#"{"action":"skip"}"#).unwrap(),
            ToolControl::Skip {
                observation: DEFAULT_SKIP_OBSERVATION.into()
            }
        );
    }

    #[test]
    fn bad_tool_control_is_a_problem() {
        for (text, phrase) in [
            ("not json", "not valid JSON"),
            ("[1]", "one JSON object, got an array"),
            (r#"{"action":"explode"}"#, "`action` must be"),
            (
                r#"{"action":"skip","observation":3}"#,
                "`observation` must be a string",
            ),
        ] {
            let err = parse_tool_control(text).unwrap_err();
            assert!(err.contains(phrase), "{text}: {err}");
        }
    }

    #[test]
    fn override_replaces_the_four_fields() {
        let mut r = request();
        let report = apply_request_override(
            &mut r,
            r#"{"model":"other","temperature":0.1,"max_tokens":77,"messages":[{"role":"user","content":"short"}],"tools":[]}"#,
        )
        .unwrap();
        assert_eq!(r.model, "other");
        assert_eq!(r.temperature, Some(0.1));
        assert_eq!(r.max_tokens, Some(77));
        assert_eq!(r.messages.len(), 1);
        assert_eq!(r.messages[0].role, Role::User);
        let mut changed = report.changed.clone();
        changed.sort_unstable();
        assert_eq!(
            changed,
            vec!["max_tokens", "messages", "model", "temperature"]
        );
        assert_eq!(report.ignored_keys, vec!["tools".to_string()]);
    }

    #[test]
    fn empty_override_changes_nothing() {
        let mut r = request();
        assert_eq!(
            apply_request_override(&mut r, "").unwrap(),
            OverrideReport::default()
        );
        assert_eq!(r, request());
    }

    #[test]
    fn invalid_override_leaves_the_request_untouched() {
        for (text, phrase) in [
            (r#"{"temperature":"hot"}"#, "`temperature` must be a number"),
            (r#"{"temperature":7}"#, "from 0 to 2"),
            (r#"{"model":""}"#, "`model` must be a non-empty string"),
            (
                r#"{"max_tokens":0}"#,
                "`max_tokens` must be a positive integer",
            ),
            (r#"{"max_tokens":1.5}"#, "positive integer"),
            (r#"{"messages":"hi"}"#, "must be an array"),
            (
                r#"{"messages":[{"role":"wizard","content":"x"}]}"#,
                "\"wizard\"",
            ),
            (r#"{"messages":[{"content":"x"}]}"#, "role` is missing"),
            (
                r#"{"messages":[{"role":"user","content":5}]}"#,
                "string or null",
            ),
            (
                r#"{"messages":[{"role":"assistant","content":"x"}]}"#,
                "not a valid history",
            ),
            (r#"{"model":"fine","messages":[]}"#, "not a valid history"),
            ("{oops", "not valid JSON"),
        ] {
            let mut r = request();
            let err = apply_request_override(&mut r, text).unwrap_err();
            assert!(err.contains(phrase), "{text}: {err}");
            assert_eq!(r, request(), "{text} must not change the request");
        }
    }
}
