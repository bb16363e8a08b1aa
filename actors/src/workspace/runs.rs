//! The `list-runs` scan: every `<work>/.delta/<run_id>/` whose metadata is readable (ours or
//! the original engine's), newest first. Runs whose metadata cannot be read are reported
//! separately, never silently merged. This file does not format anything for a terminal.

use std::io;
use std::path::Path;

use serde::Serialize;

use super::{control_dir, validate_run_id, WorkspaceError, RESERVED_CONTROL_NAMES};
use crate::metadata::{read_metadata, RunMetadata};
use crate::protocol::RunStatus;

/// Longest task summary, in characters, before the ellipsis.
const TASK_SUMMARY_CHARS: usize = 60;

/// One line of `delta list-runs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// The run's folder name (what `delta continue --run-id` needs).
    pub run_id: String,
    /// The status metadata.json records (RUNNING includes runs whose owner died and that
    /// the janitor has not seen yet).
    pub status: RunStatus,
    /// First line of the initial message, at most 60 characters plus `…`.
    pub task_summary: String,
    /// The whole initial message (the original engine's `task`).
    pub task: String,
    /// When the run was created (UTC, RFC 3339).
    pub created_at: String,
    /// The last write of its metadata.
    pub last_updated: String,
    /// When it last reached a final status.
    pub end_time: Option<String>,
    /// Iterations so far.
    pub iterations: u32,
    /// Tokens over the run's whole life (every start and attempt).
    pub usage: crate::protocol::TokenUsage,
    /// Dollars of `usage`; `None` when a model had no price (shown as `—`).
    pub total_cost_usd: Option<f64>,
}

/// A run directory whose metadata cannot be read (or whose name is not a run id), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedRun {
    /// The folder's name under `.delta/`.
    pub run_id: String,
    /// Why it was skipped (the metadata error, or why the name is not a run id).
    pub reason: String,
}

/// The result of a scan: readable runs (newest first) and skipped directories.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunListing {
    /// Runs whose metadata was read, newest first.
    pub runs: Vec<RunSummary>,
    /// Folders that could not be listed as runs.
    pub skipped: Vec<SkippedRun>,
}

fn task_summary(initial_message: &str) -> String {
    // A tab or another control character would break the columns of a listing.
    let first_line: String = initial_message
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if first_line.chars().count() <= TASK_SUMMARY_CHARS {
        return first_line;
    }
    let mut summary: String = first_line.chars().take(TASK_SUMMARY_CHARS).collect();
    summary.push('…');
    summary
}

impl RunSummary {
    pub(crate) fn from_metadata(dir_name: &str, meta: &RunMetadata) -> RunSummary {
        RunSummary {
            // The directory name is what `continue --run-id` needs, even if a copied
            // metadata file says otherwise.
            run_id: dir_name.to_string(),
            status: meta.status,
            task_summary: task_summary(&meta.initial_message),
            task: meta.initial_message.clone(),
            created_at: meta.created_at.clone(),
            last_updated: meta.updated_at.clone(),
            end_time: meta.end_time.clone(),
            iterations: meta.iterations,
            usage: meta.usage_so_far(),
            total_cost_usd: meta.cost_so_far().total_usd(),
        }
    }
}

/// Scans `<work>/.delta`; [`WorkspaceError::NoControlDir`] when it does not exist.
pub fn list_runs_with_warnings(work_dir: &Path) -> Result<RunListing, WorkspaceError> {
    let control = control_dir(work_dir);
    let entries = match std::fs::read_dir(&control) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(WorkspaceError::NoControlDir {
                work_dir: work_dir.to_path_buf(),
            })
        }
        Err(e) => return Err(WorkspaceError::io("list runs in", &control, e)),
    };
    let mut listing = RunListing::default();
    for entry in entries {
        let entry = entry.map_err(|e| WorkspaceError::io("list runs in", &control, e))?;
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || RESERVED_CONTROL_NAMES.contains(&name.as_str()) {
            continue;
        }
        if validate_run_id(&name).is_err() {
            listing.skipped.push(SkippedRun {
                run_id: name,
                reason: "directory name is not a valid run id".to_string(),
            });
            continue;
        }
        match read_metadata(&path) {
            Ok(meta) => listing.runs.push(RunSummary::from_metadata(&name, &meta)),
            Err(e) => listing.skipped.push(SkippedRun {
                run_id: name,
                reason: e.to_string(),
            }),
        }
    }
    listing.runs.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
    listing.skipped.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    Ok(listing)
}

