//! The batch view of one orchestration: its stage graph (every stage of the plan it recorded,
//! with its `needs`, those not started yet included), per-stage counts by status, tokens and
//! duration, and every run as a row the page can sort, filter and page through: built to
//! open a 10,000-run orchestration at once and keep up with it while it runs.
//!
//! An [`OrchestrationIndex`] is read once and then kept up to date cheaply: the scheduling
//! journal is read from where the last read stopped, `summary.json` again only when it
//! changed, and runs' `metadata.json` within a budget per refresh (running runs first, for
//! their progress; finished ones once, for their start time and iterations). [`BatchCache`]
//! keeps the indexes of the orchestrations pages look at (a few, least recently used
//! dropped), and refreshes one at most every [`REFRESH_INTERVAL`].
//!
//! Files are read through [`super::bounded_file`]. Must not: write anything, or read
//! outside the workspace's `.delta/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::bounded_file;
use super::inspector::{clip, epoch_ms, read_record, InspectError};
use crate::plan::model::PlanFile;
use crate::plan::state::{
    validate_orchestration_id, OrchestrationSummary, SchedulingEvent, SchedulingRecord,
    StageStatus, ORCHESTRATIONS_DIR,
};
use crate::protocol::{RunStatus, TokenUsage};
use crate::workspace::control_dir;

/// An index is refreshed at most this often; requests in between answer from it as it is.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(500);
/// Most run records (`metadata.json`) read per refresh.
pub const METADATA_BUDGET: usize = 2_000;
/// Most scheduling-journal bytes read per refresh (a longer backlog is read over several).
pub const JOURNAL_STEP_BYTES: u64 = 64 * 1024 * 1024;
/// Most bytes of `summary.json` or `plan.yaml` read.
pub const MAX_SUMMARY_BYTES: u64 = 256 * 1024 * 1024;
/// Orchestrations kept indexed at once.
pub const CACHED_ORCHESTRATIONS: usize = 16;
/// Most rows one page of the runs table holds.
pub const MAX_PAGE: usize = 1_000;

/// Where a run of the batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RowStatus {
    /// Ended FAILED.
    Failed,
    /// Being driven.
    Running,
    /// Paused on a question.
    WaitingForInput,
    /// Stopped; the orchestration's resume continues it.
    Interrupted,
    /// Handed to the engine, not started yet.
    Queued,
    /// Ended COMPLETED.
    Completed,
}

impl RowStatus {
    fn of(status: RunStatus) -> RowStatus {
        match status {
            RunStatus::Running => RowStatus::Running,
            RunStatus::WaitingForInput => RowStatus::WaitingForInput,
            RunStatus::Completed => RowStatus::Completed,
            RunStatus::Failed => RowStatus::Failed,
            RunStatus::Interrupted => RowStatus::Interrupted,
        }
    }

    /// The query spelling (`failed`, `waiting_for_input`...), any case.
    pub fn parse(text: &str) -> Option<RowStatus> {
        serde_json::from_value(serde_json::Value::String(text.to_ascii_uppercase())).ok()
    }
}

/// One run of the batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchRow {
    pub stage: String,
    pub index: usize,
    pub run_id: String,
    pub status: RowStatus,
    pub attempts: u32,
    /// The error's kind (`llm_error`, `timeout`...), for a run that did not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the (last) attempt was handed to the engine, ms since the epoch.
    pub queued_at: Option<i64>,
    /// When it started running.
    pub started_at: Option<i64>,
    /// When it ended.
    pub ended_at: Option<i64>,
    /// Wall time of its last attempt.
    pub duration_ms: Option<u64>,
    /// Tokens over every attempt.
    pub tokens: u64,
    pub iterations: u32,
    /// Prompt and completion tokens behind `tokens`.
    #[serde(skip)]
    usage: TokenUsage,
    #[serde(skip)]
    record_final: bool,
}

/// The total of a usage as the views show it: the provider's, or the sum when it gave none.
fn total(usage: &TokenUsage) -> u64 {
    usage.total_tokens.max(usage.sum())
}

/// Runs of a stage by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageCounts {
    pub planned: usize,
    pub completed: usize,
    pub failed: usize,
    pub running: usize,
    pub queued: usize,
    pub waiting: usize,
    pub interrupted: usize,
    pub not_started: usize,
}

/// One box of the stage graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageView {
    pub id: String,
    /// The stages it waits for.
    pub needs: Vec<String>,
    pub status: StageStatus,
    pub counts: StageCounts,
    pub tokens: TokenUsage,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub duration_ms: Option<u64>,
}

/// How many runs failed with each error kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorKindCount {
    pub kind: String,
    pub count: usize,
}

