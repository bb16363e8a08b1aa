//! The batch view of one orchestration: its stage graph (every stage of the plan it recorded,
//! with its `needs`, those not started yet included), per-stage counts by status, tokens and
//! duration, and every run as a row the page can sort, filter and page through: built to
//! open a 10,000-run orchestration at once and keep up with it while it runs.
//!
//! An [`OrchestrationIndex`] is read once and then kept up to date cheaply: the scheduling
//! journal is read from where the last read stopped, `summary.json` again only when it
//! changed, and runs' `metadata.json` within a budget per refresh (running runs first, for
//! their progress; finished ones once, for their start time and iterations). What the page
//! asks of the rows (the graph's counts, a page of rows, the timeline) is
//! [`super::batch_rows`]'s; keeping the indexes pages look at is [`super::batch_cache`]'s.
//!
//! Files are read through [`super::bounded_file`], run records through the lenient
//! [`crate::metadata::read_metadata_lenient`]. Must not: write anything, or read outside the
//! workspace's `.delta/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::batch_rows::{
    self, total, BatchRow, OrchestrationDetail, RowPage, RowQuery, RowStatus, StageState,
    TimelineView,
};
use super::bounded_file;
use super::run_files::{clip, epoch_ms, InspectError};
use crate::metadata::read_metadata_lenient;
use crate::plan::model::PlanFile;
use crate::plan::state::{
    validate_orchestration_id, OrchestrationSummary, SchedulingEvent, SchedulingRecord,
    StageStatus, ORCHESTRATIONS_DIR,
};
use crate::protocol::{CostTally, OrchestrationStatus, RunStatus, TokenUsage};
use crate::workspace::control_dir;

/// An index is refreshed at most this often; requests in between answer from it as it is.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(500);
/// Most run records (`metadata.json`) read per refresh.
pub const METADATA_BUDGET: usize = 2_000;
/// Most scheduling-journal bytes read per refresh (a longer backlog is read over several).
pub const JOURNAL_STEP_BYTES: u64 = 64 * 1024 * 1024;
/// Most bytes of `summary.json` or `plan.yaml` read.
pub const MAX_SUMMARY_BYTES: u64 = 256 * 1024 * 1024;

/// One orchestration, read and kept up to date.
#[derive(Debug)]
pub struct OrchestrationIndex {
    workspace: PathBuf,
    id: String,
    dir: PathBuf,
    journal_offset: u64,
    summary_seen: Option<(u64, Option<SystemTime>)>,
    plan: String,
    status: OrchestrationStatus,
    started_at: Option<i64>,
    ended_at: Option<i64>,
    resumes: usize,
    graph_problem: Option<String>,
    stages: Vec<StageState>,
    rows: Vec<BatchRow>,
    by_run: HashMap<String, usize>,
    refreshed: Option<Instant>,
}

impl OrchestrationIndex {
    /// The index of orchestration `id` of `workspace` (read on first [`Self::refresh`]).
    pub fn open(workspace: &Path, id: &str) -> Result<OrchestrationIndex, InspectError> {
        validate_orchestration_id(id).map_err(|_| InspectError::Invalid {
            what: "orchestration id",
            value: id.chars().take(80).collect(),
            hint: "orchestration ids are what `delta list-orchestrations` shows",
        })?;
        let dir = control_dir(workspace).join(ORCHESTRATIONS_DIR).join(id);
        if !dir.is_dir() {
            return Err(InspectError::NotFound(format!(
                "no orchestration `{id}` in {} (no folder {})",
                workspace.display(),
                dir.display()
            )));
        }
        let mut index = OrchestrationIndex {
            workspace: workspace.to_path_buf(),
            id: id.to_string(),
            dir,
            journal_offset: 0,
            summary_seen: None,
            plan: String::new(),
            status: OrchestrationStatus::Running,
            started_at: None,
            ended_at: None,
            resumes: 0,
            graph_problem: None,
            stages: Vec::new(),
            rows: Vec::new(),
            by_run: HashMap::new(),
            refreshed: None,
        };
        index.read_plan();
        Ok(index)
    }

