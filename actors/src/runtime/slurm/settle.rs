//! A run whose Slurm job left the queue without writing its result: what its own files say.
//! The janitor's rule settles it first (a RUNNING run whose lock is free lost its process:
//! INTERRUPTED, or the journal's final status when it got that far), then the metadata is
//! the outcome: COMPLETED stays COMPLETED; a run the job left unfinished is FAILED (the
//! scheduler continues it as a retry); a run that never started is FAILED without
//! metadata (started afresh); a run this executor cancelled is INTERRUPTED.

use std::path::Path;

use crate::janitor::check_run;
use crate::metadata::{lock_is_held, read_metadata};
use crate::plan::schedule::{RunEnd, RunOutcome};
use crate::protocol::{RunErrorKind, RunStatus, TokenUsage};
use crate::workspace::RunPaths;

use super::SlurmExecutor;

/// The last bytes of a job's output quoted in an error.
const LOG_TAIL: usize = 600;

impl SlurmExecutor {
    /// `None` while another process holds the run's lock (it is still being driven).
    pub(super) fn settle(&mut self, run_id: &str) -> Option<RunEnd> {
        let run = self.runs.get(run_id)?;
        let paths = RunPaths::new(&run.work_dir, run_id);
        if lock_is_held(&paths.run_dir).unwrap_or(false) {
            return None;
        }
        let job = run.job.clone().unwrap_or_default();
        let cancelled = run.cancelled;
        // Recorded by a node, so on another host: the job is gone, so is its process.
        let _ = check_run(&run.work_dir, run_id, true);
        let outcome = match read_metadata(&paths.run_dir) {
            Ok(meta) => {
                let lifetime_usage = meta.usage_so_far();
                let lifetime_cost = meta.cost_so_far();
                let duration_ms = meta.last_duration_ms();
                let (status, error) = match meta.status {
                    RunStatus::Completed | RunStatus::WaitingForInput | RunStatus::Failed => {
                        (meta.status, meta.error.map(|e| e.to_string()))
                    }
                    _ if cancelled => (RunStatus::Interrupted, meta.error.map(|e| e.to_string())),
                    _ => (
                        RunStatus::Failed,
                        Some(format!(
                            "{}: Slurm job {job} ended without finishing the run (node failure, scancel, preemption or time limit){}",
                            RunErrorKind::ExecutorLost,
                            self.log_tail(run_id)
                        )),
                    ),
                };
                RunOutcome {
                    tokens_saved: 0,
                    run_id: run_id.to_owned(),
                    empty_answer: status == RunStatus::Completed
                        && meta.result.as_deref().is_some_and(|r| r.trim().is_empty()),
                    usage: lifetime_usage,
                    cost: lifetime_cost,
                    status,
                    result: meta.result,
                    error,
                    duration_ms,
                    iterations: meta.iterations,
                    metadata_written: true,
                }
            }
            Err(_) => {
                let (status, error) = if cancelled {
                    (
                        RunStatus::Interrupted,
                        "interrupted before its job started".to_owned(),
                    )
                } else {
                    (
                        RunStatus::Failed,
                        format!(
                            "executor_lost: Slurm job {job} ended before the run started{}",
                            self.log_tail(run_id)
                        ),
                    )
                };
                RunOutcome {
                    tokens_saved: 0,
                    run_id: run_id.to_owned(),
                    status,
                    result: None,
                    error: Some(error),
                    duration_ms: 0,
                    iterations: 0,
                    usage: TokenUsage::default(),
                    cost: Default::default(),
                    empty_answer: false,
                    metadata_written: paths.metadata.exists(),
                }
            }
        };
        Some(RunEnd::Finished(outcome))
    }

    /// The end of a run cancelled before it was submitted.
    pub(super) fn unstarted_interrupted(&self, run_id: &str) -> RunEnd {
        let written = self
            .runs
            .get(run_id)
            .is_some_and(|r| RunPaths::new(&r.work_dir, run_id).metadata.exists());
        RunEnd::Finished(RunOutcome {
            tokens_saved: 0,
            run_id: run_id.to_owned(),
            status: RunStatus::Interrupted,
            result: None,
            error: Some("interrupted before its job was submitted".to_owned()),
            duration_ms: 0,
            iterations: 0,
            usage: TokenUsage::default(),
            cost: Default::default(),
            empty_answer: false,
            metadata_written: written,
        })
    }

    /// `; its output (<file>) ends: <tail>` when the job left output, else empty.
    fn log_tail(&self, run_id: &str) -> String {
        let Some(run) = self.runs.get(run_id) else {
            return String::new();
        };
        let logs = crate::cluster::slurm::sbatch::logs_dir(&self.orchestration_dir);
        let Some(job) = &run.job else {
            return String::new();
        };
        let file = match job.split_once('_') {
            Some((array, task)) => logs.join(format!("{}-{array}_{task}.out", run.stage)),
            None => logs.join(format!("{}-{}-{job}.out", run.stage, run.index)),
        };
        tail(&file)
            .map(|t| format!("; its output ({}) ends: {t}", file.display()))
            .unwrap_or_default()
    }
}

fn tail(file: &Path) -> Option<String> {
    // A job's output file, written by the job (its tools too): within bounds.
    let text = crate::bounded_read::read(
        file,
        crate::bounded_read::JOURNAL,
        crate::bounded_read::Links::Refuse,
    )
    .ok()?;
    let start = text.len().saturating_sub(LOG_TAIL);
    let tail = String::from_utf8_lossy(&text[start..]).trim().to_owned();
    (!tail.is_empty()).then_some(tail)
}
