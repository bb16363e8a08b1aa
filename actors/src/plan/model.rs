//! plan::model — the serde model of `plan.yaml`, exactly as written (paths unresolved,
//! defaults not applied). Embedders may build it in code and hand it to validation.
//!
//! Owns: field names, types and the YAML spellings of enums.
//! Must not: resolve paths, apply defaults or check cross-field rules (that is `validate.rs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Part of the orchestration id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Runs in flight across the whole plan (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<usize>,
    /// Shared workspace for all runs, relative to the plan file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Template variables (`vars.<name>`); `--var key=value` overrides.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub defaults: StageDefaults,
    #[serde(default)]
    pub llm: LlmLimits,
    /// Where the runs execute (default: this process). See `plan::executor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorSpec>,
    pub stages: Vec<StageSpec>,
}

/// What every stage inherits unless it overrides it. `id`, `message`, `foreach` and
/// `needs` have no default: they are what makes a stage itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageDefaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputKind>,
}

/// Shared LLM limits per endpoint for this batch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Limit on each model call attempt of the plan's runs (overrides agent.yaml's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<DurationValue>,
    /// Silence allowed before a response and between its chunks (overrides agent.yaml's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<DurationValue>,
}

/// One stage: a single run, or one run per `foreach` item.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    /// `[a-z0-9_-]+`, unique in the plan.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A minijinja template over `vars`, `item`, `index`, `stages`.
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach: Option<ForeachSpec>,
    /// Stages this one waits for; absent = none (it starts at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Needs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
}

/// `needs: previous`, `needs: plan` or `needs: [plan, previous]`. `previous` stands for
/// the stage written just before this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Needs {
    One(String),
    Many(Vec<String>),
}

impl Needs {
    /// The names as written (`previous` not yet resolved).
    pub fn names(&self) -> Vec<String> {
        match self {
            Needs::One(name) => vec![name.clone()],
            Needs::Many(names) => names.clone(),
        }
    }
}

/// The word in `needs` that means the stage written just before.
pub const PREVIOUS: &str = "previous";

/// How a run's result is exposed to later stages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputKind {
    /// The result must parse as JSON; later stages see the parsed value.
    Json,
    #[default]
    Text,
}

/// What a failed run does to the stage's dependants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Dependants do not start; the orchestration ends FAILED.
    #[default]
    Stop,
    /// Failed items are recorded; dependants see them with their status.
    Continue,
}

/// The four ways to give a stage its items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ForeachSpec {
    /// A template yielding a list, e.g. `"{{ stages.plan.output.steps }}"`.
    Template(String),
    /// A literal list.
    Items { items: Vec<serde_json::Value> },
    /// A glob relative to the plan file; one item per matching path (absolute), sorted.
    Files { files: String },
    /// A text file relative to the plan file; one item per non-empty line.
    Lines { lines: String },
}

/// `"15m"`, `"30s"`, `"1h30m"`, `"250ms"` or an integer number of milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DurationValue {
    Millis(u64),
    Text(String),
}

/// `executor:` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorSpec {
    /// `local` (default) or `slurm`.
    #[serde(rename = "type", default)]
    pub kind: ExecutorKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Slurm's `--time` (`30`, `1:00:00`, `1-12:00:00`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    /// Added to every `sbatch` command line, e.g. `["--mem=2G", "--qos=batch"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sbatch_args: Vec<String>,
    /// Largest array one `sbatch` submits (the cluster's `MaxArraySize` - 1 at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_array: Option<usize>,
    /// The `delta` binary as the compute nodes see it (default: this one's path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_path: Option<std::path::PathBuf>,
    /// How often the queue and the runs' files are looked at (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<DurationValue>,
}

/// `executor.type`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    #[default]
    Local,
    Slurm,
}
