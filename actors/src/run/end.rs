//! Ending a run: the ERROR event, `on_error` for a FAILED run, ENGINE_END, the final
//! metadata, the RunResult, `on_run_end`, then the lock released and `RunFinished` emitted.
//!
//! `on_run_end` runs after ENGINE_END and the final metadata are written, so the hook sees the
//! run's complete journal and final status; its HOOK_EXECUTED is the one line after ENGINE_END.
//! Must not: return the RunResult before the end hooks are done, or let a hook change the
//! run's final status.

use serde_json::json;

use crate::agent::HookName;
use crate::clock::now_rfc3339;
use crate::journal::Event;
use crate::protocol::RunStatus;
use crate::protocol::{
    InteractionInfo, RecordedError, RunErrorInfo, RunErrorKind, RunEvent, RunMetrics, RunResult,
    RunResultMetadata, UsageReport,
};

use super::redaction::redact_result;
use super::state::{error_info, Ending, HookVars, Run};

impl Run {
    /// Records the ending and returns the RunResult. Nothing of the run is still running:
    /// the token is cancelled anyway, so a straggler (a dropped tool future) is killed.
    pub(super) async fn end(mut self, ending: Ending) -> RunResult {
        let Ending {
            status,
            result,
            empty_answer,
            error,
            interaction,
        } = ending;
        self.lp.control.begin_ending();
        self.lp.control.token().cancel();
        if let Some(e) = &error {
            let _ = self.rec.borrow_mut().append(Event::Error {
                error_type: e.kind.to_string(),
                error_message: e.message.clone(),
                error_details: e.details.clone().map(serde_json::Value::String),
            });
        }
        if let (RunStatus::Failed, Some(failure)) = (status, &error) {
            let vars = HookVars {
                error_message: Some(failure.message.clone()),
                ..HookVars::default()
            };
            let iteration = self.iteration;
            self.fire_end_hook(
                HookName::OnError,
                || {
                    json!({
                        "error_type": failure.kind,
                        "message": failure.message,
                        "iteration": iteration,
                    })
                },
                vars,
            )
            .await;
        }
        {
            let mut rec = self.rec.borrow_mut();
            let _ = rec.append(Event::EngineEnd {
                run_id: self.lp.run_id.clone(),
                status,
                final_iteration: self.iteration,
                result: result.clone(),
                error: error.as_ref().map(|e| e.message.clone()),
            });
        }
        let end_time = now_rfc3339();
        self.meta.status = status;
        self.meta.end_time = Some(end_time.clone());
        self.meta.error = error.as_ref().map(RecordedError::of);
        self.meta.result = result.clone();
        let mut error = error;
        if !self.save_status_change().await {
            error = Some(self.unrecorded_end(status, error));
        }
        self.log(&format!(
            "run finished: {status} after {} iteration(s){}",
            self.iteration,
            error
                .as_ref()
                .map(|e| format!(" ({}: {})", e.kind, e.message))
                .unwrap_or_default()
        ));
        let mut run_result = self.run_result(status, result, error, interaction, end_time);
        run_result.empty_answer = empty_answer;
        self.fire_end_hook(
            HookName::OnRunEnd,
            || {
                json!({
                    "status": run_result.status,
                    "result": run_result.result,
                    "error": run_result.error.as_ref().map(|e| json!({"type": e.kind, "message": e.message})),
                    "iterations": run_result.metrics.iterations,
                })
            },
            HookVars::default(),
        )
        .await;
        if self.lp.config.journal_fsync && self.has_hook(HookName::OnRunEnd) {
            let journal = self.rec.borrow().journal_file();
            if let Some(journal) = journal {
                let _ = crate::blocking::run_to_end(move || journal.sync_data()).await;
            }
        }
        self.lock = None;
        self.emit(RunEvent::RunFinished {
            run_id: self.lp.run_id.clone(),
            status: run_result.status,
            duration_ms: run_result.metrics.duration_ms,
            error: run_result.error.as_ref().map(|e| match &e.details {
                Some(details) => format!("{}; {details}", e.message),
                None => e.message.clone(),
            }),
        });
        redact_result(&mut run_result, &self.secrets.snapshot());
        run_result
    }

    /// The run ended (its ENGINE_END is journaled) but metadata.json still shows the old
    /// status. The status stands, as the journal has it; the first write failure becomes the
    /// RunResult's error (`metadata_error`), or its `details` when the run already failed, and
    /// a WARNING in the journal, so the user reads the real cause (a full disk, an unwritable
    /// file) instead of a later "still running".
    fn unrecorded_end(&self, status: RunStatus, error: Option<RunErrorInfo>) -> RunErrorInfo {
        let cause = self
            .metadata_failure
            .clone()
            .unwrap_or_else(|| "unknown error".into());
        let message = format!(
            "the run ended {status}, but its record {} still says RUNNING: {cause}; the journal has the run's end, and `delta list-runs -w {}` or `delta continue` repair the record once it can be written",
            self.paths.run_dir.join(crate::metadata::METADATA_FILE).display(),
            self.lp.request.work_dir.display()
        );
        self.log(&message);
        let _ = self.rec.borrow_mut().append(Event::Warning {
            message: message.clone(),
        });
        match error {
            Some(mut error) => {
                error.details = Some(match error.details.take() {
                    Some(details) => format!("{details}; {message}"),
                    None => message,
                });
                error
            }
            None => error_info(RunErrorKind::MetadataError, message),
        }
    }

    fn run_result(
        &self,
        status: RunStatus,
        result: Option<String>,
        error: Option<RunErrorInfo>,
        interaction: Option<InteractionInfo>,
        end_time: String,
    ) -> RunResult {
        RunResult {
            schema_version: "2.0".into(),
            run_id: self.lp.run_id.clone(),
            status,
            result,
            empty_answer: false,
            error,
            interaction,
            metrics: RunMetrics {
                iterations: self.iteration,
                duration_ms: self.started_at.elapsed().as_millis() as u64,
                model_time_ms: self.timings.model.as_millis() as u64,
                queue_time_ms: self.timings.queue.as_millis() as u64,
                tool_time_ms: self.timings.tools.as_millis() as u64,
                start_time: self.start_time.clone(),
                end_time,
                usage: UsageReport {
                    total_cost_usd: self.cost.total_usd(),
                    cost_note: self.cost.note(),
                    input_tokens: self.usage.input_tokens,
                    output_tokens: self.usage.output_tokens,
                    model_usage: self.model_usage.clone(),
                    estimated: self.usage.estimated,
                },
                cumulative_usage: self.cumulative_usage(),
                cumulative_cost_usd: self.cumulative_cost().total_usd(),
                tokens_saved: self.context.tokens_saved,
                compactions: self.context.compactions,
            },
            metadata: RunResultMetadata {
                agent_name: self.lp.request.agent.name.clone(),
                workspace_path: self.lp.request.work_dir.to_string_lossy().into_owned(),
                run_dir: self.paths.run_dir.to_string_lossy().into_owned(),
            },
        }
    }
}