/// Readable runs of `<work>/.delta`, newest first by `created_at`. Unreadable runs are
/// left out; use [`list_runs_with_warnings`] to report them.
pub fn list_runs(work_dir: &Path) -> Result<Vec<RunSummary>, WorkspaceError> {
    list_runs_with_warnings(work_dir).map(|listing| listing.runs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::metadata::{write_metadata, RunMetadata};
    use crate::workspace::create_run_dir;

    fn meta(run_id: &str, created_at: &str, message: &str, status: RunStatus) -> RunMetadata {
        let mut meta = RunMetadata::new_running(
            run_id,
            "agent",
            message,
            Path::new("/agent"),
            Path::new("/work"),
            30,
        );
        meta.created_at = created_at.to_string();
        meta.updated_at = created_at.to_string();
        meta.status = status;
        meta
    }

    #[test]
    fn summary_is_first_line_cut_at_60_chars() {
        assert_eq!(task_summary("short\nsecond line"), "short");
        // Issue 24 item 23: a tab in the task broke the listing's columns.
        assert_eq!(task_summary("a\tb\u{1b}c"), "a b c");
        let long = "é".repeat(61);
        let summary = task_summary(&long);
        assert_eq!(summary.chars().count(), 61);
        assert!(summary.ends_with('…'));
        assert_eq!(task_summary(&"x".repeat(60)), "x".repeat(60));
        assert_eq!(task_summary(""), "");
    }

    #[test]
    fn missing_control_dir_is_an_error_with_a_hint() {
        let tmp = tempfile::tempdir().unwrap();
        let err = list_runs(tmp.path()).unwrap_err();
        assert!(matches!(err, WorkspaceError::NoControlDir { .. }));
        assert!(err.to_string().contains("no .delta directory"));
    }

    #[test]
    fn runs_are_newest_first_and_broken_ones_are_reported() {
        let tmp = tempfile::tempdir().unwrap();
        for (id, created, status) in [
            ("old", "2026-01-01T00:00:00.000Z", RunStatus::Completed),
            ("new", "2026-03-01T00:00:00.000Z", RunStatus::Interrupted),
            ("mid", "2026-02-01T00:00:00.000Z", RunStatus::Failed),
        ] {
            let paths = create_run_dir(tmp.path(), id).unwrap();
            write_metadata(&paths.run_dir, &meta(id, created, "task", status)).unwrap();
        }
        let broken = create_run_dir(tmp.path(), "broken").unwrap();
        std::fs::write(broken.metadata, "{not json").unwrap();
        create_run_dir(tmp.path(), "empty").unwrap();
        std::fs::create_dir(tmp.path().join(".delta/orchestrations")).unwrap();

        let listing = list_runs_with_warnings(tmp.path()).unwrap();
        let ids: Vec<_> = listing.runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["new", "mid", "old"]);
        assert_eq!(listing.runs[0].status, RunStatus::Interrupted);
        let skipped: Vec<_> = listing.skipped.iter().map(|s| s.run_id.as_str()).collect();
        assert_eq!(skipped, ["broken", "empty"]);
        assert!(listing.skipped[0].reason.contains("metadata.json"));
        assert_eq!(list_runs(tmp.path()).unwrap(), listing.runs);
    }
}
