//! `context.yaml`: the recipe of what the model sees (spec §2.4.3, §2.4.8), parsed and
//! validated.
//!
//! Owns the source schema (`file`, `computed_file`, `pipeline`, `journal`), the token budget
//! (`total_max_tokens`, a source's `max_tokens`), the default recipe written by `delta init`
//! (spec §2.4.4) and `${AGENT_HOME}`/`${CWD}` expansion; `options` parses the budget,
//! condition, cache, pipeline and compaction keys. It must not read the sources or run
//! generators: `crate::context` executes the recipe at run time.

mod options;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod options_tests;

pub use options::{
    Compaction, CompactionStrategy, GeneratorCache, OnOverflow, PipelineStage, SourceCondition,
    TaskPattern, TokenCap, MAX_CONTEXT_TOKENS, MIN_CONTEXT_TOKENS,
};
pub(crate) use options::{CACHE_KEYS, COMPACTION_KEYS, CONDITION_KEYS, GENERATOR_KEYS, STAGE_KEYS};

use std::path::Path;

use serde::Serialize;
use serde_yaml::Value;

use super::error::AgentError;
use super::read_yaml;
use crate::yaml::{closest, Fields, UnknownKeys};

/// Default generator timeout (spec §2.4.3).
pub const DEFAULT_GENERATOR_TIMEOUT_MS: u64 = 30_000;
/// Default cap on one `file` or `computed_file` source (a source's `max_bytes`): far more
/// text than any model takes at once (≈ 250,000 tokens), far less than what a runaway
/// file (a log, a dump a tool wrote into `DELTA.md`) would cost in memory at every
/// iteration.
pub const DEFAULT_SOURCE_MAX_BYTES: u64 = 1024 * 1024;
/// Default cap on all `file` and `computed_file` sources of one context together (the
/// recipe's top-level `max_bytes`).
pub const DEFAULT_CONTEXT_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// The largest `max_bytes` context.yaml may set (per source or in total).
pub const MAX_CONFIGURABLE_BYTES: u64 = 256 * 1024 * 1024;

const DEFAULT_CONTEXT_YAML: &str = "# Delta Engine Context Strategy (v1.6+)
# This file defines HOW the Agent's attention window (LLM context) is constructed.
# It is the explicit \"recipe\" for what the Agent sees.

sources:
  # 1. Core Instructions (The System Prompt)
  # This is the primary definition of the Agent's role, rules, and goals.
  # Note: System Prompt must be explicitly declared here to ensure recipe completeness.
  - type: file
    id: system_prompt
    path: '${AGENT_HOME}/system_prompt.md'

  # 2. Workspace Guide (Optional: DELTA.md)
  # If a DELTA.md file exists in the workspace (CWD), it is automatically loaded.
  # Use this to provide workspace-specific context, rules, or documentation.
  - type: file
    id: workspace_guide
    path: '${CWD}/DELTA.md'
    on_missing: skip  # Skip if DELTA.md does not exist

  # 3. Conversation History (The Journal)
  # Includes the history of Thoughts, Actions, and Observations.
  - type: journal
    id: conversation_history
    # By default, the full history is included.
    # To limit history length (save tokens or manage attention), uncomment and adjust:
    # max_iterations: 20
";

/// The commented default recipe of spec §2.4.4.
pub fn default_context_yaml() -> &'static str {
    DEFAULT_CONTEXT_YAML
}

/// What to do when a source's file is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMissing {
    /// The run fails, naming the source (the default).
    Error,
    /// The source is left out of the context.
    Skip,
}

