//! `hooks.yaml` (spec §2.7.3): the eight lifecycle hooks, parsed and validated.
//!
//! Owns hook names, the `{command, timeout_ms}` schema, the legacy short names of the
//! original engine (`pre_llm_req`, …) and the deprecated `lifecycle_hooks` key of agent.yaml.
//! It must not run hooks: a later runtime module does.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_yaml::Value;

use super::error::AgentError;
use crate::yaml::{closest, Fields, UnknownKeyError, UnknownKeys};

/// A point in the run where a hook may be invoked.
///
/// Hooks never stop a run: a failing hook is journaled (`HOOK_EXECUTED`) and the run goes
/// on. `docs/hooks.md` lists each hook's payload and environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookName {
    /// The request is built, before it is sent; it may replace parts of the request.
    PreLlmRequest,
    /// The model answered, before the THOUGHT is journaled.
    PostLlmResponse,
    /// Before each tool call starts; it may skip the call and answer in its place.
    PreToolExecution,
    /// After each executed call, before its result is journaled.
    PostToolExecution,
    /// The run is about to end FAILED.
    OnError,
    /// Every final status, after ENGINE_END and metadata.json are written.
    OnRunEnd,
    /// Start of an iteration, before the context is built.
    OnIterationStart,
    /// After the iteration's results are journaled.
    OnIterationEnd,
}

impl HookName {
    /// Every hook.
    pub const ALL: [HookName; 8] = [
        HookName::PreLlmRequest,
        HookName::PostLlmResponse,
        HookName::PreToolExecution,
        HookName::PostToolExecution,
        HookName::OnError,
        HookName::OnRunEnd,
        HookName::OnIterationStart,
        HookName::OnIterationEnd,
    ];

    /// The key in hooks.yaml (and the journal's `hook_name`), e.g. `pre_tool_execution`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookName::PreLlmRequest => "pre_llm_request",
            HookName::PostLlmResponse => "post_llm_response",
            HookName::PreToolExecution => "pre_tool_execution",
            HookName::PostToolExecution => "post_tool_execution",
            HookName::OnError => "on_error",
            HookName::OnRunEnd => "on_run_end",
            HookName::OnIterationStart => "on_iteration_start",
            HookName::OnIterationEnd => "on_iteration_end",
        }
    }

    /// Parses a hook key, also accepting the original engine's short names; the flag is
    /// true for a short name (deprecated).
    pub fn parse(key: &str) -> Option<(HookName, bool)> {
        if let Some(name) = HookName::ALL.into_iter().find(|h| h.as_str() == key) {
            return Some((name, false));
        }
        let legacy = match key {
            "pre_llm_req" => HookName::PreLlmRequest,
            "post_llm_resp" => HookName::PostLlmResponse,
            "pre_tool_exec" => HookName::PreToolExecution,
            "post_tool_exec" => HookName::PostToolExecution,
            _ => return None,
        };
        Some((legacy, true))
    }
}

/// One hook: the argv to run (no shell; `${AGENT_HOME}` etc. still unexpanded) and its timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookSpec {
    /// The argv; `${AGENT_HOME}` and `${CWD}` are expanded when it runs.
    pub command: Vec<String>,
    /// The timeout in milliseconds; `None` means 30 s. On expiry the process group is
    /// killed.
    pub timeout_ms: Option<u64>,
}

/// The configured hooks, at most one per name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Hooks {
    by_name: BTreeMap<HookName, HookSpec>,
}

impl Hooks {
    /// The hook configured for `name`, if any.
    pub fn get(&self, name: HookName) -> Option<&HookSpec> {
        self.by_name.get(&name)
    }

    /// No hook is configured.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Configured hooks in a stable order.
    pub fn iter(&self) -> impl Iterator<Item = (HookName, &HookSpec)> {
        self.by_name.iter().map(|(name, spec)| (*name, spec))
    }
}

/// The keys of one hook's mapping (`description` is for people and ignored).
pub(crate) const HOOK_KEYS: [&str; 3] = ["command", "timeout_ms", "description"];

