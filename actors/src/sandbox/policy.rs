//! sandbox::policy — the `sandbox:` setting as the user writes it: in agent.yaml, as a plan's
//! default, or in `DELTA_SANDBOX`; parsed and bounded here, resolved against a run's places
//! by `resolve.rs`.
//!
//! Owns: the keys (`filesystem`, `allow_write`, `deny_read`, `network`, `required`), their
//! values and defaults, the path forms (`/abs`, `~/x`, `${AGENT_HOME}/x`, `${CWD}/x`, a
//! relative path from the file's folder), the limits on lists, the `DELTA_SANDBOX` grammar,
//! and which setting wins (agent.yaml > plan > `DELTA_SANDBOX`).
//! Must not: touch the disk or the kernel, or read the process environment (callers pass
//! what they resolved).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use crate::yaml::{kind_of, FieldError, Fields, UnknownKeys};

/// The variable holding the default policy of agents that have no `sandbox:` (and whose plan
/// sets none).
pub const SANDBOX_VAR: &str = "DELTA_SANDBOX";
/// The keys of a `sandbox:` mapping.
pub const SANDBOX_KEYS: [&str; 5] = [
    "filesystem",
    "allow_write",
    "deny_read",
    "network",
    "required",
];
/// The most entries `allow_write` or `deny_read` may list.
pub const MAX_LISTED_PATHS: usize = 64;
/// The longest path an entry may be, in bytes (the kernel's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// The `deny_read` entry that stands for the built-in list of credential stores.
pub const DEFAULT_DENY_ENTRY: &str = "default";

/// What a sandboxed tool may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FilesystemAccess {
    /// No confinement of the filesystem (only `deny_read` hides paths).
    Off,
    /// Writes nowhere but the private temporary folder and `allow_write`.
    ReadOnly,
    /// Writes to the run's workspace, the private temporary folder and `allow_write`.
    WorkspaceWrite,
}

impl FilesystemAccess {
    /// The spelling in agent.yaml.
    pub fn as_str(self) -> &'static str {
        match self {
            FilesystemAccess::Off => "off",
            FilesystemAccess::ReadOnly => "read-only",
            FilesystemAccess::WorkspaceWrite => "workspace-write",
        }
    }

    fn parse(text: &str) -> Option<FilesystemAccess> {
        match text {
            "off" => Some(FilesystemAccess::Off),
            "read-only" => Some(FilesystemAccess::ReadOnly),
            "workspace-write" => Some(FilesystemAccess::WorkspaceWrite),
            _ => None,
        }
    }
}

/// Whether a sandboxed tool may open sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkAccess {
    /// No socket at all but a `socketpair`: no TCP, UDP (so no DNS), Unix socket or netlink.
    Off,
    /// What the user may reach.
    On,
}

impl NetworkAccess {
    /// The spelling in agent.yaml.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkAccess::Off => "off",
            NetworkAccess::On => "on",
        }
    }
}

/// A path of `allow_write` or `deny_read`, as far as it can be resolved before a run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyPath {
    /// Absolute already.
    Absolute(PathBuf),
    /// `~/rest`: under the run's `HOME`.
    Home(PathBuf),
    /// `${AGENT_HOME}/rest` written in a plan: under each agent's folder.
    AgentHome(PathBuf),
    /// `${CWD}/rest`: under the run's workspace.
    Workspace(PathBuf),
}

impl PolicyPath {
    /// The absolute path for a run, `None` for `~/…` when the run has no `HOME`.
    pub fn resolve(
        &self,
        home: Option<&Path>,
        agent_home: &Path,
        work_dir: &Path,
    ) -> Option<PathBuf> {
        match self {
            PolicyPath::Absolute(path) => Some(path.clone()),
            PolicyPath::Home(rest) => home.map(|home| home.join(rest)),
            PolicyPath::AgentHome(rest) => Some(agent_home.join(rest)),
            PolicyPath::Workspace(rest) => Some(work_dir.join(rest)),
        }
    }