/// The orchestration page's header and graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrchestrationDetail {
    pub id: String,
    pub workspace: PathBuf,
    /// RUNNING, COMPLETED, FAILED or INTERRUPTED.
    pub status: String,
    pub plan: String,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub duration_ms: Option<u64>,
    /// Times it was resumed.
    pub resumes: usize,
    pub stages: Vec<StageView>,
    pub totals: StageCounts,
    pub tokens: TokenUsage,
    /// Failed runs by error kind, most first.
    pub error_kinds: Vec<ErrorKindCount>,
    /// Why the plan's graph is not shown, when it is not (the stages come from the journal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_problem: Option<String>,
}

/// Which rows, in which order.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RowQuery {
    /// Only this stage's runs.
    #[serde(default)]
    pub stage: Option<String>,
    /// Only runs with this status (`failed`, `running`...).
    #[serde(default)]
    pub status: Option<String>,
    /// Only runs whose id, index or error contains this (any case).
    #[serde(default)]
    pub q: Option<String>,
    /// `index` (default), `status`, `duration`, `tokens`.
    #[serde(default)]
    pub sort: Option<String>,
    /// `asc` (default) or `desc`.
    #[serde(default)]
    pub order: Option<String>,
    #[serde(default)]
    pub offset: usize,
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One page of rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RowPage {
    /// Runs of the orchestration (or of the stage asked for).
    pub total: usize,
    /// Of those, the ones the filters keep.
    pub matched: usize,
    pub offset: usize,
    pub rows: Vec<BatchRow>,
}

/// One run of the batch timeline: `[index, stage, status, queued, started, ended]` (the stage
/// and status as positions in [`TimelineView::stages`] and [`TimelineView::statuses`]; times
/// in ms since the epoch, `null` when not known yet).
pub type Bar = (usize, usize, usize, Option<i64>, Option<i64>, Option<i64>);

/// The batch timeline: every run (of a stage, when asked) as a [`Bar`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineView {
    pub stages: Vec<String>,
    /// Status names, indexed by the third number of a bar.
    pub statuses: Vec<RowStatus>,
    pub bars: Vec<Bar>,
    /// Run ids, in the order of `bars`.
    pub run_ids: Vec<String>,
    pub now: i64,
}

const STATUS_ORDER: [RowStatus; 6] = [
    RowStatus::Failed,
    RowStatus::Running,
    RowStatus::WaitingForInput,
    RowStatus::Interrupted,
    RowStatus::Queued,
    RowStatus::Completed,
];

/// A stage as the plan declares it and as the journal saw it.
#[derive(Debug, Clone, Default)]
struct StageState {
    id: String,
    needs: Vec<String>,
    planned: usize,
    status: Option<StageStatus>,
    started_at: Option<i64>,
    ended_at: Option<i64>,
}

