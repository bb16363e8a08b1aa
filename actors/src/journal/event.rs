//! Journal event types and their serde shape. One [`JournalEvent`] is one line:
//! `{"seq":N,"timestamp":"<RFC3339 millis UTC>","type":"<TYPE>",…fields}` (flat, no
//! `payload` wrapper — lines with a `payload` are the original engine's, see
//! [`super::legacy`]). `None` fields are left out of the line to keep it short.
//!
//! This file only describes data; it does not read or write files.

use serde::{Deserialize, Serialize};

use crate::protocol::RunStatus;

/// What a sensitive human answer is replaced with in the journal.
pub const REDACTED: &str = "[REDACTED]";

/// One journal line: sequence number, time, and the event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEvent {
    pub seq: u64,
    pub timestamp: String,
    #[serde(flatten)]
    pub event: Event,
}

/// A tool call as the model sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub id: String,
    pub name: String,
    /// The raw JSON text of the arguments, exactly as the model produced it.
    pub arguments: String,
}

/// Outcome of one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ActionStatus {
    Success,
    Failed,
    Error,
}

impl ActionStatus {
    /// The on-disk spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Success => "SUCCESS",
            ActionStatus::Failed => "FAILED",
            ActionStatus::Error => "ERROR",
        }
    }

    /// Parses the on-disk spelling (case-insensitive).
    pub fn parse(s: &str) -> Option<ActionStatus> {
        match s.to_ascii_uppercase().as_str() {
            "SUCCESS" => Some(ActionStatus::Success),
            "FAILED" => Some(ActionStatus::Failed),
            "ERROR" => Some(ActionStatus::Error),
            _ => None,
        }
    }
}

/// Everything a run records. The `type` tag is the SCREAMING_SNAKE_CASE variant name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Event {
    EngineStart {
        run_id: String,
        agent_home: String,
        work_dir: String,
        agent_name: String,
        task: String,
    },
    UserMessage {
        content: String,
    },
    Thought {
        iteration: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default)]
        tool_calls: Vec<ToolCallRecord>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        llm_invocation_ref: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
    },
    ActionRequest {
        iteration: u32,
        action_id: String,
        tool_name: String,
        tool_args: serde_json::Value,
        resolved_command: String,
    },
    ActionResult {
        iteration: u32,
        action_id: String,
        tool_name: String,
        status: ActionStatus,
        observation_content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        execution_ref: Option<String>,
    },
    Error {
        error_type: String,
        error_message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_details: Option<serde_json::Value>,
    },
    EngineEnd {
        run_id: String,
        status: RunStatus,
        final_iteration: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    HumanInputRequest {
        iteration: u32,
        action_id: String,
        prompt: String,
        input_type: String,
        sensitive: bool,
    },
    HumanInputReceived {
        iteration: u32,
        action_id: String,
        /// The answer, or [`REDACTED`] when the question was sensitive.
        response: String,
        redacted: bool,
    },
    HookExecuted {
        hook_name: String,
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        io_path_ref: String,
    },
    /// Something the engine noticed that did not stop the run (e.g. a torn tail repaired).
    Warning {
        message: String,
    },
    /// A RUNNING → INTERRUPTED transition (signal, janitor).
    Interrupted {
        reason: String,
    },
}

/// Every `type` tag [`Event::type_name`] writes. A line whose type is neither one of these
/// nor one of the original engine's is skipped on reading (see `format`).
pub(crate) const EVENT_TYPES: [&str; 12] = [
    "ENGINE_START",
    "USER_MESSAGE",
    "THOUGHT",
    "ACTION_REQUEST",
    "ACTION_RESULT",
    "ERROR",
    "ENGINE_END",
    "HUMAN_INPUT_REQUEST",
    "HUMAN_INPUT_RECEIVED",
    "HOOK_EXECUTED",
    "WARNING",
    "INTERRUPTED",
];

impl Event {
    /// The on-disk `type` tag, e.g. `ACTION_RESULT`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::EngineStart { .. } => "ENGINE_START",
            Event::UserMessage { .. } => "USER_MESSAGE",
            Event::Thought { .. } => "THOUGHT",
            Event::ActionRequest { .. } => "ACTION_REQUEST",
            Event::ActionResult { .. } => "ACTION_RESULT",
            Event::Error { .. } => "ERROR",
            Event::EngineEnd { .. } => "ENGINE_END",
            Event::HumanInputRequest { .. } => "HUMAN_INPUT_REQUEST",
            Event::HumanInputReceived { .. } => "HUMAN_INPUT_RECEIVED",
            Event::HookExecuted { .. } => "HOOK_EXECUTED",
            Event::Warning { .. } => "WARNING",
            Event::Interrupted { .. } => "INTERRUPTED",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(event: Event) -> String {
        serde_json::to_string(&JournalEvent {
            seq: 3,
            timestamp: "2026-11-22T01:42:34.123Z".into(),
            event,
        })
        .unwrap()
    }

