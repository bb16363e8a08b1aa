//! Running a `context.yaml` recipe (spec §2.4.3): `file` and `computed_file` sources become
//! one system message each (`# Context Block: <id>`), generators run with their timeout in
//! the workspace, and `journal` sources become the conversation ([`super::journal_to_messages`]).
//! A failing source fails the run with an error naming the source id; `on_missing: skip`
//! skips only a missing file, never a failing generator.
//!
//! Must not: read a file itself (`source_file` decides where a read may block).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::source_file::{SourceFile, SourceReader};
use super::{journal_to_messages, path_str, CancellationToken, ContextError, ContextInputs};
use crate::agent::{expand_path_vars, ContextRecipe, ContextSource, OnMissing};
use crate::journal::JournalEvent;
use crate::llm::{ChatMessage, Role};
use crate::redact::SecretSet;
use crate::tool::process::{run_process, CaptureSpec, ProcessSpec, Termination};

/// Builds the full message list for one model call, in recipe order.
pub async fn build_messages(
    recipe: &ContextRecipe,
    inputs: &ContextInputs<'_>,
    events: &[JournalEvent],
    secrets: &SecretSet,
    cancel: &CancellationToken,
) -> Result<Vec<ChatMessage>, ContextError> {
    let mut messages = Vec::new();
    let mut total = ContextTotal {
        bytes: 0,
        limit: recipe.max_bytes,
    };
    let mut reader = SourceReader::new(inputs.agent_home, inputs.work_dir, inputs.folders);
    // Consecutive `file` sources are read in one trip to the blocking pool; a generator may
    // write what a later `file` source reads, so a batch never crosses another source.
    let mut pending: Vec<PendingFile> = Vec::new();
    for source in &recipe.sources {
        if let ContextSource::File {
            id,
            path,
            on_missing,
            max_bytes,
        } = source
        {
            pending.push(PendingFile {
                id,
                path: expand_path_vars(path, inputs.agent_home, inputs.work_dir),
                on_missing: *on_missing,
                max_bytes: *max_bytes,
            });
            continue;
        }
        read_pending(&mut pending, &mut reader, &mut messages, &mut total, cancel).await?;
        match source {
            ContextSource::ComputedFile {
                id,
                command,
                timeout_ms,
                output_path,
                on_missing,
                max_bytes,
            } => {
                let generator = Generator {
                    id,
                    command,
                    timeout_ms: *timeout_ms,
                    output_path,
                    on_missing: *on_missing,
                    max_bytes: *max_bytes,
                };
                let text = run_generator(&generator, inputs, &mut reader, cancel).await?;
                if let Some(text) = text {
                    total.add(id, &text)?;
                    push_block(&mut messages, id, &text);
                }
            }
            ContextSource::Journal { max_iterations, .. } => {
                messages.extend(journal_to_messages(events, *max_iterations, secrets));
            }
            // Batched above.
            ContextSource::File { .. } => {}
        }
    }
    read_pending(&mut pending, &mut reader, &mut messages, &mut total, cancel).await?;
    Ok(messages)
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
}

/// Reads the pending `file` sources (one trip) and appends their blocks in order.
async fn read_pending(
    pending: &mut Vec<PendingFile<'_>>,
    reader: &mut SourceReader<'_>,
    messages: &mut Vec<ChatMessage>,
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
        total.add(file.id, &text)?;
        push_block(messages, file.id, &text);
    }
    Ok(())
}

/// A `computed_file` source, as written in the recipe.
struct Generator<'a> {
    id: &'a str,
    command: &'a [String],
    timeout_ms: u64,
    output_path: &'a str,
    on_missing: OnMissing,
    max_bytes: u64,
}

async fn run_generator(
    generator: &Generator<'_>,
    inputs: &ContextInputs<'_>,
    reader: &mut SourceReader<'_>,
    cancel: &CancellationToken,
) -> Result<Option<String>, ContextError> {
    let Generator {
        id,
        command,
        timeout_ms,
        output_path,
        on_missing,
        ..
    } = *generator;
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
        env: env.into(),
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
        programs: None,
        sandbox: None,
    };
    let outcome = run_process(spec, cancel.clone()).await;
    let failure = match &outcome.termination {
        Termination::Exited(0) => None,
        Termination::Exited(code) => Some(format!("exited with code {code}")),
        Termination::Signaled(sig) => Some(format!("was killed by signal {sig}")),
        Termination::TimedOut => Some(format!(
            "hit its timeout: killed after {timeout_ms} ms (raise generator.timeout_ms in context.yaml if it needs longer)"
        )),
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
    let output = SourceFile {
        id: id.to_string(),
        path: output_path.clone(),
        max_bytes: generator.max_bytes,
    };
    let read = reader.read(vec![output], cancel).await?.into_iter().next();
    match read.unwrap_or_else(|| Err(std::io::ErrorKind::NotFound.into())) {
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
                })
                .collect(),
            max_bytes: 100,
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