/// Parses a hooks mapping (`hooks.yaml` root, or agent.yaml's `lifecycle_hooks`).
/// `prefix` is the key path of the mapping (`""` or `lifecycle_hooks`). An unknown hook name
/// or key is an error (a warning under `strict: false`: such a hook would never run).
pub(crate) fn parse_hooks(
    file: &Path,
    prefix: &str,
    doc: &Value,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Hooks, AgentError> {
    if doc.is_null() {
        return Ok(Hooks::default());
    }
    let fields = Fields::new(file, prefix, doc)?;
    // hooks.yaml may wrap everything in `lifecycle_hooks:` like the old agent.yaml key did.
    if prefix.is_empty() && fields.has("lifecycle_hooks") {
        if let Some(inner) = fields.get("lifecycle_hooks") {
            return parse_hooks(file, "lifecycle_hooks", inner, policy, warnings);
        }
    }
    let Value::Mapping(map) = doc else {
        return Ok(Hooks::default());
    };
    let known: Vec<&str> = HookName::ALL.iter().map(|h| h.as_str()).collect();
    let mut hooks = Hooks::default();
    for (key, value) in map {
        let key = key.as_str().unwrap_or_default().to_string();
        let path = fields.key_path(&key);
        let Some((name, legacy)) = HookName::parse(&key) else {
            let nearest = closest(&key, &known);
            if policy == UnknownKeys::Refuse {
                return Err(AgentError::UnknownKey(UnknownKeyError {
                    file: file.to_path_buf(),
                    key: path,
                    closest: nearest.map(str::to_owned),
                    known: known.iter().map(|k| (*k).to_owned()).collect(),
                }));
            }
            let suggestion = nearest
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            warnings.push(format!(
                "{}: unknown hook `{path}`{suggestion}; it will never run",
                file.display()
            ));
            continue;
        };
        if legacy {
            warnings.push(format!(
                "{}: hook name `{path}` is deprecated; rename it to `{}`",
                file.display(),
                name.as_str()
            ));
        }
        if value.is_null() {
            continue;
        }
        let hook = Fields::new(file, &path, value)?;
        hook.check_keys(&HOOK_KEYS, policy, warnings)?;
        let command = match hook.get("command") {
            Some(Value::String(_)) => {
                return Err(AgentError::invalid(
                    file,
                    format!("`{path}.command` must be a list (argv), not a string"),
                    format!(
                        "write it as a list, e.g. command: [\"sh\", \"{}/hook.sh\"]",
                        "${AGENT_HOME}"
                    ),
                ))
            }
            _ => hook.string_list("command")?.unwrap_or_default(),
        };
        if !matches!(command.first(), Some(program) if !program.trim().is_empty()) {
            return Err(AgentError::invalid(
                file,
                format!("`{path}.command` must be a non-empty list (program first)"),
                "e.g. command: [\"${AGENT_HOME}/hooks/log.sh\"]",
            ));
        }
        if hooks.by_name.contains_key(&name) {
            return Err(AgentError::invalid(
                file,
                format!("hook `{}` is defined twice", name.as_str()),
                "keep one definition (the short legacy name and the full name are the same hook)",
            ));
        }
        let spec = HookSpec {
            command,
            timeout_ms: hook.timeout_ms("timeout_ms")?,
        };
        hooks.by_name.insert(name, spec);
    }
    Ok(hooks)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse_with(text: &str, policy: UnknownKeys) -> (Result<Hooks, AgentError>, Vec<String>) {
        let doc: Value = serde_yaml::from_str(text).unwrap();
        let mut warnings = Vec::new();
        (
            parse_hooks(Path::new("/a/hooks.yaml"), "", &doc, policy, &mut warnings),
            warnings,
        )
    }

    fn parse(text: &str) -> (Result<Hooks, AgentError>, Vec<String>) {
        parse_with(text, UnknownKeys::Refuse)
    }

    #[test]
    fn all_eight_hooks_parse() {
        let text: String = HookName::ALL
            .iter()
            .map(|h| {
                format!(
                    "{}:\n  command: [echo, {}]\n  timeout_ms: 500\n",
                    h.as_str(),
                    h.as_str()
                )
            })
            .collect();
        let (hooks, warnings) = parse(&text);
        let hooks = hooks.unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        for name in HookName::ALL {
            let spec = hooks.get(name).unwrap();
            assert_eq!(
                spec.command,
                vec!["echo".to_string(), name.as_str().to_string()]
            );
            assert_eq!(spec.timeout_ms, Some(500));
        }
    }

    #[test]
    fn wrapped_and_legacy_names_are_accepted_with_warnings() {
        let (hooks, warnings) = parse("lifecycle_hooks:\n  pre_llm_req:\n    command: [x]\n");
        assert_eq!(
            hooks.unwrap().get(HookName::PreLlmRequest).unwrap().command,
            vec!["x"]
        );
        assert!(
            warnings[0].contains("rename it to `pre_llm_request`"),
            "{warnings:?}"
        );
    }

    /// Issue 24 item 18: a misspelt hook never ran, with only a warning.
    #[test]
    fn an_unknown_hook_or_hook_key_is_an_error_with_the_closest_name() {
        for (text, key, closest) in [
            (
                "on_run_ends:\n  command: [x]\n",
                "on_run_ends",
                "on_run_end",
            ),
            (
                "on_error:\n  command: [x]\n  timeout: 5\n",
                "on_error.timeout",
                "timeout_ms",
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
    fn unknown_hook_warns_with_suggestion_under_strict_false() {
        let (hooks, warnings) = parse_with("on_run_ends:\n  command: [x]\n", UnknownKeys::Warn);
        assert!(hooks.unwrap().is_empty());
        assert!(
            warnings[0].contains("unknown hook `on_run_ends` (did you mean `on_run_end`?)"),
            "{warnings:?}"
        );
    }

    #[test]
    fn bad_commands_are_errors() {
        for (text, phrase) in [
            (
                "on_error:\n  command: notify.sh\n",
                "must be a list (argv), not a string",
            ),
            ("on_error:\n  command: []\n", "non-empty list"),
            (
                "on_error:\n  command: [x]\n  timeout_ms: 0\n",
                "greater than 0",
            ),
        ] {
            let err = parse(text).0.unwrap_err().to_string();
            assert!(err.contains(phrase), "{text}: {err}");
        }
    }

    #[test]
    fn empty_file_means_no_hooks() {
        assert!(parse("# nothing\n").0.unwrap().is_empty());
    }
}