    /// Reads what changed since the last refresh (at most every [`REFRESH_INTERVAL`]).
    pub fn refresh(&mut self) -> Result<(), InspectError> {
        if self
            .refreshed
            .is_some_and(|at| at.elapsed() < REFRESH_INTERVAL)
        {
            return Ok(());
        }
        self.read_journal()?;
        if self.status == OrchestrationStatus::Running && !self.driven() {
            // Started and never finished, and no process holds it: killed or crashed.
            self.status = OrchestrationStatus::Interrupted;
        }
        self.read_summary();
        self.read_records();
        self.refreshed = Some(Instant::now());
        Ok(())
    }

    /// Stage ids and needs from the plan the orchestration recorded (`plan.yaml`), so stages
    /// not started yet are drawn too.
    fn read_plan(&mut self) {
        let path = self.dir.join("plan.yaml");
        let text = match bounded_file::read_capped(&path, MAX_SUMMARY_BYTES) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                self.graph_problem = Some(format!("cannot read {}: {e}", path.display()));
                return;
            }
        };
        match serde_yaml::from_str::<PlanFile>(&text) {
            Ok(plan) => {
                for (position, stage) in plan.stages.iter().enumerate() {
                    // `previous` is the stage written just before (as plan::needs resolves it).
                    let needs = stage
                        .needs
                        .as_ref()
                        .map(|n| n.names())
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|name| match name.as_str() {
                            crate::plan::model::PREVIOUS => {
                                position.checked_sub(1).map(|p| plan.stages[p].id.clone())
                            }
                            _ => Some(name),
                        })
                        .collect();
                    self.stage_mut(&stage.id).needs = needs;
                }
            }
            Err(e) => {
                self.graph_problem = Some(format!("cannot read {}: {e}", path.display()));
            }
        }
    }

    fn stage_mut(&mut self, id: &str) -> &mut StageState {
        let position = match self.stages.iter().position(|s| s.id == id) {
            Some(position) => position,
            None => {
                self.stages.push(StageState {
                    id: id.to_string(),
                    ..StageState::default()
                });
                self.stages.len() - 1
            }
        };
        &mut self.stages[position]
    }

    fn row_mut(&mut self, stage: &str, index: usize, run_id: &str) -> &mut BatchRow {
        let position = match self.by_run.get(run_id) {
            Some(position) => *position,
            None => {
                self.rows.push(BatchRow {
                    stage: stage.to_string(),
                    index,
                    run_id: run_id.to_string(),
                    status: RowStatus::Queued,
                    attempts: 0,
                    error_kind: None,
                    error: None,
                    queued_at: None,
                    started_at: None,
                    ended_at: None,
                    duration_ms: None,
                    tokens: 0,
                    cost: CostTally::default(),
                    iterations: 0,
                    usage: TokenUsage::default(),
                    record_final: false,
                });
                self.by_run.insert(run_id.to_string(), self.rows.len() - 1);
                self.rows.len() - 1
            }
        };
        &mut self.rows[position]
    }

    /// The scheduling journal from where the last read stopped (whole lines only).
    fn read_journal(&mut self) -> Result<(), InspectError> {
        let path = self.dir.join("journal.jsonl");
        let tail = match bounded_file::read_from(&path, self.journal_offset, JOURNAL_STEP_BYTES) {
            Ok(tail) => tail,
            Err(e) if e.is_missing() => return Ok(()),
            Err(e) => return Err(InspectError::unreadable(&path, e)),
        };
        let Some(last_newline) = tail.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        self.journal_offset += last_newline as u64 + 1;
        for line in tail[..last_newline].split(|b| *b == b'\n') {
            if let Ok(record) = serde_json::from_slice::<SchedulingRecord>(line) {
                self.apply(record);
            }
        }
        Ok(())
    }

    fn apply(&mut self, record: SchedulingRecord) {
        let at = epoch_ms(&record.timestamp);
        match record.event {
            SchedulingEvent::OrchestrationStarted { plan, resumed, .. } => {
                self.plan = plan;
                self.status = OrchestrationStatus::Running;
                self.ended_at = None;
                if resumed {
                    self.resumes += 1;
                }
                self.started_at = self.started_at.or(at);
            }
            SchedulingEvent::StageStarted { stage, runs } => {
                let state = self.stage_mut(&stage);
                state.planned = state.planned.max(runs);
                state.status = Some(StageStatus::Running);
                state.started_at = state.started_at.or(at);
                state.ended_at = None;
            }
            SchedulingEvent::RunSubmitted {
                stage,
                index,
                run_id,
                attempt,
                ..
            } => {
                self.stage_mut(&stage);
                let row = self.row_mut(&stage, index, &run_id);
                row.attempts = row.attempts.max(attempt);
                row.status = RowStatus::Queued;
                row.queued_at = at;
                row.started_at = None;
                row.ended_at = None;
                row.record_final = false;
            }
            SchedulingEvent::RunFinished {
                stage,
                index,
                run_id,
                status,
                attempt,
                error,
                usage,
                cost,
            } => {
                let row = self.row_mut(&stage, index, &run_id);
                row.status = RowStatus::of(status);
                row.attempts = row.attempts.max(attempt);
                row.ended_at = at;
                row.error_kind = error
                    .as_deref()
                    .map(|e| e.split_once(": ").map_or(e, |(kind, _)| kind).to_string());
                row.error = error.map(|e| clip(&e, 2048));
                if !usage.is_zero() {
                    row.tokens = total(&usage);
                    row.usage = usage;
                    // A journal from before delta priced calls: tokens nobody priced.
                    row.cost = cost.unwrap_or_else(|| CostTally::unknown("(unrecorded)"));
                }
                if let (Some(end), Some(queued)) = (row.ended_at, row.queued_at) {
                    row.duration_ms = Some((end - queued).max(0) as u64);
                }
            }
            SchedulingEvent::StageFinished { stage, status, .. } => {
                let state = self.stage_mut(&stage);
                state.status = Some(status);
                state.ended_at = at;
            }
            SchedulingEvent::OrchestrationFinished { status } => {
                self.status = status;
                self.ended_at = at;
            }
        }
    }

    /// Whether a process holds the orchestration's lock (probed, never taken; a lock that
    /// is not a regular file counts as not held).
    fn driven(&self) -> bool {
        let Ok((file, _)) = bounded_file::open_regular(&self.dir.join(crate::metadata::LOCK_FILE))
        else {
            return false;
        };
        matches!(
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock),
            Err((_, nix::errno::Errno::EWOULDBLOCK))
        )
    }

    /// `summary.json` when it changed and the orchestration is not running again since:
    /// final statuses, durations, iterations and tokens of every run at once.
    fn read_summary(&mut self) {
        // Its last start has no finish: a summary there is an earlier invocation's.
        if self.ended_at.is_none() {
            return;
        }
        let path = self.dir.join("summary.json");
        let Ok((file, size)) = bounded_file::open_regular(&path) else {
            return;
        };
        let seen = (size, file.metadata().ok().and_then(|m| m.modified().ok()));
        drop(file);
        if self.summary_seen == Some(seen) {
            return;
        }
        self.summary_seen = Some(seen);
        let Ok(bytes) = bounded_file::read_capped(&path, MAX_SUMMARY_BYTES) else {
            return;
        };
        let Ok(summary) = serde_json::from_slice::<OrchestrationSummary>(&bytes) else {
            return;
        };
        drop(bytes);
        for stage in summary.stages {
            let state = self.stage_mut(&stage.id);
            state.status = Some(stage.status);
            state.planned = state.planned.max(stage.counts.total);
            for run in stage.runs {
                let row = self.row_mut(&stage.id, run.index, &run.run_id);
                row.status = RowStatus::of(run.status);
                row.attempts = row.attempts.max(run.attempts);
                row.duration_ms = Some(run.duration_ms);
                row.iterations = run.iterations;
                row.tokens = total(&run.usage);
                row.usage = run.usage;
                row.cost = run.cost;
                if let Some(error) = run.error {
                    row.error_kind = Some(
                        error
                            .split_once(": ")
                            .map_or(error.as_str(), |(kind, _)| kind)
                            .to_string(),
                    );
                    row.error = Some(clip(&error, 2048));
                }
                if let (Some(end), None) = (row.ended_at, row.started_at) {
                    row.started_at = Some(end - run.duration_ms as i64);
                }
                row.record_final = true;
            }
        }
    }

    /// Runs' own records, within [`METADATA_BUDGET`]: every running one (progress), then
    /// finished ones not read since they finished (start time, iterations).
    fn read_records(&mut self) {
        let mut budget = METADATA_BUDGET;
        let driven = self.status == OrchestrationStatus::Running;
        let control = control_dir(&self.workspace);
        let wanted: Vec<usize> = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, row)| matches!(row.status, RowStatus::Running | RowStatus::Queued))
            .chain(self.rows.iter().enumerate().filter(|(_, row)| {
                !row.record_final && !matches!(row.status, RowStatus::Running | RowStatus::Queued)
            }))
            .map(|(position, _)| position)
            .collect();
        for position in wanted {
            if budget == 0 {
                break;
            }
            budget -= 1;
            let row = &mut self.rows[position];
            let Ok(record) = read_metadata_lenient(&control.join(&row.run_id)) else {
                continue;
            };
            row.iterations = record.iterations;
            row.started_at = epoch_ms(&record.created_at).or(row.started_at);
            let tokens = record.usage_so_far();
            if total(&tokens) > row.tokens {
                row.tokens = total(&tokens);
                row.usage = tokens;
                row.cost = record.cost_so_far();
            }
            match (row.status, record.status) {
                // Started; its end comes from the scheduling journal.
                (RowStatus::Queued | RowStatus::Running, RunStatus::Running) => {
                    row.status = RowStatus::Running;
                }
                // The orchestration's process is gone: the run's record has the last word.
                (RowStatus::Queued | RowStatus::Running, status) if !driven => {
                    row.status = RowStatus::of(status);
                    row.record_final = true;
                }
                (RowStatus::Queued | RowStatus::Running, _) => {}
                _ => {
                    if let (Some(end), Some(start)) = (row.ended_at, row.started_at) {
                        row.duration_ms = Some((end - start).max(0) as u64);
                    }
                    row.record_final = true;
                }
            }
        }
    }

    /// The header and the stage graph.
    pub fn detail(&self) -> OrchestrationDetail {
        let now = chrono::Utc::now().timestamp_millis();
        let running = self.status == OrchestrationStatus::Running;
        let (stages, totals, tokens, cost) =
            batch_rows::stage_views(&self.stages, &self.rows, running, now);
        let end = self.ended_at.or(running.then_some(now));
        OrchestrationDetail {
            id: self.id.clone(),
            workspace: self.workspace.clone(),
            status: self.status,
            plan: self.plan.clone(),
            started_at: self.started_at,
            ended_at: self.ended_at,
            duration_ms: self
                .started_at
                .zip(end)
                .map(|(start, end)| (end - start).max(0) as u64),
            resumes: self.resumes,
            stages,
            totals,
            tokens,
            cost,
            error_kinds: batch_rows::error_kinds(&self.rows),
            graph_problem: self.graph_problem.clone(),
        }
    }

    /// One page of rows.
    pub fn rows(&self, query: &RowQuery) -> Result<RowPage, InspectError> {
        batch_rows::page(&self.stages, &self.rows, query)
    }

    /// Every run (of `stage`, when given) as a bar of the batch timeline, in index order.
    pub fn timeline(&self, stage: Option<&str>) -> TimelineView {
        batch_rows::timeline(&self.stages, &self.rows, stage)
    }
}

#[cfg(test)]
#[path = "batch_view_tests.rs"]
mod tests;
