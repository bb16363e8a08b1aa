//! The orchestration's outward view: progress events while it runs, and at the end the
//! summary (per stage: counts and every run's row; totals; status), written to
//! `summary.json`, journaled, sent to the caller.

use actix::prelude::*;

use crate::api::OrchestrationEvent;
use crate::plan::state::{
    OrchestrationStatus, OrchestrationSummary, RunRow, SchedulingEvent, StageStatus, StageSummary,
    Totals,
};
use crate::protocol::RunStatus;
use crate::runtime::janitor::StopJanitor;
use crate::workspace::now_rfc3339;

use super::OrchestrationActor;

impl OrchestrationActor {
    pub(super) fn emit_progress(&self) {
        let mut total = 0;
        let mut done = 0;
        let mut failed = 0;
        for stage in self.stages.values() {
            total += stage.runs.len();
            for r in stage.runs.iter().filter_map(|r| r.done.as_ref()) {
                done += 1;
                if r.status != RunStatus::Completed {
                    failed += 1;
                }
            }
        }
        self.emit(OrchestrationEvent::Progress {
            total,
            done,
            running: self.in_flight.len(),
            failed,
        });
    }

    pub(super) fn finish(&mut self, ctx: &mut Context<Self>) {
        let Some(reply) = self.reply.take() else {
            return;
        };
        if let Some(janitor) = self.janitor.take() {
            janitor.do_send(StopJanitor);
        }
        let mut stages = Vec::new();
        let mut totals = Totals::default();
        for spec in &self.request.plan.stages {
            let (status, runs) = match self.stages.get(&spec.id) {
                Some(s) => {
                    let status = if s.status == StageStatus::Running {
                        StageStatus::Interrupted
                    } else {
                        s.status
                    };
                    (
                        status,
                        s.runs
                            .iter()
                            .filter_map(|r| r.done.clone())
                            .collect::<Vec<_>>(),
                    )
                }
                None if self.stop_reason.is_some() => (StageStatus::Interrupted, Vec::new()),
                None => (StageStatus::Skipped, Vec::new()),
            };
            let total = self.stages.get(&spec.id).map(|s| s.runs.len()).unwrap_or(0);
            let (completed, interrupted) = tally(runs.iter());
            let failed = runs.len() - completed - interrupted;
            totals.runs += total;
            totals.completed += completed;
            totals.failed += failed;
            totals.interrupted += interrupted + (total - runs.len());
            for r in &runs {
                totals.input_tokens += r.usage.input_tokens;
                totals.output_tokens += r.usage.output_tokens;
            }
            stages.push(StageSummary {
                id: spec.id.clone(),
                status,
                total,
                completed,
                failed,
                interrupted,
                runs,
            });
        }
        let status = if self.stop_reason.is_some() {
            OrchestrationStatus::Interrupted
        } else if self.failed || totals.failed > 0 || totals.completed < totals.runs {
            OrchestrationStatus::Failed
        } else {
            OrchestrationStatus::Completed
        };
        let summary = OrchestrationSummary {
            orchestration_id: self.request.orchestration_id.clone(),
            status,
            plan: self.request.plan.file.to_string_lossy().into_owned(),
            workspace: self.request.workspace.to_string_lossy().into_owned(),
            started_at: self.started_at_text.clone(),
            ended_at: now_rfc3339(),
            duration_ms: self.started_at.elapsed().as_millis() as u64,
            stages,
            totals,
            error: self
                .setup_error
                .clone()
                .or_else(|| self.stop_reason.clone()),
        };
        self.record(SchedulingEvent::OrchestrationFinished { status });
        if let Some(state) = &self.state {
            if let Err(e) = state.write_summary(&summary) {
                tracing::warn!(target: "delta::orchestrate", "{e}");
            }
            state.sync();
        }
        self.emit(OrchestrationEvent::Finished { status });
        let _ = reply.send(summary);
        ctx.stop();
    }
}

/// (completed, interrupted) among finished rows.
pub(super) fn tally<'a>(rows: impl Iterator<Item = &'a RunRow>) -> (usize, usize) {
    rows.fold((0, 0), |(completed, interrupted), r| match r.status {
        RunStatus::Completed => (completed + 1, interrupted),
        RunStatus::Interrupted => (completed, interrupted + 1),
        _ => (completed, interrupted),
    })
}
