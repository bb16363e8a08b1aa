//! The top level of `agent.yaml` (spec §2.7.2): metadata, `llm` settings, system prompt
//! path, iteration cap, and `strict` (whether unknown keys in the agent's files are errors,
//! the default, or warnings).
//!
//! Owns the schema of those keys and their ranges: [`AGENT_KEYS`] and [`LLM_KEYS`] are the
//! keys this file reads (a read of an undeclared key fails every debug build, see
//! `yaml::Fields`). It does not touch `imports`/`tools` (see `imports`), hooks (see `hooks`)
//! or read any other file.

use std::path::Path;

use serde::Serialize;
use serde_yaml::Value;

use super::error::AgentError;
use crate::llm::{parse_llm_timeout, LlmTimeoutSettings};
use crate::yaml::{Fields, UnknownKeys};

pub(crate) const AGENT_KEYS: [&str; 16] = [
    "strict",
    "name",
    "version",
    "description",
    "llm",
    "system_prompt",
    "max_iterations",
    "parallel_tool_calls",
    "ask_human",
    "empty_answer",
    "imports",
    "tools",
    "mcp",
    "sandbox",
    "lifecycle_hooks",
    "timeout_seconds",
];

pub(crate) const LLM_KEYS: [&str; 19] = [
    "model",
    "price",
    "temperature",
    "max_tokens",
    "context_window",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "base_url",
    "api_key_env",
    "request_timeout",
    "idle_timeout",
    "http2",
    "max_connections",
    "response_format",
    "stream",
    "tool_call_content",
    "max_tokens_field",
    "system_role",
];

/// Model settings of one agent. Unset values are not sent to the provider.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlmSettings {
    /// `model`: the provider's model name (required).
    pub model: String,
    /// `temperature`, 0 to 2.
    pub temperature: Option<f64>,
    /// `max_tokens`: the cap on each reply's length, in tokens (positive).
    pub max_tokens: Option<u32>,
    /// `context_window`: the most tokens one request (prompt and reply) may hold; the
    /// context budget's base (else learned: `DELTA_CONTEXT_WINDOW`, the server, the catalogue).
    /// Not sent to the provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// `context_window` came from `DELTA_CONTEXT_WINDOW` (set by the CLI), not agent.yaml:
    /// recorded as its source in the run's metadata.
    #[serde(skip)]
    pub context_window_from_env: bool,
    /// `top_p`, 0 to 1.
    pub top_p: Option<f64>,
    /// `frequency_penalty`, -2 to 2.
    pub frequency_penalty: Option<f64>,
    /// `presence_penalty`, -2 to 2.
    pub presence_penalty: Option<f64>,
    /// OpenAI-compatible endpoint for this agent (overrides `DELTA_BASE_URL`).
    pub base_url: Option<String>,
    /// Name of the environment variable holding this agent's API key (default `DELTA_API_KEY`).
    pub api_key_env: Option<String>,
    /// `request_timeout` / `idle_timeout`: limits on each model call attempt (a plan's
    /// `llm:` and `--llm-timeout` override them). Not sent to the provider.
    #[serde(skip)]
    pub timeouts: LlmTimeoutSettings,
    /// `http2` / `max_connections`: how requests reach the endpoint (see
    /// [`crate::llm::HttpTransport`]). Not sent to the provider.
    #[serde(skip)]
    pub transport: crate::llm::HttpTransport,
    /// `stream`, `tool_call_content`, `max_tokens_field`, `system_role`: how requests are
    /// written for the endpoint (see [`crate::llm::Dialect`]; unset = detect). Not sent as
    /// such to the provider.
    #[serde(skip)]
    pub dialect: crate::llm::Dialect,
    /// `response_format: json_object`: sent as `"response_format": {"type": "json_object"}`
    /// (only when set), for endpoints that can constrain a reply to JSON.
    pub response_format: Option<ResponseFormat>,
    /// `price`: dollars per million tokens the run's cost is computed at, in place of the
    /// model catalogue's (see [`crate::llm::price::price_of`]). Not sent to the provider.
    #[serde(skip)]
    pub price: Option<crate::llm::price::Price>,
}

/// `llm.response_format` (agent.yaml or a plan's `llm:`): the reply format asked of the
/// endpoint. Only OpenAI's JSON mode is modelled; unset, nothing is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// `{"type": "json_object"}`: the endpoint constrains the reply to one JSON object.
    JsonObject,
}