    #[test]
    fn lines_are_flat_with_seq_timestamp_type_first() {
        let text = line(Event::Thought {
            iteration: 2,
            content: None,
            tool_calls: vec![ToolCallRecord {
                id: "call_1".into(),
                name: "ls".into(),
                arguments: "{\"dir\":\".\"}".into(),
            }],
            llm_invocation_ref: None,
            finish_reason: Some("tool_calls".into()),
        });
        assert_eq!(
            text,
            r#"{"seq":3,"timestamp":"2026-11-22T01:42:34.123Z","type":"THOUGHT","iteration":2,"tool_calls":[{"id":"call_1","name":"ls","arguments":"{\"dir\":\".\"}"}],"finish_reason":"tool_calls"}"#
        );
    }

    #[test]
    fn every_variant_round_trips_and_tags_match_type_name() {
        let events = vec![
            Event::EngineStart {
                run_id: "r".into(),
                agent_home: "/a".into(),
                work_dir: "/w".into(),
                agent_name: "a".into(),
                task: "t".into(),
            },
            Event::UserMessage {
                content: "hi".into(),
            },
            Event::Thought {
                iteration: 1,
                content: Some("x".into()),
                tool_calls: vec![],
                llm_invocation_ref: Some("io/invocations/x.json".into()),
                finish_reason: None,
            },
            Event::ActionRequest {
                iteration: 1,
                action_id: "c1".into(),
                tool_name: "ls".into(),
                tool_args: json!({"d": "."}),
                resolved_command: "ls .".into(),
            },
            Event::ActionResult {
                iteration: 1,
                action_id: "c1".into(),
                tool_name: "ls".into(),
                status: ActionStatus::Failed,
                observation_content: "o".into(),
                exit_code: Some(2),
                execution_ref: None,
            },
            Event::Error {
                error_type: "LLM".into(),
                error_message: "m".into(),
                error_details: Some(json!({"status": 500})),
            },
            Event::EngineEnd {
                run_id: "r".into(),
                status: RunStatus::WaitingForInput,
                final_iteration: 4,
                result: None,
                error: Some("e".into()),
            },
            Event::HumanInputRequest {
                iteration: 2,
                action_id: "c2".into(),
                prompt: "p".into(),
                input_type: "password".into(),
                sensitive: true,
            },
            Event::HumanInputReceived {
                iteration: 2,
                action_id: "c2".into(),
                response: REDACTED.into(),
                redacted: true,
            },
            Event::HookExecuted {
                hook_name: "pre_llm_req".into(),
                status: "FAILED".into(),
                reason: Some("exit 3".into()),
                io_path_ref: "io/hooks/x.json".into(),
            },
            Event::Warning {
                message: "w".into(),
            },
            Event::Interrupted {
                reason: "SIGINT".into(),
            },
        ];
        for event in events {
            let text = line(event.clone());
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(value["type"], event.type_name(), "{text}");
            let back: JournalEvent = serde_json::from_str(&text).unwrap();
            assert_eq!(back.event, event, "{text}");
            assert_eq!(back.seq, 3);
        }
    }

    #[test]
    fn missing_optional_fields_read_as_none() {
        let back: JournalEvent =
            serde_json::from_str(r#"{"seq":1,"timestamp":"t","type":"THOUGHT","iteration":1}"#)
                .unwrap();
        assert_eq!(
            back.event,
            Event::Thought {
                iteration: 1,
                content: None,
                tool_calls: vec![],
                llm_invocation_ref: None,
                finish_reason: None
            }
        );
    }

    #[test]
    fn action_status_spelling() {
        assert_eq!(
            serde_json::to_string(&ActionStatus::Success).unwrap(),
            "\"SUCCESS\""
        );
        assert_eq!(ActionStatus::parse("failed"), Some(ActionStatus::Failed));
        assert_eq!(ActionStatus::parse("nope"), None);
        assert_eq!(ActionStatus::Error.as_str(), "ERROR");
    }
}
