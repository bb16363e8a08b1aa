//! plan::resolved — the validated plan: [`ResolvedPlan`], its [`ResolvedStage`]s and their
//! [`ResolvedForeach`] forms. Plain immutable values that validation produces and graph
//! ordering, template checks, expansion and scheduling read.
//!
//! Must not: validate (that is `validate.rs`) or import the modules that read these types.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::model::{LlmLimits, OnFailure, OutputKind, PlanFile};
use crate::llm::LlmTimeoutSettings;

/// A validated plan. Immutable; the supervisor and `--dry-run` read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedPlan {
    /// The plan file (absolute), named in every error.
    pub file: PathBuf,
    /// The directory relative paths were resolved against.
    pub dir: PathBuf,
    /// `name` as written; it starts the orchestration id.
    pub name: Option<String>,
    /// Runs in flight at once across the plan (default 8).
    pub max_parallel: usize,
    /// The shared workspace; `None` = allocate the next free `<dir>/workspaces/W00N`.
    pub workspace: Option<PathBuf>,
    /// The plan's vars with the `--var` overrides applied.
    pub vars: BTreeMap<String, serde_json::Value>,
    /// The endpoint limits shared by the plan's runs.
    pub llm: LlmLimits,
    /// `llm.request_timeout` / `llm.idle_timeout`, parsed (they override the agents').
    pub llm_timeouts: LlmTimeoutSettings,
    /// In file order.
    pub stages: Vec<ResolvedStage>,
    /// `sandbox`: the default sandbox of the plan's agents (an agent's own wins).
    pub sandbox: Option<crate::sandbox::SandboxPolicy>,
    /// The spending cap of the whole plan (`budget:`), validated.
    pub budget: Option<crate::budget::Budget>,
    /// The model as written, for the copy kept with the orchestration state.
    pub source: PlanFile,
}

impl ResolvedPlan {
    /// The stage with this id.
    pub fn stage(&self, id: &str) -> Option<&ResolvedStage> {
        self.stages.iter().find(|stage| stage.id == id)
    }
}

/// One stage with its defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedStage {
    /// The stage's id.
    pub id: String,
    /// The agent folder (absolute; exists at load time).
    pub agent: PathBuf,
    /// The message template source.
    pub message: String,
    /// How each run's result is exposed to later stages.
    pub output: OutputKind,
    /// The items; `None`: one run.
    pub foreach: Option<ResolvedForeach>,
    /// The stages this one waits for (from `needs` only; `previous` resolved).
    pub needs: Vec<String>,
    /// What a failed run does to the dependants.
    pub on_failure: OnFailure,
    /// Each run works in `<workspace>/<stage id>/<index>`.
    pub isolate: bool,
    /// `None` = the agent's own limit.
    pub max_iterations: Option<u32>,
    /// Wall-clock limit per run; `None` = no limit.
    pub timeout: Option<Duration>,
    /// How many times a FAILED run is tried again.
    pub retries: u32,
    /// The spending cap of the stage's runs together (`budget:`), validated.
    pub budget: Option<crate::budget::Budget>,
}

/// A `foreach` with its paths resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolvedForeach {
    /// A template evaluated when the stage starts.
    Template(String),
    /// A literal list.
    Items(Vec<serde_json::Value>),
    /// An absolute glob pattern; matched (sorted) when the stage starts.
    Files {
        /// The pattern (`*` stays within a folder, `**` spans folders).
        pattern: String,
    },
    /// An absolute path to a text file; one item per non-empty line.
    Lines(PathBuf),
}
