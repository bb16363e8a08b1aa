//! Agent loading: `agent.yaml` (or legacy `config.yaml`), imports, `hooks.yaml`,
//! `context.yaml` and the `.env` cascade, resolved once into an immutable `ResolvedAgent`.
//!
//! Owns locating the main file, the system prompt check and the order in which the parts are
//! validated. Nothing later re-reads the YAML: every consumer takes a `ResolvedAgent`. This
//! module never prints; deprecations are returned as `warnings`. Unknown keys in any of the
//! agent's files are errors ([`AgentError::UnknownKey`]), or warnings when agent.yaml says
//! `strict: false` ([`UnknownKeys`]).
//!
//! # Layout
//! - `config`: top-level agent.yaml keys and `llm` settings
//! - `imports`: recursive imports and tool merging
//! - `context_recipe`: `context.yaml`
//! - `hooks`: `hooks.yaml` / deprecated `lifecycle_hooks`
//! - `dotenv`: the `.env` cascade
//! - `error`: [`AgentError`]; typed YAML access (`Fields`) is the crate's `yaml` module

mod config;
mod context_recipe;
mod dotenv;
mod error;
mod hooks;
mod imports;
mod price;
mod run_needs;

use std::path::{Path, PathBuf};

pub use config::{EmptyAnswerPolicy, LlmSettings, ResponseFormat};
pub(crate) use context_recipe::expand_path_vars;
pub use context_recipe::{
    default_context_yaml, Compaction, CompactionStrategy, ContextRecipe, ContextSource,
    GeneratorCache, OnMissing, OnOverflow, PipelineStage, SourceCondition, TaskPattern, TokenCap,
    DEFAULT_CONTEXT_MAX_BYTES, DEFAULT_GENERATOR_TIMEOUT_MS, DEFAULT_SOURCE_MAX_BYTES,
    MAX_CONFIGURABLE_BYTES, MAX_CONTEXT_TOKENS, MIN_CONTEXT_TOKENS,
};
pub use dotenv::{load_env_cascade, parse_dotenv, EnvCascade};
pub use error::AgentError;
pub use hooks::{HookName, HookSpec, Hooks};
pub use run_needs::{
    creation_lock_wait, is_loopback_url, llm_target, script_path, scripted_model,
    with_context_window, with_env_model, with_model_override, with_retry_override, NeedsError,
    RunNeeds, API_KEY_VAR, BASE_URL_VAR, CONTEXT_WINDOW_VAR, CREATION_LOCK_WAIT_VAR, HTTP2_VAR,
    MODEL_VAR, RETRY_BASE_MS_VAR, SCRIPT_VAR, STREAM_VAR,
};

use crate::tool::compile::{ask_human_schema, CompiledTool};
use crate::tool::kind::ToolOwner;
use crate::tool::mcp::config::namespace_clash;
use crate::tool::mcp::McpServerConfig;
use crate::yaml::Fields;
pub use crate::yaml::{UnknownKeyError, UnknownKeys};

/// A fully validated agent folder. Immutable; share it behind an `Arc`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedAgent {
    /// Canonical agent folder (`${AGENT_HOME}`).
    pub home: PathBuf,
    /// The agent.yaml (or config.yaml) actually used.
    pub config_file: PathBuf,
    /// `name`: shown in listings, metadata and RunResults.
    pub name: String,
    /// `version` (default `1.0.0`); informational.
    pub version: String,
    /// `description`; informational.
    pub description: Option<String>,
    /// `llm`: the model and its sampling settings, endpoint and timeouts.
    pub llm: LlmSettings,
    /// Resolved system prompt file, checked to be non-blank.
    pub system_prompt_path: PathBuf,
    /// `max_iterations`: the iteration cap of each start or continuation (a request's cap
    /// wins; unset means 30).
    pub max_iterations: Option<u32>,
    /// agent.yaml `parallel_tool_calls` (default false).
    pub parallel_tool_calls: bool,
    /// agent.yaml `ask_human` (default true): the built-in `ask_human` tool is offered to
    /// the model. With `false` and no tools, requests carry neither `tools` nor `tool_choice`.
    pub ask_human: bool,
    /// agent.yaml `empty_answer` (default `warn`): what an empty final answer does.
    pub empty_answer: EmptyAnswerPolicy,
    /// Imported and local tools, merged, in final order.
    pub tools: Vec<CompiledTool>,
    /// `mcp`: the Model Context Protocol servers whose tools a run offers after the agent's
    /// own (as `<server>__<tool>`; see `docs/mcp.md`), in the order listed.
    pub mcp: Vec<McpServerConfig>,
    /// `sandbox`: how the kernel confines the agent's tools and MCP servers (see
    /// `docs/sandbox.md`); `None` runs them unconfined unless a plan or `DELTA_SANDBOX` gives
    /// a default (see [`crate::sandbox::effective_policy`]).
    pub sandbox: Option<crate::sandbox::SandboxPolicy>,
    /// `context.yaml`: what the model sees at every call.
    pub context: ContextRecipe,
    /// `hooks.yaml` (or the deprecated `lifecycle_hooks`).
    pub hooks: Hooks,
    /// Deprecations and unknown keys, each naming its file, for the caller to show.
    pub warnings: Vec<String>,
}

