//! The orchestration's outward view: progress events while it runs, and at the end the
//! summary (per stage: counts and every run's row; totals; status), written to
//! `summary.json`, journaled, sent to the caller.

use actix::prelude::*;

use crate::plan::state::{
    OrchestrationStatus, OrchestrationSummary, RunCounts, SchedulingEvent, StageStatus,
    StageSummary, Totals,
};
use crate::protocol::OrchestrationEvent;
use crate::runtime::janitor::StopJanitor;
use crate::workspace::now_rfc3339;

use super::OrchestrationActor;

impl OrchestrationActor {
    pub(super) fn emit_progress(&self) {
        let mut counts = RunCounts::default();
        for stage in self.stages.values() {
            counts.add(&RunCounts::tally(
                stage.runs.len(),
                stage.runs.iter().filter_map(|r| r.done.as_ref()),
            ));
        }
        self.emit(OrchestrationEvent::Progress {
            total: counts.total,
            done: counts.finished(),
            running: self.in_flight.len(),
            failed: counts.unsuccessful(),
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
            let planned = self.stages.get(&spec.id).map(|s| s.runs.len()).unwrap_or(0);
            let counts = RunCounts::tally(planned, &runs);
            totals.counts.add(&counts);
            for r in &runs {
                totals.input_tokens += r.usage.input_tokens;
                totals.output_tokens += r.usage.output_tokens;
            }
            stages.push(StageSummary {
                id: spec.id.clone(),
                status,
                counts,
                runs,
            });
        }
        let status = if self.stop_reason.is_some() {
            OrchestrationStatus::Interrupted
        } else if self.failed || totals.counts.completed < totals.counts.total {
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
        if let Some(state) = &mut self.state {
            if let Err(e) = state.write_summary(&summary) {
                tracing::warn!(target: "delta::orchestrate", "{e}");
            }
            state.sync();
            // Before the caller hears of the end, so it may resume at once.
            state.release();
        }
        self.emit(OrchestrationEvent::Finished { status });
        let _ = reply.send(summary);
        ctx.stop();
    }
}
