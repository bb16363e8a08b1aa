//! Reading journals written by the original TypeScript engine (reference §8.1): lines of the
//! form `{"seq","timestamp","type","payload":{…}}` become our [`Event`]s.
//!
//! The original left out things we record per event, so a small amount of state is carried
//! along the file: the iteration (counted by THOUGHTs), the run id (from RUN_START) and each
//! action's tool name (from THOUGHT tool calls and ACTION_REQUESTs). Our own lines appended
//! after original ones update the same state, so mixed files read consistently.
//! Conversions are lossy only where the original had nothing to say; this file never writes.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::event::{ActionStatus, Event, JournalEvent, ToolCallRecord};
use crate::protocol::RunStatus;

/// The event types the original engine wrote (reference §8.1), all converted below.
pub(crate) const ORIGINAL_TYPES: [&str; 8] = [
    "RUN_START",
    "RUN_END",
    "USER_MESSAGE",
    "THOUGHT",
    "ACTION_REQUEST",
    "ACTION_RESULT",
    "SYSTEM_MESSAGE",
    "HOOK_EXECUTION_AUDIT",
];

/// Carries what the original engine's lines leave implicit.
#[derive(Debug, Default)]
pub(crate) struct LegacyConverter {
    work_dir: String,
    run_id: String,
    iteration: u32,
    tool_names: HashMap<String, String>,
}

