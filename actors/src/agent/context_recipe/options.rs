//! The context.yaml keys of the token budget and of when and how sources are made (spec
//! §2.4.8): a source's `max_tokens` and `on_overflow`, its `condition`, a generator's `cache`,
//! a pipeline's `stages`, and the journal's `compaction`. Parsed and validated here, so a
//! mistake names the file, the key and a fix before any run starts.
//!
//! Must not: evaluate a condition, hash a file or run a generator (`crate::context` does, at
//! run time).

use serde::Serialize;
use serde_yaml::Value;

use crate::agent::error::AgentError;
use crate::yaml::{closest, Fields, UnknownKeys};

/// The smallest `total_max_tokens` (and `llm.context_window`) accepted: less cannot hold a
/// system prompt and a turn.
pub const MIN_CONTEXT_TOKENS: u64 = 256;
/// The largest `total_max_tokens` (and `llm.context_window`) accepted.
pub const MAX_CONTEXT_TOKENS: u64 = 100_000_000;
/// Iterations kept whole by default when the journal is compacted.
pub const DEFAULT_KEEP_LAST: u32 = 2;
/// Share of the budget a compaction brings the request down to, by default.
pub const DEFAULT_COMPACT_TO_PERCENT: u8 = 50;
/// Reply cap of a summary call, by default.
pub const DEFAULT_SUMMARY_MAX_TOKENS: u32 = 512;

/// What happens to a source longer than its `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOverflow {
    /// Its head and tail are kept, with a line naming the file and what was cut (default).
    Cut,
    /// The run fails, naming the source.
    Fail,
}

/// `max_tokens` (and `on_overflow`) of a `file`, `computed_file` or `pipeline` source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TokenCap {
    /// The most tokens the source brings to a request.
    pub max_tokens: u64,
    /// What a longer source does.
    pub on_overflow: OnOverflow,
}

/// A task pattern, kept as written and compiled once.
#[derive(Debug, Clone)]
pub struct TaskPattern {
    /// As written in context.yaml.
    pub text: String,
    /// Compiled (`task_matches`: the regular expression; `task_contains`: the words).
    pub regex: regex_lite::Regex,
}

impl PartialEq for TaskPattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Serialize for TaskPattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// `condition:` of a source: the source is part of a request only when it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "when", rename_all = "snake_case")]
pub enum SourceCondition {
    /// The task (the run's first message) contains one of the `|`-separated words of
    /// `pattern`, whatever their case.
    TaskContains {
        /// The words.
        pattern: TaskPattern,
    },
    /// The task matches the regular expression `pattern`.
    TaskMatches {
        /// The expression.
        pattern: TaskPattern,
    },
    /// `path` exists (`${AGENT_HOME}`, `${CWD}`; relative paths are taken from the workspace).
    FileExists {
        /// The path, variables unexpanded.
        path: String,
    },
    /// The run's environment has `name` set and not empty.
    EnvSet {
        /// The variable.
        name: String,
    },
}

/// `cache:` of a `computed_file`: the generator runs again only when a watched file changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GeneratorCache {
    /// Glob patterns of the files whose contents key the cache (relative to the workspace,
    /// or under `${AGENT_HOME}/` or `${CWD}/`).
    pub invalidate_on: Vec<String>,
}

/// One stage of a `pipeline` source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineStage {
    /// The generator's argv (no shell), run in the workspace.
    pub command: Vec<String>,
    /// Its timeout, in milliseconds.
    pub timeout_ms: u64,
    /// The file it writes: the next stage's input, or the source's text for the last.
    pub output: String,
}

/// How the journal is made to fit the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionStrategy {
    /// Older tool results become a one-line stub naming the tool, its size and its record
    /// (the default).
    Mask,
    /// A model call summarises the older iterations, which the summary replaces.
    Summarize,
    /// Masking first; a summary only when masking is not enough.
    MaskThenSummarize,
    /// Never compacted (a request that does not fit is sent anyway).
    Off,
}

impl CompactionStrategy {
    /// The spelling in context.yaml and in CONTEXT_COMPACTED events.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionStrategy::Mask => "mask",
            CompactionStrategy::Summarize => "summarize",
            CompactionStrategy::MaskThenSummarize => "mask_then_summarize",
            CompactionStrategy::Off => "off",
        }
    }
}

const STRATEGIES: [&str; 4] = ["mask", "summarize", "mask_then_summarize", "off"];

