//! Ending a run, in three steps so the end hooks can run without blocking the actor:
//! `finish` (stop everything, journal the ERROR, fire `on_error` for a FAILED run) →
//! `write_end` (ENGINE_END, final metadata, the RunResult built) → `on_run_end` →
//! `deliver` (its HOOK_EXECUTED, lock released, RunResult sent, actor stopped).
//!
//! `on_run_end` runs after ENGINE_END and the final metadata are written, so the hook sees the
//! run's complete journal and final status; its HOOK_EXECUTED is the one line after ENGINE_END.
//! Must not: send the RunResult before the end hooks are done, or let a hook change the
//! run's final status.

use actix::prelude::*;
use serde_json::json;

use crate::agent::HookName;
use crate::api::{
    InteractionInfo, RunErrorInfo, RunEvent, RunMetrics, RunResult, RunResultMetadata, UsageReport,
};
use crate::journal::Event;
use crate::protocol::RunStatus;
use crate::workspace::now_rfc3339;

use super::hooks::HookVars;
use super::{error_info, RunActor};

/// How the run ends, carried from `finish` to `write_end`.
struct Ending {
    status: RunStatus,
    result: Option<String>,
    error: Option<RunErrorInfo>,
    interaction: Option<InteractionInfo>,
}

impl RunActor {
    /// Ends the run. Safe to call more than once: only the first call counts.
    pub(super) fn finish(
        &mut self,
        status: RunStatus,
        result: Option<String>,
        error: Option<RunErrorInfo>,
        interaction: Option<InteractionInfo>,
        ctx: &mut Context<Self>,
    ) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.cancel.cancel();
        if let Some(handle) = self.model_call.take() {
            ctx.cancel_future(handle);
        }
        if let (Some(journal), Some(e)) = (self.journal.as_mut(), &error) {
            let _ = journal.append(Event::Error {
                error_type: e.kind.clone(),
                error_message: e.message.clone(),
                error_details: e.details.clone().map(serde_json::Value::String),
            });
        }
        let ending = Ending {
            status,
            result,
            error,
            interaction,
        };
        let failure = match (&ending.status, &ending.error) {
            (RunStatus::Failed, Some(e)) => Some(e.clone()),
            _ => None,
        };
        let Some(failure) = failure else {
            self.write_end(ending, ctx);
            return;
        };
        let vars = HookVars {
            error_message: Some(failure.message.clone()),
            ..HookVars::default()
        };
        self.fire_end_hook(
            HookName::OnError,
            move |act| {
                json!({
                    "error_type": failure.kind,
                    "message": failure.message,
                    "iteration": act.iteration,
                })
            },
            vars,
            ctx,
            move |act, _, ctx| act.write_end(ending, ctx),
        );
    }

    fn write_end(&mut self, ending: Ending, ctx: &mut Context<Self>) {
        let Ending {
            status,
            result,
            error,
            interaction,
        } = ending;
        if let Some(journal) = self.journal.as_mut() {
            let _ = journal.append(Event::EngineEnd {
                run_id: self.run_id.clone(),
                status,
                final_iteration: self.iteration,
                result: result.clone(),
                error: error.as_ref().map(|e| e.message.clone()),
            });
            if self.config.journal_fsync {
                let _ = journal.sync();
            }
        }
        let end_time = now_rfc3339();
        if let Some(meta) = self.meta.as_mut() {
            meta.status = status;
            meta.end_time = Some(end_time.clone());
            meta.error = error.as_ref().map(|e| format!("{}: {}", e.kind, e.message));
            meta.result = result.clone();
        }
        let mut error = error;
        if !self.save_metadata(self.config.journal_fsync) {
            error = Some(self.unrecorded_end(status, error));
        }
        self.log.line(&format!(
            "run finished: {status} after {} iteration(s){}",
            self.iteration,
            error
                .as_ref()
                .map(|e| format!(" ({}: {})", e.kind, e.message))
                .unwrap_or_default()
        ));
        let duration_ms = self.started_at.elapsed().as_millis() as u64;
        let run_result = RunResult {
            schema_version: "2.0".into(),
            run_id: self.run_id.clone(),
            status,
            result,
            error,
            interaction,
            metrics: RunMetrics {
                iterations: self.iteration,
                duration_ms,
                model_time_ms: self.timings.model.as_millis() as u64,
                queue_time_ms: self.timings.queue.as_millis() as u64,
                tool_time_ms: self.timings.tools.as_millis() as u64,
                start_time: self.start_time.clone(),
                end_time,
                usage: UsageReport {
                    total_cost_usd: 0.0,
                    input_tokens: self.usage.input_tokens,
                    output_tokens: self.usage.output_tokens,
                    model_usage: self.model_usage.clone(),
                },
            },
            metadata: RunResultMetadata {
                agent_name: self.request.agent.name.clone(),
                workspace_path: self.request.work_dir.to_string_lossy().into_owned(),
                run_dir: self.paths.run_dir.to_string_lossy().into_owned(),
            },
        };
        let payload = json!({
            "status": run_result.status,
            "result": run_result.result,
            "error": run_result.error.as_ref().map(|e| json!({"type": e.kind, "message": e.message})),
            "iterations": run_result.metrics.iterations,
        });
        self.fire_end_hook(
            HookName::OnRunEnd,
            move |_| payload,
            HookVars::default(),
            ctx,
            move |act, _, ctx| act.deliver(run_result, ctx),
        );
    }

    fn deliver(&mut self, run_result: RunResult, ctx: &mut Context<Self>) {
        if self.config.journal_fsync && self.has_hook(HookName::OnRunEnd) {
            if let Some(journal) = self.journal.as_mut() {
                let _ = journal.sync();
            }
        }
        self.lock = None;
        self.emit(RunEvent::RunFinished {
            run_id: self.run_id.clone(),
            status: run_result.status,
            duration_ms: run_result.metrics.duration_ms,
            error: run_result.error.as_ref().map(|e| match &e.details {
                Some(details) => format!("{}; {details}", e.message),
                None => e.message.clone(),
            }),
        });
        if let Some(tx) = self.result_tx.take() {
            let _ = tx.send(run_result);
        }
        ctx.stop();
    }

    /// The run ended (its ENGINE_END is journaled) but metadata.json still shows the old
    /// status. The status stands, as the journal has it; the first write failure becomes the
    /// RunResult's error (`metadata_error`), or its `details` when the run already failed, and
    /// a WARNING in the journal, so the user reads the real cause (a full disk, an unwritable
    /// file) instead of a later "still running".
    fn unrecorded_end(&mut self, status: RunStatus, error: Option<RunErrorInfo>) -> RunErrorInfo {
        let cause = self
            .metadata_failure
            .clone()
            .unwrap_or_else(|| "unknown error".into());
        let message = format!(
            "the run ended {status}, but its record {} still says RUNNING: {cause}; the journal has the run's end, and `delta list-runs -w {}` or `delta continue` repair the record once it can be written",
            self.paths.run_dir.join(crate::metadata::METADATA_FILE).display(),
            self.request.work_dir.display()
        );
        self.log.line(&message);
        if let Some(journal) = self.journal.as_mut() {
            let _ = journal.append(Event::Warning {
                message: message.clone(),
            });
        }
        match error {
            Some(mut error) => {
                error.details = Some(match error.details.take() {
                    Some(details) => format!("{details}; {message}"),
                    None => message,
                });
                error
            }
            None => error_info("metadata_error", message),
        }
    }

    pub(super) fn interrupt_now(&mut self, ctx: &mut Context<Self>) {
        let (reason, timeout) = self
            .stop
            .as_ref()
            .map(|s| (s.reason.clone(), s.timeout))
            .unwrap_or_else(|| ("interrupted".into(), false));
        let _ = self.append(
            Event::Interrupted {
                reason: reason.clone(),
            },
            ctx,
        );
        let kind = if timeout { "timeout" } else { "interrupted" };
        self.finish(
            RunStatus::Interrupted,
            None,
            Some(error_info(kind, reason)),
            None,
            ctx,
        );
    }
}