fn text(payload: &Map<String, Value>, key: &str) -> String {
    payload
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn optional_text(payload: &Map<String, Value>, key: &str) -> Option<String> {
    payload
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// `=== EXIT CODE: n ===` in an original observation, if present.
fn exit_code_from_observation(observation: &str) -> Option<i32> {
    const MARKER: &str = "=== EXIT CODE: ";
    let start = observation.rfind(MARKER)? + MARKER.len();
    let rest = &observation[start..];
    let end = rest.find(" ===")?;
    rest[..end].trim().parse().ok()
}

/// A provider tool call `{id, type, function:{name, arguments}}` (arguments may be a string
/// or, in hand-edited files, an object).
fn tool_call_record(call: &Value) -> Option<ToolCallRecord> {
    let function = call.get("function")?;
    let arguments = match function.get("arguments") {
        Some(Value::String(raw)) => raw.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    Some(ToolCallRecord {
        id: call.get("id")?.as_str()?.to_string(),
        name: function.get("name")?.as_str()?.to_string(),
        arguments,
    })
}

impl LegacyConverter {
    /// `journal_path` is `<work>/.delta/<run_id>/journal.jsonl`; the work dir is derived from
    /// it because the original RUN_START did not record it.
    pub(crate) fn new(journal_path: &Path) -> LegacyConverter {
        let work_dir = journal_path
            .ancestors()
            .nth(3)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        LegacyConverter {
            work_dir,
            ..LegacyConverter::default()
        }
    }

    /// Keeps the carried state in step with one of our own events.
    pub(crate) fn observe(&mut self, event: &Event) {
        match event {
            Event::EngineStart { run_id, .. } => self.run_id.clone_from(run_id),
            Event::Thought {
                iteration,
                tool_calls,
                ..
            } => {
                self.iteration = *iteration;
                for call in tool_calls {
                    self.tool_names.insert(call.id.clone(), call.name.clone());
                }
            }
            Event::ActionRequest {
                action_id,
                tool_name,
                ..
            } => {
                self.tool_names.insert(action_id.clone(), tool_name.clone());
            }
            _ => {}
        }
    }

    /// Converts one original line (already parsed) into our event.
    pub(crate) fn convert(&mut self, line: &Map<String, Value>) -> Result<JournalEvent, String> {
        let seq = line
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or("original-engine line without a numeric 'seq'")?;
        let timestamp = text(line, "timestamp");
        let kind = line
            .get("type")
            .and_then(Value::as_str)
            .ok_or("original-engine line without a 'type'")?;
        let empty = Map::new();
        let payload = line
            .get("payload")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let event = self.convert_payload(kind, payload)?;
        self.observe(&event);
        Ok(JournalEvent {
            seq,
            timestamp,
            event,
        })
    }

    fn convert_payload(
        &mut self,
        kind: &str,
        payload: &Map<String, Value>,
    ) -> Result<Event, String> {
        let event = match kind {
            "RUN_START" => {
                let agent_home = text(payload, "agent_ref");
                let agent_name = Path::new(&agent_home)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| agent_home.clone());
                Event::EngineStart {
                    run_id: text(payload, "run_id"),
                    agent_home,
                    work_dir: self.work_dir.clone(),
                    agent_name,
                    task: text(payload, "task"),
                }
            }
            "RUN_END" => {
                let status_text = text(payload, "status");
                let status = RunStatus::parse(&status_text)
                    .ok_or_else(|| format!("RUN_END with unknown status '{status_text}'"))?;
                Event::EngineEnd {
                    run_id: self.run_id.clone(),
                    status,
                    final_iteration: self.iteration,
                    result: None,
                    error: None,
                }
            }
            "USER_MESSAGE" => Event::UserMessage {
                content: text(payload, "content"),
            },
            "THOUGHT" => {
                let tool_calls = match payload.get("tool_calls") {
                    Some(Value::Array(calls)) => calls
                        .iter()
                        .map(|call| {
                            tool_call_record(call).ok_or_else(|| {
                                format!("THOUGHT with a malformed tool call: {call}")
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                    _ => Vec::new(),
                };
                Event::Thought {
                    iteration: self.iteration + 1,
                    // The original stored "" for "no text"; we store its absence.
                    content: optional_text(payload, "content"),
                    tool_calls,
                    llm_invocation_ref: optional_text(payload, "llm_invocation_ref"),
                    finish_reason: None,
                    usage: None,
                    prompt: None,
                }
            }
            "ACTION_REQUEST" => Event::ActionRequest {
                iteration: self.iteration,
                action_id: text(payload, "action_id"),
                tool_name: text(payload, "tool_name"),
                tool_args: payload.get("tool_args").cloned().unwrap_or(Value::Null),
                resolved_command: text(payload, "resolved_command"),
            },
            "ACTION_RESULT" => {
                let action_id = text(payload, "action_id");
                let status_text = text(payload, "status");
                let status = ActionStatus::parse(&status_text)
                    .ok_or_else(|| format!("ACTION_RESULT with unknown status '{status_text}'"))?;
                let observation_content = text(payload, "observation_content");
                Event::ActionResult {
                    iteration: self.iteration,
                    tool_name: self.tool_names.get(&action_id).cloned().unwrap_or_default(),
                    action_id,
                    status,
                    exit_code: exit_code_from_observation(&observation_content),
                    observation_content,
                    execution_ref: optional_text(payload, "execution_ref"),
                }
            }
            "SYSTEM_MESSAGE" => {
                let content = text(payload, "content");
                if text(payload, "level").eq_ignore_ascii_case("ERROR") {
                    Event::Error {
                        error_type: "SYSTEM_MESSAGE".to_string(),
                        error_message: content,
                        error_details: None,
                    }
                } else {
                    Event::Warning { message: content }
                }
            }
            "HOOK_EXECUTION_AUDIT" => Event::HookExecuted {
                hook_name: text(payload, "hook_name"),
                status: text(payload, "status"),
                reason: None,
                io_path_ref: text(payload, "io_path_ref"),
            },
            other => return Err(format!("unknown original-engine event type '{other}'")),
        };
        Ok(event)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn convert(converter: &mut LegacyConverter, line: Value) -> Event {
        converter.convert(line.as_object().unwrap()).unwrap().event
    }

    #[test]
    fn conversation_converts_with_counted_iterations_and_tool_names() {
        let mut c = LegacyConverter::new(Path::new("/ws/W001/.delta/r1/journal.jsonl"));
        let start = convert(
            &mut c,
            json!({"seq":1,"timestamp":"t","type":"RUN_START","payload":{"run_id":"r1","task":"do it","agent_ref":"/agents/hello"}}),
        );
        assert_eq!(
            start,
            Event::EngineStart {
                run_id: "r1".into(),
                agent_home: "/agents/hello".into(),
                work_dir: "/ws/W001".into(),
                agent_name: "hello".into(),
                task: "do it".into()
            }
        );
        let thought = convert(
            &mut c,
            json!({"seq":3,"timestamp":"t","type":"THOUGHT","payload":{"content":"","llm_invocation_ref":"u1",
                "tool_calls":[{"id":"call_9","type":"function","function":{"name":"echo","arguments":"{\"m\":\"x\"}"}}]}}),
        );
        let Event::Thought {
            iteration,
            content,
            tool_calls,
            llm_invocation_ref,
            ..
        } = thought
        else {
            panic!("not a thought");
        };
        assert_eq!((iteration, content), (1, None));
        assert_eq!(llm_invocation_ref.as_deref(), Some("u1"));
        assert_eq!(tool_calls[0].arguments, "{\"m\":\"x\"}");
        // A result without a request (tool not found) still learns its tool name.
        let result = convert(
            &mut c,
            json!({"seq":4,"timestamp":"t","type":"ACTION_RESULT","payload":{"action_id":"call_9","status":"SUCCESS",
                "observation_content":"=== STDOUT ===\nx\n\n=== EXIT CODE: 0 ===","execution_ref":"call_9"}}),
        );
        let Event::ActionResult {
            iteration,
            tool_name,
            status,
            exit_code,
            execution_ref,
            ..
        } = result
        else {
            panic!("not a result");
        };
        assert_eq!(
            (iteration, tool_name.as_str(), status),
            (1, "echo", ActionStatus::Success)
        );
        assert_eq!(exit_code, Some(0));
        assert_eq!(execution_ref.as_deref(), Some("call_9"));
        let end = convert(
            &mut c,
            json!({"seq":5,"timestamp":"t","type":"RUN_END","payload":{"status":"COMPLETED"}}),
        );
        assert_eq!(
            end,
            Event::EngineEnd {
                run_id: "r1".into(),
                status: RunStatus::Completed,
                final_iteration: 1,
                result: None,
                error: None
            }
        );
    }

    #[test]
    fn system_messages_split_by_level() {
        let mut c = LegacyConverter::default();
        let error = convert(
            &mut c,
            json!({"seq":1,"type":"SYSTEM_MESSAGE","payload":{"level":"ERROR","content":"Tool not found: x"}}),
        );
        assert!(
            matches!(error, Event::Error { ref error_message, .. } if error_message == "Tool not found: x")
        );
        let warn = convert(
            &mut c,
            json!({"seq":2,"type":"SYSTEM_MESSAGE","payload":{"level":"WARN","content":"Maximum iterations (3) reached"}}),
        );
        assert_eq!(
            warn,
            Event::Warning {
                message: "Maximum iterations (3) reached".into()
            }
        );
    }

    #[test]
    fn hook_audit_converts() {
        let mut c = LegacyConverter::default();
        let hook = convert(
            &mut c,
            json!({"seq":1,"type":"HOOK_EXECUTION_AUDIT","payload":{"hook_name":"pre_llm_req","status":"FAILED","io_path_ref":"io/hooks/001_pre_llm_req/"}}),
        );
        assert_eq!(
            hook,
            Event::HookExecuted {
                hook_name: "pre_llm_req".into(),
                status: "FAILED".into(),
                reason: None,
                io_path_ref: "io/hooks/001_pre_llm_req/".into()
            }
        );
    }

    #[test]
    fn unknown_types_and_statuses_are_errors() {
        let mut c = LegacyConverter::default();
        let line = json!({"seq":1,"type":"MYSTERY","payload":{}});
        assert!(c
            .convert(line.as_object().unwrap())
            .unwrap_err()
            .contains("MYSTERY"));
        let line = json!({"seq":1,"type":"RUN_END","payload":{"status":"DONE"}});
        assert!(c
            .convert(line.as_object().unwrap())
            .unwrap_err()
            .contains("DONE"));
        let line = json!({"type":"RUN_END","payload":{}});
        assert!(c
            .convert(line.as_object().unwrap())
            .unwrap_err()
            .contains("seq"));
    }

    #[test]
    fn exit_code_marker_parsing() {
        assert_eq!(
            exit_code_from_observation("=== EXIT CODE: 127 ==="),
            Some(127)
        );
        assert_eq!(
            exit_code_from_observation("x\n=== EXIT CODE: -1 ==="),
            Some(-1)
        );
        assert_eq!(exit_code_from_observation("no marker"), None);
        assert_eq!(exit_code_from_observation("=== EXIT CODE: x ==="), None);
    }
}