/// The journal source's `compaction:`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compaction {
    /// `strategy` (default `mask`).
    pub strategy: CompactionStrategy,
    /// `keep_last`: the last this many iterations are never masked nor summarized.
    pub keep_last: u32,
    /// `compact_to`: a compaction brings the request down to this share (percent) of the
    /// budget, so the next ones are many calls away.
    pub compact_to_percent: u8,
    /// `summary_model`: the model that writes summaries (default: the agent's).
    pub summary_model: Option<String>,
    /// `summary_prompt`: its instructions (default: delta's).
    pub summary_prompt: Option<String>,
    /// `summary_max_tokens`: the summary's reply cap.
    pub summary_max_tokens: u32,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            strategy: CompactionStrategy::Mask,
            keep_last: DEFAULT_KEEP_LAST,
            compact_to_percent: DEFAULT_COMPACT_TO_PERCENT,
            summary_model: None,
            summary_prompt: None,
            summary_max_tokens: DEFAULT_SUMMARY_MAX_TOKENS,
        }
    }
}

pub(crate) const CONDITION_KEYS: [&str; 4] = ["when", "pattern", "path", "name"];
pub(crate) const CACHE_KEYS: [&str; 2] = ["strategy", "invalidate_on"];
pub(crate) const STAGE_KEYS: [&str; 2] = ["generator", "output"];
pub(crate) const GENERATOR_KEYS: [&str; 2] = ["command", "timeout_ms"];
pub(crate) const COMPACTION_KEYS: [&str; 6] = [
    "strategy",
    "keep_last",
    "compact_to",
    "summary_model",
    "summary_prompt",
    "summary_max_tokens",
];
const WHENS: [&str; 4] = ["task_contains", "task_matches", "file_exists", "env_set"];

/// `total_max_tokens` of the recipe: [`MIN_CONTEXT_TOKENS`]..=[`MAX_CONTEXT_TOKENS`].
pub(crate) fn token_count(fields: &Fields<'_>, key: &str) -> Result<Option<u64>, AgentError> {
    let Some(tokens) = fields.positive_integer(key)? else {
        return Ok(None);
    };
    if !(MIN_CONTEXT_TOKENS..=MAX_CONTEXT_TOKENS).contains(&tokens) {
        return Err(AgentError::invalid(
            fields.file(),
            format!(
                "`{}` is {tokens}, outside {MIN_CONTEXT_TOKENS}..{MAX_CONTEXT_TOKENS}",
                fields.key_path(key)
            ),
            "give the budget in tokens, e.g. 8000, or leave it out (the default is the model's window less the reply and a margin)",
        ));
    }
    Ok(Some(tokens))
}

/// A source's `max_tokens` and `on_overflow` (the latter only beside the former).
pub(crate) fn token_cap(fields: &Fields<'_>) -> Result<Option<TokenCap>, AgentError> {
    let on_overflow = match fields.string("on_overflow")?.as_deref() {
        None => None,
        Some("cut") => Some(OnOverflow::Cut),
        Some("fail") => Some(OnOverflow::Fail),
        Some(other) => {
            return Err(AgentError::invalid(
                fields.file(),
                format!("`{}` is `{other}`", fields.key_path("on_overflow")),
                "use `cut` (keep the head and tail, the default) or `fail` (fail the run)",
            ))
        }
    };
    let Some(max_tokens) = fields.positive_integer("max_tokens")? else {
        if on_overflow.is_some() {
            return Err(AgentError::invalid(
                fields.file(),
                format!(
                    "`{}` is set without `{}`",
                    fields.key_path("on_overflow"),
                    fields.key_path("max_tokens")
                ),
                "add `max_tokens: N` (the most tokens the source brings), or remove `on_overflow`",
            ));
        }
        return Ok(None);
    };
    if max_tokens > MAX_CONTEXT_TOKENS {
        return Err(AgentError::invalid(
            fields.file(),
            format!(
                "`{}` is {max_tokens}, above {MAX_CONTEXT_TOKENS}",
                fields.key_path("max_tokens")
            ),
            "give the most tokens the source may bring, e.g. 2000",
        ));
    }
    Ok(Some(TokenCap {
        max_tokens,
        on_overflow: on_overflow.unwrap_or(OnOverflow::Cut),
    }))
}

