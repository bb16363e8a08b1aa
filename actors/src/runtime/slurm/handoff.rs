//! The Slurm executor's preparation of a planned run: the run described in the
//! orchestration's folder (the handoff file `delta exec-planned` reads on the node; a stale
//! result of an earlier attempt removed), before the run joins the next `sbatch`.

use std::path::Path;

use crate::cluster::handoff::{result_path, write_planned, HandoffLaunch, PlannedRunFile};
use crate::plan::schedule::Launch;
use crate::plan::PlannedRun;

use super::SlurmExecutor;

impl SlurmExecutor {
    /// Writes `planned`'s handoff file; the error says why the run cannot be handed over.
    pub(super) fn write_handoff(
        &self,
        planned: PlannedRun,
        work_dir: &Path,
        launch: Launch,
        trace: Option<crate::protocol::TraceSpan>,
    ) -> Result<(), String> {
        let stage_route = self
            .jobs
            .stage_routes
            .get(&(planned.stage_id.clone(), planned.agent.clone()));
        let Some(route) = stage_route
            .or_else(|| self.jobs.routes.get(&planned.agent))
            .cloned()
        else {
            return Err(format!(
                "agent {} has no relay route",
                planned.agent.display()
            ));
        };
        let timeouts = self.plan.llm_timeouts;
        let file = PlannedRunFile {
            orchestration_id: self.orchestration_id.clone(),
            run_id: planned.run_id.clone(),
            stage: planned.stage_id.clone(),
            index: planned.index,
            agent: planned.agent.clone(),
            work_dir: work_dir.to_path_buf(),
            plan_dir: self.plan.dir.clone(),
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
            llm_response_format: self.plan.llm.response_format,
            llm_price: self.plan.llm.price,
            trace,
            sandbox: self.plan.sandbox.clone(),
        };
        write_planned(&self.orchestration_dir, &file).map_err(|e| e.to_string())?;
        if let Ok(stale) = result_path(&self.orchestration_dir, &planned.stage_id, planned.index) {
            let _ = std::fs::remove_file(stale);
        }
        Ok(())
    }
}
