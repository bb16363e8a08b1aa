//! serve::workspace_scan — one workspace's runs and orchestrations for `delta serve`'s runs
//! view, kept between scans and re-read only where something changed.
//!
//! The page is refreshed every second. Reading every run's `metadata.json` each time cost
//! 30-73 % of a core for a 100,000-run workspace with nothing happening. A scan now `stat`s
//! instead, and reads and parses a file again only when its stamp (inode, size, times)
//! changed; the rows are sorted again only then too. What is `stat`ed:
//! - at every scan, the `.delta` folder (a new run's folder, a removed one, and a continued
//!   run — `workspace::mark_runs_changed` — change its time), the `metadata.json` of every
//!   run last seen RUNNING or unreadable (a run's record is replaced by an exchange of names
//!   at every update), and each listed orchestration's `summary.json` and `journal.jsonl`;
//! - every run's `metadata.json` when the `.delta` folder changed, and at least every
//!   [`FULL_SWEEP_EVERY`] scans (a record changed by hand, or by an older delta).
//!
//! Why stamps and not inotify: one watch per run folder (100,000 here) runs into the user's
//! inotify limits, inotify says nothing on NFS (where Slurm workspaces live), and the
//! `stat`s cost a fraction of the reads they save (BENCHMARKS.md, "delta serve: an idle
//! runs view").
//!
//! Every read goes through [`crate::bounded_read`]: a FIFO or a link in a run folder is
//! listed as unreadable, never waited on. A file system that stops answering can still hold
//! a scan; the caller (`runtime::serve::watcher`) gives each workspace's scan a deadline.
//!
//! Must not: write anything, or keep a run's row once its folder is gone.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::runs_view::{
    orchestration_view, run_row, OrchestrationView, RunRowView, RunTotals, UnreadableRunView,
    WorkspaceView, MAX_ORCHESTRATIONS, MAX_RUNS,
};
use crate::metadata::read_metadata;
use crate::protocol::RunStatus;
use crate::workspace::{control_dir, validate_run_id, RESERVED_CONTROL_NAMES};

/// Every so many scans, every run's record is `stat`ed, not only the running ones'.
pub const FULL_SWEEP_EVERY: u64 = 30;

