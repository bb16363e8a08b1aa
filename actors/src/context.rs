//! Context builder: turns an agent's `context.yaml` recipe plus the run's journal into the
//! chat messages sent to the model (spec §2.4.3, §2.4.7).
//!
//! Two halves:
//! - [`journal_to_messages`] is pure: journal events in, an OpenAI-valid conversation out. It
//!   is the single place that guarantees a valid history: assistant turns without text carry
//!   `content: null`, every tool call is followed by exactly one tool result (results are
//!   pulled next to their call wherever they sit in the journal; a call with no recorded
//!   result gets a synthetic "interrupted" result), and `journal.max_iterations` trims old
//!   iterations while always keeping the task (the first user message). A sensitive answer's
//!   marker found in the events is replaced by the answer: the model sees what it was told.
//! - [`build_messages`] runs the recipe: `file` and `computed_file` sources become one system
//!   message each (`# Context Block: <id>`), generators run with their timeout in the
//!   workspace. A failing source fails the run with an error naming the source id;
//!   `on_missing: skip` skips only a missing file, never a failing generator. Source files are
//!   read only from inside the agent folder or the workspace (after symlinks; relative paths
//!   are taken from the workspace), since their text is sent to the model provider.
//!
//! Must not: write the journal, or read the process environment (callers pass it).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use tokio_util::sync::CancellationToken;

use crate::agent::{expand_path_vars, ContextRecipe, ContextSource, OnMissing};
use crate::journal::{Event, JournalEvent};
use crate::llm::{ChatMessage, FunctionCall, Role, ToolCall};
use crate::redact::SecretSet;
use crate::tool::process::{run_process, CaptureSpec, ProcessSpec, Termination};

/// The observation recorded for a tool call whose result was never written (crash, kill -9).
pub const INTERRUPTED_OBSERVATION: &str =
    "Error: the run was interrupted before a result was recorded for this tool call. \
     The tool may or may not have run; check its effects before retrying.";

/// What a source needs from the run besides the recipe.
#[derive(Debug, Clone)]
pub struct ContextInputs<'a> {
    pub agent_home: &'a Path,
    pub work_dir: &'a Path,
    pub run_id: &'a str,
    pub run_dir: &'a Path,
    pub journal_path: &'a Path,
    /// Complete environment for generator processes (already scrubbed of secrets).
    pub child_env: &'a BTreeMap<String, String>,
}

/// A source that could not be built. Fatal for the run.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("context source '{id}': file not found: {path} (set `on_missing: skip` in context.yaml to make it optional)")]
    FileMissing { id: String, path: String },
    #[error("context source '{id}': cannot read {path}: {message}")]
    FileUnreadable {
        id: String,
        path: String,
        message: String,
    },
    #[error("context source '{id}': generator {command:?} {reason}")]
    GeneratorFailed {
        id: String,
        command: Vec<String>,
        reason: String,
    },
    #[error("context source '{id}': generator {command:?} finished but did not create {path}")]
    GeneratorOutputMissing {
        id: String,
        command: Vec<String>,
        path: String,
    },
    #[error("context source '{id}': {path} resolves to {resolved}, outside the agent folder {agent_home} and the workspace {work_dir} (hint: keep context files in one of them; symlinks are followed)")]
    OutsideAllowedFolders {
        id: String,
        path: String,
        resolved: String,
        agent_home: String,
        work_dir: String,
    },
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
            | ContextError::OutsideAllowedFolders { id, .. } => Some(id),
            ContextError::Cancelled => None,
        }
    }
}

/// Builds the full message list for one model call, in recipe order.
pub async fn build_messages(
    recipe: &ContextRecipe,
    inputs: &ContextInputs<'_>,
    events: &[JournalEvent],
    secrets: &SecretSet,
    cancel: &CancellationToken,
) -> Result<Vec<ChatMessage>, ContextError> {
    let mut messages = Vec::new();
    let roots = SourceRoots::of(inputs);
    for source in &recipe.sources {
        match source {
            ContextSource::File {
                id,
                path,
                on_missing,
            } => {
                let path = expand_path_vars(path, inputs.agent_home, inputs.work_dir);
                if let Some(text) = read_source_file(id, &path, *on_missing, &roots)? {
                    push_block(&mut messages, id, &text);
                }
            }
            ContextSource::ComputedFile {
                id,
                command,
                timeout_ms,
                output_path,
                on_missing,
            } => {
                let text = run_generator(
                    id,
                    command,
                    *timeout_ms,
                    output_path,
                    *on_missing,
                    &roots,
                    cancel,
                )
                .await?;
                if let Some(text) = text {
                    push_block(&mut messages, id, &text);
                }
            }
            ContextSource::Journal { max_iterations, .. } => {
                messages.extend(journal_to_messages(events, *max_iterations, secrets));
            }
        }
    }
    Ok(messages)
}

