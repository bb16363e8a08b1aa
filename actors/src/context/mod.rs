//! Context builder: turns an agent's `context.yaml` recipe plus the run's journal into the
//! chat messages sent to the model (spec §2.4.3, §2.4.7).
//!
//! Two halves:
//! - [`journal_to_messages`] (here) is pure: journal events in, an OpenAI-valid conversation
//!   out. It is the single place that guarantees a valid history: assistant turns without
//!   text carry `content: null`, every tool call is followed by exactly one tool result
//!   (results are pulled next to their call wherever they sit in the journal; a call with no
//!   recorded result gets a synthetic "interrupted" result), a tool call id is sent once even
//!   if its THOUGHT was journaled twice, and `journal.max_iterations` trims old iterations
//!   while always keeping the task (the first user message). A sensitive answer's marker found
//!   in the events is replaced by the answer: the model sees what it was told.
//! - [`build_messages`] (`sources`) runs the recipe: file sources and generators become
//!   system blocks. Source files are read only from inside the agent folder or the workspace
//!   (after symlinks; relative paths are taken from the workspace), since their text is sent
//!   to the model provider, and only when they are regular files, off the actor's thread
//!   (`source_file`).
//!
//! Must not: write the journal, or read the process environment (callers pass it).

pub mod budget;
mod builder;
mod cache;
pub(crate) mod compact;
mod generator;
mod source_file;
mod sources;
mod summary;
pub(crate) mod view;

use std::collections::BTreeMap;
use std::path::Path;

pub use tokio_util::sync::CancellationToken;

pub use builder::{Budgeting, Built, ContextBuilder};
pub use cache::CacheOutcome;
pub use source_file::ContextFolders;
pub use sources::{build_messages, build_sources, source_paths, task_of, SourceParts};

use crate::journal::JournalEvent;
use crate::llm::ChatMessage;
use crate::redact::SecretSet;

/// The observation recorded for a tool call whose result was never written (crash, kill -9).
pub const INTERRUPTED_OBSERVATION: &str =
    "Error: the run was interrupted before a result was recorded for this tool call. \
     The tool may or may not have run; check its effects before retrying.";

/// What a source needs from the run besides the recipe.
#[derive(Debug, Clone)]
pub struct ContextInputs<'a> {
    /// The agent's folder: `${AGENT_HOME}` in source paths, one of the two folders sources
    /// may be read from, and `DELTA_AGENT_HOME` for generators.
    pub agent_home: &'a Path,
    /// The run's workspace: `${CWD}` in source paths, the base of relative paths, the other
    /// readable folder, and the generators' working directory (`DELTA_CWD`).
    pub work_dir: &'a Path,
    /// The run's id (`DELTA_RUN_ID` for generators).
    pub run_id: &'a str,
    /// The run's folder (`DELTA_RUN_DIR` for generators).
    pub run_dir: &'a Path,
    /// The run's journal (`JOURNAL_PATH` for generators).
    pub journal_path: &'a Path,
    /// Complete environment for generator processes (already scrubbed of secrets).
    pub child_env: &'a BTreeMap<String, String>,
    /// `agent_home` and `work_dir` with symlinks resolved, kept from one build to the next
    /// (a run keeps one for its whole life; a fresh default resolves them again).
    pub folders: &'a ContextFolders,
}

