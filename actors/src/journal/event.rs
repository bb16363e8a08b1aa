//! Journal event types and their serde shape. One [`JournalEvent`] is one line:
//! `{"seq":N,"timestamp":"<RFC3339 millis UTC>","type":"<TYPE>",…fields}` (flat, no
//! `payload` wrapper — lines with a `payload` are the original engine's, see
//! [`super::legacy`]). `None` fields are left out of the line to keep it short.
//!
//! This file only describes data; it does not read or write files.

use serde::{Deserialize, Serialize};

use crate::llm::ContextWindow;
use crate::protocol::RunStatus;

/// What a sensitive human answer is replaced with in the journal.
pub const REDACTED: &str = "[REDACTED]";

/// One journal line: sequence number, time, and the event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEvent {
    /// 1-based, strictly increasing within the file (a continued run goes on counting).
    pub seq: u64,
    /// When the event was appended (UTC, RFC 3339 with milliseconds).
    pub timestamp: String,
    /// The event's type and fields, flattened into the same JSON object.
    #[serde(flatten)]
    pub event: Event,
}

/// A tool call as the model sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The model's id for the call (an `ACTION_REQUEST`/`ACTION_RESULT` pair carries it as
    /// `action_id`).
    pub id: String,
    /// The tool's name as the model wrote it.
    pub name: String,
    /// The raw JSON text of the arguments, exactly as the model produced it.
    pub arguments: String,
}

/// What a model call's request held, as the context budget measures it (on its THOUGHT, and
/// on a CONTEXT_COMPACTED for a request the server refused): the next request's estimate is
/// calibrated from it, so a continued run decides as an uninterrupted one would.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptSize {
    /// The request's size as delta measures it: its messages' text and its tool list.
    pub bytes: u64,
    /// delta's estimate of its prompt tokens.
    pub estimate: u64,
    /// The provider's count (`usage.prompt_tokens`, or the refusal's words), when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// A tool result cut head and tail for the model (the full text stays in io/).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutResult {
    /// The call whose result is cut.
    pub action_id: String,
    /// Bytes of it the model still sees (half from its start, half from its end).
    pub kept_bytes: u64,
}