fn push_block(messages: &mut Vec<ChatMessage>, id: &str, text: &str) {
    if text.trim().is_empty() {
        return;
    }
    messages.push(ChatMessage {
        role: Role::System,
        content: Some(format!("# Context Block: {id}\n\n{text}")),
        tool_calls: None,
        tool_call_id: None,
    });
}

fn read_source_file(
    id: &str,
    path: &str,
    on_missing: OnMissing,
    roots: &SourceRoots<'_>,
) -> Result<Option<String>, ContextError> {
    match roots.read(id, path)? {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match on_missing {
            OnMissing::Skip => Ok(None),
            OnMissing::Error => Err(ContextError::FileMissing {
                id: id.to_string(),
                path: path.to_string(),
            }),
        },
        Err(e) => Err(ContextError::FileUnreadable {
            id: id.to_string(),
            path: path.to_string(),
            message: e.to_string(),
        }),
    }
}

async fn run_generator(
    id: &str,
    command: &[String],
    timeout_ms: u64,
    output_path: &str,
    on_missing: OnMissing,
    roots: &SourceRoots<'_>,
    cancel: &CancellationToken,
) -> Result<Option<String>, ContextError> {
    let inputs = roots.inputs;
    let argv: Vec<String> = command
        .iter()
        .map(|a| expand_path_vars(a, inputs.agent_home, inputs.work_dir))
        .collect();
    let output_path = expand_path_vars(output_path, inputs.agent_home, inputs.work_dir);
    let mut env: Vec<(String, String)> = inputs
        .child_env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.push(("DELTA_RUN_ID".into(), inputs.run_id.to_string()));
    env.push(("DELTA_RUN_DIR".into(), path_str(inputs.run_dir)));
    env.push(("DELTA_AGENT_HOME".into(), path_str(inputs.agent_home)));
    env.push(("DELTA_CWD".into(), path_str(inputs.work_dir)));
    env.push(("JOURNAL_PATH".into(), path_str(inputs.journal_path)));
    let spec = ProcessSpec {
        argv: argv.clone(),
        stdin: None,
        cwd: inputs.work_dir.to_path_buf(),
        env,
        timeout: Duration::from_millis(timeout_ms),
        kill_grace: Duration::from_secs(2),
        capture: CaptureSpec {
            head_bytes: 2048,
            tail_bytes: 2048,
            full_output: None,
            file_cap_bytes: 0,
            ..CaptureSpec::default()
        },
        spawner: crate::tool::spawner::shared(),
    };
    let outcome = run_process(spec, cancel.clone()).await;
    let failure = match &outcome.termination {
        Termination::Exited(0) => None,
        Termination::Exited(code) => Some(format!("exited with code {code}")),
        Termination::Signaled(sig) => Some(format!("was killed by signal {sig}")),
        Termination::TimedOut => Some(format!("timed out after {timeout_ms} ms")),
        Termination::Cancelled => return Err(ContextError::Cancelled),
        Termination::SpawnFailed(reason) => Some(format!("could not start: {reason}")),
    };
    if let Some(reason) = failure {
        let stderr = outcome.stderr.text_lossy();
        let reason = if stderr.trim().is_empty() {
            reason
        } else {
            format!("{reason}; stderr: {}", stderr.trim())
        };
        return Err(ContextError::GeneratorFailed {
            id: id.to_string(),
            command: argv,
            reason,
        });
    }
    match roots.read(id, &output_path)? {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match on_missing {
            OnMissing::Skip => Ok(None),
            OnMissing::Error => Err(ContextError::GeneratorOutputMissing {
                id: id.to_string(),
                command: argv,
                path: output_path,
            }),
        },
        Err(e) => Err(ContextError::FileUnreadable {
            id: id.to_string(),
            path: output_path,
            message: e.to_string(),
        }),
    }
}

/// The run's inputs plus the two folders source files may be read from, the agent folder and
/// the workspace, with symlinks resolved once per build (as given where they cannot be).
struct SourceRoots<'a> {
    inputs: &'a ContextInputs<'a>,
    agent_home: PathBuf,
    work_dir: PathBuf,
}