/// One context source, in recipe order. Paths and argv still contain `${AGENT_HOME}` and
/// `${CWD}`; the engine expands them when the run builds its context.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContextSource {
    /// `type: file`: a file's text, as one system message.
    File {
        /// The source's name, unique in the recipe (the message's `# Context Block: <id>`).
        id: String,
        /// The file; relative paths are taken from the workspace. It must resolve inside
        /// the agent folder or the workspace.
        path: String,
        /// What to do when the file does not exist.
        on_missing: OnMissing,
        /// The most bytes read from the file (`max_bytes`, default
        /// [`DEFAULT_SOURCE_MAX_BYTES`]): a larger file fails the run, naming the source.
        max_bytes: u64,
        /// `max_tokens` / `on_overflow`: the most tokens it brings to a request.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<TokenCap>,
        /// `condition`: when the source is part of a request (always when `None`).
        #[serde(skip_serializing_if = "Option::is_none")]
        condition: Option<SourceCondition>,
    },
    /// `type: computed_file`: a generator writes a file, whose text becomes one system
    /// message.
    ComputedFile {
        /// The source's name, unique in the recipe.
        id: String,
        /// The generator's argv (no shell), run in the workspace.
        command: Vec<String>,
        /// The generator's timeout, in milliseconds (default
        /// [`DEFAULT_GENERATOR_TIMEOUT_MS`]).
        timeout_ms: u64,
        /// The file the generator writes.
        output_path: String,
        /// What to do when the generator succeeded but wrote no file (a failing generator
        /// always fails the run).
        on_missing: OnMissing,
        /// The most bytes read from the output file (`max_bytes`, default
        /// [`DEFAULT_SOURCE_MAX_BYTES`]).
        max_bytes: u64,
        /// `max_tokens` / `on_overflow`.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<TokenCap>,
        /// `condition`.
        #[serde(skip_serializing_if = "Option::is_none")]
        condition: Option<SourceCondition>,
        /// `cache`: the generator runs again only when a watched file changed.
        #[serde(skip_serializing_if = "Option::is_none")]
        cache: Option<GeneratorCache>,
    },
    /// `type: pipeline`: generators run in turn, each reading the file the one before wrote
    /// (`DELTA_PIPELINE_INPUT`); the last one's file becomes one system message.
    Pipeline {
        /// The source's name, unique in the recipe.
        id: String,
        /// The stages, in order (at least one).
        stages: Vec<PipelineStage>,
        /// What to do when the last stage succeeded but wrote no file.
        on_missing: OnMissing,
        /// The most bytes read from the last stage's file.
        max_bytes: u64,
        /// `max_tokens` / `on_overflow`.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<TokenCap>,
        /// `condition`.
        #[serde(skip_serializing_if = "Option::is_none")]
        condition: Option<SourceCondition>,
    },
    /// `type: journal`: the conversation so far.
    Journal {
        /// The source's name, unique in the recipe.
        id: String,
        /// Keep only the last this many iterations (the task is always kept); `None` keeps
        /// everything.
        max_iterations: Option<u32>,
        /// `compaction`: how the conversation is made to fit the budget.
        compaction: Compaction,
    },
}

impl ContextSource {
    /// The source's `id`, whatever its type.
    pub fn id(&self) -> &str {
        match self {
            ContextSource::File { id, .. }
            | ContextSource::ComputedFile { id, .. }
            | ContextSource::Pipeline { id, .. }
            | ContextSource::Journal { id, .. } => id,
        }
    }

    /// The source's `condition`, when it has one.
    pub fn condition(&self) -> Option<&SourceCondition> {
        match self {
            ContextSource::File { condition, .. }
            | ContextSource::ComputedFile { condition, .. }
            | ContextSource::Pipeline { condition, .. } => condition.as_ref(),
            ContextSource::Journal { .. } => None,
        }
    }

    /// The journal's compaction settings (`None` for other sources).
    pub fn compaction(&self) -> Option<&Compaction> {
        match self {
            ContextSource::Journal { compaction, .. } => Some(compaction),
            _ => None,
        }
    }
}

/// The parsed `context.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextRecipe {
    /// The sources, in the order their messages are sent.
    pub sources: Vec<ContextSource>,
    /// The most bytes the `file` and `computed_file` sources may bring together (top-level
    /// `max_bytes`, default [`DEFAULT_CONTEXT_MAX_BYTES`]); the journal is not counted.
    pub max_bytes: u64,
    /// `total_max_tokens`: the most tokens of one request, system blocks and conversation
    /// together. `None`: the model's context window less the reply (`llm.max_tokens`) and a
    /// margin, when the window is known.
    pub total_max_tokens: Option<u64>,
}