impl ResolvedAgent {
    /// The environment variables no child of this agent (tool, hook, generator, MCP server)
    /// may see: `DELTA_API_KEY` and the agent's `llm.api_key_env`.
    pub fn secret_env_names(&self) -> Vec<String> {
        let mut names = vec!["DELTA_API_KEY".to_string()];
        if let Some(name) = &self.llm.api_key_env {
            names.push(name.clone());
        }
        names
    }

    /// This agent with `default` as its sandbox when its agent.yaml has no `sandbox:` (a
    /// plan's `sandbox:` is the default of its agents).
    pub fn with_default_sandbox(
        mut self,
        default: Option<&crate::sandbox::SandboxPolicy>,
    ) -> ResolvedAgent {
        if self.sandbox.is_none() {
            self.sandbox = default.cloned();
        }
        self
    }

    /// The one line `delta run` prints when this agent's tools will run unconfined (it has
    /// tools or MCP servers, and neither its `sandbox:` nor `DELTA_SANDBOX` in `env` confines
    /// them); `None` otherwise. The error: `DELTA_SANDBOX` cannot be read.
    pub fn unsandboxed_notice(
        &self,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<String>, crate::sandbox::SandboxEnvError> {
        let confined = crate::sandbox::effective_policy(self.sandbox.as_ref(), None, env)?;
        if confined.is_some() || (self.tools.is_empty() && self.mcp.is_empty()) {
            return Ok(None);
        }
        Ok(Some(format!(
            "the tools of agent `{}` are not sandboxed: they run with all your rights (your \
             files, your credentials, the network). To confine them, add `sandbox: {{}}` to {} \
             (writes only to the workspace, no network) or set {}=workspace-write \
             (docs/sandbox.md)",
            self.name,
            self.config_file.display(),
            crate::sandbox::SANDBOX_VAR
        )))
    }

    /// Looks a tool up by name.
    pub fn tool(&self, name: &str) -> Option<&CompiledTool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The agent's own tools as OpenAI function definitions, the built-in `ask_human` last
    /// (unless the agent turned it off). MCP servers' tools are listed when a run starts the
    /// servers (`tool::kind::registry::open_toolbox`).
    pub fn openai_tools(&self) -> Vec<serde_json::Value> {
        self.tools
            .iter()
            .map(CompiledTool::openai_schema)
            .chain(self.ask_human.then(ask_human_schema))
            .collect()
    }
}

/// The run's tool kinds see the agent through [`ToolOwner`] (the kinds live in `tool`,
/// which agent loading imports).
impl ToolOwner for ResolvedAgent {
    fn own_tools(&self) -> &[CompiledTool] {
        &self.tools
    }
    fn home(&self) -> &Path {
        &self.home
    }
    fn mcp_servers(&self) -> &[McpServerConfig] {
        &self.mcp
    }
    fn offers_ask_human(&self) -> bool {
        self.ask_human
    }
    fn hidden_env_names(&self) -> Vec<String> {
        self.secret_env_names()
    }
}

/// A standalone tools file (e.g. `tools/file-ops.yaml`) with its imports resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLibrary {
    /// The file loaded, canonical.
    pub file: PathBuf,
    /// Its tools and those it imports, merged, in final order.
    pub tools: Vec<CompiledTool>,
    /// Deprecations and unknown keys, each naming its file.
    pub warnings: Vec<String>,
}

