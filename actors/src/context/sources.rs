//! Running a `context.yaml` recipe (spec §2.4.3, §2.4.8): `file`, `computed_file` and
//! `pipeline` sources become one system message each (`# Context Block: <id>`), generators run
//! with their timeout in the workspace (a cached one only when a watched file changed), and
//! the `journal` source's place is kept for the conversation. A source whose `condition` does
//! not hold is left out; one longer than its `max_tokens` is cut head and tail, with a line
//! naming the file and what was cut (or fails the run with `on_overflow: fail`). A failing
//! source fails the run with an error naming the source id; `on_missing: skip` skips only a
//! missing file, never a failing generator.
//!
//! Must not: read a file itself (`source_file` decides where a read may block), or run a
//! process itself (`generator`).

use std::path::{Path, PathBuf};

use super::budget::SOURCE_BYTES_PER_TOKEN;
use super::cache::CacheOutcome;
use super::generator::{computed_file, pipeline, Generator};
use super::source_file::{SourceFile, SourceReader};
use super::view::conversation_view;
use super::{CancellationToken, ContextError, ContextInputs};
use crate::agent::{
    expand_path_vars, ContextRecipe, ContextSource, OnMissing, OnOverflow, SourceCondition,
    TokenCap,
};
use crate::journal::{Event, JournalEvent};
use crate::llm::{ChatMessage, MessageLog, Messages, Role};
use crate::redact::SecretSet;

/// The recipe's sources for one request: their system blocks in recipe order, and where the
/// conversation goes among them.
#[derive(Debug, Clone, Default)]
pub struct SourceParts {
    /// The system blocks, in order.
    pub messages: Vec<ChatMessage>,
    /// How many of them come before the conversation (`None`: the recipe has no journal).
    pub journal_at: Option<usize>,
    /// The journal source's `max_iterations`.
    pub max_iterations: Option<u32>,
    /// What cached generators did (journaled as CONTEXT_CACHE events).
    pub cache: Vec<CacheOutcome>,
}