impl ContextRecipe {
    /// The `journal` source's compaction settings (the defaults without a journal source).
    pub fn compaction(&self) -> Compaction {
        self.sources
            .iter()
            .find_map(ContextSource::compaction)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether building the context reads the run's child environment: a generator runs
    /// (`computed_file`, `pipeline`) or a condition is `env_set`. A recipe of files and the
    /// journal does not, and its runs skip building that environment.
    pub fn reads_child_environment(&self) -> bool {
        self.sources.iter().any(|source| {
            matches!(
                source,
                ContextSource::ComputedFile { .. } | ContextSource::Pipeline { .. }
            ) || matches!(source.condition(), Some(SourceCondition::EnvSet { .. }))
        })
    }
}

/// Replaces `${AGENT_HOME}` and `${CWD}` in a path or argv element.
pub(crate) fn expand_path_vars(template: &str, agent_home: &Path, cwd: &Path) -> String {
    template
        .replace("${AGENT_HOME}", &agent_home.to_string_lossy())
        .replace("${CWD}", &cwd.to_string_lossy())
}

const SOURCE_TYPES: [&str; 4] = ["file", "computed_file", "pipeline", "journal"];

/// The keys of context.yaml, per place (what the parsers below read).
pub(crate) const CONTEXT_KEYS: [&str; 3] = ["sources", "max_bytes", "total_max_tokens"];
pub(crate) const FILE_SOURCE_KEYS: [&str; 8] = [
    "type",
    "id",
    "path",
    "on_missing",
    "max_bytes",
    "max_tokens",
    "on_overflow",
    "condition",
];
pub(crate) const COMPUTED_FILE_SOURCE_KEYS: [&str; 10] = [
    "type",
    "id",
    "generator",
    "output_path",
    "on_missing",
    "max_bytes",
    "max_tokens",
    "on_overflow",
    "condition",
    "cache",
];
pub(crate) const PIPELINE_SOURCE_KEYS: [&str; 8] = [
    "type",
    "id",
    "stages",
    "on_missing",
    "max_bytes",
    "max_tokens",
    "on_overflow",
    "condition",
];
pub(crate) const JOURNAL_SOURCE_KEYS: [&str; 4] = ["type", "id", "max_iterations", "compaction"];

/// Loads `<agent_home>/context.yaml`; a missing file is an error carrying the default recipe.
pub(crate) fn load_context_recipe(
    agent_home: &Path,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<ContextRecipe, AgentError> {
    let file = agent_home.join("context.yaml");
    if !file.is_file() {
        return Err(AgentError::MissingContext {
            path: file,
            recipe: DEFAULT_CONTEXT_YAML,
        });
    }
    let doc = read_yaml(&file)?;
    parse_context_recipe(&file, &doc, policy, warnings)
}

pub(crate) fn parse_context_recipe(
    file: &Path,
    doc: &Value,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<ContextRecipe, AgentError> {
    if doc.is_null() {
        return Err(AgentError::invalid(
            file,
            "the file is empty",
            format!("start from the default recipe:\n\n{DEFAULT_CONTEXT_YAML}"),
        ));
    }
    let root = Fields::new(file, "", doc)?;
    root.check_keys(&CONTEXT_KEYS, policy, warnings)?;
    let max_bytes = parse_max_bytes(&root)?.unwrap_or(DEFAULT_CONTEXT_MAX_BYTES);
    let total_max_tokens = options::token_count(&root, "total_max_tokens")?;
    let items = root.sequence("sources")?.unwrap_or_default();
    if items.is_empty() {
        return Err(AgentError::invalid(
            file,
            "`sources` must list at least one source",
            "add at least the system prompt: `- type: file` with `path: '${AGENT_HOME}/system_prompt.md'`",
        ));
    }
    let sources = items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_source(file, i, item, policy, warnings))
        .collect::<Result<Vec<_>, _>>()?;
    refuse_second_journal(file, &sources)?;
    Ok(ContextRecipe {
        sources,
        max_bytes,
        total_max_tokens,
    })
}

/// `total_max_tokens` and `llm.max_tokens` must fit in `llm.context_window` when all three
/// are set: a budget the window cannot hold would be refused by the server at every call.
pub(crate) fn check_budget_fits(
    agent_home: &Path,
    recipe: &ContextRecipe,
    llm: &super::LlmSettings,
) -> Result<(), AgentError> {
    let (Some(total), Some(window)) = (recipe.total_max_tokens, llm.context_window) else {
        return Ok(());
    };
    let reply = u64::from(llm.max_tokens.unwrap_or(0));
    if total + reply <= window {
        return Ok(());
    }
    Err(AgentError::invalid(
        &agent_home.join("context.yaml"),
        format!(
            "`total_max_tokens` ({total}) and agent.yaml's `llm.max_tokens` ({reply}) add up to more than `llm.context_window` ({window})"
        ),
        format!(
            "lower `total_max_tokens` to at most {}, or leave it out (the budget is then the window less the reply and a margin)",
            window.saturating_sub(reply)
        ),
    ))
}

/// `max_bytes` of a source or of the whole recipe: a whole number of bytes, 1 up to
/// [`MAX_CONFIGURABLE_BYTES`].
fn parse_max_bytes(fields: &Fields<'_>) -> Result<Option<u64>, AgentError> {
    let Some(bytes) = fields.positive_integer("max_bytes")? else {
        return Ok(None);
    };
    if bytes > MAX_CONFIGURABLE_BYTES {
        return Err(AgentError::invalid(
            fields.file(),
            format!(
                "`{}` is {bytes}, above the most delta reads into a context ({MAX_CONFIGURABLE_BYTES})",
                fields.key_path("max_bytes")
            ),
            "a model takes far less text at once; trim the source, or summarize it with a `computed_file` generator",
        ));
    }
    Ok(Some(bytes))
}

/// Two `journal` sources would send the conversation twice: every tool call id repeated,
/// which providers refuse (HTTP 400).
fn refuse_second_journal(file: &Path, sources: &[ContextSource]) -> Result<(), AgentError> {
    let journals: Vec<(usize, &str)> = sources
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, ContextSource::Journal { .. }))
        .map(|(i, s)| (i, s.id()))
        .collect();
    let [(first, first_id), (second, second_id), ..] = journals[..] else {
        return Ok(());
    };
    Err(AgentError::invalid(
        file,
        format!(
            "`sources[{first}]` (id `{first_id}`) and `sources[{second}]` (id `{second_id}`) are both `type: journal`: the conversation would be sent twice, and providers refuse its repeated tool call ids"
        ),
        "keep one `type: journal` source (its `max_iterations` limits how much history is sent)",
    ))
}

