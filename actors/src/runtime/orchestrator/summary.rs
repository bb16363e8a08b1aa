//! Carrying out [`Effect::Finish`](crate::plan::schedule::Effect::Finish): the summary
//! (the scheduler's conclusion plus ids, paths and times) written to `summary.json`, the
//! orchestration released, the caller answered.

use actix::prelude::*;

use crate::clock::now_rfc3339;
use crate::plan::schedule::Conclusion;
use crate::plan::state::OrchestrationSummary;
use crate::protocol::OrchestrationEvent;
use crate::runtime::janitor::StopJanitor;

use super::OrchestrationActor;

impl OrchestrationActor {
    pub(super) fn finish(&mut self, conclusion: Conclusion, ctx: &mut Context<Self>) {
        let Some(reply) = self.reply.take() else {
            return;
        };
        if let Some(janitor) = self.janitor.take() {
            janitor.do_send(StopJanitor);
        }
        if let Some(mut desk) = self.desk.take() {
            desk.stop();
        }
        let status = conclusion.status;
        let summary = OrchestrationSummary {
            orchestration_id: self.request.orchestration_id.clone(),
            status,
            plan: self.request.plan.file.to_string_lossy().into_owned(),
            workspace: self.request.workspace.to_string_lossy().into_owned(),
            started_at: self.started_at_text.clone(),
            ended_at: now_rfc3339(),
            duration_ms: self.started_at.elapsed().as_millis() as u64,
            stages: conclusion.stages,
            totals: conclusion.totals,
            error: conclusion.error,
        };
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
