//! cluster::handoff — what the orchestrating process and a compute node exchange through the
//! orchestration's folder on the shared filesystem, per planned run:
//! `<orchestration dir>/slurm/runs/<stage>/<index>.json` (the [`PlannedRunFile`]: agent,
//! workspace, run id, how to start or continue it, limits, which relay route its model
//! calls take), written before each submission; and `<index>.result.json` (the run's
//! [`RunResult`]), written by `delta exec-planned` when the run ends.
//!
//! The task text lives here, on the shared filesystem, and never in a job script or argv.
//! No secret is ever written: the relay token reaches the job through its environment.
//!
//! Must not: decide anything about the run (the scheduler did), or accept a stage name
//! that would make a path outside the orchestration's folder.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::protocol::RunResult;

/// Largest handoff file read (a task message is bounded by the plan's template limits).
const FILE_BYTES: u64 = 16 * 1024 * 1024;

/// How the compute node starts the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HandoffLaunch {
    /// A new run with this task.
    New {
        /// The run's rendered task: its first user message.
        task: String,
    },
    /// Continue the run from its journal, with this message for the model if any.
    Continue {
        /// The answer or next user message; `None` resumes as the journal left it.
        message: Option<String>,
    },
}

/// One planned run, as the compute node needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRunFile {
    /// The orchestration the run belongs to, recorded in the run's metadata.
    pub orchestration_id: String,
    /// The id the run is started or continued under; checked as a run id when read.
    pub run_id: String,
    /// The stage id; must match the `<stage>` folder the file is read from.
    pub stage: String,
    /// The item's 0-based position in the stage (0 without `foreach`); must match the
    /// file's name.
    pub index: usize,
    /// The agent folder (absolute, on the shared filesystem).
    pub agent: PathBuf,
    /// Where the run works (absolute, on the shared filesystem).
    pub work_dir: PathBuf,
    /// The plan's folder: its `.env` is part of the run's environment, as on the submitting host.
    pub plan_dir: PathBuf,
    /// Whether the node starts the run afresh or continues it from its journal.
    pub launch: HandoffLaunch,
    /// The iteration cap; `None` = the agent's own.
    pub max_iterations: Option<u32>,
    /// Wall-clock limit of this attempt, in milliseconds; `None` = no limit.
    pub timeout_ms: Option<u64>,
    /// The relay route of the agent's model endpoint (`<relay>/r/<route>/v1`).
    pub llm_route: String,
    /// The plan's `llm.request_timeout` in milliseconds, which wins over the agent's;
    /// `None` = the agent's own.
    pub llm_request_timeout_ms: Option<u64>,
    /// The plan's `llm.idle_timeout` in milliseconds, which wins over the agent's; `None` =
    /// the agent's own.
    pub llm_idle_timeout_ms: Option<u64>,
    /// The plan's `llm.response_format`, which wins over the agent's; `None` = the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_response_format: Option<crate::agent::ResponseFormat>,
    /// The plan's `llm.price`, for an agent without its own; `None` = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_price: Option<crate::llm::price::Price>,
    /// The span this submission of the run is (the orchestration is traced): the node's
    /// run continues it, under the stage's span on the submitting host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::protocol::TraceSpan>,
    /// The plan's `sandbox:`, the sandbox of an agent without one of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::SandboxPolicy>,
}