    /// As the user would write it.
    pub fn display(&self) -> String {
        let joined = |prefix: &str, rest: &Path| {
            if rest.as_os_str().is_empty() {
                prefix.to_owned()
            } else {
                format!("{prefix}/{}", rest.display())
            }
        };
        match self {
            PolicyPath::Absolute(path) => path.display().to_string(),
            PolicyPath::Home(rest) => joined("~", rest),
            PolicyPath::AgentHome(rest) => joined("${AGENT_HOME}", rest),
            PolicyPath::Workspace(rest) => joined("${CWD}", rest),
        }
    }
}

/// One `deny_read` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyEntry {
    /// `default`: the built-in credential stores (`resolve::DEFAULT_DENIED_IN_HOME`).
    Defaults,
    /// A path of the user's.
    Path(PolicyPath),
}

/// Where a policy was written: named by every message that tells how to change it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicySource {
    /// `sandbox:` of this agent.yaml.
    Agent(PathBuf),
    /// `sandbox:` of this plan, the default of its agents.
    Plan(PathBuf),
    /// The `DELTA_SANDBOX` variable.
    Environment,
}

impl PolicySource {
    /// Where to change `key` (`sandbox.allow_write`...), for hints.
    pub fn where_to_set(&self, key: &str) -> String {
        match self {
            PolicySource::Agent(file) => format!("`sandbox.{key}` in {}", file.display()),
            PolicySource::Plan(file) => format!(
                "`sandbox.{key}` in the agent's agent.yaml (the sandbox comes from the plan {}; \
                 an agent's own `sandbox:` replaces it)",
                file.display()
            ),
            PolicySource::Environment => format!(
                "`sandbox.{key}` in the agent's agent.yaml (the sandbox comes from \
                 {SANDBOX_VAR}; an agent's own `sandbox:` replaces it)"
            ),
        }
    }

    /// One line naming it, for messages.
    pub fn describe(&self) -> String {
        match self {
            PolicySource::Agent(file) => format!("`sandbox:` of {}", file.display()),
            PolicySource::Plan(file) => format!("`sandbox:` of the plan {}", file.display()),
            PolicySource::Environment => SANDBOX_VAR.to_string(),
        }
    }
}

/// A sandbox policy as written (with its defaults filled in), before a run resolves it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// `filesystem` (default `workspace-write`).
    pub filesystem: FilesystemAccess,
    /// `allow_write`: more places a tool may write (default none).
    pub allow_write: Vec<PolicyPath>,
    /// `deny_read` (default `[default]`): what a tool cannot read. delta's own secrets and
    /// state (`.env` files, the workspace's `.delta`, serve's state) are hidden whatever it
    /// lists.
    pub deny_read: Vec<DenyEntry>,
    /// `network` (default `off`).
    pub network: NetworkAccess,
    /// `required` (default true): refuse to run when the kernel cannot enforce the policy;
    /// false runs with what it can (a journal WARNING says what is missing).
    pub required: bool,
    /// Where it was written.
    pub source: PolicySource,
}

impl SandboxPolicy {
    /// Every setting at its default: workspace-write, network off, the default `deny_read`,
    /// required.
    pub fn defaults(source: PolicySource) -> SandboxPolicy {
        SandboxPolicy {
            filesystem: FilesystemAccess::WorkspaceWrite,
            allow_write: Vec::new(),
            deny_read: vec![DenyEntry::Defaults],
            network: NetworkAccess::Off,
            required: true,
            source,
        }
    }

    /// One line for logs and notices: `workspace-write, network off`.
    pub fn summary(&self) -> String {
        format!(
            "filesystem {}, network {}",
            self.filesystem.as_str(),
            self.network.as_str()
        )
    }
}

