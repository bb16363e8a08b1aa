//! Running the programs that make context: a `computed_file` generator (with its cache) and
//! the stages of a `pipeline`, each in the workspace, without a shell, within its timeout,
//! with the run's scrubbed environment and the `DELTA_*` / `JOURNAL_PATH` variables (a
//! pipeline stage also gets `DELTA_PIPELINE_INPUT`, the file the stage before wrote, and
//! `DELTA_PIPELINE_OUTPUT`, its own).
//!
//! Must not: read the output it waits for (`source_file` reads it, confined), or decide what
//! a failure means for the run (every failure is a [`ContextError`] naming the source).

use std::time::Duration;

use super::cache::{CacheOutcome, GeneratorCacheKey};
use super::source_file::{SourceFile, SourceReader};
use super::{path_str, CancellationToken, ContextError, ContextInputs};
use crate::agent::{expand_path_vars, GeneratorCache, OnMissing, PipelineStage};
use crate::tool::process::{run_process, CaptureSpec, ProcessSpec, Termination};

/// A `computed_file` source, as written in the recipe.
pub(super) struct Generator<'a> {
    pub(super) id: &'a str,
    pub(super) command: &'a [String],
    pub(super) timeout_ms: u64,
    pub(super) output_path: &'a str,
    pub(super) on_missing: OnMissing,
    pub(super) max_bytes: u64,
    pub(super) cache: Option<&'a GeneratorCache>,
}

/// What a generator brought: its output's text (`None`: skipped, `on_missing: skip`), and
/// the cache's answer when the source has one.
pub(super) struct Generated {
    pub(super) text: Option<String>,
    pub(super) cache: Option<CacheOutcome>,
}

/// Runs a `computed_file` generator (unless its cache holds) and reads its output.
pub(super) async fn computed_file(
    generator: &Generator<'_>,
    inputs: &ContextInputs<'_>,
    reader: &mut SourceReader<'_>,
    cancel: &CancellationToken,
) -> Result<Generated, ContextError> {
    let argv = expand_all(generator.command, inputs);
    let output_path = expand_path_vars(generator.output_path, inputs.agent_home, inputs.work_dir);
    let mut outcome = None;
    if let Some(cache) = generator.cache {
        let key = GeneratorCacheKey {
            id: generator.id,
            argv: &argv,
            output_path: &output_path,
            invalidate_on: &cache.invalidate_on,
        };
        let checked = key.check(inputs, cancel).await?;
        if checked.hit {
            let text =
                read_output(generator.id, &argv, &output_path, generator, reader, cancel).await?;
            if text.is_some() {
                return Ok(Generated {
                    text,
                    cache: Some(checked),
                });
            }
        }
        outcome = Some(checked);
    }
    run_command(
        generator.id,
        &argv,
        generator.timeout_ms,
        inputs,
        &[],
        cancel,
    )
    .await?;
    let text = read_output(generator.id, &argv, &output_path, generator, reader, cancel).await?;
    if let Some(miss) = &outcome {
        // Stored once the output exists: the next build finds it unless a watched file changes.
        if text.is_some() {
            miss.store(inputs);
        }
    }
    Ok(Generated {
        text,
        cache: outcome.map(|mut o| {
            o.hit = false;
            o
        }),
    })
}

/// Runs a pipeline's stages in order and reads the last one's output.
pub(super) async fn pipeline(
    id: &str,
    stages: &[PipelineStage],
    on_missing: OnMissing,
    max_bytes: u64,
    inputs: &ContextInputs<'_>,
    reader: &mut SourceReader<'_>,
    cancel: &CancellationToken,
) -> Result<Option<String>, ContextError> {
    let mut input: Option<String> = None;
    let mut last = None;
    for (index, stage) in stages.iter().enumerate() {
        let argv = expand_all(&stage.command, inputs);
        let output = expand_path_vars(&stage.output, inputs.agent_home, inputs.work_dir);
        let mut env = vec![
            ("DELTA_PIPELINE_STAGE".to_string(), (index + 1).to_string()),
            ("DELTA_PIPELINE_OUTPUT".to_string(), output.clone()),
        ];
        if let Some(previous) = &input {
            env.push(("DELTA_PIPELINE_INPUT".to_string(), previous.clone()));
        }
        run_command(id, &argv, stage.timeout_ms, inputs, &env, cancel)
            .await
            .map_err(|e| at_stage(e, index + 1, stages.len()))?;
        let is_last = index + 1 == stages.len();
        if !is_last && !std::path::Path::new(&output).exists() {
            // The next stage would start without its input.
            return Err(ContextError::GeneratorOutputMissing {
                id: id.to_string(),
                command: argv,
                path: output,
            });
        }
        input = Some(output);
        last = Some(argv);
    }
    let (Some(argv), Some(output)) = (last, input) else {
        return Ok(None);
    };
    let generator = Generator {
        id,
        command: &[],
        timeout_ms: 0,
        output_path: "",
        on_missing,
        max_bytes,
        cache: None,
    };
    read_output(id, &argv, &output, &generator, reader, cancel).await
}

/// A stage's failure says which stage it was.
fn at_stage(error: ContextError, stage: usize, stages: usize) -> ContextError {
    match error {
        ContextError::GeneratorFailed {
            id,
            command,
            reason,
        } => ContextError::GeneratorFailed {
            id,
            command,
            reason: format!("(pipeline stage {stage} of {stages}) {reason}"),
        },
        other => other,
    }
}

fn expand_all(command: &[String], inputs: &ContextInputs<'_>) -> Vec<String> {
    command
        .iter()
        .map(|a| expand_path_vars(a, inputs.agent_home, inputs.work_dir))
        .collect()
}

/// Runs `argv` to its end; anything but exit 0 is a [`ContextError::GeneratorFailed`].
async fn run_command(
    id: &str,
    argv: &[String],
    timeout_ms: u64,
    inputs: &ContextInputs<'_>,
    extra_env: &[(String, String)],
    cancel: &CancellationToken,
) -> Result<(), ContextError> {
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
    env.extend(extra_env.iter().cloned());
    let spec = ProcessSpec {
        argv: argv.to_vec(),
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
    let Some(reason) = failure else {
        return Ok(());
    };
    let stderr = outcome.stderr.text_lossy();
    let reason = if stderr.trim().is_empty() {
        reason
    } else {
        format!("{reason}; stderr: {}", stderr.trim())
    };
    Err(ContextError::GeneratorFailed {
        id: id.to_string(),
        command: argv.to_vec(),
        reason,
    })
}

/// Reads a generator's output file (confined like any source file).
async fn read_output(
    id: &str,
    argv: &[String],
    output_path: &str,
    generator: &Generator<'_>,
    reader: &mut SourceReader<'_>,
    cancel: &CancellationToken,
) -> Result<Option<String>, ContextError> {
    let output = SourceFile {
        id: id.to_string(),
        path: output_path.to_string(),
        max_bytes: generator.max_bytes,
    };
    let read = reader.read(vec![output], cancel).await?.into_iter().next();
    match read.unwrap_or_else(|| Err(std::io::ErrorKind::NotFound.into())) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match generator.on_missing {
            OnMissing::Skip => Ok(None),
            OnMissing::Error => Err(ContextError::GeneratorOutputMissing {
                id: id.to_string(),
                command: argv.to_vec(),
                path: output_path.to_string(),
            }),
        },
        Err(e) => Err(ContextError::FileUnreadable {
            id: id.to_string(),
            path: output_path.to_string(),
            message: e.to_string(),
        }),
    }
}