const CONFIG_NAMES: [&str; 2] = ["agent.yaml", "config.yaml"];

/// Reads and parses one YAML file of the agent. An empty file parses as `Value::Null`.
pub(crate) fn read_yaml(file: &Path) -> Result<serde_yaml::Value, AgentError> {
    let text = read_agent_file(file)
        .map_err(|e| AgentError::io(file, e, "check that the file exists and is readable UTF-8"))?;
    serde_yaml::from_str(&text).map_err(|e| {
        let syntax = crate::yaml_errors::syntax_error(&text, &e);
        AgentError::Yaml {
            file: file.to_path_buf(),
            hint: if syntax.tab {
                crate::yaml_errors::TAB_HINT.to_owned()
            } else {
                "check the indentation and quoting at that line".to_owned()
            },
            message: syntax.to_string(),
        }
    })
}

/// One file of an agent folder as text: a regular file (links followed) of at most
/// [`crate::bounded_read::CONFIG`]; a FIFO a tool left in the folder must not hang loading.
pub(crate) fn read_agent_file(file: &Path) -> std::io::Result<String> {
    use crate::bounded_read::{read_to_string, Links, CONFIG};
    Ok(read_to_string(file, CONFIG, Links::Follow)?)
}

fn canonical(path: &Path) -> Result<PathBuf, AgentError> {
    std::fs::canonicalize(path)
        .map_err(|e| AgentError::io(path, e, "check that the path exists and is accessible"))
}

/// Finds the main file for `path` (a folder, or the main file itself) → (home, file).
fn locate(path: &Path, warnings: &mut Vec<String>) -> Result<(PathBuf, PathBuf), AgentError> {
    if !path.exists() {
        return Err(AgentError::NotFound {
            path: path.to_path_buf(),
        });
    }
    if path.is_file() {
        let file = canonical(path)?;
        let home = file.parent().map(Path::to_path_buf).unwrap_or_default();
        if file.file_name().is_some_and(|n| n == "config.yaml") {
            warnings.push(format!(
                "{}: config.yaml is deprecated; rename it to agent.yaml (mv config.yaml agent.yaml)",
                file.display()
            ));
        }
        return Ok((home, file));
    }
    let home = canonical(path)?;
    let [agent_yaml, config_yaml] = CONFIG_NAMES.map(|n| home.join(n));
    match (agent_yaml.is_file(), config_yaml.is_file()) {
        (true, false) => Ok((home, agent_yaml)),
        (true, true) => {
            warnings.push(format!(
                "{}: both agent.yaml and config.yaml exist; using agent.yaml (remove config.yaml to avoid confusion)",
                home.display()
            ));
            Ok((home, agent_yaml))
        }
        (false, true) => {
            warnings.push(format!(
                "{}: config.yaml is deprecated; rename it to agent.yaml (mv config.yaml agent.yaml)",
                config_yaml.display()
            ));
            Ok((home, config_yaml))
        }
        (false, false) => Err(AgentError::NoConfig { dir: home }),
    }
}

/// Resolves and checks the system prompt: `system_prompt:` from agent.yaml, else
/// `system_prompt.md` (or the original engine's `system_prompt.txt`).
fn resolve_system_prompt(
    home: &Path,
    config_file: &Path,
    configured: Option<&str>,
) -> Result<PathBuf, AgentError> {
    let path = match configured {
        Some(p) => home.join(p),
        None => {
            let md = home.join("system_prompt.md");
            let txt = home.join("system_prompt.txt");
            if !md.exists() && txt.is_file() {
                txt
            } else {
                md
            }
        }
    };
    if !path.is_file() {
        return Err(AgentError::invalid(
            config_file,
            format!("system prompt `{}` not found", path.display()),
            "create system_prompt.md beside agent.yaml with the agent's instructions, or point `system_prompt:` at the file",
        ));
    }
    let resolved = canonical(&path)?;
    let home_resolved = canonical(home)?;
    if !resolved.starts_with(&home_resolved) {
        // The prompt is sent to the provider: a path leaving the agent folder (`..`, an
        // absolute path, a symlink) would ship whatever file it names.
        return Err(AgentError::invalid(
            config_file,
            format!(
                "system prompt `{}` resolves to `{}`, outside the agent folder `{}`",
                path.display(),
                resolved.display(),
                home_resolved.display()
            ),
            "keep the system prompt inside the agent folder (symlinks are followed); copy the file there",
        ));
    }
    let text = read_agent_file(&resolved)
        .map_err(|e| AgentError::io(&path, e, "the system prompt must be readable UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(AgentError::invalid(
            &path,
            "the system prompt is blank",
            "write the agent's role, rules and goals into it",
        ));
    }
    Ok(resolved)
}