impl ResponseFormat {
    /// The spelling in agent.yaml and plans.
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseFormat::JsonObject => "json_object",
        }
    }

    /// The request's `response_format` value.
    pub fn request_value(self) -> serde_json::Value {
        serde_json::json!({ "type": self.as_str() })
    }
}

/// The scalar part of agent.yaml.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentConfig {
    pub name: String,
    pub version: String,
    pub description: Option<String>,
    pub llm: LlmSettings,
    pub system_prompt: Option<String>,
    pub max_iterations: Option<u32>,
    pub parallel_tool_calls: bool,
    /// `ask_human` (default true): whether the built-in tool is offered to the model.
    pub ask_human: bool,
    /// `empty_answer` (default `warn`): what an empty final answer does to the run.
    pub empty_answer: EmptyAnswerPolicy,
    /// `mcp`: the Model Context Protocol servers whose tools the agent offers.
    pub mcp: Vec<crate::tool::mcp::McpServerConfig>,
    /// `sandbox`: how the kernel confines the agent's tools and MCP servers.
    pub sandbox: Option<crate::sandbox::SandboxPolicy>,
}

/// agent.yaml `empty_answer`: what a final answer with no text (the model replied with
/// empty or blank content and no tool call) does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EmptyAnswerPolicy {
    /// The run ends COMPLETED with `result: ""`, a WARNING in its journal and
    /// `empty_answer: true` in its RunResult.
    #[default]
    Warn,
    /// The run ends FAILED (error kind `empty_answer`): a plan retries it like any failure.
    Fail,
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `strict:` of agent.yaml: `false` makes unknown keys in every file of the agent (and tool
/// placeholders no `parameters:` entry declares) warnings instead of errors.
pub(crate) fn unknown_keys_policy(file: &Path, doc: &Value) -> Result<UnknownKeys, AgentError> {
    if !doc.is_mapping() {
        return Ok(UnknownKeys::Refuse);
    }
    let strict = Fields::new(file, "", doc)?.boolean("strict")?;
    Ok(match strict {
        Some(false) => UnknownKeys::Warn,
        Some(true) | None => UnknownKeys::Refuse,
    })
}

pub(crate) fn parse_agent_config(
    file: &Path,
    doc: &Value,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<AgentConfig, AgentError> {
    if doc.is_null() {
        return Err(AgentError::invalid(
            file,
            "the file is empty",
            "an agent needs at least `name:` and `llm: {model: ...}`; `delta init` writes a complete example",
        ));
    }
    let root = Fields::new(file, "", doc)?;
    root.check_keys(&AGENT_KEYS, policy, warnings)?;
    if root.has("timeout_seconds") {
        warnings.push(format!(
            "{}: `timeout_seconds` is not used by delta; set `timeout_ms` on each tool instead",
            file.display()
        ));
    }
    let name = root.required_string("name", "add `name: my-agent` at the top of the file")?;
    let llm_value = root.get("llm").ok_or_else(|| {
        AgentError::invalid(
            file,
            "`llm` is required",
            "add an `llm:` section, e.g.\nllm:\n  model: gpt-4o-mini",
        )
    })?;
    let llm = Fields::new(file, "llm", llm_value)?;
    llm.check_keys(&LLM_KEYS, policy, warnings)?;
    let api_key_env = llm.string("api_key_env")?;
    if let Some(var) = &api_key_env {
        if !is_env_name(var) {
            return Err(AgentError::invalid(
                file,
                format!("`llm.api_key_env` is `{var}`, which is not an environment variable name"),
                "write the variable's name (e.g. OPENROUTER_API_KEY), not the key itself",
            ));
        }
    }
    let base_url = llm.string("base_url")?;
    if let Some(url) = &base_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(AgentError::invalid(
                file,
                format!("`llm.base_url` is `{url}`, which is not an http(s) URL"),
                "use the provider's OpenAI-compatible base, e.g. https://llm.example.com/v1",
            ));
        }
    }
    let settings = LlmSettings {
        model: llm.required_string("model", "name the model, e.g. `model: gpt-4o-mini`")?,
        temperature: llm.number_in("temperature", 0.0, 2.0)?,
        max_tokens: llm.positive_u32("max_tokens")?,
        context_window: context_window(&llm)?,
        context_window_from_env: false,
        top_p: llm.number_in("top_p", 0.0, 1.0)?,
        frequency_penalty: llm.number_in("frequency_penalty", -2.0, 2.0)?,
        presence_penalty: llm.number_in("presence_penalty", -2.0, 2.0)?,
        base_url,
        api_key_env,
        timeouts: LlmTimeoutSettings {
            request: llm_timeout(&llm, "request_timeout")?,
            idle: llm_timeout(&llm, "idle_timeout")?,
        },
        transport: crate::llm::HttpTransport {
            http2: llm.boolean("http2")?,
            max_connections: max_connections(&llm)?,
        },
        response_format: response_format(&llm)?,
        dialect: dialect(&llm)?,
        price: super::price::parse_price(&llm)?,
    };
    Ok(AgentConfig {
        name,
        version: root
            .string("version")?
            .unwrap_or_else(|| "1.0.0".to_string()),
        description: root.string("description")?,
        llm: settings,
        system_prompt: root.string("system_prompt")?,
        max_iterations: root.positive_u32("max_iterations")?,
        parallel_tool_calls: root.boolean("parallel_tool_calls")?.unwrap_or(false),
        ask_human: root.boolean("ask_human")?.unwrap_or(true),
        empty_answer: empty_answer_policy(&root)?,
        mcp: crate::tool::mcp::config::parse_servers(file, root.get("mcp"), policy, warnings)?,
        sandbox: sandbox(&root, policy, warnings)?,
    })
}

