//! A run's end in the scheduler: its summary row, the `output: json` check, and the retry
//! decision (a run that never wrote its metadata is started afresh, one that did is
//! continued with a message quoting the error; an attempt an interruption cut short is not a
//! failure and is not retried).
//!
//! Must not: do I/O; whether the run wrote its metadata comes in the
//! [`RunOutcome`](super::RunOutcome).

use super::{Effect, Launch, RunEnd, Scheduler};
use crate::plan::expand::parse_json_output;
use crate::plan::model::OutputKind;
use crate::plan::state::{RunRow, SchedulingEvent};
use crate::protocol::OrchestrationEvent;
use crate::protocol::{RunStatus, TokenUsage};

impl Scheduler {
    pub(super) fn run_finished(&mut self, run_id: &str, end: RunEnd, out: &mut Vec<Effect>) {
        let Some(flight) = self.in_flight.remove(run_id) else {
            return;
        };
        let stage_id = flight.stage.as_str();
        let Some((retries, output)) = self.plan.stage(stage_id).map(|s| (s.retries, s.output))
        else {
            return;
        };
        let stopping = self.stop_reason.is_some();
        let Some(run) = self
            .stages
            .get_mut(stage_id)
            .and_then(|s| s.runs.get_mut(flight.slot))
        else {
            return;
        };
        let (mut row, metadata_written) = match end {
            RunEnd::Finished(outcome) => (
                RunRow {
                    tokens_saved: outcome.tokens_saved,
                    run_id: outcome.run_id,
                    index: run.planned.index,
                    status: outcome.status,
                    result: outcome.result,
                    error: outcome.error,
                    duration_ms: outcome.duration_ms,
                    iterations: outcome.iterations,
                    attempts: run.attempts,
                    usage: outcome.usage,
                    cost: outcome.cost,
                    empty_answer: outcome.empty_answer,
                    reused: false,
                },
                Some(outcome.metadata_written),
            ),
            RunEnd::Lost(message) => (
                RunRow {
                    tokens_saved: 0,
                    run_id: run.planned.run_id.clone(),
                    index: run.planned.index,
                    status: RunStatus::Failed,
                    result: None,
                    error: Some(message),
                    duration_ms: 0,
                    iterations: 0,
                    attempts: run.attempts,
                    usage: TokenUsage::default(),
                    cost: Default::default(),
                    empty_answer: false,
                    reused: false,
                },
                None,
            ),
        };
        // `output: json`: an answer that does not parse is a failure (and may be retried).
        if output == OutputKind::Json && row.status == RunStatus::Completed {
            if let Some(error) = not_json(row.result.as_deref()) {
                row.status = RunStatus::Failed;
                row.error = Some(error);
            }
        }
        // A lost run has no outcome to retry from.
        let retryable = row.status == RunStatus::Failed && metadata_written.is_some();
        let recorded = Effect::Record(SchedulingEvent::RunFinished {
            stage: stage_id.to_string(),
            index: row.index,
            run_id: row.run_id.clone(),
            status: row.status,
            attempt: row.attempts,
            error: row.error.clone(),
            usage: row.usage,
            cost: Some(row.cost.clone()),
        });
        if retryable {
            run.failures += 1;
        }
        let retried = retryable && !stopping && run.failures <= retries;
        let emitted = Effect::Emit(OrchestrationEvent::RunFinished {
            stage: stage_id.to_string(),
            index: row.index,
            run_id: row.run_id.clone(),
            status: row.status,
            duration_ms: row.duration_ms,
            error: row.error.clone(),
            retried,
        });
        if retried {
            run.first_error = run.first_error.take().or_else(|| row.error.clone());
            // A run whose setup failed before its metadata was written (too many open files,
            // a full disk) never started: there is nothing to continue, so it starts afresh.
            run.pending_launch = Some(if metadata_written == Some(true) {
                Launch::Continue(Some(retry_message(row.error.as_deref())))
            } else {
                Launch::New
            });
            out.push(recorded);
            out.push(emitted);
            self.advance(out);
            return;
        }
        if let (Some(first), Some(last)) = (&run.first_error, &row.error) {
            if first != last {
                row.error = Some(format!("{last} (first failure: {first})"));
            }
        }
        run.done = Some(row);
        out.push(recorded);
        out.push(emitted);
        if let Some(stage) = self.stages.get_mut(stage_id) {
            stage.outstanding = stage.outstanding.saturating_sub(1);
            if stage.outstanding == 0 {
                self.finish_stage(stage_id, out);
            }
        }
        self.emit_progress(out);
        self.advance(out);
    }
}

/// Why an `output: json` answer does not count, or `None` when it parses.
pub(super) fn not_json(result: Option<&str>) -> Option<String> {
    parse_json_output(result.unwrap_or(""))
        .err()
        .map(|e| format!("the result is not valid JSON ({e})"))
}

/// The message that continues a failed run for another attempt.
pub fn retry_message(error: Option<&str>) -> String {
    match error {
        Some(e) => format!(
            "The previous attempt failed: {e}\nTry again, taking this into account, and finish with a final answer."
        ),
        None => "The previous attempt failed. Try again and finish with a final answer.".to_string(),
    }
}