/// A source that could not be built. Fatal for the run.
///
/// `id` is always the source's `id` in context.yaml; paths are as resolved (variables
/// expanded).
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// A `file` source (or a generator's output) does not exist and `on_missing` is not
    /// `skip`.
    #[error("context source '{id}': file not found: {path} (set `on_missing: skip` in context.yaml to make it optional)")]
    FileMissing {
        /// The source's id.
        id: String,
        /// The file looked for.
        path: String,
    },
    /// The file exists but could not be read (permissions, not UTF-8, an I/O error).
    #[error("context source '{id}': cannot read {path}: {message}")]
    FileUnreadable {
        /// The source's id.
        id: String,
        /// The file.
        path: String,
        /// The system's or decoder's complaint.
        message: String,
    },
    /// A `computed_file` generator exited non-zero, was killed, timed out or could not
    /// start.
    #[error("context source '{id}': generator {command:?} {reason}")]
    GeneratorFailed {
        /// The source's id.
        id: String,
        /// The generator's argv, variables expanded.
        command: Vec<String>,
        /// How it ended (`exited with code 2`, `hit its timeout: killed after 30000 ms`...), with its
        /// stderr when it wrote any.
        reason: String,
    },
    /// A generator succeeded but its `output_path` is not there.
    #[error("context source '{id}': generator output file not found: {path} (generator {command:?} finished without creating it)")]
    GeneratorOutputMissing {
        /// The source's id.
        id: String,
        /// The generator's argv.
        command: Vec<String>,
        /// The output file expected.
        path: String,
    },
    /// The file resolves (after symlinks) outside both the agent folder and the workspace:
    /// its text would go to the model provider, so it is refused.
    #[error("context source '{id}': {path} resolves to {resolved}, outside the agent folder {agent_home} and the workspace {work_dir} (hint: keep context files in one of them; symlinks are followed)")]
    OutsideAllowedFolders {
        /// The source's id.
        id: String,
        /// The path as context.yaml gives it (variables expanded).
        path: String,
        /// Where it really is.
        resolved: String,
        /// The agent folder.
        agent_home: String,
        /// The workspace.
        work_dir: String,
    },
    /// The path is a FIFO, device, socket or folder: reading it could block the run.
    #[error("context source '{id}': {path} is {kind}, not a regular file (hint: context sources are read whole at every iteration, so a pipe, device or socket could block the run forever; write the text to a regular file, or produce it with a `computed_file` generator)")]
    NotRegularFile {
        /// The source's id.
        id: String,
        /// The path.
        path: String,
        /// What it is instead (`a FIFO`, `a directory`...).
        kind: String,
    },
    /// The file (or a generator's output) is larger than the source's `max_bytes`.
    #[error(
        "context source '{id}': {path} is larger than {limit} bytes, the most this source \
         reads (hint: raise `max_bytes` of source '{id}' in context.yaml, up to {}, or make \
         the file smaller)",
        crate::agent::MAX_CONFIGURABLE_BYTES
    )]
    SourceTooLarge {
        /// The source's id.
        id: String,
        /// The file.
        path: String,
        /// The source's `max_bytes`.
        limit: u64,
    },
    /// The `file` and `computed_file` sources together are larger than the recipe's
    /// top-level `max_bytes`.
    #[error(
        "context source '{id}': with it, the context's file sources come to more than \
         {limit} bytes, the most one context reads (hint: raise the top-level `max_bytes` in \
         context.yaml, up to {}, or make the sources smaller)",
        crate::agent::MAX_CONFIGURABLE_BYTES
    )]
    ContextTooLarge {
        /// The source that went over.
        id: String,
        /// The recipe's `max_bytes`.
        limit: u64,
    },
    /// A source longer than its `max_tokens`, with `on_overflow: fail`.
    #[error("context source '{id}': {path} is about {tokens} tokens, more than its `max_tokens: {limit}` (hint: raise `max_tokens` of source '{id}' in context.yaml, make the text shorter, or set `on_overflow: cut` to keep its head and tail)")]
    SourceOverTokens {
        /// The source's id.
        id: String,
        /// The file.
        path: String,
        /// Its size in tokens (four bytes each).
        tokens: u64,
        /// Its `max_tokens`.
        limit: u64,
    },
    /// The files of a generator's `cache.invalidate_on` are too many or too large to hash.
    #[error("context source '{id}': the files `cache.invalidate_on` matches are too many to hash ({what}) (hint: narrow the globs in context.yaml to the files the generator reads)")]
    CacheTooLarge {
        /// The source's id.
        id: String,
        /// What was over the limit.
        what: String,
    },
    /// The run was stopped while the context was built (not a failure of the source).
    #[error("context build cancelled")]
    Cancelled,
}

impl ContextError {
    /// The id of the source that failed, for the run's error record.
    pub fn source_id(&self) -> Option<&str> {
        match self {
            ContextError::FileMissing { id, .. }
            | ContextError::FileUnreadable { id, .. }
            | ContextError::GeneratorFailed { id, .. }
            | ContextError::GeneratorOutputMissing { id, .. }
            | ContextError::OutsideAllowedFolders { id, .. }
            | ContextError::NotRegularFile { id, .. }
            | ContextError::SourceTooLarge { id, .. }
            | ContextError::ContextTooLarge { id, .. }
            | ContextError::SourceOverTokens { id, .. }
            | ContextError::CacheTooLarge { id, .. } => Some(id),
            ContextError::Cancelled => None,
        }
    }
}