impl SourceParts {
    /// The request's messages: the blocks with `conversation` in the journal's place. The
    /// conversation's chunks are shared with the request, not copied (see
    /// [`MessageLog`]).
    ///
    /// The block standing for compacted iterations (the conversation's only system message,
    /// its first) joins the system block right before it: some servers' templates repeat
    /// the tool instructions in every system message (llama.cpp's function-calling one adds
    /// about 150 tokens each), so a compaction must not add a system message of its own.
    pub fn assemble(&self, conversation: &MessageLog) -> Messages {
        let Some(at) = self.journal_at else {
            return Messages::from(self.messages.clone());
        };
        let mut before = self.messages[..at].to_vec();
        let mut conversation_start = 0;
        if let (Some(preface), Some(block)) = (conversation.get(0), before.last_mut()) {
            if preface.role == Role::System && block.role == Role::System {
                let joined = format!(
                    "{}\n\n{}",
                    block.content.as_deref().unwrap_or_default(),
                    preface.content.as_deref().unwrap_or_default()
                );
                block.content = Some(joined);
                conversation_start = 1;
            }
        }
        let mut messages = Messages::from(before);
        messages.append(conversation.shared_from(conversation_start));
        messages.extend_from_slice(&self.messages[at..]);
        messages
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
    let parts = build_sources(recipe, inputs, task_of(events), cancel).await?;
    let conversation = conversation_view(events, parts.max_iterations, secrets).messages;
    let messages = parts.assemble(&conversation);
    // The request alone holds the segments now: they are moved out, not copied.
    drop(conversation);
    Ok(messages.into_vec())
}

/// The run's task: its first user message.
pub fn task_of(events: &[JournalEvent]) -> &str {
    events
        .iter()
        .find_map(|e| match &e.event {
            Event::UserMessage { content } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

/// Runs the recipe's sources (all but the journal) for one request; `task` is what
/// `task_contains` and `task_matches` conditions look at.
pub async fn build_sources(
    recipe: &ContextRecipe,
    inputs: &ContextInputs<'_>,
    task: &str,
    cancel: &CancellationToken,
) -> Result<SourceParts, ContextError> {
    let mut parts = SourceParts::default();
    let mut total = ContextTotal {
        bytes: 0,
        limit: recipe.max_bytes,
    };
    let mut reader = SourceReader::new(inputs.agent_home, inputs.work_dir, inputs.folders);
    // Consecutive `file` sources are read in one trip to the blocking pool; a generator may
    // write what a later `file` source reads, so a batch never crosses another source.
    let mut pending: Vec<PendingFile> = Vec::new();
    for source in &recipe.sources {
        if let Some(condition) = source.condition() {
            if !holds(condition, task, inputs) {
                continue;
            }
        }
        if let ContextSource::File {
            id,
            path,
            on_missing,
            max_bytes,
            max_tokens,
            ..
        } = source
        {
            pending.push(PendingFile {
                id,
                path: expand_path_vars(path, inputs.agent_home, inputs.work_dir),
                on_missing: *on_missing,
                max_bytes: *max_bytes,
                max_tokens: *max_tokens,
            });
            continue;
        }
        read_pending(&mut pending, &mut reader, &mut parts, &mut total, cancel).await?;
        match source {
            ContextSource::ComputedFile {
                id,
                command,
                timeout_ms,
                output_path,
                on_missing,
                max_bytes,
                max_tokens,
                cache,
                ..
            } => {
                let generator = Generator {
                    id,
                    command,
                    timeout_ms: *timeout_ms,
                    output_path,
                    on_missing: *on_missing,
                    max_bytes: *max_bytes,
                    cache: cache.as_ref(),
                };
                let generated = computed_file(&generator, inputs, &mut reader, cancel).await?;
                parts.cache.extend(generated.cache);
                if let Some(text) = generated.text {
                    let path = expand_path_vars(output_path, inputs.agent_home, inputs.work_dir);
                    let text = capped(id, &path, text, *max_tokens)?;
                    total.add(id, &text)?;
                    push_block(&mut parts.messages, id, &text);
                }
            }
            ContextSource::Pipeline {
                id,
                stages,
                on_missing,
                max_bytes,
                max_tokens,
                ..
            } => {
                let text = pipeline(
                    id,
                    stages,
                    *on_missing,
                    *max_bytes,
                    inputs,
                    &mut reader,
                    cancel,
                )
                .await?;
                if let Some(text) = text {
                    let last = stages.last().map(|s| s.output.as_str()).unwrap_or_default();
                    let path = expand_path_vars(last, inputs.agent_home, inputs.work_dir);
                    let text = capped(id, &path, text, *max_tokens)?;
                    total.add(id, &text)?;
                    push_block(&mut parts.messages, id, &text);
                }
            }
            ContextSource::Journal { max_iterations, .. } => {
                parts.journal_at = Some(parts.messages.len());
                parts.max_iterations = *max_iterations;
            }
            // Batched above.
            ContextSource::File { .. } => {}
        }
    }
    read_pending(&mut pending, &mut reader, &mut parts, &mut total, cancel).await?;
    Ok(parts)
}

/// Whether a source's `condition` holds for this request.
fn holds(condition: &SourceCondition, task: &str, inputs: &ContextInputs<'_>) -> bool {
    match condition {
        SourceCondition::TaskContains { pattern } | SourceCondition::TaskMatches { pattern } => {
            pattern.regex.is_match(task)
        }
        SourceCondition::FileExists { path } => {
            let path = expand_path_vars(path, inputs.agent_home, inputs.work_dir);
            inputs.work_dir.join(path).exists()
        }
        SourceCondition::EnvSet { name } => inputs
            .child_env
            .get(name)
            .is_some_and(|value| !value.is_empty()),
    }
}

/// `text` within the source's `max_tokens` (at [`SOURCE_BYTES_PER_TOKEN`] bytes each): cut
/// head and tail around a line naming the file and what was cut, or refused
/// (`on_overflow: fail`).
fn capped(
    id: &str,
    path: &str,
    text: String,
    cap: Option<TokenCap>,
) -> Result<String, ContextError> {
    let Some(cap) = cap else {
        return Ok(text);
    };
    let limit = cap.max_tokens.saturating_mul(SOURCE_BYTES_PER_TOKEN);
    if text.len() as u64 <= limit {
        return Ok(text);
    }
    if cap.on_overflow == OnOverflow::Fail {
        return Err(ContextError::SourceOverTokens {
            id: id.to_string(),
            path: path.to_string(),
            tokens: (text.len() as u64).div_ceil(SOURCE_BYTES_PER_TOKEN),
            limit: cap.max_tokens,
        });
    }
    let kept = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut head = kept / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (kept - kept / 2);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    Ok(format!(
        "{}\n[... {} of {} bytes of {path} cut here: source '{id}' has `max_tokens: {}` in context.yaml ...]\n{}",
        &text[..head],
        tail - head,
        text.len(),
        cap.max_tokens,
        &text[tail..]
    ))
}

/// The bytes the file sources of one context brought so far, against the recipe's
/// `max_bytes`.
struct ContextTotal {
    bytes: u64,
    limit: u64,
}

impl ContextTotal {
    fn add(&mut self, id: &str, text: &str) -> Result<(), ContextError> {
        self.bytes = self.bytes.saturating_add(text.len() as u64);
        if self.bytes > self.limit {
            return Err(ContextError::ContextTooLarge {
                id: id.to_string(),
                limit: self.limit,
            });
        }
        Ok(())
    }
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

/// A `file` source waiting for its batch to be read.
struct PendingFile<'a> {
    id: &'a str,
    path: String,
    on_missing: OnMissing,
    max_bytes: u64,
    max_tokens: Option<TokenCap>,
}

/// Reads the pending `file` sources (one trip) and appends their blocks in order.
async fn read_pending(
    pending: &mut Vec<PendingFile<'_>>,
    reader: &mut SourceReader<'_>,
    parts: &mut SourceParts,
    total: &mut ContextTotal,
    cancel: &CancellationToken,
) -> Result<(), ContextError> {
    if pending.is_empty() {
        return Ok(());
    }
    let files = pending
        .iter()
        .map(|f| SourceFile {
            id: f.id.to_string(),
            path: f.path.clone(),
            max_bytes: f.max_bytes,
        })
        .collect();
    let texts = reader.read(files, cancel).await?;
    for (file, text) in pending.drain(..).zip(texts) {
        let text = match text {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match file.on_missing {
                OnMissing::Skip => continue,
                OnMissing::Error => {
                    return Err(ContextError::FileMissing {
                        id: file.id.to_string(),
                        path: file.path,
                    })
                }
            },
            Err(e) => {
                return Err(ContextError::FileUnreadable {
                    id: file.id.to_string(),
                    path: file.path,
                    message: e.to_string(),
                })
            }
        };
        let text = capped(file.id, &file.path, text, file.max_tokens)?;
        total.add(file.id, &text)?;
        push_block(&mut parts.messages, file.id, &text);
    }
    Ok(())
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
            ContextSource::Pipeline { stages, .. } => stages
                .last()
                .map(|s| PathBuf::from(expand_path_vars(&s.output, agent_home, work_dir))),
            ContextSource::Journal { .. } => None,
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::ContextFolders;
    use super::*;
    use std::collections::BTreeMap;

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
                    max_bytes: 64,
                    max_tokens: None,
                    condition: None,
                })
                .collect(),
            max_bytes: 100,
            total_max_tokens: None,
        };
        let (home, work) = (tmp.join("agent"), tmp.join("ws"));
        let env = BTreeMap::new();
        let folders = ContextFolders::default();
        let inputs = ContextInputs {
            agent_home: &home,
            work_dir: &work,
            run_id: "r1",
            run_dir: &work,
            journal_path: &work,
            child_env: &env,
            folders: &folders,
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

    fn message(role: Role, content: &str) -> ChatMessage {
        ChatMessage {
            role,
            content: Some(content.into()),
            tool_calls: None,
            tool_call_id: None,
        }
    }

    /// The block standing for compacted iterations joins the system block before the
    /// conversation (one system message: llama.cpp's function-calling template repeats the
    /// tool list in each); without compaction the request is what it always was.
    #[test]
    fn the_compaction_note_joins_the_system_block_before_the_conversation() {
        let parts = SourceParts {
            messages: vec![message(
                Role::System,
                "# Context Block: system_prompt\n\nRead.",
            )],
            journal_at: Some(1),
            ..SourceParts::default()
        };
        let task = message(Role::User, "Read the book.");
        let plain = parts.assemble(&[task.clone()].into_iter().collect());
        assert_eq!(plain.len(), 2);
        assert_eq!(plain[0].content, parts.messages[0].content);
        let note = message(
            Role::System,
            "# Context Block: conversation summary\n\nLeft out.",
        );
        let joined = parts.assemble(&[note, task.clone()].into_iter().collect());
        assert_eq!(joined.len(), 2, "{joined:?}");
        assert_eq!(
            joined[0].content.as_deref(),
            Some("# Context Block: system_prompt\n\nRead.\n\n# Context Block: conversation summary\n\nLeft out.")
        );
        assert_eq!(joined[1], task);
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

    /// Regression (issue 24): a context source had no size limit (a 3 GiB file passed
    /// 5.9 GiB resident in 15 s). Over its `max_bytes` (64 here) a source fails the run,
    /// naming the source and the setting, whether read inline (small, local) or on the pool
    /// (in a subfolder).
    #[tokio::test]
    async fn a_source_over_its_max_bytes_fails_naming_the_source_and_the_setting() {
        let tmp = confinement_fixture();
        std::fs::create_dir(tmp.path().join("ws/sub")).unwrap();
        std::fs::write(tmp.path().join("ws/big.md"), "x".repeat(65)).unwrap();
        std::fs::write(tmp.path().join("ws/sub/big.md"), "x".repeat(65)).unwrap();
        std::fs::write(tmp.path().join("ws/fits.md"), "x".repeat(64)).unwrap();
        for path in ["big.md", "sub/big.md"] {
            let err = build_files(tmp.path(), &[(path, OnMissing::Error)])
                .await
                .unwrap_err();
            assert!(
                matches!(err, ContextError::SourceTooLarge { limit: 64, .. }),
                "{path}: {err}"
            );
            let text = err.to_string();
            for phrase in [
                "'s0'",
                path,
                "larger than 64 bytes",
                "`max_bytes`",
                "context.yaml",
            ] {
                assert!(text.contains(phrase), "{phrase}: {text}");
            }
        }
        assert!(build_files(tmp.path(), &[("fits.md", OnMissing::Error)])
            .await
            .is_ok());
    }

    /// The sources together are capped too (100 bytes here): the one that goes over is named.
    #[tokio::test]
    async fn sources_together_over_the_recipes_max_bytes_fail_naming_the_last_one() {
        let tmp = confinement_fixture();
        std::fs::write(tmp.path().join("ws/a.md"), "a".repeat(60)).unwrap();
        std::fs::write(tmp.path().join("ws/b.md"), "b".repeat(60)).unwrap();
        let err = build_files(
            tmp.path(),
            &[("a.md", OnMissing::Error), ("b.md", OnMissing::Error)],
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, ContextError::ContextTooLarge { ref id, limit: 100 } if id == "s1"),
            "{err}"
        );
        assert!(err.to_string().contains("top-level `max_bytes`"), "{err}");
    }
}