/// A handoff file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// The stage is not a stage id, so it cannot name a folder inside the orchestration's.
    #[error("invalid stage {stage:?}: a stage id is 1-48 characters from [a-z0-9_-] (hint: pass the stage id as the plan writes it)")]
    InvalidStage {
        /// The stage as given.
        stage: String,
    },
    /// The file, or its folder, could not be created, written, replaced or read.
    #[error("cannot {action} {}: {message} (hint: is the orchestration folder on a filesystem this node shares with the submitting host? `delta orchestrate --executor slurm --check`)", path.display())]
    Io {
        /// What failed, as a verb phrase: `read`, `write`, `replace`, `create the folder of`.
        action: &'static str,
        /// The handoff file concerned.
        path: PathBuf,
        /// The operating system's error.
        message: String,
    },
    /// The file is not a usable planned run: bad JSON, another item's file, or an invalid
    /// run id.
    #[error("{}: not a planned run: {message}", path.display())]
    Invalid {
        /// The handoff file concerned.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

fn check_stage(stage: &str) -> Result<(), HandoffError> {
    let valid = !stage.is_empty()
        && stage.len() <= crate::protocol::STAGE_ID_LEN
        && stage
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(HandoffError::InvalidStage {
            stage: stage.to_owned(),
        })
    }
}

/// `<orchestration dir>/slurm/runs/<stage>` (the stage checked first).
fn stage_dir(orchestration_dir: &Path, stage: &str) -> Result<PathBuf, HandoffError> {
    check_stage(stage)?;
    Ok(orchestration_dir.join("slurm").join("runs").join(stage))
}

/// Where the planned run of `stage`/`index` is described.
pub fn planned_path(
    orchestration_dir: &Path,
    stage: &str,
    index: usize,
) -> Result<PathBuf, HandoffError> {
    Ok(stage_dir(orchestration_dir, stage)?.join(format!("{index}.json")))
}

/// Where the result of the planned run of `stage`/`index` is written when it ends.
pub fn result_path(
    orchestration_dir: &Path,
    stage: &str,
    index: usize,
) -> Result<PathBuf, HandoffError> {
    Ok(stage_dir(orchestration_dir, stage)?.join(format!("{index}.result.json")))
}

