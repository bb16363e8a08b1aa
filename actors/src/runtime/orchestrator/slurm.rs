//! Carrying out [`Effect::SubmitRun`](crate::plan::schedule::Effect::SubmitRun) with the
//! Slurm executor: the planned run is described in the orchestration's folder (the handoff
//! file the job reads; a stale result of an earlier attempt removed), then handed to the
//! `SlurmExecutor`, whose answer comes back as [`Event::RunFinished`]. Submissions of one
//! batch of effects go out together ([`Flush`] after the batch), so a stage's fan-out is one
//! job array.

use std::path::PathBuf;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::cluster::handoff::{result_path, write_planned, HandoffLaunch, PlannedRunFile};
use crate::plan::schedule::{Event, Launch, RunEnd};
use crate::plan::PlannedRun;
use crate::runtime::slurm::SubmitPlanned;

use super::OrchestrationActor;

impl OrchestrationActor {
    pub(super) fn submit_to_slurm(
        &mut self,
        planned: PlannedRun,
        work_dir: PathBuf,
        launch: Launch,
        ctx: &mut Context<Self>,
    ) -> Event {
        let run_id = planned.run_id.clone();
        let lost = |message: String| super::run_lost(&run_id, message);
        let (Some(executor), Some(state), crate::cluster::RunExecutor::Slurm(jobs)) =
            (&self.slurm, &self.state, &self.request.executor)
        else {
            return lost("the Slurm executor is not running".into());
        };
        let Some(route) = jobs.routes.get(&planned.agent).cloned() else {
            return lost(format!(
                "agent {} has no relay route",
                planned.agent.display()
            ));
        };
        let timeouts = self.request.plan.llm_timeouts;
        let file = PlannedRunFile {
            orchestration_id: self.request.orchestration_id.clone(),
            run_id: run_id.clone(),
            stage: planned.stage_id.clone(),
            index: planned.index,
            agent: planned.agent.clone(),
            work_dir: work_dir.clone(),
            plan_dir: self.request.plan.dir.clone(),
            launch: match launch {
                Launch::New => HandoffLaunch::New {
                    task: planned.message.clone(),
                },
                Launch::Continue(message) => HandoffLaunch::Continue { message },
            },
            max_iterations: planned.max_iterations,
            timeout_ms: planned.timeout.map(|t| t.as_millis() as u64),
            llm_route: route,
            llm_request_timeout_ms: timeouts.request.map(|t| t.as_millis() as u64),
            llm_idle_timeout_ms: timeouts.idle.map(|t| t.as_millis() as u64),
            llm_response_format: self.request.plan.llm.response_format,
        };
        if let Err(e) = write_planned(&state.dir, &file) {
            return lost(e.to_string());
        }
        if let Ok(stale) = result_path(&state.dir, &planned.stage_id, planned.index) {
            let _ = std::fs::remove_file(stale);
        }
        let (tx, rx) = oneshot::channel();
        executor.do_send(SubmitPlanned {
            run_id: run_id.clone(),
            stage: planned.stage_id,
            index: planned.index,
            work_dir,
            reply: tx,
        });
        self.slurm_batch_open = true;
        let end = async move {
            rx.await
                .unwrap_or_else(|_| RunEnd::Lost("the Slurm executor stopped".into()))
        };
        self.finish_when(run_id, end, ctx)
    }
}