/// A source's `condition:`.
pub(crate) fn condition(
    fields: &Fields<'_>,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Option<SourceCondition>, AgentError> {
    let Some(value) = fields.get("condition") else {
        return Ok(None);
    };
    let file = fields.file();
    let condition = Fields::new(file, &fields.key_path("condition"), value)?;
    condition.check_keys(&CONDITION_KEYS, policy, warnings)?;
    let when = condition.required_string(
        "when",
        "use one of: task_contains, task_matches, file_exists, env_set",
    )?;
    let required = |key: &str, hint: &str| condition.required_string(key, hint);
    let parsed = match when.as_str() {
        "task_contains" => {
            let text = required("pattern", "e.g. pattern: \"API|endpoint|REST\"")?;
            let words: Vec<String> = text
                .split('|')
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .map(regex_lite::escape)
                .collect();
            if words.is_empty() {
                return Err(AgentError::invalid(
                    file,
                    format!("`{}` has no word", condition.key_path("pattern")),
                    "list the words to look for, separated by |, e.g. pattern: \"API|endpoint\"",
                ));
            }
            let regex = compile(&condition, &format!("(?i){}", words.join("|")), &text)?;
            SourceCondition::TaskContains {
                pattern: TaskPattern { text, regex },
            }
        }
        "task_matches" => {
            let text = required("pattern", "e.g. pattern: \"^(fix|debug) \"")?;
            let regex = compile(&condition, &text, &text)?;
            SourceCondition::TaskMatches {
                pattern: TaskPattern { text, regex },
            }
        }
        "file_exists" => SourceCondition::FileExists {
            path: required("path", "e.g. path: '${CWD}/api-docs.md'")?,
        },
        "env_set" => SourceCondition::EnvSet {
            name: required("name", "e.g. name: USE_API_DOCS")?,
        },
        other => {
            let suggestion = closest(other, &WHENS)
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err(AgentError::invalid(
                file,
                format!("`{}` is `{other}`{suggestion}", condition.key_path("when")),
                "use one of: task_contains, task_matches, file_exists, env_set",
            ));
        }
    };
    Ok(Some(parsed))
}

fn compile(
    fields: &Fields<'_>,
    pattern: &str,
    written: &str,
) -> Result<regex_lite::Regex, AgentError> {
    regex_lite::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            AgentError::invalid(
                fields.file(),
                format!(
                    "`{}` is not a valid regular expression ({written:?}): {e}",
                    fields.key_path("pattern")
                ),
                "write a regular expression such as `^(fix|debug) `, or use `when: task_contains` with words separated by |",
            )
        })
}

/// A `computed_file`'s `cache:`.
pub(crate) fn cache(
    fields: &Fields<'_>,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Option<GeneratorCache>, AgentError> {
    let Some(value) = fields.get("cache") else {
        return Ok(None);
    };
    let file = fields.file();
    let cache = Fields::new(file, &fields.key_path("cache"), value)?;
    cache.check_keys(&CACHE_KEYS, policy, warnings)?;
    match cache.string("strategy")?.as_deref() {
        None | Some("file_hash") => {}
        Some(other) => {
            return Err(AgentError::invalid(
                file,
                format!("`{}` is `{other}`", cache.key_path("strategy")),
                "use `strategy: file_hash` (the generator runs again when a file of `invalidate_on` changed)",
            ))
        }
    }
    let patterns = cache.string_list("invalidate_on")?.unwrap_or_default();
    if patterns.is_empty() {
        return Err(AgentError::invalid(
            file,
            format!(
                "`{}` must list at least one glob",
                cache.key_path("invalidate_on")
            ),
            "list the files the generator reads, e.g. invalidate_on: [\"src/**/*.py\"]",
        ));
    }
    for (i, pattern) in patterns.iter().enumerate() {
        let relative = pattern
            .strip_prefix("${AGENT_HOME}/")
            .or_else(|| pattern.strip_prefix("${CWD}/"))
            .unwrap_or(pattern);
        let escapes = relative.starts_with('/')
            || relative.split('/').any(|part| part == "..")
            || relative.contains("${");
        let problem = if escapes {
            Some("reaches outside the workspace and the agent folder".to_string())
        } else {
            glob::Pattern::new(relative).err().map(|e| e.to_string())
        };
        if let Some(problem) = problem {
            return Err(AgentError::invalid(
                file,
                format!("`{}[{i}]` ({pattern:?}) {problem}", cache.key_path("invalidate_on")),
                "write a glob relative to the workspace (e.g. \"src/**/*.py\") or under ${AGENT_HOME}/, without `..`",
            ));
        }
    }
    Ok(Some(GeneratorCache {
        invalidate_on: patterns,
    }))
}