/// Writes `value` to `path` atomically (a reader never sees half a file).
fn write_atomically(path: &Path, value: &impl Serialize) -> Result<(), HandoffError> {
    let io = |action: &'static str, e: std::io::Error| HandoffError::Io {
        action,
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    if let Some(parent) = path.parent() {
        super::create_private_dirs(parent).map_err(|e| io("create the folder of", e))?;
    }
    let text = serde_json::to_vec(value).map_err(|e| HandoffError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let spare = path.with_extension("json.tmp");
    // A spare left behind (or a link planted in its name) is replaced, never written
    // through: the write below refuses links, and this makes room for a fresh file.
    let _ = std::fs::remove_file(&spare);
    crate::workspace::write_private_file(&spare, &text).map_err(|e| io("write", e))?;
    std::fs::rename(&spare, path).map_err(|e| io("replace", e))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, HandoffError> {
    // The orchestration's own file: never through a link, never a FIFO, within bounds.
    let bytes = crate::bounded_read::read_to_string(
        path,
        crate::bounded_read::Limit::bytes(FILE_BYTES),
        crate::bounded_read::Links::Refuse,
    )
    .map_err(|e| HandoffError::Io {
        action: "read",
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&bytes).map_err(|e| HandoffError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Describes a planned run for the node that will run it (replacing an earlier attempt's).
pub fn write_planned(orchestration_dir: &Path, run: &PlannedRunFile) -> Result<(), HandoffError> {
    write_atomically(
        &planned_path(orchestration_dir, &run.stage, run.index)?,
        run,
    )
}

/// Reads the planned run of `stage`/`index`.
pub fn read_planned(
    orchestration_dir: &Path,
    stage: &str,
    index: usize,
) -> Result<PlannedRunFile, HandoffError> {
    let path = planned_path(orchestration_dir, stage, index)?;
    let run: PlannedRunFile = read_json(&path)?;
    if run.stage != stage || run.index != index {
        return Err(HandoffError::Invalid {
            path,
            message: format!("it describes {}/{}", run.stage, run.index),
        });
    }
    crate::workspace::validate_run_id(&run.run_id).map_err(|e| HandoffError::Invalid {
        path: path.clone(),
        message: e.to_string(),
    })?;
    check_identity(orchestration_dir, &path, &run)?;
    Ok(run)
}

/// The file must describe a run of the orchestration whose folder it is in: the same
/// orchestration id as the folder's name, and a work folder that is that orchestration's
/// workspace (`<workspace>/.delta/orchestrations/<id>`), or the `<stage>/<index>` folder in
/// it of an `isolate` stage. Anyone who can write the shared folder can write this file; a
/// forged one must not make the node run (and record, and continue) a run elsewhere.
fn check_identity(
    orchestration_dir: &Path,
    path: &Path,
    run: &PlannedRunFile,
) -> Result<(), HandoffError> {
    let invalid = |message: String| HandoffError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let folder = std::fs::canonicalize(orchestration_dir).map_err(|e| HandoffError::Io {
        action: "resolve",
        path: orchestration_dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let name = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if run.orchestration_id != name {
        return Err(invalid(format!(
            "it names orchestration {:?}, but it is in the folder of {name:?}",
            run.orchestration_id
        )));
    }
    let workspace = folder
        .parent()
        .filter(|p| p.ends_with(".delta/orchestrations"))
        .and_then(|p| p.parent()?.parent())
        .ok_or_else(|| {
            invalid(format!(
                "{} is not a folder `<workspace>/.delta/orchestrations/<id>`",
                folder.display()
            ))
        })?;
    let isolated = workspace.join(&run.stage).join(run.index.to_string());
    let work_dir = resolve_as_far_as_exists(&run.work_dir);
    if work_dir != workspace && work_dir != isolated {
        return Err(invalid(format!(
            "its work folder {} is neither the orchestration's workspace {} nor {} (hint: \
             the file was not written by `delta orchestrate`; submit the plan again)",
            run.work_dir.display(),
            workspace.display(),
            isolated.display()
        )));
    }
    Ok(())
}

/// `path` with links resolved in the part of it that exists (an isolated run's folder may
/// not exist yet); not resolvable at all: as given.
fn resolve_as_far_as_exists(path: &Path) -> PathBuf {
    if let Ok(resolved) = std::fs::canonicalize(path) {
        return resolved;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => resolve_as_far_as_exists(parent).join(name),
        _ => path.to_path_buf(),
    }
}

/// Records how the run ended (`delta exec-planned`, on the node).
pub fn write_result(
    orchestration_dir: &Path,
    stage: &str,
    index: usize,
    result: &RunResult,
) -> Result<(), HandoffError> {
    write_atomically(&result_path(orchestration_dir, stage, index)?, result)
}

/// The recorded result, if the run's job wrote one. A file that exists but cannot be read is
/// logged (naming the file and why) and treated as absent: the run is then settled from its
/// own folder, as a job that died before writing its result is.
pub fn read_result(path: &Path) -> Option<RunResult> {
    if !path.exists() {
        return None;
    }
    match read_json(path) {
        Ok(result) => Some(result),
        Err(e) => {
            tracing::warn!(target: "delta::slurm", "ignoring an unreadable run result: {e}");
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A workspace with the folder of orchestration `o-1` in it: (the temporary root, the
    /// workspace, the orchestration's folder).
    fn orchestration() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let workspace = root.path().join("ws");
        let dir = workspace.join(".delta/orchestrations/o-1");
        std::fs::create_dir_all(&dir).unwrap();
        (root, workspace, dir)
    }

    fn planned(stage: &str, index: usize, workspace: &Path) -> PlannedRunFile {
        PlannedRunFile {
            orchestration_id: "o-1".into(),
            run_id: format!("o-1-{stage}-{index}"),
            stage: stage.into(),
            index,
            agent: "/agents/a".into(),
            work_dir: workspace.to_path_buf(),
            plan_dir: "/plan".into(),
            launch: HandoffLaunch::New {
                task: "Summarize x".into(),
            },
            max_iterations: Some(3),
            timeout_ms: None,
            llm_route: "0".into(),
            llm_request_timeout_ms: None,
            llm_idle_timeout_ms: None,
            llm_response_format: None,
            llm_price: None,
            trace: None,
            sandbox: None,
        }
    }

    #[test]
    fn a_planned_run_reads_back() {
        let (_root, workspace, dir) = orchestration();
        let run = planned("map", 7, &workspace);
        write_planned(&dir, &run).unwrap();
        assert_eq!(read_planned(&dir, "map", 7).unwrap(), run);
        let file = dir.join("slurm/runs/map/7.json");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "a run's task is private: mode {mode:o}");
        assert!(read_planned(&dir, "map", 8).is_err());
        // An isolated run works in `<workspace>/<stage>/<index>`, made later.
        let isolated = planned("map", 3, &workspace.join("map/3"));
        write_planned(&dir, &isolated).unwrap();
        assert_eq!(read_planned(&dir, "map", 3).unwrap(), isolated);
    }

    /// Regression (issue 24): `exec-planned` ran (and recorded, and continued) whatever run
    /// the file named, in whatever folder, under whatever orchestration id.
    #[test]
    fn a_file_naming_another_workspace_or_orchestration_is_refused() {
        let (root, workspace, dir) = orchestration();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        for (run, phrase) in [
            (planned("map", 0, &elsewhere), "work folder"),
            (planned("map", 0, &workspace.join("map/1")), "work folder"),
            (
                PlannedRunFile {
                    orchestration_id: "o-2".into(),
                    ..planned("map", 0, &workspace)
                },
                "names orchestration",
            ),
        ] {
            write_planned(&dir, &run).unwrap();
            let error = read_planned(&dir, "map", 0).unwrap_err().to_string();
            assert!(error.contains(phrase), "{error}");
        }
    }

    /// Regression (issue 24): the result was written through a link planted in the spare's
    /// name, into the file it pointed at.
    #[test]
    fn a_result_is_never_written_through_a_link_in_its_spares_name() {
        let (root, _workspace, dir) = orchestration();
        let outside = root.path().join("outside.txt");
        std::fs::write(&outside, "keep").unwrap();
        let result_file = result_path(&dir, "map", 0).unwrap();
        std::fs::create_dir_all(result_file.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&outside, result_file.with_extension("json.tmp")).unwrap();
        let result: RunResult = serde_json::from_value(serde_json::json!({
            "schema_version": "2.0", "run_id": "r", "status": "COMPLETED", "result": "done",
            "metrics": {
                "iterations": 1, "duration_ms": 1, "start_time": "t", "end_time": "t",
                "usage": {
                    "total_cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0,
                    "model_usage": {}
                }
            },
            "metadata": {"agent_name": "a", "workspace_path": "w", "run_dir": "d"}
        }))
        .unwrap();
        write_result(&dir, "map", 0, &result).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(&result_file)
            .unwrap()
            .is_symlink());
        assert_eq!(read_result(&result_file).unwrap(), result);
    }

    #[test]
    fn a_stage_that_would_leave_the_folder_is_refused() {
        let (_root, workspace, dir) = orchestration();
        for stage in ["../x", "a/b", "", ".", "UP"] {
            let error = read_planned(&dir, stage, 0).unwrap_err();
            assert!(
                matches!(error, HandoffError::InvalidStage { .. }),
                "{stage}: {error}"
            );
        }
        let mut run = planned("map", 0, &workspace);
        run.stage = "../../etc".into();
        assert!(write_planned(&dir, &run).is_err());
    }

    #[test]
    fn a_file_for_another_item_is_refused() {
        let (_root, workspace, dir) = orchestration();
        let run = planned("map", 1, &workspace);
        let path = planned_path(&dir, "map", 2).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_string(&run).unwrap()).unwrap();
        assert!(matches!(
            read_planned(&dir, "map", 2),
            Err(HandoffError::Invalid { .. })
        ));
    }
}
