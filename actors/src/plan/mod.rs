//! `plan.yaml`: the orchestration plan model, validation, fan-out expansion and scheduling.
//!
//! # Layout
//! - [`model`]: the serde model of the file (strict: unknown keys are errors).
//! - [`keys`]: the unknown-key check that names the key path and the closest known key.
//! - durations (`"15m"`, `"1h30m"`, `500` ms) are parsed by the crate-level
//!   [`crate::duration`], shared with `llm`.
//! - [`executor`]: the `executor:` key (local, or Slurm job arrays) as written.
//! - [`limits`]: the range of every number and the bounds on loading/expansion work.
//! - [`resolved`]: the validated plan ([`ResolvedPlan`], [`ResolvedStage`]), beside the model
//!   so that ordering, checks and expansion read it without importing validation.
//! - [`validate`]: [`load_plan`] reads the file within bounds, resolves paths, checks ids,
//!   numbers, templates and `foreach` forms into one immutable [`ResolvedPlan`];
//!   `needs` (private) turns `needs` into stage ids (`previous` included) and refuses cycles.
//! - `parse` (private): text to [`PlanFile`], bounded, with readable errors.
//! - `glob_walk` (private): `foreach: {files: ...}` expansion within bounds.
//! - `templates` (crate-private): the strict minijinja environment (`tojson`, undefined =
//!   error) and template analysis; `stage_checks` (private) applies it to a stage's
//!   message/foreach.
//! - [`graph`]: stage ordering ([`topo_order`], [`ready_stages`]).
//! - [`expand`]: [`expand_stage`] turns a stage plus finished stages' outputs into
//!   [`PlannedRun`]s with deterministic run ids.
//! - [`schedule`]: the pure [`Scheduler`]: stage order, submissions under `max_parallel`,
//!   retries, `on_failure`, resume decisions; events in, effects out.
//! - [`state`]: the orchestration's own files (scheduling journal, lock, summary).
//!
//! Must not: start runs, load agents (the `ResolvedPlan` keeps agent paths), import actix or
//! read the process environment.

pub mod executor;
pub mod expand;
mod glob_walk;
pub mod graph;
mod json_output;
pub mod keys;
pub mod limits;
pub mod model;
mod needs;
mod parse;
pub mod resolved;
pub mod schedule;
mod stage_checks;
pub mod state;
pub(crate) mod templates;
pub mod validate;

use std::path::PathBuf;

pub use expand::{
    expand_stage, orchestration_id, parse_json_output, PlannedRun, RunRecord, StageContext,
};
pub use graph::{ready_stages, topo_order};
pub use model::{
    DurationValue, ForeachSpec, LlmLimits, Needs, OnFailure, OutputKind, PlanFile, StageSpec,
};
pub use resolved::{ResolvedForeach, ResolvedPlan, ResolvedStage};
pub use schedule::Scheduler;
pub use stage_checks::planned_runs;
pub use validate::{load_plan, load_plan_str, load_plan_with_vars, resolve_plan};

/// Where every plan error's hint points: the plan.yaml reference.
pub const PLAN_REFERENCE: &str = "docs/plan.md";

/// Everything that can be wrong with a plan. Every variant names the plan file and the key
/// (as a path like `stages[2].timeout` or `stages.work.message`) and carries a hint that
/// ends with the reference page ([`PLAN_REFERENCE`]).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file could not be read, or is not a regular file within the size limit.
    #[error("{}: cannot read the plan: {message} (hint: check the path given to `delta orchestrate`; the format is in docs/plan.md)", file.display())]
    Read {
        /// The plan file.
        file: PathBuf,
        /// Why.
        message: String,
    },
    /// A key is missing, unknown, of the wrong type or out of range, or stages contradict
    /// each other (a cycle in `needs`, a duplicate id...).
    #[error("{}: {key}: {message} (hint: {})", file.display(), with_reference(hint))]
    Invalid {
        /// The plan file.
        file: PathBuf,
        /// The key path, e.g. `stages[2].timeout`.
        key: String,
        /// What is wrong.
        message: String,
        /// What to write instead.
        hint: String,
    },
    /// A template does not parse, reads a variable it cannot have, or fails to render.
    #[error("{}: {key}: template error in `{expression}`: {message} (hint: {})", file.display(), with_reference(hint))]
    Template {
        /// The plan file.
        file: PathBuf,
        /// The key holding the template, e.g. `stages.work.message`.
        key: String,
        /// The failing expression, quoted.
        expression: String,
        /// The template engine's complaint.
        message: String,
        /// What to write instead.
        hint: String,
    },
}

/// `hint`, ending with the reference page unless it names it already (said once).
fn with_reference(hint: &str) -> String {
    if hint.contains(PLAN_REFERENCE) {
        hint.to_owned()
    } else {
        format!("{hint}; see {PLAN_REFERENCE}")
    }
}

impl PlanError {
    /// The key path the error is about (`"<file>"` for read errors).
    pub fn key(&self) -> &str {
        match self {
            PlanError::Read { .. } => "<file>",
            PlanError::Invalid { key, .. } | PlanError::Template { key, .. } => key,
        }
    }

    pub(crate) fn invalid(
        file: &std::path::Path,
        key: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        PlanError::Invalid {
            // One path form in every plan error: absolute, as the plan's own record keeps it.
            file: std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf()),
            key: key.into(),
            message: message.into(),
            hint: hint.into(),
        }
    }
}
