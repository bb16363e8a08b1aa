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
    pub name: Option<String>,
    pub max_parallel: usize,
    /// The shared workspace; `None` = allocate the next free `<dir>/workspaces/W00N`.
    pub workspace: Option<PathBuf>,
    /// The plan's vars with the `--var` overrides applied.
    pub vars: BTreeMap<String, serde_json::Value>,
    pub llm: LlmLimits,
    /// `llm.request_timeout` / `llm.idle_timeout`, parsed (they override the agents').
    pub llm_timeouts: LlmTimeoutSettings,
    /// In file order.
    pub stages: Vec<ResolvedStage>,
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
    pub id: String,
    /// The agent folder (absolute; exists at load time).
    pub agent: PathBuf,
    /// The message template source.
    pub message: String,
    pub output: OutputKind,
    pub foreach: Option<ResolvedForeach>,
    /// The stages this one waits for (from `needs` only; `previous` resolved).
    pub needs: Vec<String>,
    pub on_failure: OnFailure,
    pub isolate: bool,
    /// `None` = the agent's own limit.
    pub max_iterations: Option<u32>,
    /// Wall-clock limit per run; `None` = no limit.
    pub timeout: Option<Duration>,
    pub retries: u32,
}

/// A `foreach` with its paths resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolvedForeach {
    /// A template evaluated when the stage starts.
    Template(String),
    Items(Vec<serde_json::Value>),
    /// An absolute glob pattern; matched (sorted) when the stage starts.
    Files {
        pattern: String,
    },
    /// An absolute path to a text file; one item per non-empty line.
    Lines(PathBuf),
}
