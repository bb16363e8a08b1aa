//! The `mcp:` key of agent.yaml: the Model Context Protocol servers an agent lists, each a
//! program speaking MCP on its stdin and stdout, and the names their tools get in a run
//! (`<server>__<tool>`, so they never collide with the agent's own tools, the built-in
//! `ask_human` or another server's).
//!
//! Owns the schema of each server's keys, the `${AGENT_HOME}` / `${CWD}` placeholders of its
//! settings, and tool naming. Compiled with or without the `mcp` feature, so an agent file
//! reads the same either way.
//! Must not: start servers or read files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use crate::yaml::{FieldError, Fields, UnknownKeys};

pub(crate) const SERVER_KEYS: [&str; 7] = [
    "command",
    "args",
    "env",
    "cwd",
    "timeout_ms",
    "startup_timeout_ms",
    "tools",
];

/// The separator between a server's name and its tool's name in the name the model sees.
pub const NAME_SEPARATOR: &str = "__";

/// Longest tool name a model endpoint accepts (OpenAI's function-name limit).
const MAX_TOOL_NAME: usize = 64;

/// Longest server name (room is left for the tool's own name).
const MAX_SERVER_NAME: usize = 32;

/// One server of an agent's `mcp:` mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The key in `mcp:`: letters, digits, `_` or `-` (no `__`); its tools are offered as
    /// `<name>__<tool>`.
    pub name: String,
    /// The program (a bare name is looked up on the tools' `PATH`; a path with `/` is taken
    /// from the agent folder).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to the cleaned environment tools get.
    pub env: BTreeMap<String, String>,
    /// Its working directory (default: the agent folder; relative: from the agent folder).
    pub cwd: Option<String>,
    /// Limit of each call in ms (default: the engine's tool timeout, 300 s).
    pub timeout_ms: Option<u64>,
    /// Limit of the start (initialize and tools/list) in ms (default 30 s).
    pub startup_timeout_ms: Option<u64>,
    /// Only these of its tools are offered (by the server's names); all when absent.
    pub tools: Option<Vec<String>>,
    /// The file that lists it.
    pub source_file: PathBuf,
}

/// The placeholders a server's settings may use.
const PLACEHOLDERS: [&str; 2] = ["AGENT_HOME", "CWD"];

/// Parses `mcp:` (a mapping of server name to settings). Unknown keys are warnings, or
/// errors under `strict`.
pub(crate) fn parse_servers(
    file: &Path,
    value: Option<&Value>,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Vec<McpServerConfig>, FieldError> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Value::Mapping(map) = value else {
        return Err(FieldError::new(
            file,
            format!(
                "`mcp` must be a mapping of server name to settings, found {}",
                crate::yaml::kind_of(value)
            ),
            "write e.g.\nmcp:\n  files:\n    command: mcp-server-filesystem\n    args: [\"${CWD}\"]",
        ));
    };
    let mut servers = Vec::with_capacity(map.len());
    for (key, settings) in map {
        let Some(name) = key.as_str() else {
            return Err(FieldError::new(
                file,
                "every key of `mcp` must be a server name",
                "name each server with letters, digits, `_` or `-`, e.g. `files:`",
            ));
        };
        servers.push(parse_server(file, name, settings, policy, warnings)?);
    }
    Ok(servers)
}

fn parse_server(
    file: &Path,
    name: &str,
    settings: &Value,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<McpServerConfig, FieldError> {
    let prefix = format!("mcp.{name}");
    if !valid_server_name(name) {
        return Err(FieldError::new(
            file,
            format!(
                "`{prefix}`: a server name must be 1-{MAX_SERVER_NAME} letters, digits, `_` or `-`, without `__`"
            ),
            "its tools are offered as <server>__<tool>; rename it, e.g. `files` or `web-search`",
        ));
    }
    let fields = Fields::new(file, &prefix, settings)?;
    fields.check_keys(&SERVER_KEYS, policy, warnings)?;
    let command = fields.required_string(
        "command",
        "name the server's program, e.g. `command: mcp-server-filesystem` or `command: npx`",
    )?;
    if command.trim().is_empty() {
        return Err(FieldError::new(
            file,
            format!("`{prefix}.command` is empty"),
            "name the server's program, e.g. `command: mcp-server-filesystem`",
        ));
    }
    let args = fields.string_list("args")?.unwrap_or_default();
    let env = match fields.get("env") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(value) => parse_env(file, &prefix, value)?,
    };
    let server = McpServerConfig {
        name: name.to_string(),
        command,
        args,
        env,
        cwd: fields.string("cwd")?,
        timeout_ms: fields.timeout_ms("timeout_ms")?,
        startup_timeout_ms: fields.timeout_ms("startup_timeout_ms")?,
        tools: fields.string_list("tools")?,
        source_file: file.to_path_buf(),
    };
    for (key, text) in server.settings() {
        check_placeholders(file, &format!("{prefix}.{key}"), text)?;
    }
    Ok(server)
}