/// `sandbox:`; relative paths in it are the agent folder's.
fn sandbox(
    root: &Fields<'_>,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Option<crate::sandbox::SandboxPolicy>, AgentError> {
    let file = root.file();
    let folder = file.parent().unwrap_or(Path::new("/"));
    Ok(crate::sandbox::parse_sandbox(
        root,
        crate::sandbox::RelativeTo::AgentFolder(folder),
        crate::sandbox::PolicySource::Agent(file.to_path_buf()),
        policy,
        warnings,
    )?)
}

/// `empty_answer: warn | fail`.
fn empty_answer_policy(root: &Fields<'_>) -> Result<EmptyAnswerPolicy, AgentError> {
    match root.string("empty_answer")?.as_deref() {
        None | Some("warn") => Ok(EmptyAnswerPolicy::Warn),
        Some("fail") => Ok(EmptyAnswerPolicy::Fail),
        Some(other) => Err(AgentError::invalid(
            root.file(),
            format!("`empty_answer` is `{other}`, which is neither `warn` nor `fail`"),
            "write `empty_answer: warn` (the run completes with a warning, the default) or `empty_answer: fail` (the run fails)",
        )),
    }
}

/// `llm.response_format`: `json_object`, or unset.
fn response_format(llm: &Fields<'_>) -> Result<Option<ResponseFormat>, AgentError> {
    match llm.string("response_format")?.as_deref() {
        None => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some(other) => Err(AgentError::invalid(
            llm.file(),
            format!(
                "`{}` is `{other}`, which is not a format delta can ask for",
                llm.key_path("response_format")
            ),
            "write `response_format: json_object` (JSON mode, for endpoints that support it), or leave it out",
        )),
    }
}

/// `llm.context_window`: [`MIN_CONTEXT_TOKENS`]..=[`MAX_CONTEXT_TOKENS`], with room for a
/// prompt beside `llm.max_tokens`.
fn context_window(llm: &Fields<'_>) -> Result<Option<u64>, AgentError> {
    use super::{MAX_CONTEXT_TOKENS, MIN_CONTEXT_TOKENS};
    let Some(window) = llm.positive_integer("context_window")? else {
        return Ok(None);
    };
    if !(MIN_CONTEXT_TOKENS..=MAX_CONTEXT_TOKENS).contains(&window) {
        return Err(AgentError::invalid(
            llm.file(),
            format!(
                "`{}` is {window}, outside {MIN_CONTEXT_TOKENS}..{MAX_CONTEXT_TOKENS}",
                llm.key_path("context_window")
            ),
            "give the model's context window in tokens, e.g. context_window: 128000 (or leave it out: delta asks the server, then its model catalogue)",
        ));
    }
    if let Some(reply) = llm.positive_u32("max_tokens")? {
        if u64::from(reply) + MIN_CONTEXT_TOKENS > window {
            return Err(AgentError::invalid(
                llm.file(),
                format!(
                    "`{}` ({reply}) leaves less than {MIN_CONTEXT_TOKENS} tokens of `{}` ({window}) for the prompt",
                    llm.key_path("max_tokens"),
                    llm.key_path("context_window")
                ),
                "lower `llm.max_tokens` (the reply's cap) or raise `llm.context_window` to the model's real window",
            ));
        }
    }
    Ok(Some(window))
}