/// Outcome of one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ActionStatus {
    /// The tool exited by itself with code 0 (or a `pre_tool_execution` hook answered in
    /// its place, or ask_human got its answer).
    Success,
    /// The tool ran and failed: a non-zero exit, a signal, its timeout.
    Failed,
    /// The call could not run: arguments the tool refused, an unknown tool, a run stopped
    /// before it started, or a crash that left it without a result.
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
///
/// Paths in `*_ref` fields are relative to the run folder (`io/invocations/...`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Event {
    /// The run's first event.
    EngineStart {
        /// The run's id.
        run_id: String,
        /// The agent's folder.
        agent_home: String,
        /// The run's workspace.
        work_dir: String,
        /// `name` from the agent's `agent.yaml`.
        agent_name: String,
        /// The task the run was started with.
        task: String,
    },
    /// A user message the model sees: the task at the start, a `delta continue` message
    /// later.
    UserMessage {
        /// The message text.
        content: String,
    },
    /// One model reply: its text and the tool calls it asked for.
    Thought {
        /// The iteration the reply belongs to, 1-based.
        iteration: u32,
        /// The reply's text; `None` for a reply with tool calls only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// The calls asked for, in the model's order; none for a final answer.
        #[serde(default)]
        tool_calls: Vec<ToolCallRecord>,
        /// The record of the model call in `io/invocations/`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        llm_invocation_ref: Option<String>,
        /// The provider's finish reason (`stop`, `tool_calls`, `length` for a reply cut at
        /// the output limit...).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// The tokens of the model call (its failed attempts not included): the provider's
        /// count, or an estimate marked `estimated` when it sent none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<crate::protocol::TokenUsage>,
        /// What the request held (written when the run knows its context budget).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<PromptSize>,
    },
    /// A tool call about to be carried out (after argument checks and hooks decided it).
    ActionRequest {
        /// The iteration whose reply asked for it.
        iteration: u32,
        /// The model's id for the call.
        action_id: String,
        /// The tool's name.
        tool_name: String,
        /// The arguments as parsed JSON (an object; the raw text is in the THOUGHT).
        tool_args: serde_json::Value,
        /// What will run: the command line for a tool, the question for ask_human, empty
        /// for a call that does not run.
        resolved_command: String,
    },
    /// A tool call's result: what the model sees next.
    ActionResult {
        /// The iteration whose reply asked for it.
        iteration: u32,
        /// The model's id for the call, pairing it with its ACTION_REQUEST.
        action_id: String,
        /// The tool's name.
        tool_name: String,
        /// How the call ended.
        status: ActionStatus,
        /// The observation the model gets: output (head and tail when long) and a status
        /// line, or the error text.
        observation_content: String,
        /// The process's exit code, when it exited by itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// The record with the full output in `io/tool_executions/`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        execution_ref: Option<String>,
    },
    /// The run failed; ENGINE_END follows.
    Error {
        /// The error kind's on-disk spelling (`llm_error`, `max_iterations`...; see
        /// [`crate::RunErrorKind`]).
        error_type: String,
        /// The message, as in the RunResult.
        error_message: String,
        /// More detail when there is some (a string, or any JSON in original-engine files).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_details: Option<serde_json::Value>,
    },
    /// A start or continuation of the run ended; a continuation appends after it.
    EngineEnd {
        /// The run's id.
        run_id: String,
        /// The status the run ended with.
        status: RunStatus,
        /// The last iteration number.
        final_iteration: u32,
        /// The final answer, when COMPLETED.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        /// The error message, when the run failed or was interrupted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// An ask_human question put to a person (on a terminal, or left pending for
    /// `delta continue`).
    HumanInputRequest {
        /// The iteration whose reply asked it.
        iteration: u32,
        /// The ask_human call's id.
        action_id: String,
        /// The question.
        prompt: String,
        /// `text`, `password` or `confirmation`.
        input_type: String,
        /// The answer is secret and is redacted everywhere it is written.
        sensitive: bool,
    },
    /// The answer to an ask_human question.
    HumanInputReceived {
        /// The iteration of the question.
        iteration: u32,
        /// The ask_human call's id.
        action_id: String,
        /// The answer, or [`REDACTED`] when the question was sensitive.
        response: String,
        /// `response` is [`REDACTED`] (the real answer is under the run's `secrets/`).
        redacted: bool,
    },
    /// A lifecycle hook ran (or was skipped); hooks never stop a run.
    HookExecuted {
        /// The hook (`pre_llm_request`, `post_tool_execution`, `on_run_end`...).
        hook_name: String,
        /// `SUCCESS`, `FAILED`, `TIMED_OUT`, `CANCELLED` or `SKIPPED`.
        status: String,
        /// What went wrong, for every status but SUCCESS.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The hook's record in `io/hooks/`.
        io_path_ref: String,
    },
    /// Something the engine noticed that did not stop the run (e.g. a torn tail repaired).
    Warning {
        /// What happened and what was done about it.
        message: String,
    },
    /// A RUNNING → INTERRUPTED transition (signal, janitor).
    Interrupted {
        /// Why: the cancel's reason, or why the janitor found the owner gone.
        reason: String,
    },
    /// The conversation was compacted to fit the context budget. From this event on, every
    /// reader (the next request, `delta continue`, `delta serve`) shows the conversation with
    /// these changes; the events it changes stay in the journal as they were.
    ContextCompacted {
        /// The iteration whose request it was made for.
        iteration: u32,
        /// What was done: `mask`, `summarize` or `mask_then_summarize`.
        strategy: String,
        /// Why: `budget` (the request did not fit) or `refusal` (the server refused it as
        /// longer than the model's window).
        reason: String,
        /// Tool results (by call id) shown from now on as a one-line stub naming the tool,
        /// its size and its io/ record.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        masked: Vec<String>,
        /// Tool results cut head and tail for the model.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        cut: Vec<CutResult>,
        /// Events up to this seq, the task excepted, are left out from now on (replaced by
        /// `summary`, or by a note saying so).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped_through: Option<u64>,
        /// The summary a model call wrote of what was left out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
        /// The request's estimated prompt tokens before the compaction.
        tokens_before: u64,
        /// And after.
        tokens_after: u64,
        /// The budget it was compacted against (tokens of one request).
        budget: u64,
        /// The model's context window and where it came from, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<ContextWindow>,
        /// The request the server refused (reason `refusal`): a calibration point.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<PromptSize>,
    },
    /// A cached `computed_file` source was looked up (context.yaml `cache:`): its generator
    /// did not run (`hit`) or ran because a watched file changed.
    ContextCache {
        /// The source's id.
        source: String,
        /// The stored key matched: the generator's last output was used.
        hit: bool,
        /// The key's first 16 hex digits (SHA-256 of the command and the watched files).
        key: String,
    },
}

/// Every `type` tag [`Event::type_name`] writes. A line whose type is neither one of these
/// nor one of the original engine's is skipped on reading (see `format`).
pub(crate) const EVENT_TYPES: [&str; 14] = [
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
    "CONTEXT_COMPACTED",
    "CONTEXT_CACHE",
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
            Event::ContextCompacted { .. } => "CONTEXT_COMPACTED",
            Event::ContextCache { .. } => "CONTEXT_CACHE",
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
            usage: None,
            prompt: None,
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
                usage: None,
                prompt: Some(PromptSize {
                    bytes: 4000,
                    estimate: 1000,
                    tokens: Some(1010),
                }),
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
            Event::ContextCompacted {
                iteration: 9,
                strategy: "mask".into(),
                reason: "budget".into(),
                masked: vec!["c1".into()],
                cut: vec![CutResult {
                    action_id: "c2".into(),
                    kept_bytes: 2048,
                }],
                dropped_through: Some(12),
                summary: Some("s".into()),
                tokens_before: 3900,
                tokens_after: 1800,
                budget: 3773,
                window: Some(ContextWindow::new(4096, "refusal", None)),
                refused: Some(PromptSize {
                    bytes: 16_000,
                    estimate: 3700,
                    tokens: Some(4096),
                }),
            },
            Event::ContextCache {
                source: "summary".into(),
                hit: true,
                key: "0123456789abcdef".into(),
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
                finish_reason: None,
                usage: None,
                prompt: None,
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
