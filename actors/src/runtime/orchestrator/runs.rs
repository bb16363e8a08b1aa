//! Submitting one planned run to the `RunSupervisor` and taking its result: the summary
//! row, `output: json` checks, retries (a run that never started is started afresh, one
//! that did is continued with a retry message) and the stage's bookkeeping.

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::plan::state::{RunRow, SchedulingEvent};
use crate::plan::{parse_json_output, OutputKind};
use crate::protocol::{OrchestrationEvent, RunRequest, RunResult, RunStart};
use crate::protocol::{RunStatus, TokenUsage};
use crate::runtime::supervisor::SubmitRun;
use crate::workspace::RunPaths;

use super::{Launch, OrchestrationActor};

impl OrchestrationActor {
    pub(super) fn submit(
        &mut self,
        stage_id: &str,
        k: usize,
        launch: Launch,
        ctx: &mut Context<Self>,
    ) {
        let Some(run) = self
            .stages
            .get_mut(stage_id)
            .and_then(|s| s.runs.get_mut(k))
        else {
            return;
        };
        run.attempts += 1;
        let attempt = run.attempts;
        let planned = run.planned.clone();
        let work_dir = run.work_dir.clone();
        let Some(agent) = self.request.agents.get(&planned.agent).cloned() else {
            let message = format!(
                "agent {} was not loaded before the orchestration started",
                planned.agent.display()
            );
            self.on_run_done(stage_id, k, Err(message), ctx);
            return;
        };
        if let Err(e) = std::fs::create_dir_all(&work_dir) {
            let message = format!(
                "cannot create the run's workspace {}: {e}",
                work_dir.display()
            );
            self.on_run_done(stage_id, k, Err(message), ctx);
            return;
        }
        let (start, resume) = match launch {
            Launch::New => (
                RunStart::New {
                    task: planned.message.clone(),
                },
                false,
            ),
            Launch::Resume(message) => (
                RunStart::Continue {
                    message,
                    force: false,
                },
                true,
            ),
        };
        let request = RunRequest {
            agent,
            work_dir,
            run_id: Some(planned.run_id.clone()),
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
        self.in_flight.insert(planned.run_id.clone());
        self.record(SchedulingEvent::RunSubmitted {
            stage: stage_id.to_string(),
            index: planned.index,
            run_id: planned.run_id.clone(),
            attempt,
            resume,
        });
        self.emit(OrchestrationEvent::RunStarted {
            stage: stage_id.to_string(),
            index: planned.index,
            run_id: planned.run_id.clone(),
            attempt,
        });
        let (tx, rx) = oneshot::channel();
        let stage = stage_id.to_string();
        let submitted = self.supervisor.send(SubmitRun { request, reply: tx });
        async move {
            match submitted.await {
                Ok(Ok(_)) => rx
                    .await
                    .map_err(|_| "the engine stopped before the run finished".to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the engine stopped".to_string()),
            }
        }
        .into_actor(self)
        .map(move |result, act, ctx| act.on_run_done(&stage, k, result, ctx))
        .spawn(ctx);
    }

    pub(super) fn on_run_done(
        &mut self,
        stage_id: &str,
        k: usize,
        result: Result<RunResult, String>,
        ctx: &mut Context<Self>,
    ) {
        let Some(stage_spec) = self.request.plan.stage(stage_id).cloned() else {
            return;
        };
        let stopping = self.stop_reason.is_some();
        let Some(run) = self
            .stages
            .get_mut(stage_id)
            .and_then(|s| s.runs.get_mut(k))
        else {
            return;
        };
        self.in_flight.remove(&run.planned.run_id);
        let mut row = match &result {
            Ok(r) => RunRow {
                run_id: r.run_id.clone(),
                index: run.planned.index,
                status: r.status,
                result: r.result.clone(),
                error: r
                    .error
                    .as_ref()
                    .map(|e| format!("{}: {}", e.kind, e.message)),
                duration_ms: r.metrics.duration_ms,
                iterations: r.metrics.iterations,
                attempts: run.attempts,
                usage: TokenUsage {
                    input_tokens: r.metrics.usage.input_tokens,
                    output_tokens: r.metrics.usage.output_tokens,
                    total_tokens: r.metrics.usage.input_tokens + r.metrics.usage.output_tokens,
                },
                reused: false,
            },
            Err(message) => RunRow {
                run_id: run.planned.run_id.clone(),
                index: run.planned.index,
                status: RunStatus::Failed,
                result: None,
                error: Some(message.clone()),
                duration_ms: 0,
                iterations: 0,
                attempts: run.attempts,
                usage: TokenUsage::default(),
                reused: false,
            },
        };
        // `output: json`: an answer that does not parse is a failure (and may be retried).
        if stage_spec.output == OutputKind::Json && row.status == RunStatus::Completed {
            if let Err(e) = parse_json_output(row.result.as_deref().unwrap_or("")) {
                row.status = RunStatus::Failed;
                row.error = Some(format!("the result is not valid JSON ({e})"));
            }
        }
        let retryable = row.status == RunStatus::Failed && result.is_ok();
        let event = SchedulingEvent::RunFinished {
            stage: stage_id.to_string(),
            index: row.index,
            run_id: row.run_id.clone(),
            status: row.status,
            attempt: row.attempts,
            error: row.error.clone(),
        };
        let finished = OrchestrationEvent::RunFinished {
            stage: stage_id.to_string(),
            index: row.index,
            run_id: row.run_id.clone(),
            status: row.status,
            duration_ms: row.duration_ms,
            error: row.error.clone(),
        };
        if retryable {
            run.failures += 1;
        }
        if retryable && !stopping && run.failures <= stage_spec.retries {
            run.first_error = run.first_error.take().or_else(|| row.error.clone());
            // A run whose setup failed before its metadata was written (too many open files,
            // a full disk) never started: there is nothing to continue, so it starts afresh.
            let never_started = !RunPaths::new(&run.work_dir, &run.planned.run_id)
                .metadata
                .exists();
            run.pending_launch = Some(if never_started {
                Launch::New
            } else {
                Launch::Resume(Some(retry_message(row.error.as_deref())))
            });
            self.record(event);
            self.emit(finished);
            self.advance(ctx);
            return;
        }
        if let (Some(first), Some(last)) = (&run.first_error, &row.error) {
            if first != last {
                row.error = Some(format!("{last} (first failure: {first})"));
            }
        }
        run.done = Some(row);
        self.record(event);
        self.emit(finished);
        if let Some(stage) = self.stages.get_mut(stage_id) {
            stage.outstanding = stage.outstanding.saturating_sub(1);
            if stage.outstanding == 0 {
                self.finish_stage(stage_id);
            }
        }
        self.emit_progress();
        self.advance(ctx);
    }
}

/// The message that continues a failed run for another attempt.
pub(super) fn retry_message(error: Option<&str>) -> String {
    match error {
        Some(e) => format!(
            "The previous attempt failed: {e}\nTry again, taking this into account, and finish with a final answer."
        ),
        None => "The previous attempt failed. Try again and finish with a final answer.".to_string(),
    }
}