/// How relative paths of a file are read.
#[derive(Debug, Clone, Copy)]
pub enum RelativeTo<'a> {
    /// An agent.yaml: relative paths and `${AGENT_HOME}` are the agent's folder.
    AgentFolder(&'a Path),
    /// A plan: relative paths are the plan's folder; `${AGENT_HOME}` is each agent's.
    PlanFolder(&'a Path),
}

/// `sandbox:` of a YAML file (its root mapping is `root`); `None` when the key is absent.
pub(crate) fn parse_sandbox(
    root: &Fields<'_>,
    relative: RelativeTo<'_>,
    source: PolicySource,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Option<SandboxPolicy>, FieldError> {
    let Some(value) = root.get("sandbox") else {
        return Ok(None);
    };
    let file = root.file();
    let key = root.key_path("sandbox");
    if !matches!(value, Value::Mapping(_)) {
        return Err(FieldError::new(
            file,
            format!("`{key}` must be a mapping, found {}", kind_of(value)),
            "write e.g.\nsandbox:\n  filesystem: workspace-write\n  network: off\n(docs/sandbox.md)",
        ));
    }
    let fields = Fields::new(file, &key, value)?;
    fields.check_keys(&SANDBOX_KEYS, policy, warnings)?;
    let mut parsed = SandboxPolicy::defaults(source);
    if let Some(text) = fields.string("filesystem")? {
        parsed.filesystem = FilesystemAccess::parse(&text).ok_or_else(|| {
            FieldError::new(
                file,
                format!(
                    "`{}` is `{text}`, not one of off, read-only, workspace-write",
                    fields.key_path("filesystem")
                ),
                "write `filesystem: workspace-write` (tools write only to the workspace), \
                 `read-only` or `off` (docs/sandbox.md)",
            )
        })?;
    }
    if let Some(value) = fields.get("network") {
        parsed.network = network_value(value).ok_or_else(|| {
            FieldError::new(
                file,
                format!(
                    "`{}` is {}, not off or on",
                    fields.key_path("network"),
                    shown(value)
                ),
                "write `network: off` (no sockets, the default) or `network: on`",
            )
        })?;
    }
    if let Some(required) = fields.boolean("required")? {
        parsed.required = required;
    }
    if let Some(entries) = bounded_list(&fields, "allow_write")? {
        parsed.allow_write = entries
            .iter()
            .enumerate()
            .map(|(i, text)| {
                policy_path(text, relative)
                    .map_err(|problem| path_error(&fields, "allow_write", i, text, &problem))
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(entries) = bounded_list(&fields, "deny_read")? {
        parsed.deny_read = entries
            .iter()
            .enumerate()
            .map(|(i, text)| {
                if text == DEFAULT_DENY_ENTRY {
                    return Ok(DenyEntry::Defaults);
                }
                policy_path(text, relative)
                    .map(DenyEntry::Path)
                    .map_err(|problem| path_error(&fields, "deny_read", i, text, &problem))
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(Some(parsed))
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => format!("`{text}`"),
        other => kind_of(other).to_owned(),
    }
}

/// `off` / `on`, also written as a boolean.
fn network_value(value: &Value) -> Option<NetworkAccess> {
    match value {
        Value::Bool(false) => Some(NetworkAccess::Off),
        Value::Bool(true) => Some(NetworkAccess::On),
        Value::String(text) => match text.as_str() {
            "off" => Some(NetworkAccess::Off),
            "on" => Some(NetworkAccess::On),
            _ => None,
        },
        _ => None,
    }
}

fn bounded_list(fields: &Fields<'_>, key: &str) -> Result<Option<Vec<String>>, FieldError> {
    let Some(entries) = fields.string_list(key)? else {
        return Ok(None);
    };
    if entries.len() > MAX_LISTED_PATHS {
        return Err(FieldError::new(
            fields.file(),
            format!(
                "`{}` lists {} paths, more than the limit of {MAX_LISTED_PATHS}",
                fields.key_path(key),
                entries.len()
            ),
            "list folders rather than each file inside them",
        ));
    }
    Ok(Some(entries))
}

fn path_error(
    fields: &Fields<'_>,
    key: &str,
    index: usize,
    text: &str,
    problem: &str,
) -> FieldError {
    FieldError::new(
        fields.file(),
        format!("`{}[{index}]` is `{text}`: {problem}", fields.key_path(key)),
        "write an absolute path, `~/…` (the run's HOME), `${AGENT_HOME}/…`, `${CWD}/…` (the \
         workspace) or a path relative to this file's folder, without `..`",
    )
}

/// Reads one path entry; the error says what is wrong with it.
fn policy_path(text: &str, relative: RelativeTo<'_>) -> Result<PolicyPath, String> {
    if text.trim().is_empty() {
        return Err("the path is empty".into());
    }
    if text.len() > MAX_PATH_BYTES {
        return Err(format!("the path is longer than {MAX_PATH_BYTES} bytes"));
    }
    if text.contains('\0') {
        return Err("the path contains a NUL byte".into());
    }
    let (form, rest): (fn(PathBuf) -> PolicyPath, &str) = if text == "~" {
        (PolicyPath::Home, "")
    } else if text.starts_with("~/") {
        (PolicyPath::Home, &text[1..])
    } else if let Some(rest) = text.strip_prefix("${CWD}") {
        (PolicyPath::Workspace, rest)
    } else if let Some(rest) = text.strip_prefix("${AGENT_HOME}") {
        match relative {
            RelativeTo::AgentFolder(home) => {
                return absolute(home, rest.trim_start_matches('/')).map(PolicyPath::Absolute)
            }
            RelativeTo::PlanFolder(_) => (PolicyPath::AgentHome, rest),
        }
    } else if text.starts_with('~') {
        return Err("`~user` is not supported; write `~/…` or an absolute path".into());
    } else if text.contains("${") {
        return Err("the only placeholders are ${AGENT_HOME} and ${CWD}".into());
    } else if Path::new(text).is_absolute() {
        return absolute(Path::new("/"), text).map(PolicyPath::Absolute);
    } else {
        let base = match relative {
            RelativeTo::AgentFolder(dir) | RelativeTo::PlanFolder(dir) => dir,
        };
        return absolute(base, text).map(PolicyPath::Absolute);
    };
    if !rest.is_empty() && !rest.starts_with('/') {
        return Err("a placeholder must be followed by `/` or end the path".into());
    }
    let rest = rest.trim_start_matches('/');
    check_no_parent(rest)?;
    Ok(form(PathBuf::from(rest)))
}

fn absolute(base: &Path, rest: &str) -> Result<PathBuf, String> {
    check_no_parent(rest)?;
    Ok(base.join(rest))
}

fn check_no_parent(rest: &str) -> Result<(), String> {
    if Path::new(rest)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err("`..` is not allowed (the sandbox compares paths as written)".into());
    }
    Ok(())
}

/// Why `DELTA_SANDBOX` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{SANDBOX_VAR}={value:?}: {problem}\n  hint: write a filesystem mode (workspace-write, \
     read-only, off), optionally followed by `,network=on` and `,required=false`, e.g. \
     {SANDBOX_VAR}=workspace-write; `none` or an empty value sets no default (docs/sandbox.md)"
)]
pub struct SandboxEnvError {
    /// The value as set.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

/// The default policy `DELTA_SANDBOX` sets (`None`: unset, empty or `none`).
///
/// Grammar: comma-separated settings; a bare `workspace-write`, `read-only` or `off` is the
/// filesystem mode; `filesystem=`, `network=on|off`, `required=true|false` set one key. What
/// is not given has its default (workspace-write, network off, required, the default
/// `deny_read`).
pub fn env_default(
    env: &BTreeMap<String, String>,
) -> Result<Option<SandboxPolicy>, SandboxEnvError> {
    let Some(value) = env.get(SANDBOX_VAR) else {
        return Ok(None);
    };
    let trimmed = value.trim();
    if trimmed.is_empty() || trimmed == "none" {
        return Ok(None);
    }
    let error = |problem: String| SandboxEnvError {
        value: value.clone(),
        problem,
    };
    let mut policy = SandboxPolicy::defaults(PolicySource::Environment);
    for part in trimmed.split(',').map(str::trim) {
        let (key, setting) = match part.split_once('=') {
            Some((key, setting)) => (key.trim(), setting.trim()),
            None => ("filesystem", part),
        };
        match key {
            "filesystem" => {
                policy.filesystem = FilesystemAccess::parse(setting).ok_or_else(|| {
                    error(format!(
                        "`{setting}` is not one of workspace-write, read-only, off"
                    ))
                })?
            }
            "network" => {
                policy.network = match setting {
                    "off" => NetworkAccess::Off,
                    "on" => NetworkAccess::On,
                    _ => return Err(error(format!("network `{setting}` is not off or on"))),
                }
            }
            "required" => {
                policy.required = match setting {
                    "true" => true,
                    "false" => false,
                    _ => return Err(error(format!("required `{setting}` is not true or false"))),
                }
            }
            other => {
                return Err(error(format!(
                    "unknown setting `{other}` (the settings are filesystem, network, required)"
                )))
            }
        }
    }
    Ok(Some(policy))
}

/// The policy a run of an agent gets: the agent's own (`agent_policy`), else the plan's
/// default, else `DELTA_SANDBOX` from the run's environment; `None`: not sandboxed.
pub fn effective_policy(
    agent_policy: Option<&SandboxPolicy>,
    plan_default: Option<&SandboxPolicy>,
    env: &BTreeMap<String, String>,
) -> Result<Option<SandboxPolicy>, SandboxEnvError> {
    if let Some(policy) = agent_policy.or(plan_default) {
        return Ok(Some(policy.clone()));
    }
    env_default(env)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Option<SandboxPolicy>, FieldError> {
        let doc: Value = serde_yaml::from_str(yaml).unwrap();
        let file = Path::new("/agents/a/agent.yaml");
        let root = Fields::new(file, "", &doc).unwrap();
        let mut warnings = Vec::new();
        parse_sandbox(
            &root,
            RelativeTo::AgentFolder(Path::new("/agents/a")),
            PolicySource::Agent(file.to_path_buf()),
            UnknownKeys::Refuse,
            &mut warnings,
        )
    }

    #[test]
    fn an_empty_mapping_is_every_default() {
        let policy = parse("sandbox: {}\n").unwrap().unwrap();
        assert_eq!(policy.filesystem, FilesystemAccess::WorkspaceWrite);
        assert_eq!(policy.network, NetworkAccess::Off);
        assert!(policy.required);
        assert_eq!(policy.deny_read, vec![DenyEntry::Defaults]);
        assert!(parse("name: a\n").unwrap().is_none());
    }

    #[test]
    fn every_key_and_path_form_parses() {
        let policy = parse(
            "sandbox:\n  filesystem: read-only\n  network: on\n  required: false\n  \
             allow_write: [/var/cache/x, '~/.cache/pip', '${CWD}/out', '${AGENT_HOME}/state', data]\n  \
             deny_read: [default, '~/.kube']\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(policy.filesystem, FilesystemAccess::ReadOnly);
        assert_eq!(policy.network, NetworkAccess::On);
        assert!(!policy.required);
        assert_eq!(
            policy.allow_write,
            vec![
                PolicyPath::Absolute("/var/cache/x".into()),
                PolicyPath::Home(".cache/pip".into()),
                PolicyPath::Workspace("out".into()),
                PolicyPath::Absolute("/agents/a/state".into()),
                PolicyPath::Absolute("/agents/a/data".into()),
            ]
        );
        assert_eq!(
            policy.deny_read,
            vec![
                DenyEntry::Defaults,
                DenyEntry::Path(PolicyPath::Home(".kube".into()))
            ]
        );
        // A boolean is read as off/on.
        let off = parse("sandbox: {network: false}\n").unwrap().unwrap();
        assert_eq!(off.network, NetworkAccess::Off);
    }

    #[test]
    fn a_plan_keeps_agent_home_for_each_agent() {
        let doc: Value =
            serde_yaml::from_str("sandbox:\n  allow_write: ['${AGENT_HOME}/cache', out]\n")
                .unwrap();
        let file = Path::new("/plans/p.yaml");
        let root = Fields::new(file, "", &doc).unwrap();
        let policy = parse_sandbox(
            &root,
            RelativeTo::PlanFolder(Path::new("/plans")),
            PolicySource::Plan(file.to_path_buf()),
            UnknownKeys::Refuse,
            &mut Vec::new(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            policy.allow_write,
            vec![
                PolicyPath::AgentHome("cache".into()),
                PolicyPath::Absolute("/plans/out".into())
            ]
        );
        let resolved = policy.allow_write[0].resolve(None, Path::new("/ag"), Path::new("/ws"));
        assert_eq!(resolved, Some(PathBuf::from("/ag/cache")));
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        for (yaml, phrase) in [
            ("sandbox: yes-please\n", "`sandbox` must be a mapping"),
            (
                "sandbox: {filesystem: rw}\n",
                "`sandbox.filesystem` is `rw`, not one of off, read-only, workspace-write",
            ),
            (
                "sandbox: {network: maybe}\n",
                "`sandbox.network` is `maybe`",
            ),
            (
                "sandbox: {required: 3}\n",
                "`sandbox.required` must be true or false",
            ),
            (
                "sandbox: {allow_write: ['../up']}\n",
                "`sandbox.allow_write[0]` is `../up`: `..` is not allowed",
            ),
            (
                "sandbox: {deny_read: ['${HOME}/x']}\n",
                "the only placeholders are ${AGENT_HOME} and ${CWD}",
            ),
            (
                "sandbox: {deny_read: ['~bob/x']}\n",
                "`~user` is not supported",
            ),
            ("sandbox: {allow_write: ['']}\n", "the path is empty"),
            (
                "sandbox: {allow_write: x}\n",
                "`sandbox.allow_write` must be a list",
            ),
        ] {
            let error = parse(yaml).unwrap_err().to_string();
            assert!(error.contains(phrase), "{yaml}: {error}");
            assert!(error.contains("/agents/a/agent.yaml"), "{error}");
            assert!(error.contains("hint:"), "{error}");
        }
        let many = format!(
            "sandbox:\n  deny_read: [{}]\n",
            vec!["/x"; MAX_LISTED_PATHS + 1].join(", ")
        );
        assert!(parse(&many)
            .unwrap_err()
            .to_string()
            .contains("more than the limit"));
    }

    #[test]
    fn a_misspelt_key_is_refused_with_the_closest_one() {
        match parse("sandbox: {netwrok: on}\n") {
            Err(FieldError::UnknownKey(error)) => {
                assert_eq!(error.key, "sandbox.netwrok");
                assert_eq!(error.closest.as_deref(), Some("network"));
            }
            other => panic!("{other:?}"),
        }
    }

    fn env(value: &str) -> BTreeMap<String, String> {
        [(SANDBOX_VAR.to_owned(), value.to_owned())].into()
    }

    #[test]
    fn the_variable_sets_a_default() {
        assert_eq!(env_default(&BTreeMap::new()), Ok(None));
        assert_eq!(env_default(&env("")), Ok(None));
        assert_eq!(env_default(&env("none")), Ok(None));
        let plain = env_default(&env("workspace-write")).unwrap().unwrap();
        assert_eq!(plain, SandboxPolicy::defaults(PolicySource::Environment));
        let full = env_default(&env("read-only, network=on,required=false"))
            .unwrap()
            .unwrap();
        assert_eq!(full.filesystem, FilesystemAccess::ReadOnly);
        assert_eq!(full.network, NetworkAccess::On);
        assert!(!full.required);
        for (value, phrase) in [
            ("rw", "`rw` is not one of"),
            ("workspace-write,network=maybe", "network `maybe`"),
            ("off,colour=red", "unknown setting `colour`"),
        ] {
            let error = env_default(&env(value)).unwrap_err().to_string();
            assert!(error.contains(phrase), "{value}: {error}");
            assert!(error.contains("DELTA_SANDBOX"), "{error}");
        }
    }

    #[test]
    fn the_agent_wins_then_the_plan_then_the_variable() {
        let agent = SandboxPolicy::defaults(PolicySource::Agent("/a/agent.yaml".into()));
        let plan = SandboxPolicy::defaults(PolicySource::Plan("/p.yaml".into()));
        let vars = env("read-only");
        let pick = |a, p| effective_policy(a, p, &vars).unwrap().unwrap().source;
        assert_eq!(pick(Some(&agent), Some(&plan)), agent.source);
        assert_eq!(pick(None, Some(&plan)), plan.source);
        assert_eq!(pick(None, None), PolicySource::Environment);
        assert_eq!(effective_policy(None, None, &BTreeMap::new()), Ok(None));
    }
}