fn parse_env(
    file: &Path,
    prefix: &str,
    value: &Value,
) -> Result<BTreeMap<String, String>, FieldError> {
    let Value::Mapping(map) = value else {
        return Err(FieldError::new(
            file,
            format!(
                "`{prefix}.env` must be a mapping of variable to value, found {}",
                crate::yaml::kind_of(value)
            ),
            "write e.g.\n    env:\n      LOG_LEVEL: debug",
        ));
    };
    let mut env = BTreeMap::new();
    for (key, value) in map {
        let name = key.as_str().filter(|k| is_env_name(k)).ok_or_else(|| {
            FieldError::new(
                file,
                format!("`{prefix}.env` has a key that is not a variable name"),
                "variable names are letters, digits and `_`, not starting with a digit",
            )
        })?;
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                return Err(FieldError::new(
                    file,
                    format!(
                        "`{prefix}.env.{name}` must be text, found {}",
                        crate::yaml::kind_of(other)
                    ),
                    "quote the value, e.g. `LEVEL: \"3\"`",
                ))
            }
        };
        env.insert(name.to_string(), text);
    }
    Ok(env)
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn valid_server_name(name: &str) -> bool {
    (1..=MAX_SERVER_NAME).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains(NAME_SEPARATOR)
}

/// Refuses `${NAME}` other than the placeholders a server may use: servers are shared by
/// every run of the process that has the same settings, so nothing of one run may be in them.
fn check_placeholders(file: &Path, key: &str, text: &str) -> Result<(), FieldError> {
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(FieldError::new(
                file,
                format!("`{key}` has an unclosed `${{`"),
                "close it: ${AGENT_HOME} or ${CWD}",
            ));
        };
        let name = &after[..end];
        if !PLACEHOLDERS.contains(&name) {
            let why = if name == "RUN_ID" {
                "an MCP server is shared by the runs of one process, so it cannot depend on one run"
            } else {
                "MCP server settings take ${AGENT_HOME} (the agent folder) and ${CWD} (the run's workspace); the server also inherits the tools' environment"
            };
            return Err(FieldError::new(
                file,
                format!("`{key}` uses `${{{name}}}`, which MCP server settings do not know"),
                why,
            ));
        }
        rest = &after[end + 1..];
    }
    Ok(())
}

impl McpServerConfig {
    /// Every text setting that may hold a placeholder, with its key.
    fn settings(&self) -> Vec<(String, &str)> {
        let mut all = vec![("command".to_string(), self.command.as_str())];
        all.extend(
            self.args
                .iter()
                .enumerate()
                .map(|(i, a)| (format!("args[{i}]"), a.as_str())),
        );
        all.extend(
            self.env
                .iter()
                .map(|(k, v)| (format!("env.{k}"), v.as_str())),
        );
        if let Some(cwd) = &self.cwd {
            all.push(("cwd".to_string(), cwd.as_str()));
        }
        all
    }

    /// The prefix of this server's tool names: `<name>__`.
    pub fn tool_prefix(&self) -> String {
        format!("{}{NAME_SEPARATOR}", self.name)
    }
}

/// `text` with `${AGENT_HOME}` and `${CWD}` replaced (the only placeholders parsing lets
/// through).
pub fn expand_placeholders(text: &str, agent_home: &Path, work_dir: &Path) -> String {
    text.replace("${AGENT_HOME}", &agent_home.to_string_lossy())
        .replace("${CWD}", &work_dir.to_string_lossy())
}

/// Refuses an agent tool whose name starts with a listed server's `<name>__`: that prefix
/// belongs to the server's tools. Returns the offending (tool, server) pair.
pub fn namespace_clash<'a>(
    servers: &'a [McpServerConfig],
    tool_names: impl IntoIterator<Item = &'a str>,
) -> Option<(&'a str, &'a McpServerConfig)> {
    tool_names.into_iter().find_map(|tool| {
        servers
            .iter()
            .find(|s| tool.starts_with(&s.tool_prefix()))
            .map(|s| (tool, s))
    })
}

/// The names the model sees for one server's tools, in order: `<server>__<tool>` with every
/// character a model endpoint refuses replaced by `_`, shortened to 64 characters with a
/// hash of the original name when too long, and `_2`, `_3`... when two names would be equal.
pub fn exposed_names(server: &str, tools: &[&str]) -> Vec<String> {
    let mut given: Vec<String> = Vec::with_capacity(tools.len());
    for tool in tools {
        let clean: String = tool
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let base = fit(&format!("{server}{NAME_SEPARATOR}{clean}"), tool, "");
        let mut name = base.clone();
        let mut n = 2;
        while given.contains(&name) {
            name = fit(&base, tool, &format!("_{n}"));
            n += 1;
        }
        given.push(name);
    }
    given
}