/// A path as text, for messages.
pub(crate) fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Converts journal events into an OpenAI-valid conversation, with every compaction the
/// journal records applied (see the `view` module).
///
/// `max_iterations: Some(n)` keeps the last `n` assistant turns (and everything after the first
/// of them) plus the first user message, which is the task.
///
/// `secrets` holds the run's sensitive answers: the journal holds their markers, and the real
/// answers are put back here, into the request alone (events read through
/// `Journal::open_with_secrets` already have them; this covers any marker left).
pub fn journal_to_messages(
    events: &[JournalEvent],
    max_iterations: Option<u32>,
    secrets: &SecretSet,
) -> Vec<ChatMessage> {
    view::conversation_view(events, max_iterations, secrets)
        .messages
        .into_vec()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::journal::{ActionStatus, Event, ToolCallRecord};
    use crate::llm::Role;

    fn ev(seq: u64, event: Event) -> JournalEvent {
        JournalEvent {
            seq,
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            event,
        }
    }

    fn thought(seq: u64, text: Option<&str>, calls: &[&str]) -> JournalEvent {
        ev(
            seq,
            Event::Thought {
                iteration: seq as u32,
                content: text.map(str::to_string),
                tool_calls: calls
                    .iter()
                    .map(|id| ToolCallRecord {
                        id: id.to_string(),
                        name: "t".into(),
                        arguments: "{}".into(),
                    })
                    .collect(),
                llm_invocation_ref: None,
                finish_reason: None,
                usage: None,
                prompt: None,
            },
        )
    }

    fn result(seq: u64, id: &str, text: &str) -> JournalEvent {
        ev(
            seq,
            Event::ActionResult {
                iteration: 1,
                action_id: id.into(),
                tool_name: "t".into(),
                status: ActionStatus::Success,
                observation_content: text.into(),
                exit_code: Some(0),
                execution_ref: None,
            },
        )
    }

    fn task(seq: u64, text: &str) -> JournalEvent {
        ev(
            seq,
            Event::UserMessage {
                content: text.into(),
            },
        )
    }

    #[test]
    fn assistant_turn_without_text_has_null_content() {
        let events = vec![
            task(1, "go"),
            thought(2, None, &["a"]),
            result(3, "a", "ok"),
        ];
        let msgs = journal_to_messages(&events, None, &SecretSet::default());
        assert_eq!(msgs[1].content, None);
        let json = serde_json::to_value(&msgs[1]).unwrap();
        assert_eq!(json["content"], serde_json::Value::Null);
    }

    #[test]
    fn unanswered_call_gets_synthetic_result_and_duplicates_are_dropped() {
        let events = vec![
            task(1, "go"),
            thought(2, Some("x"), &["a", "b"]),
            result(3, "a", "first"),
            result(4, "a", "duplicate"),
        ];
        let msgs = journal_to_messages(&events, None, &SecretSet::default());
        let tools: Vec<_> = msgs.iter().filter(|m| m.role == Role::Tool).collect();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0].content.as_deref(), Some("first"));
        assert_eq!(tools[1].content.as_deref(), Some(INTERRUPTED_OBSERVATION));
    }

    #[test]
    fn user_message_recorded_between_call_and_result_goes_after_the_results() {
        let events = vec![
            task(1, "go"),
            thought(2, None, &["a"]),
            task(3, "extra"),
            result(4, "a", "answer"),
        ];
        let msgs = journal_to_messages(&events, None, &SecretSet::default());
        let roles: Vec<_> = msgs.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![Role::User, Role::Assistant, Role::Tool, Role::User]
        );
    }

    #[test]
    fn max_iterations_keeps_the_task_and_last_n_turns() {
        let mut events = vec![task(1, "the task")];
        for i in 0..5u64 {
            let id = format!("c{i}");
            events.push(thought(10 + i * 2, None, &[id.as_str()]));
            events.push(result(11 + i * 2, &id, &format!("r{i}")));
        }
        let msgs = journal_to_messages(&events, Some(2), &SecretSet::default());
        assert_eq!(msgs[0].content.as_deref(), Some("the task"));
        let assistants = msgs.iter().filter(|m| m.role == Role::Assistant).count();
        assert_eq!(assistants, 2);
        assert_eq!(msgs.last().unwrap().content.as_deref(), Some("r4"));
    }

    /// Regression: a THOUGHT journaled twice (under two seqs) sent its tool calls twice,
    /// and providers answer such a history with HTTP 400.
    #[test]
    fn a_repeated_thought_does_not_send_its_tool_calls_twice() {
        let events = vec![
            task(1, "go"),
            thought(2, Some("x"), &["a", "b"]),
            result(3, "a", "ra"),
            result(4, "b", "rb"),
            thought(5, Some("x"), &["a", "b"]),
            result(6, "a", "ra"),
            thought(7, None, &["b", "c"]),
            result(8, "c", "rc"),
        ];
        let msgs = journal_to_messages(&events, None, &SecretSet::default());
        let ids: Vec<&str> = msgs
            .iter()
            .filter_map(|m| m.tool_calls.as_ref())
            .flatten()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
        crate::llm::validate_history(&msgs).unwrap();
    }

    /// An empty answer, then the user's next message (`delta continue -m`): the empty turn
    /// is not sent back, since vLLM and Mistral refuse an assistant turn with neither text
    /// nor tool calls.
    #[test]
    fn an_empty_answer_is_not_sent_back() {
        let events = vec![task(1, "go"), thought(2, Some(""), &[]), task(3, "again")];
        let msgs = journal_to_messages(&events, None, &SecretSet::default());
        let roles: Vec<_> = msgs.iter().map(|m| m.role).collect();
        assert_eq!(roles, vec![Role::User, Role::User]);
        crate::llm::validate_history(&msgs).unwrap();
    }
}