impl<'a> SourceRoots<'a> {
    fn of(inputs: &'a ContextInputs<'a>) -> SourceRoots<'a> {
        let resolve = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        SourceRoots {
            inputs,
            agent_home: resolve(inputs.agent_home),
            work_dir: resolve(inputs.work_dir),
        }
    }

    /// Reads a source file that must lie inside one of the roots once symlinks are resolved;
    /// a relative path is taken from the workspace. The outer error is the confinement
    /// refusal, the inner one the ordinary read failure (missing, unreadable), which the
    /// caller maps according to `on_missing`.
    fn read(&self, id: &str, written: &str) -> Result<std::io::Result<String>, ContextError> {
        let resolved = match std::fs::canonicalize(self.work_dir.join(written)) {
            Ok(resolved) => resolved,
            Err(e) => return Ok(Err(e)),
        };
        if !resolved.starts_with(&self.agent_home) && !resolved.starts_with(&self.work_dir) {
            return Err(ContextError::OutsideAllowedFolders {
                id: id.to_string(),
                path: written.to_string(),
                resolved: path_str(&resolved),
                agent_home: path_str(&self.agent_home),
                work_dir: path_str(&self.work_dir),
            });
        }
        Ok(std::fs::read_to_string(&resolved))
    }
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Converts journal events into an OpenAI-valid conversation.
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
    let mut messages = conversation(events, max_iterations);
    if !secrets.is_empty() {
        for message in &mut messages {
            if let Some(content) = message.content.as_mut() {
                secrets.restore_string(content);
            }
            for call in message.tool_calls.iter_mut().flatten() {
                secrets.restore_string(&mut call.function.arguments);
            }
        }
    }
    messages
}

fn conversation(events: &[JournalEvent], max_iterations: Option<u32>) -> Vec<ChatMessage> {
    // Results by action id: the first recorded result wins; later duplicates are ignored.
    let mut results: HashMap<&str, &str> = HashMap::new();
    for ev in events {
        if let Event::ActionResult {
            action_id,
            observation_content,
            ..
        } = &ev.event
        {
            results
                .entry(action_id.as_str())
                .or_insert(observation_content.as_str());
        }
    }

    let start = match max_iterations {
        Some(n) if n > 0 => trimmed_start(events, n as usize),
        _ => 0,
    };

    let mut messages = Vec::new();
    if start > 0 {
        if let Some(task) = events.iter().find_map(|e| match &e.event {
            Event::UserMessage { content } => Some(content.clone()),
            _ => None,
        }) {
            messages.push(user(task));
        }
    }
    for ev in &events[start..] {
        match &ev.event {
            Event::UserMessage { content } => messages.push(user(content.clone())),
            Event::Thought {
                content,
                tool_calls,
                ..
            } => {
                let text = content.clone().filter(|c| !c.is_empty());
                if tool_calls.is_empty() {
                    messages.push(ChatMessage {
                        role: Role::Assistant,
                        content: Some(text.unwrap_or_default()),
                        tool_calls: None,
                        tool_call_id: None,
                    });
                    continue;
                }
                messages.push(ChatMessage {
                    role: Role::Assistant,
                    content: text,
                    tool_calls: Some(
                        tool_calls
                            .iter()
                            .map(|c| ToolCall {
                                id: c.id.clone(),
                                kind: "function".to_string(),
                                function: FunctionCall {
                                    name: c.name.clone(),
                                    arguments: c.arguments.clone(),
                                },
                            })
                            .collect(),
                    ),
                    tool_call_id: None,
                });
                for call in tool_calls {
                    let observation = results
                        .get(call.id.as_str())
                        .copied()
                        .unwrap_or(INTERRUPTED_OBSERVATION);
                    messages.push(ChatMessage {
                        role: Role::Tool,
                        content: Some(observation.to_string()),
                        tool_calls: None,
                        tool_call_id: Some(call.id.clone()),
                    });
                }
            }
            // Results were placed right after their call above.
            _ => {}
        }
    }
    messages
}

/// Index of the first event to keep so that only the last `n` thoughts remain.
fn trimmed_start(events: &[JournalEvent], n: usize) -> usize {
    let thought_positions: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.event, Event::Thought { .. }))
        .map(|(i, _)| i)
        .collect();
    if thought_positions.len() <= n {
        return 0;
    }
    let first_kept = thought_positions[thought_positions.len() - n];
    // Keep user messages that directly precede the first kept thought (the question it answers).
    let mut start = first_kept;
    while start > 0 && matches!(events[start - 1].event, Event::UserMessage { .. }) {
        start -= 1;
    }
    // The first user message (the task) is re-added by the caller when it falls outside.
    if events[..start]
        .iter()
        .any(|e| matches!(e.event, Event::UserMessage { .. }))
    {
        start
    } else {
        0
    }
}