/// A generator as `{command: [...], timeout_ms}` or as a bare argv list.
pub(crate) fn generator(
    fields: &Fields<'_>,
    key: &str,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
    default_timeout_ms: u64,
) -> Result<(Vec<String>, u64), AgentError> {
    let file = fields.file();
    let hint = "e.g. generator: {command: [\"python3\", \"${AGENT_HOME}/tools/summarize.py\"]}";
    let (command, timeout_ms, path) = match fields.get(key) {
        None => {
            return Err(AgentError::invalid(
                file,
                format!("`{}` is required", fields.key_path(key)),
                hint,
            ))
        }
        Some(Value::Sequence(_)) => (
            fields.string_list(key)?.unwrap_or_default(),
            default_timeout_ms,
            fields.key_path(key),
        ),
        Some(value) => {
            let generator = Fields::new(file, &fields.key_path(key), value)?;
            generator.check_keys(&GENERATOR_KEYS, policy, warnings)?;
            (
                generator.string_list("command")?.unwrap_or_default(),
                generator
                    .timeout_ms("timeout_ms")?
                    .unwrap_or(default_timeout_ms),
                generator.key_path("command"),
            )
        }
    };
    if !matches!(command.first(), Some(program) if !program.trim().is_empty()) {
        return Err(AgentError::invalid(
            file,
            format!("`{path}` must be a non-empty list (program first)"),
            hint,
        ));
    }
    Ok((command, timeout_ms))
}

/// A pipeline's `stages:`.
pub(crate) fn stages(
    fields: &Fields<'_>,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
    default_timeout_ms: u64,
) -> Result<Vec<PipelineStage>, AgentError> {
    let file = fields.file();
    let items = fields.sequence("stages")?.unwrap_or_default();
    if items.is_empty() {
        return Err(AgentError::invalid(
            file,
            format!("`{}` must list at least one stage", fields.key_path("stages")),
            "e.g. stages: [{generator: [\"retrieve.py\"], output: \"${CWD}/.delta/tmp/docs.json\"}]",
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let stage = Fields::new(file, &format!("{}[{i}]", fields.key_path("stages")), item)?;
            stage.check_keys(&STAGE_KEYS, policy, warnings)?;
            let (command, timeout_ms) =
                generator(&stage, "generator", policy, warnings, default_timeout_ms)?;
            let output = stage.required_string(
                "output",
                "the file this stage writes, e.g. output: '${CWD}/.delta/tmp/stage.json'",
            )?;
            Ok(PipelineStage {
                command,
                timeout_ms,
                output,
            })
        })
        .collect()
}

/// The journal's `compaction:` (a mapping, or the strategy alone).
pub(crate) fn compaction(
    fields: &Fields<'_>,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Compaction, AgentError> {
    let file = fields.file();
    let mut parsed = Compaction::default();
    let strategy_text = match fields.get("compaction") {
        None => return Ok(parsed),
        Some(Value::String(strategy)) => (strategy.clone(), fields.key_path("compaction")),
        Some(value) => {
            let settings = Fields::new(file, &fields.key_path("compaction"), value)?;
            settings.check_keys(&COMPACTION_KEYS, policy, warnings)?;
            if let Some(keep) = settings.positive_u32("keep_last")? {
                parsed.keep_last = keep;
            }
            parsed.compact_to_percent = compact_to(&settings)?;
            parsed.summary_model = settings.string("summary_model")?;
            parsed.summary_prompt = settings.string("summary_prompt")?;
            if let Some(max) = settings.positive_u32("summary_max_tokens")? {
                parsed.summary_max_tokens = max;
            }
            let strategy = settings
                .string("strategy")?
                .unwrap_or_else(|| "mask".into());
            (strategy, settings.key_path("strategy"))
        }
    };
    let (strategy, key) = strategy_text;
    parsed.strategy = match strategy.as_str() {
        "mask" => CompactionStrategy::Mask,
        "summarize" => CompactionStrategy::Summarize,
        "mask_then_summarize" => CompactionStrategy::MaskThenSummarize,
        "off" => CompactionStrategy::Off,
        other => {
            let suggestion = closest(other, &STRATEGIES)
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err(AgentError::invalid(
                file,
                format!("`{key}` is `{other}`{suggestion}"),
                "use mask (the default), summarize, mask_then_summarize or off",
            ));
        }
    };
    Ok(parsed)
}

/// `compact_to`: `50%` or `50`, 10 to 90.
fn compact_to(settings: &Fields<'_>) -> Result<u8, AgentError> {
    let Some(value) = settings.get("compact_to") else {
        return Ok(DEFAULT_COMPACT_TO_PERCENT);
    };
    let number = match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().trim_end_matches('%').trim().parse::<u64>().ok(),
        _ => None,
    };
    match number {
        Some(n @ 10..=90) => Ok(n as u8),
        _ => Err(AgentError::invalid(
            settings.file(),
            format!(
                "`{}` is {}, not a share of the budget from 10% to 90%",
                settings.key_path("compact_to"),
                serde_yaml::to_string(value).unwrap_or_default().trim()
            ),
            "write e.g. compact_to: 50% (a compaction brings the request down to half the budget)",
        )),
    }
}