/// `llm.max_connections`: 1..=[`crate::llm::MAX_CONNECTIONS_LIMIT`].
fn max_connections(llm: &Fields<'_>) -> Result<Option<u32>, AgentError> {
    let limit = crate::llm::MAX_CONNECTIONS_LIMIT;
    match llm.positive_u32("max_connections")? {
        Some(n) if n > limit => Err(AgentError::invalid(
            llm.file(),
            format!(
                "`{}` is {n}, above the limit of {limit}",
                llm.key_path("max_connections")
            ),
            "cap the connections to what the endpoint accepts, e.g. `max_connections: 64`",
        )),
        n => Ok(n),
    }
}

/// `llm.stream`, `llm.tool_call_content`, `llm.max_tokens_field`, `llm.system_role`.
fn dialect(llm: &Fields<'_>) -> Result<crate::llm::Dialect, AgentError> {
    use crate::llm::{MaxTokensField, SystemRole, ToolCallContent};
    let stream = match llm.get("stream") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(Value::String(s)) if s == "auto" => None,
        Some(other) => {
            return Err(AgentError::invalid(
                llm.file(),
                format!(
                    "`{}` is {}, not auto, true or false",
                    llm.key_path("stream"),
                    crate::yaml::kind_of(other)
                ),
                "write `stream: auto` (the default: stream unless the endpoint cannot), `stream: true` or `stream: false`",
            ))
        }
    };
    Ok(crate::llm::Dialect {
        stream,
        tool_call_content: choice(
            llm,
            "tool_call_content",
            &["json_null", "empty_string"],
            ToolCallContent::parse,
        )?,
        max_tokens_field: choice(
            llm,
            "max_tokens_field",
            &["max_tokens", "max_completion_tokens"],
            MaxTokensField::parse,
        )?,
        system_role: choice(
            llm,
            "system_role",
            &["system", "developer", "user"],
            SystemRole::parse,
        )?,
    })
}

/// A key whose value is one of `names` (or `auto`, the same as leaving it out).
fn choice<T>(
    llm: &Fields<'_>,
    key: &str,
    names: &[&str],
    parse: fn(&str) -> Option<T>,
) -> Result<Option<T>, AgentError> {
    let Some(text) = llm.string(key)? else {
        return Ok(None);
    };
    if text == "auto" {
        return Ok(None);
    }
    parse(&text).map(Some).ok_or_else(|| {
        AgentError::invalid(
            llm.file(),
            format!(
                "`{}` is `{text}`, not one of auto, {}",
                llm.key_path(key),
                names.join(", ")
            ),
            "leave it out (auto) unless the endpoint needs it; docs/providers.md says which endpoints need what",
        )
    })
}