fn user(content: String) -> ChatMessage {
    ChatMessage {
        role: Role::User,
        content: Some(content),
        tool_calls: None,
        tool_call_id: None,
    }
}

/// Paths of the source files a recipe reads, for diagnostics (`delta run -v`).
pub fn source_paths(recipe: &ContextRecipe, agent_home: &Path, work_dir: &Path) -> Vec<PathBuf> {
    recipe
        .sources
        .iter()
        .filter_map(|s| match s {
            ContextSource::File { path, .. } => {
                Some(PathBuf::from(expand_path_vars(path, agent_home, work_dir)))
            }
            ContextSource::ComputedFile { output_path, .. } => Some(PathBuf::from(
                expand_path_vars(output_path, agent_home, work_dir),
            )),
            ContextSource::Journal { .. } => None,
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::journal::{ActionStatus, ToolCallRecord};

    /// Builds the system blocks of a recipe of `file` sources in an agent folder and a
    /// workspace under one temp dir (`<tmp>/agent`, `<tmp>/ws`).
    async fn build_files(
        tmp: &Path,
        sources: &[(&str, OnMissing)],
    ) -> Result<Vec<ChatMessage>, ContextError> {
        let recipe = ContextRecipe {
            sources: sources
                .iter()
                .enumerate()
                .map(|(i, (path, on_missing))| ContextSource::File {
                    id: format!("s{i}"),
                    path: (*path).to_string(),
                    on_missing: *on_missing,
                })
                .collect(),
        };
        let (home, work) = (tmp.join("agent"), tmp.join("ws"));
        let env = BTreeMap::new();
        let inputs = ContextInputs {
            agent_home: &home,
            work_dir: &work,
            run_id: "r1",
            run_dir: &work,
            journal_path: &work,
            child_env: &env,
        };
        build_messages(
            &recipe,
            &inputs,
            &[],
            &SecretSet::default(),
            &CancellationToken::new(),
        )
        .await
    }

    fn confinement_fixture() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["agent", "ws", "outside"] {
            std::fs::create_dir(tmp.path().join(dir)).unwrap();
        }
        std::fs::write(tmp.path().join("agent/prompt.md"), "in agent").unwrap();
        std::fs::write(tmp.path().join("ws/DELTA.md"), "in workspace").unwrap();
        std::fs::write(tmp.path().join("outside/secret.txt"), "secret").unwrap();
        tmp
    }

    #[tokio::test]
    async fn file_sources_inside_the_agent_folder_or_workspace_are_read() {
        let tmp = confinement_fixture();
        let messages = build_files(
            tmp.path(),
            &[
                ("${AGENT_HOME}/prompt.md", OnMissing::Error),
                ("DELTA.md", OnMissing::Error),
                ("${CWD}/missing.md", OnMissing::Skip),
            ],
        )
        .await
        .unwrap();
        let texts: Vec<String> = messages
            .iter()
            .map(|m| m.content.clone().unwrap_or_default())
            .collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(texts[0].ends_with("in agent"), "{texts:?}");
        assert!(
            texts[1].ends_with("in workspace"),
            "relative = workspace: {texts:?}"
        );
    }

    #[tokio::test]
    async fn file_sources_escaping_both_folders_are_refused_naming_the_source() {
        let tmp = confinement_fixture();
        std::os::unix::fs::symlink(
            tmp.path().join("outside/secret.txt"),
            tmp.path().join("ws/link.md"),
        )
        .unwrap();
        let absolute = tmp.path().join("outside/secret.txt");
        for path in [
            "${AGENT_HOME}/../outside/secret.txt",
            "../outside/secret.txt",
            &absolute.to_string_lossy(),
            "${CWD}/link.md",
        ] {
            let err = build_files(tmp.path(), &[(path, OnMissing::Skip)])
                .await
                .unwrap_err();
            assert!(
                matches!(err, ContextError::OutsideAllowedFolders { .. }),
                "{path}: {err}"
            );
            let text = err.to_string();
            assert!(text.contains("context source 's0'"), "{text}");
            assert!(text.contains("outside the agent folder"), "{text}");
            assert!(text.contains("hint:"), "{text}");
        }
    }

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
}
