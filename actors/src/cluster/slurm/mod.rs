//! cluster::slurm — the Slurm side of `delta orchestrate --executor slurm`.
//!
//! # Layout
//! - [`settings`]: [`SlurmSettings`] (partition, account, time limit, extra sbatch arguments,
//!   largest array, the `delta` binary on the nodes), validated with key-naming errors.
//! - [`sbatch`]: a stage's runs to submit → `sbatch` command lines: job arrays chunked at
//!   the largest array, a plain job for a single run, job names and comments that carry the
//!   orchestration, stage and item so `squeue`/`scontrol` show what is what, and the short
//!   job script (no task text, no secret, no long argv).
//! - [`sbatch_options`]: sbatch's option table and the allow-list a plan's `sbatch_args`
//!   pass (full spellings only; nothing delta sets, however abbreviated or clustered).
//! - [`squeue`]: the queue as `squeue` prints it, parsed back to (stage, item) per task.
//! - [`commands`]: running `sbatch`, `squeue`, `scancel` (async, each bounded in time) and
//!   checking they are on PATH.
//! - [`probe`]: the shared-filesystem check (`--executor slurm --check`).
//!
//! Must not: import actix or see a provider key.

pub mod commands;
pub mod probe;
pub mod sbatch;
pub mod sbatch_options;
pub mod settings;
pub mod squeue;

pub use commands::{SlurmCommandError, SlurmTools};
pub use sbatch::{plan_submissions, JobTemplate, Submission, SubmissionShape};
pub use settings::{SettingsError, SlurmSettings, DEFAULT_MAX_ARRAY};
pub use squeue::{parse_queue, QueuedTask, TaskState};
