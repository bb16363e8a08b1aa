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
    /// Stage keys every stage inherits unless it sets them.
    #[serde(default)]
    pub defaults: StageDefaults,
    /// Shared limits of the model endpoints for this plan's runs.
    #[serde(default)]
    pub llm: LlmLimits,
    /// Where the runs execute (default: this process). See `plan::executor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorSpec>,
    /// The sandbox of every agent of the plan without a `sandbox:` of its own, as written
    /// (read by `crate::sandbox`'s parser, the one agent.yaml's goes through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<serde_yaml::Value>,
    /// The spending cap of the whole plan (`delta orchestrate --budget-usd` /
    /// `--budget-tokens` override it; docs/cost.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
    /// The stages, in any order (at least one).
    pub stages: Vec<StageSpec>,
}

/// What every stage inherits unless it overrides it. `id`, `message`, `foreach` and
/// `needs` have no default: they are what makes a stage itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageDefaults {
    /// The agent folder of stages without `agent` (relative to the plan file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// As [`StageSpec::max_iterations`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// As [`StageSpec::timeout`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationValue>,
    /// As [`StageSpec::retries`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// As [`StageSpec::on_failure`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// As [`StageSpec::isolate`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<bool>,
    /// As [`StageSpec::output`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputKind>,
}

/// Shared LLM limits per endpoint for this batch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmLimits {
    /// Model requests in flight at once per endpoint, shared by every run of the plan
    /// (1..=10000; default `max_parallel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// Requests per minute per endpoint, evenly spaced (1..=1000000; default unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Limit on each model call attempt of the plan's runs (overrides agent.yaml's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<DurationValue>,
    /// Silence allowed before a response and between its chunks (overrides agent.yaml's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<DurationValue>,
    /// `json_object`: every run of the plan asks its endpoint for JSON mode (overrides
    /// agent.yaml's `llm.response_format`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<crate::agent::ResponseFormat>,
    /// Dollars per million tokens for the runs of agents without an `llm.price` of their
    /// own (docs/cost.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<crate::llm::price::Price>,
}

/// One stage: a single run, or one run per `foreach` item.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    /// `[a-z0-9_-]+`, unique in the plan.
    pub id: String,
    /// The agent folder, relative to the plan file (default `defaults.agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A minijinja template over `vars`, `item`, `index`, `stages`.
    pub message: String,
    /// How each run's result is exposed to later stages (default text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputKind>,
    /// One run per item; absent: a single run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach: Option<ForeachSpec>,
    /// Stages this one waits for; absent = none (it starts at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Needs>,
    /// What a failed run does to the stage's dependants (default stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// Each run works in its own folder `<workspace>/<stage id>/<index>` (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<bool>,
    /// Iteration cap of each run (1..=100000; default the agent's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// Wall-clock limit of each run attempt (1 ms to 30 days; default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationValue>,
    /// How many times a FAILED run is tried again (0..=100; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// The spending cap of this stage's runs together (docs/cost.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
}

/// `needs: previous`, `needs: plan` or `needs: [plan, previous]`. `previous` stands for
/// the stage written just before this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Needs {
    /// One stage id (or `previous`).
    One(String),
    /// Several stage ids.
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
    /// The answer's text as it is (the default).
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
    Items {
        /// The items, any JSON values.
        items: Vec<serde_json::Value>,
    },
    /// A glob relative to the plan file; one item per matching path (absolute), sorted.
    Files {
        /// The pattern (`*` stays within a folder, `**` spans folders).
        files: String,
    },
    /// A text file relative to the plan file; one item per non-empty line.
    Lines {
        /// The file.
        lines: String,
    },
}

/// `"15m"`, `"30s"`, `"1h30m"`, `"250ms"` or an integer number of milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DurationValue {
    /// A number: milliseconds.
    Millis(u64),
    /// Text with units, parsed by [`crate::duration::parse_duration`].
    Text(String),
}

/// `executor:` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorSpec {
    /// `local` (default) or `slurm`.
    #[serde(rename = "type", default)]
    pub kind: ExecutorKind,
    /// Slurm partition of every job (`--partition`; default the cluster's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Slurm account the jobs are charged to (`--account`; default the user's).
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
    /// `local`: every run in this process (the default).
    #[default]
    Local,
    /// `slurm`: every run as a Slurm job, a stage's fan-out as job arrays.
    Slurm,
}
