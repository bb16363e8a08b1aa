//! The rows of a batch and what the orchestration page asks of them: the row and stage types
//! the page gets (camelCase JSON), the stage graph's boxes and counts, one page of rows as a
//! query filters, sorts and pages them, and the batch timeline's bars. Pure: the rows come
//! from [`super::batch_view`]'s index, which reads the orchestration's files.
//!
//! Must not: read files, or change a serialised name (the page reads them).

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::run_files::InspectError;
use crate::plan::state::StageStatus;
use crate::protocol::{CostTally, OrchestrationStatus, RunStatus, TokenUsage};

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
    pub(super) fn of(status: RunStatus) -> RowStatus {
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
    /// Dollars of `tokens` (`costUsd`: null when a model had no price).
    #[serde(rename = "costUsd", serialize_with = "cost_usd")]
    pub(super) cost: CostTally,
    pub iterations: u32,
    /// Prompt and completion tokens behind `tokens`.
    #[serde(skip)]
    pub(super) usage: TokenUsage,
    /// The run's own record was read since it last finished (or the summary said it all).
    #[serde(skip)]
    pub(super) record_final: bool,
}

/// A tally as the page reads it: its dollars, or null when unknown.
fn cost_usd<S: serde::Serializer>(cost: &CostTally, serializer: S) -> Result<S::Ok, S::Error> {
    cost.total_usd().serialize(serializer)
}

/// The total of a usage as the views show it: the provider's, or the sum when it gave none.
pub(super) fn total(usage: &TokenUsage) -> u64 {
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
    /// Dollars of the stage's runs (`costUsd`: null when one run's is unknown).
    #[serde(rename = "costUsd", serialize_with = "cost_usd")]
    pub cost: CostTally,
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
    pub status: OrchestrationStatus,
    pub plan: String,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub duration_ms: Option<u64>,
    /// Times it was resumed.
    pub resumes: usize,
    pub stages: Vec<StageView>,
    pub totals: StageCounts,
    pub tokens: TokenUsage,
    /// Dollars of every run (`costUsd`: null when one run's is unknown).
    #[serde(rename = "costUsd", serialize_with = "cost_usd")]
    pub cost: CostTally,
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
pub(super) struct StageState {
    pub(super) id: String,
    /// The stages it waits for (from the plan).
    pub(super) needs: Vec<String>,
    /// Runs planned: the most the plan, the journal or the summary said.
    pub(super) planned: usize,
    /// As the journal or the summary last said; `None` before it started.
    pub(super) status: Option<StageStatus>,
    pub(super) started_at: Option<i64>,
    pub(super) ended_at: Option<i64>,
}

/// Runs by status, of `planned` (the runs not seen yet are not started).
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

/// The boxes of the stage graph, the counts over every stage and the tokens and dollars of
/// every run (`running`: the orchestration is driven, so a stage not started yet is pending; `now`
/// ends a running stage).
pub(super) fn stage_views(
    stages: &[StageState],
    rows: &[BatchRow],
    running: bool,
    now: i64,
) -> (Vec<StageView>, StageCounts, TokenUsage, CostTally) {
    let mut totals = StageCounts::default();
    let mut all_tokens = TokenUsage::default();
    let mut all_cost = CostTally::default();
    let views: Vec<StageView> = stages
        .iter()
        .map(|stage| {
            let rows = || rows.iter().filter(|r| r.stage == stage.id);
            let counts = counts_of(rows(), stage.planned);
            let tokens = rows().fold(TokenUsage::default(), |mut sum, row| {
                sum.add(TokenUsage {
                    total_tokens: row.tokens,
                    ..row.usage
                });
                sum
            });
            let cost = rows().fold(CostTally::default(), |mut sum, row| {
                sum.add(&row.cost);
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
            all_cost.add(&cost);
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
                cost,
                started_at: stage.started_at,
                ended_at: stage.ended_at,
                duration_ms: stage
                    .started_at
                    .zip(end)
                    .map(|(start, end)| (end - start).max(0) as u64),
            }
        })
        .collect();
    (views, totals, all_tokens, all_cost)
}

/// Failed runs by error kind, most first.
pub(super) fn error_kinds(rows: &[BatchRow]) -> Vec<ErrorKindCount> {
    let mut kinds: HashMap<&str, usize> = HashMap::new();
    for row in rows.iter().filter(|r| r.status == RowStatus::Failed) {
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
    error_kinds
}

/// One page of `rows`, as `query` asks (`stages` give the stage order).
pub(super) fn page(
    stages: &[StageState],
    rows: &[BatchRow],
    query: &RowQuery,
) -> Result<RowPage, InspectError> {
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
    let total = rows.iter().filter(in_stage).count();
    let mut kept: Vec<&BatchRow> = rows
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
        stages
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
pub(super) fn timeline(
    stages: &[StageState],
    rows: &[BatchRow],
    stage: Option<&str>,
) -> TimelineView {
    let stages: Vec<String> = stages.iter().map(|s| s.id.clone()).collect();
    let mut rows: Vec<&BatchRow> = rows
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