/// One orchestration, read and kept up to date.
#[derive(Debug)]
pub struct OrchestrationIndex {
    workspace: PathBuf,
    id: String,
    dir: PathBuf,
    journal_offset: u64,
    summary_seen: Option<(u64, Option<SystemTime>)>,
    plan: String,
    status: String,
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
            status: "RUNNING".into(),
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
        if self.status == "RUNNING" && !self.driven() {
            // Started and never finished, and no process holds it: killed or crashed.
            self.status = "INTERRUPTED".into();
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
        let Some(last_newline) = tail.bytes.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        self.journal_offset += last_newline as u64 + 1;
        for line in tail.bytes[..last_newline].split(|b| *b == b'\n') {
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
                self.status = "RUNNING".into();
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
                self.status = status.as_str().to_string();
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
        let driven = self.status == "RUNNING";
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
            let Ok(record) = read_record(&control.join(&row.run_id)) else {
                continue;
            };
            row.iterations = record.iterations;
            row.started_at = epoch_ms(&record.created_at).or(row.started_at);
            let tokens = record.tokens();
            if total(&tokens) > row.tokens {
                row.tokens = total(&tokens);
                row.usage = tokens;
            }
            match (row.status, record.status) {
                // Started; its end comes from the scheduling journal.
                (RowStatus::Queued | RowStatus::Running, Some(RunStatus::Running)) => {
                    row.status = RowStatus::Running;
                }
                // The orchestration's process is gone: the run's record has the last word.
                (RowStatus::Queued | RowStatus::Running, Some(status)) if !driven => {
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

    fn counts_of<'a>(rows: impl Iterator<Item = &'a BatchRow>, planned: usize) -> StageCounts {
        let mut counts = StageCounts::default();
        let mut seen = 0;
        for row in rows {
            seen += 1;
            match row.status {
                RowStatus::Completed => counts.completed += 1,
                RowStatus::Failed => counts.failed += 1,
                RowStatus::Running => counts.running += 1,
                RowStatus::Queued => counts.queued += 1,
                RowStatus::WaitingForInput => counts.waiting += 1,
                RowStatus::Interrupted => counts.interrupted += 1,
            }
        }
        counts.planned = planned.max(seen);
        counts.not_started = counts.planned - seen;
        counts
    }

    /// The header and the stage graph.
    pub fn detail(&self) -> OrchestrationDetail {
        let now = chrono::Utc::now().timestamp_millis();
        let running = self.status == "RUNNING";
        let mut totals = StageCounts::default();
        let mut all_tokens = TokenUsage::default();
        let stages: Vec<StageView> = self
            .stages
            .iter()
            .map(|stage| {
                let rows = || self.rows.iter().filter(|r| r.stage == stage.id);
                let counts = Self::counts_of(rows(), stage.planned);
                let tokens = rows().fold(TokenUsage::default(), |mut sum, row| {
                    sum.add(TokenUsage {
                        total_tokens: row.tokens,
                        ..row.usage
                    });
                    sum
                });
                for (total, add) in [
                    (&mut totals.planned, counts.planned),
                    (&mut totals.completed, counts.completed),
                    (&mut totals.failed, counts.failed),
                    (&mut totals.running, counts.running),
                    (&mut totals.queued, counts.queued),
                    (&mut totals.waiting, counts.waiting),
                    (&mut totals.interrupted, counts.interrupted),
                    (&mut totals.not_started, counts.not_started),
                ] {
                    *total += add;
                }
                all_tokens.add(tokens);
                let status = stage.status.unwrap_or(if running {
                    StageStatus::Pending
                } else {
                    StageStatus::NotStarted
                });
                let end = stage
                    .ended_at
                    .or((status == StageStatus::Running).then_some(now));
                StageView {
                    id: stage.id.clone(),
                    needs: stage.needs.clone(),
                    status,
                    counts,
                    tokens,
                    started_at: stage.started_at,
                    ended_at: stage.ended_at,
                    duration_ms: stage
                        .started_at
                        .zip(end)
                        .map(|(start, end)| (end - start).max(0) as u64),
                }
            })
            .collect();
        let mut kinds: HashMap<&str, usize> = HashMap::new();
        for row in self.rows.iter().filter(|r| r.status == RowStatus::Failed) {
            *kinds
                .entry(row.error_kind.as_deref().unwrap_or("unknown"))
                .or_default() += 1;
        }
        let mut error_kinds: Vec<ErrorKindCount> = kinds
            .into_iter()
            .map(|(kind, count)| ErrorKindCount {
                kind: kind.to_string(),
                count,
            })
            .collect();
        error_kinds.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(&b.kind)));
        let end = self.ended_at.or(running.then_some(now));
        OrchestrationDetail {
            id: self.id.clone(),
            workspace: self.workspace.clone(),
            status: self.status.clone(),
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
            tokens: all_tokens,
            error_kinds,
            graph_problem: self.graph_problem.clone(),
        }
    }

    /// One page of rows.
    pub fn rows(&self, query: &RowQuery) -> Result<RowPage, InspectError> {
        let status = match query.status.as_deref().filter(|s| !s.is_empty()) {
            Some(text) => Some(RowStatus::parse(text).ok_or_else(|| InspectError::Invalid {
                what: "status",
                value: text.chars().take(80).collect(),
                hint: "one of failed, running, waiting_for_input, interrupted, queued, completed",
            })?),
            None => None,
        };
        let needle = query
            .q
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .map(str::to_lowercase);
        let in_stage = |row: &&BatchRow| {
            query
                .stage
                .as_deref()
                .filter(|s| !s.is_empty())
                .is_none_or(|stage| row.stage == stage)
        };
        let total = self.rows.iter().filter(in_stage).count();
        let mut kept: Vec<&BatchRow> = self
            .rows
            .iter()
            .filter(in_stage)
            .filter(|row| status.is_none_or(|s| row.status == s))
            .filter(|row| {
                needle.as_deref().is_none_or(|needle| {
                    row.run_id.to_lowercase().contains(needle)
                        || row.index.to_string() == needle
                        || row
                            .error
                            .as_deref()
                            .is_some_and(|e| e.to_lowercase().contains(needle))
                })
            })
            .collect();
        let stage_order = |row: &BatchRow| {
            self.stages
                .iter()
                .position(|s| s.id == row.stage)
                .unwrap_or(usize::MAX)
        };
        let by_index = |a: &&BatchRow, b: &&BatchRow| {
            stage_order(a)
                .cmp(&stage_order(b))
                .then(a.index.cmp(&b.index))
        };
        match query.sort.as_deref().unwrap_or("index") {
            "index" => kept.sort_by(by_index),
            "status" => kept.sort_by(|a, b| {
                let rank = |row: &BatchRow| STATUS_ORDER.iter().position(|s| *s == row.status);
                rank(a).cmp(&rank(b)).then_with(|| by_index(a, b))
            }),
            "duration" => kept.sort_by(|a, b| {
                a.duration_ms
                    .cmp(&b.duration_ms)
                    .then_with(|| by_index(a, b))
            }),
            "tokens" => kept.sort_by(|a, b| a.tokens.cmp(&b.tokens).then_with(|| by_index(a, b))),
            other => {
                return Err(InspectError::Invalid {
                    what: "sort",
                    value: other.chars().take(80).collect(),
                    hint: "one of index, status, duration, tokens",
                })
            }
        }
        match query.order.as_deref().filter(|o| !o.is_empty()) {
            None | Some("asc") => {}
            Some("desc") => kept.reverse(),
            Some(other) => {
                return Err(InspectError::Invalid {
                    what: "order",
                    value: other.chars().take(80).collect(),
                    hint: "one of asc, desc",
                })
            }
        }
        let matched = kept.len();
        let limit = query.limit.unwrap_or(100).clamp(1, MAX_PAGE);
        let rows = kept
            .into_iter()
            .skip(query.offset)
            .take(limit)
            .cloned()
            .collect();
        Ok(RowPage {
            total,
            matched,
            offset: query.offset,
            rows,
        })
    }

    /// Every run (of `stage`, when given) as a bar of the batch timeline, in index order.
    pub fn timeline(&self, stage: Option<&str>) -> TimelineView {
        let stages: Vec<String> = self.stages.iter().map(|s| s.id.clone()).collect();
        let mut rows: Vec<&BatchRow> = self
            .rows
            .iter()
            .filter(|row| stage.is_none_or(|s| row.stage == s))
            .collect();
        let position = |row: &BatchRow| stages.iter().position(|s| *s == row.stage).unwrap_or(0);
        rows.sort_by(|a, b| position(a).cmp(&position(b)).then(a.index.cmp(&b.index)));
        TimelineView {
            statuses: STATUS_ORDER.to_vec(),
            bars: rows
                .iter()
                .map(|row| {
                    (
                        row.index,
                        position(row),
                        STATUS_ORDER
                            .iter()
                            .position(|s| *s == row.status)
                            .unwrap_or(0),
                        row.queued_at,
                        row.started_at,
                        row.ended_at,
                    )
                })
                .collect(),
            run_ids: rows.iter().map(|row| row.run_id.clone()).collect(),
            stages,
            now: chrono::Utc::now().timestamp_millis(),
        }
    }
}

/// An orchestration's index in the cache, under its workspace and id.
type CacheEntry = (PathBuf, String, Arc<Mutex<OrchestrationIndex>>);

/// The orchestrations pages look at, indexed and kept fresh; shared by the server's threads.
#[derive(Debug, Default)]
pub struct BatchCache {
    entries: Mutex<Vec<CacheEntry>>,
}

impl BatchCache {
    /// Runs `read` on orchestration `id` of `workspace`, refreshed (blocking: call it off the
    /// async threads).
    pub fn with<T>(
        &self,
        workspace: &Path,
        id: &str,
        read: impl FnOnce(&OrchestrationIndex) -> Result<T, InspectError>,
    ) -> Result<T, InspectError> {
        let cached = |entries: &mut Vec<CacheEntry>| {
            let position = entries
                .iter()
                .position(|(w, i, _)| w.as_path() == workspace && i == id)?;
            // Most recently used last.
            let entry = entries.remove(position);
            let index = entry.2.clone();
            entries.push(entry);
            Some(index)
        };
        let lock = || self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let found = cached(&mut lock());
        let index = match found {
            Some(index) => index,
            None => {
                // Opened without holding the list: other orchestrations are served meanwhile.
                let opened = Arc::new(Mutex::new(OrchestrationIndex::open(workspace, id)?));
                let mut entries = lock();
                match cached(&mut entries) {
                    Some(index) => index,
                    None => {
                        entries.push((workspace.to_path_buf(), id.to_string(), opened.clone()));
                        if entries.len() > CACHED_ORCHESTRATIONS {
                            entries.remove(0);
                        }
                        opened
                    }
                }
            }
        };
        let mut index = index.lock().unwrap_or_else(PoisonError::into_inner);
        index.refresh()?;
        read(&index)
    }
}

#[cfg(test)]
#[path = "batch_view_tests.rs"]
mod tests;