/// What `lstat` says of a file, enough to tell that it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The stamp of `path` (not following a link); `None` when it cannot be had.
    fn of(path: &Path) -> Option<Stamp> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(Stamp {
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// One run folder as last read: its metadata's stamp and what it gave.
#[derive(Debug, Clone)]
struct CachedRun {
    stamp: Option<Stamp>,
    row: Result<RunRowView, String>,
}

/// One orchestration folder as last read.
#[derive(Debug, Clone)]
struct CachedOrchestration {
    stamps: (Option<Stamp>, Option<Stamp>),
    view: Option<OrchestrationView>,
}

/// One workspace's view, kept between scans (see the module header).
#[derive(Debug)]
pub struct WorkspaceScan {
    path: PathBuf,
    /// The `.delta` folder's stamp when its entries were last listed.
    control: Option<Stamp>,
    /// Run folder names (valid run ids), as last listed.
    run_names: Vec<String>,
    /// Folder names under `.delta` that are not run ids, with why.
    invalid: Vec<UnreadableRunView>,
    runs: HashMap<String, CachedRun>,
    /// The `orchestrations` folder's stamp when its entries were last listed.
    orchestrations_dir: Option<Stamp>,
    orchestration_names: Vec<String>,
    orchestrations: HashMap<String, CachedOrchestration>,
    last: Option<WorkspaceView>,
    /// Run records read so far (what the stamps save is visible in tests).
    metadata_reads: u64,
    /// Scans since the last sweep of every run's record.
    since_full_sweep: u64,
}

impl WorkspaceScan {
    /// Nothing read yet.
    pub fn new(path: &Path) -> WorkspaceScan {
        WorkspaceScan {
            path: path.to_path_buf(),
            control: None,
            run_names: Vec::new(),
            invalid: Vec::new(),
            runs: HashMap::new(),
            orchestrations_dir: None,
            orchestration_names: Vec::new(),
            orchestrations: HashMap::new(),
            last: None,
            metadata_reads: 0,
            since_full_sweep: 0,
        }
    }

    /// The view now: files whose stamp changed since the last scan are read again, the rest
    /// comes from the last scan. A folder without `.delta` is an empty view, not an error.
    pub fn scan(&mut self) -> WorkspaceView {
        let control = control_dir(&self.path);
        let control_stamp = Stamp::of(&control);
        if !control.is_dir() {
            *self = WorkspaceScan::new(&self.path);
            return WorkspaceView::empty(&self.path);
        }
        let mut changed = self.last.is_none();
        let mut error = None;
        let mut full = self.since_full_sweep >= FULL_SWEEP_EVERY || self.last.is_none();
        if control_stamp != self.control || control_stamp.is_none() {
            match self.list_run_folders(&control) {
                Ok(()) => {
                    self.control = control_stamp;
                    changed = true;
                    full = true;
                }
                Err(e) => error = Some(e),
            }
        }
        self.since_full_sweep = if full { 0 } else { self.since_full_sweep + 1 };
        changed |= self.refresh_runs(&control, full);
        changed |= self.refresh_orchestrations(&control.join("orchestrations"));
        if let (false, Some(last)) = (changed, &self.last) {
            if last.error == error {
                return last.clone();
            }
        }
        let view = self.assemble(error);
        self.last = Some(view.clone());
        view
    }

    /// Lists `.delta`'s run folders (by the entries' types: no `stat` per entry).
    fn list_run_folders(&mut self, control: &Path) -> Result<(), String> {
        let entries = std::fs::read_dir(control)
            .map_err(|e| format!("cannot list runs in {}: {e}", control.display()))?;
        let mut names = Vec::new();
        let mut invalid = Vec::new();
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || RESERVED_CONTROL_NAMES.contains(&name.as_str()) {
                continue;
            }
            if validate_run_id(&name).is_err() {
                invalid.push(UnreadableRunView {
                    run_id: name,
                    reason: "directory name is not a valid run id".to_string(),
                });
                continue;
            }
            names.push(name);
        }
        invalid.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        self.runs.retain(|name, _| names.contains(name));
        self.run_names = names;
        self.invalid = invalid;
        Ok(())
    }

    /// Reads again the runs whose metadata changed, of all runs (`full`) or of those that may
    /// change without the `.delta` folder saying so (running, unreadable, new); whether any
    /// did.
    fn refresh_runs(&mut self, control: &Path, full: bool) -> bool {
        let mut changed = false;
        for name in self.run_names.clone() {
            let name = &name;
            let settled = self.runs.get(name).is_some_and(
                |cached| matches!(&cached.row, Ok(row) if row.status != RunStatus::Running),
            );
            if settled && !full {
                continue;
            }
            let dir = control.join(name);
            let stamp = Stamp::of(&dir.join(crate::metadata::METADATA_FILE));
            if let Some(cached) = self.runs.get(name) {
                if cached.stamp == stamp && stamp.is_some() {
                    continue;
                }
            }
            self.metadata_reads += 1;
            let row = read_metadata(&dir)
                .map(|meta| run_row(name, &meta))
                .map_err(|e| e.to_string());
            let unchanged = self.runs.get(name).is_some_and(|cached| cached.row == row);
            self.runs.insert(name.clone(), CachedRun { stamp, row });
            changed |= !unchanged;
        }
        changed
    }

    /// Reads again the listed orchestrations whose files changed; whether any did.
    fn refresh_orchestrations(&mut self, root: &Path) -> bool {
        let root_stamp = Stamp::of(root);
        let mut changed = false;
        if root_stamp != self.orchestrations_dir || root_stamp.is_none() {
            let mut names: Vec<String> = std::fs::read_dir(root)
                .map(|entries| {
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names.reverse();
            names.truncate(MAX_ORCHESTRATIONS);
            changed |= names != self.orchestration_names;
            self.orchestrations.retain(|name, _| names.contains(name));
            self.orchestration_names = names;
            self.orchestrations_dir = root_stamp;
        }
        for name in &self.orchestration_names {
            let dir = root.join(name);
            let stamps = (
                Stamp::of(&dir.join("summary.json")),
                Stamp::of(&dir.join("journal.jsonl")),
            );
            if self
                .orchestrations
                .get(name)
                .is_some_and(|cached| cached.stamps == stamps)
            {
                continue;
            }
            let view = orchestration_view(&dir);
            changed |= self.orchestrations.get(name).map(|c| &c.view) != Some(&view);
            self.orchestrations
                .insert(name.clone(), CachedOrchestration { stamps, view });
        }
        changed
    }

    fn assemble(&self, error: Option<String>) -> WorkspaceView {
        let mut rows: Vec<&RunRowView> = Vec::new();
        let mut unreadable: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, cached) in &self.runs {
            match &cached.row {
                Ok(row) => rows.push(row),
                Err(reason) => {
                    unreadable.insert(name, reason);
                }
            }
        }
        rows.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| b.run_id.cmp(&a.run_id))
        });
        let mut unreadable: Vec<UnreadableRunView> = unreadable
            .into_iter()
            .map(|(run_id, reason)| UnreadableRunView {
                run_id: run_id.to_string(),
                reason: reason.to_string(),
            })
            .chain(self.invalid.iter().cloned())
            .collect();
        unreadable.truncate(MAX_RUNS);
        WorkspaceView {
            path: self.path.clone(),
            totals: RunTotals::of(rows.iter().copied()),
            runs: rows.into_iter().take(MAX_RUNS).cloned().collect(),
            unreadable,
            orchestrations: self
                .orchestration_names
                .iter()
                .filter_map(|name| self.orchestrations.get(name)?.view.clone())
                .collect(),
            error,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use crate::metadata::{write_metadata, RunMetadata};
    use crate::protocol::RunStatus;
    use crate::workspace::create_run_dir;

    /// A run's folder in `ws` with a record made at `created` in `status`.
    pub(crate) fn add_run(ws: &Path, id: &str, created: &str, status: RunStatus) {
        let paths = create_run_dir(ws, id).unwrap();
        let mut meta = RunMetadata::new_running(id, "agent", "task", ws, ws, 10);
        meta.created_at = created.to_string();
        meta.status = status;
        write_metadata(&paths.run_dir, &meta).unwrap();
    }

    #[test]
    fn runs_are_newest_first_and_a_fifo_metadata_is_listed_unreadable() {
        let ws = tempfile::tempdir().unwrap();
        add_run(
            ws.path(),
            "old",
            "2026-01-01T00:00:00.000Z",
            RunStatus::Completed,
        );
        add_run(
            ws.path(),
            "new",
            "2026-02-01T00:00:00.000Z",
            RunStatus::Failed,
        );
        let fifo_run = create_run_dir(ws.path(), "piped").unwrap();
        nix::unistd::mkfifo(&fifo_run.metadata, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let view = WorkspaceScan::new(ws.path()).scan();
        let ids: Vec<&str> = view.runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["new", "old"]);
        assert_eq!(view.unreadable.len(), 1);
        assert_eq!(view.unreadable[0].run_id, "piped");
        assert!(view.unreadable[0].reason.contains("FIFO"), "{view:?}");
    }

    /// Regression (issue 24): every scan re-read and parsed every run's metadata (73 % of a
    /// core for 100,000 runs, idle). A record is read again only when its stamp changed.
    #[test]
    fn only_runs_whose_metadata_changed_are_read_again() {
        let ws = tempfile::tempdir().unwrap();
        add_run(
            ws.path(),
            "a",
            "2026-01-01T00:00:00.000Z",
            RunStatus::Running,
        );
        add_run(
            ws.path(),
            "b",
            "2026-01-02T00:00:00.000Z",
            RunStatus::Running,
        );
        let mut scan = WorkspaceScan::new(ws.path());
        let first = scan.scan();
        assert_eq!(first.runs.len(), 2);
        assert_eq!(scan.metadata_reads, 2);
        assert_eq!(scan.scan(), first);
        assert_eq!(scan.metadata_reads, 2, "nothing changed: nothing read");
        let dir = ws.path().join(".delta/b");
        let mut meta = read_metadata(&dir).unwrap();
        meta.status = RunStatus::Completed;
        write_metadata(&dir, &meta).unwrap();
        let view = scan.scan();
        assert_eq!(scan.metadata_reads, 3, "only the updated run is read again");
        assert_eq!(view.runs[0].run_id, "b");
        assert_eq!(view.runs[0].status, RunStatus::Completed);
        add_run(
            ws.path(),
            "c",
            "2026-01-03T00:00:00.000Z",
            RunStatus::Running,
        );
        assert_eq!(scan.scan().runs[0].run_id, "c");
        assert_eq!(scan.metadata_reads, 4);
    }

    /// A settled run's record is not even `stat`ed at every scan: a change to it is seen
    /// when the `.delta` folder says a run started again (as `continue` marks it), or at the
    /// next full sweep.
    #[test]
    fn a_settled_run_is_looked_at_again_when_a_run_restarts_or_at_the_full_sweep() {
        let ws = tempfile::tempdir().unwrap();
        add_run(
            ws.path(),
            "done",
            "2026-01-01T00:00:00.000Z",
            RunStatus::Completed,
        );
        let mut scan = WorkspaceScan::new(ws.path());
        scan.scan();
        let dir = ws.path().join(".delta/done");
        let set_status = |status| {
            let mut meta = read_metadata(&dir).unwrap();
            meta.status = status;
            write_metadata(&dir, &meta).unwrap();
        };
        // Changed behind the workspace's back (by hand): seen at the full sweep.
        set_status(RunStatus::Failed);
        for _ in 0..FULL_SWEEP_EVERY {
            assert_eq!(scan.scan().runs[0].status, RunStatus::Completed);
        }
        assert_eq!(scan.scan().runs[0].status, RunStatus::Failed);
        // Continued: seen at once.
        set_status(RunStatus::Running);
        crate::workspace::mark_runs_changed(ws.path());
        assert_eq!(scan.scan().runs[0].status, RunStatus::Running);
        // Running: every scan looks, so its end is seen at once.
        set_status(RunStatus::Completed);
        assert_eq!(scan.scan().runs[0].status, RunStatus::Completed);
    }

    #[test]
    fn a_removed_run_folder_leaves_the_view() {
        let ws = tempfile::tempdir().unwrap();
        add_run(
            ws.path(),
            "a",
            "2026-01-01T00:00:00.000Z",
            RunStatus::Completed,
        );
        add_run(
            ws.path(),
            "b",
            "2026-01-02T00:00:00.000Z",
            RunStatus::Completed,
        );
        let mut scan = WorkspaceScan::new(ws.path());
        assert_eq!(scan.scan().runs.len(), 2);
        std::fs::remove_dir_all(ws.path().join(".delta/a")).unwrap();
        let ids: Vec<String> = scan.scan().runs.into_iter().map(|r| r.run_id).collect();
        assert_eq!(ids, ["b"]);
    }
}
