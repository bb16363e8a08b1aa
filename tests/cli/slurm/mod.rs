//! CLI tests of `delta orchestrate --executor slurm`: `--dry-run` (no cluster needed), and
//! against a real single-node cluster (`scripts/slurm-local.sh up`): `--check`, the
//! map-reduce example giving the local executor's report and summary, a cancelled array
//! task retried, SIGKILL of the orchestrating process then `--resume`, and the relay (one
//! `requests_per_minute` across jobs, no provider key anywhere a job or Slurm writes); and
//! `executor.sbatch_args` against the installed sbatch's option parser (no cluster needed);
//! what a check and an orchestration leave on disk (nothing, and private folders).
//!
//! Tests that need the cluster say so loudly when none answers: an eprintln and a failing
//! assertion, unless DELTA_SKIP_SLURM=1 says to skip them knowingly (they print SKIPPED).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod budget;
mod cluster;
mod dry_run;
mod exec_planned;
mod faults;
mod map_reduce;
mod options;
mod private;
mod relay;