/// `llm.request_timeout` / `llm.idle_timeout`: a duration with a unit, 100ms..24h.
fn llm_timeout(llm: &Fields<'_>, key: &str) -> Result<Option<std::time::Duration>, AgentError> {
    let Some(text) = llm.string(key)? else {
        return Ok(None);
    };
    parse_llm_timeout(&text).map(Some).map_err(|problem| {
        AgentError::invalid(
            llm.file(),
            format!("`{}` is `{text}`: {problem}", llm.key_path(key)),
            "write a duration with a unit, e.g. `request_timeout: 90s` or `idle_timeout: 2m` (100ms..24h)",
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::yaml::UnknownKeyError;

    fn parse(text: &str) -> (Result<AgentConfig, AgentError>, Vec<String>) {
        let doc: Value = serde_yaml::from_str(text).unwrap();
        let mut warnings = Vec::new();
        let file = Path::new("/a/agent.yaml");
        let parsed = unknown_keys_policy(file, &doc)
            .and_then(|policy| parse_agent_config(file, &doc, policy, &mut warnings));
        (parsed, warnings)
    }

    #[test]
    fn full_config_parses() {
        let (config, warnings) = parse(
            "name: a\nversion: 2.0\ndescription: d\nllm:\n  model: m\n  temperature: 0.2\n  max_tokens: 100\n  top_p: 0.9\n  frequency_penalty: -1\n  presence_penalty: 1.5\n  base_url: http://127.0.0.1:9/v1\n  api_key_env: MY_KEY\nmax_iterations: 7\nparallel_tool_calls: true\n",
        );
        let config = config.unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.version, "2.0");
        assert_eq!(config.llm.temperature, Some(0.2));
        assert_eq!(config.llm.max_tokens, Some(100));
        assert_eq!(config.llm.frequency_penalty, Some(-1.0));
        assert_eq!(config.llm.api_key_env.as_deref(), Some("MY_KEY"));
        assert_eq!(config.max_iterations, Some(7));
        assert!(config.parallel_tool_calls);
    }

    #[test]
    fn endpoint_dialect_settings_parse() {
        use crate::llm::{Dialect, MaxTokensField, SystemRole, ToolCallContent};
        let (config, warnings) = parse(
            "name: a\nllm:\n  model: m\n  stream: false\n  tool_call_content: empty_string\n  max_tokens_field: max_completion_tokens\n  system_role: developer\n",
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            config.unwrap().llm.dialect,
            Dialect {
                stream: Some(false),
                tool_call_content: Some(ToolCallContent::EmptyString),
                max_tokens_field: Some(MaxTokensField::MaxCompletionTokens),
                system_role: Some(SystemRole::Developer),
            }
        );
        let auto = parse("name: a\nllm: {model: m, stream: auto, system_role: auto}\n").0;
        assert!(auto.unwrap().llm.dialect.is_auto());
        for (text, phrase) in [
            ("stream: maybe", "`llm.stream` is"),
            ("stream: 3", "`llm.stream` is"),
            (
                "tool_call_content: null-ish",
                "not one of auto, json_null, empty_string",
            ),
            ("system_role: admin", "`llm.system_role` is `admin`"),
        ] {
            let err = parse(&format!("name: a\nllm:\n  model: m\n  {text}\n"))
                .0
                .unwrap_err()
                .to_string();
            assert!(err.contains(phrase), "{text}: {err}");
        }
    }

    #[test]
    fn defaults_apply() {
        let config = parse("name: a\nllm: {model: m}\n").0.unwrap();
        assert_eq!(config.version, "1.0.0");
        assert_eq!(config.llm.temperature, None);
        assert!(!config.parallel_tool_calls);
        assert_eq!(config.max_iterations, None);
    }

    /// Issue 24 item 18: a typo in agent.yaml was a warning, and the agent ran without the
    /// setting; it is an error naming the file, the key and the closest known key.
    #[test]
    fn typos_are_errors_with_the_closest_key() {
        for (text, key, closest) in [
            ("name: a\nllm: {model: m}\ntool: []\n", "tool", "tools"),
            (
                "name: a\nllm:\n  model: m\n  temprature: 1\n",
                "llm.temprature",
                "temperature",
            ),
            (
                "name: a\nllm: {model: m}\nhook:\n  x: 1\n",
                "hook",
                "lifecycle_hooks",
            ),
        ] {
            match parse(text).0 {
                Err(AgentError::UnknownKey(UnknownKeyError {
                    key: found,
                    closest: Some(nearest),
                    ..
                })) => assert_eq!((found.as_str(), nearest.as_str()), (key, closest)),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn strict_false_turns_typos_into_warnings() {
        let (config, warnings) =
            parse("strict: false\nname: a\nllm:\n  model: m\n  temprature: 1\nhook:\n  x: 1\n");
        assert!(config.is_ok());
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("unknown key `llm.temprature` (did you mean `temperature`?)")),
            "{warnings:?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("unknown key `hook` (did you mean `lifecycle_hooks`?)")),
            "{warnings:?}"
        );
    }

    #[test]
    fn invalid_values_name_the_key() {
        for (text, phrase) in [
            ("llm: {model: m}\n", "`name` is required"),
            ("name: a\n", "`llm` is required"),
            (
                "strict: no-thanks\nname: a\nllm: {model: m}\n",
                "`strict` must be true or false",
            ),
            (
                "name: a\nllm: {temperature: 1}\n",
                "`llm.model` is required",
            ),
            (
                "name: a\nllm: {model: m, temperature: 2.5}\n",
                "`llm.temperature` is 2.5, outside 0..2",
            ),
            ("name: a\nllm: {model: m, top_p: 1.5}\n", "`llm.top_p`"),
            (
                "name: a\nllm: {model: m, max_tokens: 0}\n",
                "`llm.max_tokens`",
            ),
            (
                "name: a\nllm: {model: m, api_key_env: sk-123}\n",
                "not an environment variable name",
            ),
            (
                "name: a\nllm: {model: m, base_url: localhost}\n",
                "not an http(s) URL",
            ),
            (
                "name: a\nllm: {model: m}\nmax_iterations: -3\n",
                "`max_iterations`",
            ),
            (
                "name: a\nllm: {model: m}\nparallel_tool_calls: maybe\n",
                "`parallel_tool_calls` must be true or false",
            ),
            ("", "the file is empty"),
        ] {
            let err = parse(text).0.unwrap_err().to_string();
            assert!(err.contains(phrase), "{text}: {err}");
            assert!(err.contains("/a/agent.yaml"), "{err}");
        }
    }
}
