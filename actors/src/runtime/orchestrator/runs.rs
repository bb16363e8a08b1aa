//! Carrying out [`Effect::SubmitRun`](crate::plan::schedule::Effect::SubmitRun): building
//! the run's request, handing it to the `RunSupervisor`, and feeding its result back to the
//! scheduler as a [`RunEnd`].

use std::path::PathBuf;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::plan::schedule::{Event, Launch, RunEnd};
use crate::plan::PlannedRun;
use crate::request::{RunRequest, RunStart};
use crate::runtime::admission::SubmitRun;

use super::OrchestrationActor;

impl OrchestrationActor {
    /// Hands the run to the supervisor and answers [`Event::RunSubmitted`], or
    /// [`RunEnd::Lost`] when it cannot be handed over; its result comes back later as
    /// [`Event::RunFinished`].
    pub(super) fn submit(
        &mut self,
        planned: PlannedRun,
        work_dir: PathBuf,
        launch: Launch,
        ctx: &mut Context<Self>,
    ) -> Event {
        let run_id = planned.run_id.clone();
        let lost = |message: String| super::run_lost(&run_id, message);
        let Some(agent) = self.request.agents.get(&planned.agent).cloned() else {
            return lost(format!(
                "agent {} was not loaded before the orchestration started",
                planned.agent.display()
            ));
        };
        let start = match launch {
            Launch::New => RunStart::New {
                task: planned.message,
            },
            Launch::Continue(message) => RunStart::Continue {
                message,
                force: false,
            },
        };
        let request = RunRequest {
            agent,
            work_dir: work_dir.clone(),
            run_id: Some(run_id.clone()),
            start,
            max_iterations: planned.max_iterations,
            llm: self
                .request
                .llm_by_agent
                .get(&planned.agent)
                .unwrap_or(&self.request.llm)
                .clone(),
            env: self.request.env.clone(),
            timeout: planned.timeout,
            prompter: None,
            workspace_id: None,
            orchestration_id: Some(self.request.orchestration_id.clone()),
        };
        let (tx, rx) = oneshot::channel();
        let submitted = self
            .supervisor
            .submit
            .send(SubmitRun { request, reply: tx });
        let finished_id = run_id.clone();
        let end = async move {
            let result = match submitted.await {
                Ok(Ok(_)) => rx
                    .await
                    .map_err(|_| "the engine stopped before the run finished".to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the engine stopped".to_string()),
            };
            RunEnd::from_result(result, &work_dir, &finished_id)
        };
        self.finish_when(run_id, end, ctx)
    }
}