/// Loads `hooks.yaml`, or (deprecated) `lifecycle_hooks` from agent.yaml when it is absent.
fn load_hooks(
    home: &Path,
    config_file: &Path,
    doc: &serde_yaml::Value,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Hooks, AgentError> {
    let hooks_file = home.join("hooks.yaml");
    let root = Fields::new(config_file, "", doc)?;
    let inline = root.get("lifecycle_hooks");
    if hooks_file.is_file() {
        if inline.is_some() {
            warnings.push(format!(
                "{}: `lifecycle_hooks` is ignored because hooks.yaml exists; move them into hooks.yaml",
                config_file.display()
            ));
        }
        let hooks_doc = read_yaml(&hooks_file)?;
        return hooks::parse_hooks(&hooks_file, "", &hooks_doc, policy, warnings);
    }
    match inline {
        Some(value) => {
            warnings.push(format!(
                "{}: `lifecycle_hooks` in {} is deprecated; move the hooks into hooks.yaml",
                config_file.display(),
                config_file
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
            ));
            hooks::parse_hooks(config_file, "lifecycle_hooks", value, policy, warnings)
        }
        None => Ok(Hooks::default()),
    }
}

/// Loads and validates an agent. `path` is the agent folder or its agent.yaml/config.yaml.
/// Every problem is an [`AgentError`] naming the file (a configuration error, exit 126).
pub fn load_agent(path: &Path) -> Result<ResolvedAgent, AgentError> {
    let mut warnings = Vec::new();
    let (home, config_file) = locate(path, &mut warnings)?;
    let doc = read_yaml(&config_file)?;
    // Read first: it decides whether an unknown key in any of the agent's files is an error.
    let policy = config::unknown_keys_policy(&config_file, &doc)?;
    let config = config::parse_agent_config(&config_file, &doc, policy, &mut warnings)?;
    let tools = imports::collect_tools(&home, &config_file, &doc, policy, &mut warnings)?;
    let system_prompt_path =
        resolve_system_prompt(&home, &config_file, config.system_prompt.as_deref())?;
    let context = context_recipe::load_context_recipe(&home, policy, &mut warnings)?;
    context_recipe::check_budget_fits(&home, &context, &config.llm)?;
    let hooks = load_hooks(&home, &config_file, &doc, policy, &mut warnings)?;
    check_mcp(&config_file, &config.mcp, &tools)?;
    Ok(ResolvedAgent {
        home,
        config_file,
        name: config.name,
        version: config.version,
        description: config.description,
        llm: config.llm,
        system_prompt_path,
        max_iterations: config.max_iterations,
        parallel_tool_calls: config.parallel_tool_calls,
        ask_human: config.ask_human,
        empty_answer: config.empty_answer,
        tools,
        mcp: config.mcp,
        sandbox: config.sandbox,
        context,
        hooks,
        warnings,
    })
}

/// An agent tool may not take a name in an MCP server's namespace (`<server>__...`), and an
/// engine built without the `mcp` feature refuses MCP servers rather than ignore them.
fn check_mcp(
    config_file: &Path,
    servers: &[McpServerConfig],
    tools: &[CompiledTool],
) -> Result<(), AgentError> {
    if let Some((tool, server)) = namespace_clash(servers, tools.iter().map(|t| t.name.as_str())) {
        return Err(AgentError::invalid(
            config_file,
            format!(
                "tool `{tool}` is named like a tool of the MCP server `{}` (its tools are offered as `{}<tool>`)",
                server.name,
                server.tool_prefix()
            ),
            "rename the tool (without the server's name and `__` in front), or rename the server in `mcp:`",
        ));
    }
    if cfg!(not(feature = "mcp")) && !servers.is_empty() {
        return Err(AgentError::invalid(
            config_file,
            "`mcp:` lists servers, but this delta was built without MCP support",
            "build delta with the `mcp` feature (on by default), or remove `mcp:`",
        ));
    }
    Ok(())
}

/// Loads a standalone tools file and its imports (confined to the file's folder).
pub fn load_tool_library(path: &Path) -> Result<ToolLibrary, AgentError> {
    if !path.is_file() {
        return Err(AgentError::NotFound {
            path: path.to_path_buf(),
        });
    }
    let file = canonical(path)?;
    let home = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let doc = read_yaml(&file)?;
    let mut warnings = Vec::new();
    if !doc.is_null() {
        Fields::new(&file, "", &doc)?.check_keys(
            &imports::LIBRARY_KEYS,
            UnknownKeys::Refuse,
            &mut warnings,
        )?;
    }
    let tools = imports::collect_tools(&home, &file, &doc, UnknownKeys::Refuse, &mut warnings)?;
    Ok(ToolLibrary {
        file,
        tools,
        warnings,
    })
}

/// Every key an agent's files accept, as `(file, key path)`: `("agent.yaml", "llm.model")`,
/// `("agent.yaml", "tools[].parameters[].name")`, `("context.yaml", "sources[].path")`,
/// `("hooks.yaml", "<hook>.command")`, `("tools file", "imports")`... Built from the lists the
/// parsers check keys against, so the reference (docs/agent.md) is tested to cover each.
pub fn known_key_paths() -> Vec<(&'static str, String)> {
    use crate::tool::compile::{PARAMETER_KEYS, TOOL_KEYS};
    let level = |file: &'static str, prefix: &str, keys: &[&str]| -> Vec<(&'static str, String)> {
        keys.iter()
            .map(|key| (file, format!("{prefix}{key}")))
            .collect()
    };
    let hook_names: Vec<&str> = HookName::ALL.iter().map(|h| h.as_str()).collect();
    [
        level("agent.yaml", "", &config::AGENT_KEYS),
        level("agent.yaml", "llm.", &config::LLM_KEYS),
        level("agent.yaml", "tools[].", &TOOL_KEYS),
        level("agent.yaml", "tools[].parameters[].", &PARAMETER_KEYS),
        level("context.yaml", "", &context_recipe::CONTEXT_KEYS),
        level(
            "context.yaml",
            "sources[].",
            &context_recipe::FILE_SOURCE_KEYS,
        ),
        level(
            "context.yaml",
            "sources[].",
            &context_recipe::COMPUTED_FILE_SOURCE_KEYS,
        ),
        level(
            "context.yaml",
            "sources[].",
            &context_recipe::JOURNAL_SOURCE_KEYS,
        ),
        level(
            "context.yaml",
            "sources[].",
            &context_recipe::PIPELINE_SOURCE_KEYS,
        ),
        level(
            "context.yaml",
            "sources[].generator.",
            &context_recipe::GENERATOR_KEYS,
        ),
        level(
            "context.yaml",
            "sources[].condition.",
            &context_recipe::CONDITION_KEYS,
        ),
        level(
            "context.yaml",
            "sources[].cache.",
            &context_recipe::CACHE_KEYS,
        ),
        level(
            "context.yaml",
            "sources[].stages[].",
            &context_recipe::STAGE_KEYS,
        ),
        level(
            "context.yaml",
            "sources[].compaction.",
            &context_recipe::COMPACTION_KEYS,
        ),
        level("hooks.yaml", "", &hook_names),
        level("hooks.yaml", "<hook>.", &hooks::HOOK_KEYS),
        level("tools file", "", &imports::LIBRARY_KEYS),
        level("agent.yaml", "sandbox.", &crate::sandbox::SANDBOX_KEYS),
        level(
            "agent.yaml",
            "mcp.<server>.",
            &crate::tool::mcp::config::SERVER_KEYS,
        ),
    ]
    .concat()
}

/// True when `path` names an agent (a folder, or a file called agent.yaml/config.yaml)
/// rather than a standalone tools file.
pub fn is_agent_path(path: &Path) -> bool {
    path.is_dir()
        || path
            .file_name()
            .is_some_and(|n| CONFIG_NAMES.iter().any(|c| n == *c))
}