/// `name` + `suffix` within [`MAX_TOOL_NAME`], cutting `name` and marking the cut with a hash
/// of `original`.
fn fit(name: &str, original: &str, suffix: &str) -> String {
    if name.len() + suffix.len() <= MAX_TOOL_NAME {
        return format!("{name}{suffix}");
    }
    let hash = format!("_{:08x}", fnv1a(original));
    let keep = MAX_TOOL_NAME - hash.len() - suffix.len();
    format!("{}{hash}{suffix}", &name[..keep])
}

/// 32-bit FNV-1a: a short, stable tag for a cut name.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Result<Vec<McpServerConfig>, FieldError>, Vec<String>) {
        let doc: Value = serde_yaml::from_str(text).unwrap();
        let mut warnings = Vec::new();
        let servers = parse_servers(
            Path::new("/a/agent.yaml"),
            doc.get("mcp"),
            UnknownKeys::Warn,
            &mut warnings,
        );
        (servers, warnings)
    }

    #[test]
    fn a_server_with_every_setting_parses_in_order() {
        let (servers, warnings) = parse(
            "mcp:\n  files:\n    command: mcp-server-filesystem\n    args: [\"${CWD}\", x]\n    env: {LEVEL: 3, NAME: \"${AGENT_HOME}/n\"}\n    cwd: sub\n    timeout_ms: 5000\n    startup_timeout_ms: 9000\n    tools: [read_file]\n  everything:\n    command: mcp-server-everything\n    args: [stdio]\n",
        );
        let servers = servers.unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].name, "files");
        assert_eq!(servers[0].args, ["${CWD}", "x"]);
        assert_eq!(servers[0].env["LEVEL"], "3");
        assert_eq!(servers[0].timeout_ms, Some(5000));
        assert_eq!(servers[0].startup_timeout_ms, Some(9000));
        assert_eq!(
            servers[0].tools.as_deref(),
            Some(&["read_file".to_string()][..])
        );
        assert_eq!(servers[1].name, "everything");
        assert_eq!(servers[1].tool_prefix(), "everything__");
    }

    #[test]
    fn bad_settings_name_the_key_and_give_a_hint() {
        for (text, phrase) in [
            ("mcp: [a]", "`mcp` must be a mapping"),
            ("mcp:\n  a__b: {command: x}", "without `__`"),
            ("mcp:\n  fs: {args: [x]}", "command"),
            (
                "mcp:\n  fs: {command: x, env: [a]}",
                "`mcp.fs.env` must be a mapping",
            ),
            (
                "mcp:\n  fs: {command: x, args: [\"${RUN_ID}\"]}",
                "`mcp.fs.args[0]` uses `${RUN_ID}`",
            ),
            (
                "mcp:\n  fs: {command: x, cwd: \"${HOME}\"}",
                "`mcp.fs.cwd` uses `${HOME}`",
            ),
            ("mcp:\n  fs: {command: x, timeout_ms: 0}", "timeout_ms"),
        ] {
            let error = parse(text).0.unwrap_err().to_string();
            assert!(error.contains(phrase), "{text}: {error}");
            assert!(error.contains("hint"), "{text}: {error}");
        }
    }

    #[test]
    fn an_unknown_key_warns_with_the_closest_one() {
        let (servers, warnings) = parse("mcp:\n  fs: {command: x, arg: [y]}\n");
        assert_eq!(servers.unwrap().len(), 1);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("args"), "{warnings:?}");
    }

    #[test]
    fn placeholders_expand_to_the_agent_folder_and_the_workspace() {
        assert_eq!(
            expand_placeholders(
                "${CWD}:${AGENT_HOME}",
                Path::new("/agent"),
                Path::new("/work")
            ),
            "/work:/agent"
        );
    }

    #[test]
    fn mcp_tool_names_never_collide_and_fit_the_endpoint_limit() {
        let long = "x".repeat(80);
        let names = exposed_names("srv", &["echo", "get.sum", "get_sum", "get/sum", &long]);
        assert_eq!(names[0], "srv__echo");
        assert_eq!(names[1], "srv__get_sum");
        assert_eq!(names[2], "srv__get_sum_2");
        assert_eq!(names[3], "srv__get_sum_3");
        assert_eq!(names[4].len(), 64);
        assert!(names[4].starts_with("srv__xxx"));
        let again = exposed_names("srv", &[&long, &"x".repeat(81)]);
        assert_ne!(again[0], again[1]);
        assert!(again.iter().all(|n| n.len() <= 64));
    }

    #[test]
    fn an_agent_tool_in_a_servers_namespace_is_found() {
        let (servers, _) = parse("mcp:\n  fs: {command: x}\n");
        let servers = servers.unwrap();
        assert_eq!(
            namespace_clash(&servers, ["list", "fs__read"]).map(|(t, s)| (t, s.name.as_str())),
            Some(("fs__read", "fs"))
        );
        assert!(namespace_clash(&servers, ["fs_read", "ask_human"]).is_none());
    }
}