fn parse_on_missing(fields: &Fields<'_>) -> Result<OnMissing, AgentError> {
    match fields.string("on_missing")?.as_deref() {
        None | Some("error") => Ok(OnMissing::Error),
        Some("skip") => Ok(OnMissing::Skip),
        Some(other) => Err(AgentError::invalid(
            fields.file(),
            format!("`{}` is `{other}`", fields.key_path("on_missing")),
            "use `error` (the default) or `skip`",
        )),
    }
}

fn parse_source(
    file: &Path,
    index: usize,
    item: &Value,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<ContextSource, AgentError> {
    let fields = Fields::new(file, &format!("sources[{index}]"), item)?;
    let kind =
        fields.required_string("type", "use one of: file, computed_file, pipeline, journal")?;
    let id = fields.string("id")?.unwrap_or_else(|| kind.clone());
    let source = match kind.as_str() {
        "file" => {
            fields.check_keys(&FILE_SOURCE_KEYS, policy, warnings)?;
            ContextSource::File {
                path: fields
                    .required_string("path", "e.g. path: '${AGENT_HOME}/system_prompt.md'")?,
                on_missing: parse_on_missing(&fields)?,
                max_bytes: parse_max_bytes(&fields)?.unwrap_or(DEFAULT_SOURCE_MAX_BYTES),
                max_tokens: options::token_cap(&fields)?,
                condition: options::condition(&fields, policy, warnings)?,
                id,
            }
        }
        "computed_file" => {
            fields.check_keys(&COMPUTED_FILE_SOURCE_KEYS, policy, warnings)?;
            let (command, timeout_ms) = options::generator(
                &fields,
                "generator",
                policy,
                warnings,
                DEFAULT_GENERATOR_TIMEOUT_MS,
            )?;
            ContextSource::ComputedFile {
                command,
                timeout_ms,
                output_path: fields.required_string(
                    "output_path",
                    "the file the generator writes, e.g. '${CWD}/.delta/context_artifacts/summary.md'",
                )?,
                on_missing: parse_on_missing(&fields)?,
                max_bytes: parse_max_bytes(&fields)?.unwrap_or(DEFAULT_SOURCE_MAX_BYTES),
                max_tokens: options::token_cap(&fields)?,
                condition: options::condition(&fields, policy, warnings)?,
                cache: options::cache(&fields, policy, warnings)?,
                id,
            }
        }
        "pipeline" => {
            fields.check_keys(&PIPELINE_SOURCE_KEYS, policy, warnings)?;
            ContextSource::Pipeline {
                stages: options::stages(&fields, policy, warnings, DEFAULT_GENERATOR_TIMEOUT_MS)?,
                on_missing: parse_on_missing(&fields)?,
                max_bytes: parse_max_bytes(&fields)?.unwrap_or(DEFAULT_SOURCE_MAX_BYTES),
                max_tokens: options::token_cap(&fields)?,
                condition: options::condition(&fields, policy, warnings)?,
                id,
            }
        }
        "journal" => {
            fields.check_keys(&JOURNAL_SOURCE_KEYS, policy, warnings)?;
            ContextSource::Journal {
                max_iterations: fields.positive_u32("max_iterations")?,
                compaction: options::compaction(&fields, policy, warnings)?,
                id,
            }
        }
        other => {
            let suggestion = closest(other, &SOURCE_TYPES)
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err(AgentError::invalid(
                file,
                format!("`{}` is `{other}`{suggestion}", fields.key_path("type")),
                "use one of: file, computed_file, pipeline, journal",
            ));
        }
    };
    Ok(source)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ContextRecipe, AgentError> {
        let doc: Value = serde_yaml::from_str(text).unwrap();
        parse_context_recipe(
            Path::new("/a/context.yaml"),
            &doc,
            UnknownKeys::Refuse,
            &mut Vec::new(),
        )
    }

    #[test]
    fn default_recipe_parses_to_three_sources() {
        let recipe = parse(default_context_yaml()).unwrap();
        assert_eq!(
            recipe.sources,
            vec![
                ContextSource::File {
                    id: "system_prompt".into(),
                    path: "${AGENT_HOME}/system_prompt.md".into(),
                    on_missing: OnMissing::Error,
                    max_bytes: DEFAULT_SOURCE_MAX_BYTES,
                    max_tokens: None,
                    condition: None,
                },
                ContextSource::File {
                    id: "workspace_guide".into(),
                    path: "${CWD}/DELTA.md".into(),
                    on_missing: OnMissing::Skip,
                    max_bytes: DEFAULT_SOURCE_MAX_BYTES,
                    max_tokens: None,
                    condition: None,
                },
                ContextSource::Journal {
                    id: "conversation_history".into(),
                    max_iterations: None,
                    compaction: Compaction::default(),
                },
            ]
        );
    }

    #[test]
    fn computed_file_defaults_and_ids() {
        let recipe = parse(
            "sources:\n  - type: computed_file\n    generator:\n      command: [python3, '${AGENT_HOME}/s.py']\n    output_path: '${CWD}/o.md'\n  - type: journal\n    max_iterations: 5\n",
        )
        .unwrap();
        assert_eq!(
            recipe.sources[0],
            ContextSource::ComputedFile {
                id: "computed_file".into(),
                command: vec!["python3".into(), "${AGENT_HOME}/s.py".into()],
                timeout_ms: 30_000,
                output_path: "${CWD}/o.md".into(),
                on_missing: OnMissing::Error,
                max_bytes: DEFAULT_SOURCE_MAX_BYTES,
                max_tokens: None,
                condition: None,
                cache: None,
            }
        );
        assert_eq!(recipe.max_bytes, DEFAULT_CONTEXT_MAX_BYTES);
        assert_eq!(recipe.sources[1].id(), "journal");
    }

    #[test]
    fn invalid_recipes_name_the_key() {
        let cases = [
            ("sources: []\n", "at least one source"),
            ("sources:\n  - type: files\n    path: x\n", "(did you mean `file`?)"),
            ("sources:\n  - type: file\n", "`sources[0].path` is required"),
            ("sources:\n  - type: file\n    path: x\n    on_missing: ignore\n", "`sources[0].on_missing` is `ignore`"),
            ("sources:\n  - type: computed_file\n    output_path: x\n", "`sources[0].generator` is required"),
            ("sources:\n  - type: computed_file\n    generator: {command: []}\n    output_path: x\n", "non-empty list"),
            ("sources:\n  - type: journal\n    max_iterations: 0\n", "greater than 0"),
            ("sources:\n  - type: file\n    path: x\n    max_bytes: 0\n", "`sources[0].max_bytes`"),
            ("sources:\n  - type: file\n    path: x\n    max_bytes: 1GB\n", "`sources[0].max_bytes`"),
            ("max_bytes: 300000000\nsources:\n  - type: file\n    path: x\n", "`max_bytes` is 300000000, above"),
            (
                "sources:\n  - type: journal\n    id: a\n  - type: file\n    path: x\n  - type: journal\n    id: b\n",
                "`sources[0]` (id `a`) and `sources[2]` (id `b`) are both `type: journal`",
            ),
        ];
        for (text, phrase) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(phrase), "{text}: {err}");
            assert!(err.contains("/a/context.yaml"), "{err}");
        }
    }

    #[test]
    fn expand_path_vars_replaces_both_variables() {
        let out = expand_path_vars(
            "${AGENT_HOME}/a:${CWD}/b:${OTHER}",
            Path::new("/h"),
            Path::new("/w"),
        );
        assert_eq!(out, "/h/a:/w/b:${OTHER}");
    }
}
