//! What a run needs besides its agent folder, resolved once from the agent and its
//! environment (the process's variables with the `.env` cascade applied): where its model
//! calls go ([`llm_target`]: the scripted model, else the endpoint with its key, dialect and
//! transport), the agent with `DELTA_MODEL` and `DELTA_CONTEXT_WINDOW` applied
//! ([`with_env_model`]), and the engine settings the environment may change (the retry
//! backoff, the creation-lock wait). `delta run`, `continue`, `orchestrate`, `exec-planned`
//! and an embedder resolve a run the same way; [`RunNeeds::resolve`] does all of it at once.
//!
//! Must not: read the process environment or the current directory itself (both are
//! handed in), print, or create anything: every setting is validated before a run exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{load_env_cascade, AgentError, ResolvedAgent, MAX_CONTEXT_TOKENS, MIN_CONTEXT_TOKENS};
use crate::llm::ScriptError;
use crate::llm::{Dialect, Endpoint, HttpTransport, LlmTarget, RetryPolicy, Script};

/// The variable naming the model endpoint (below agent.yaml's `llm.base_url`).
pub const BASE_URL_VAR: &str = "DELTA_BASE_URL";
/// The variable holding the endpoint's key unless agent.yaml's `llm.api_key_env` names another.
pub const API_KEY_VAR: &str = "DELTA_API_KEY";
/// The variable naming the model, over agent.yaml's `llm.model`.
pub const MODEL_VAR: &str = "DELTA_MODEL";
/// The variable naming the scripted model's script (below `--llm-script`).
pub const SCRIPT_VAR: &str = "DELTA_LLM_SCRIPT";
/// The variable that overrides `llm.stream`: `1`/`true` (always stream), `0`/`false`
/// (never), `auto`.
pub const STREAM_VAR: &str = "DELTA_LLM_STREAM";
/// The variable that overrides `llm.http2`: `1`/`true` (HTTP/2, also without TLS, without
/// asking), `0`/`false` (HTTP/1.1 only); unset, `llm.http2` or auto (an `http://` endpoint
/// is asked once whether it speaks HTTP/2).
pub const HTTP2_VAR: &str = "DELTA_LLM_HTTP2";
/// The variable that gives the model's context window (tokens), over agent.yaml's
/// `llm.context_window`.
pub const CONTEXT_WINDOW_VAR: &str = "DELTA_CONTEXT_WINDOW";
/// The variable that shortens the model-call retry backoff (milliseconds of the first wait;
/// doubles per attempt): for tests and CI against a local scripted endpoint.
pub const RETRY_BASE_MS_VAR: &str = "DELTA_RETRY_BASE_MS";
/// The variable that sets how long a new run waits for its workspace's creation lock
/// (`.delta/.creating.lock`) before it is refused (a duration: `30s`, `2m`; at most 24 h).
pub const CREATION_LOCK_WAIT_VAR: &str = "DELTA_CREATION_LOCK_WAIT";

/// The longest creation-lock wait [`CREATION_LOCK_WAIT_VAR`] may ask for.
const MAX_CREATION_LOCK_WAIT: Duration = Duration::from_secs(24 * 3600);

/// A setting a run needs is missing or invalid. Each message names the variable or file and
/// a fix.
#[derive(Debug, thiserror::Error)]
pub enum NeedsError {
    /// No key for the agent's endpoint (one on this machine needs none).
    #[error("no API key: set {key_var} (in the environment or a .env file) for the agent in {}", agent_home.display())]
    NoApiKey {
        /// The variable the agent reads its key from.
        key_var: String,
        /// The agent's folder.
        agent_home: PathBuf,
    },
    /// Neither [`BASE_URL_VAR`] nor agent.yaml's `llm.base_url` is set.
    #[error(
        "no model endpoint: set DELTA_BASE_URL (or `llm.base_url` in agent.yaml) to your \
         provider's OpenAI-compatible base URL, including /v1"
    )]
    NoEndpoint,
    /// A variable or an agent setting has a value it cannot take (the message says which
    /// and how to fix it).
    #[error("{0}")]
    Invalid(String),
    /// The scripted model's script cannot be read or is invalid.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// A `.env` file of the cascade cannot be read or parsed.
    #[error(transparent)]
    Env(#[from] AgentError),
}

/// Everything one run needs besides its start: the agent with the environment's model
/// settings applied, the environment after the `.env` cascade, the files that cascade read,
/// and where the model calls go.
#[derive(Debug)]
pub struct RunNeeds {
    /// The agent, with [`MODEL_VAR`] and [`CONTEXT_WINDOW_VAR`] applied.
    pub agent: ResolvedAgent,
    /// The run's environment: `process_env` over the `.env` files.
    pub env: BTreeMap<String, String>,
    /// The `.env` files read, nearest first.
    pub env_files: Vec<PathBuf>,
    /// Where the run's model calls go.
    pub llm: LlmTarget,
}

impl RunNeeds {
    /// Loads the `.env` cascade for `work_dir` (which need not exist yet; `cwd` is where the
    /// project's `.env` is looked for), then resolves the agent's model settings and target.
    /// `script` (the CLI's `--llm-script`) is the scripted model over [`SCRIPT_VAR`].
    ///
    /// An embedder reaches a real endpoint with its key from the environment in three lines
    /// (the fourth is the request):
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let (dir, work_dir) = (std::path::Path::new("agent"), std::path::Path::new("work"));
    /// # let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    /// let agent = delta_actors::agent::load_agent(dir)?;
    /// let needs = delta_actors::agent::RunNeeds::resolve(agent, work_dir, work_dir, &env, None)?;
    /// let start = delta_actors::RunStart::New { task: "Say hello".into() };
    /// let request = delta_actors::RunRequest::new(needs.agent.into(), work_dir, start, needs.llm);
    /// # Ok(()) }
    /// ```
    pub fn resolve(
        agent: ResolvedAgent,
        work_dir: &Path,
        cwd: &Path,
        process_env: &BTreeMap<String, String>,
        script: Option<&Path>,
    ) -> Result<RunNeeds, NeedsError> {
        let cascade = load_env_cascade(Some(work_dir), &agent.home, cwd, process_env)?;
        let agent = with_env_model(agent, &cascade.vars)?;
        let llm = llm_target(&agent, &cascade.vars, script)?;
        Ok(RunNeeds {
            agent,
            env: cascade.vars,
            env_files: cascade.files_loaded,
            llm,
        })
    }
}

/// The scripted model's script file: `script` (`--llm-script`), else [`SCRIPT_VAR`], else none.
pub fn script_path(env: &BTreeMap<String, String>, script: Option<&Path>) -> Option<PathBuf> {
    script.map(Path::to_path_buf).or_else(|| {
        env.get(SCRIPT_VAR)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    })
}

/// The scripted model, loaded and checked once, when a script is chosen ([`script_path`]).
pub fn scripted_model(
    env: &BTreeMap<String, String>,
    script: Option<&Path>,
) -> Result<Option<Arc<Script>>, NeedsError> {
    script_path(env, script)
        .map(|path| Ok(Arc::new(Script::load(&path)?)))
        .transpose()
}

/// Where model calls go: the scripted model when one is chosen (offline), else the agent's
/// or the environment's OpenAI-compatible endpoint with its key, dialect and transport.
pub fn llm_target(
    agent: &ResolvedAgent,
    env: &BTreeMap<String, String>,
    script: Option<&Path>,
) -> Result<LlmTarget, NeedsError> {
    if let Some(script) = scripted_model(env, script)? {
        return Ok(LlmTarget::Scripted(script));
    }
    // The URL first: `DELTA_BASE_URL=127.0.0.1:8080/v1` (no scheme) was reported as a
    // missing key, because only an http:// URL is known to be on this machine.
    // agent.yaml's `llm.base_url` is checked when the agent loads.
    if agent.llm.base_url.is_none() {
        if let Some(url) = env.get(BASE_URL_VAR).filter(|u| !u.is_empty()) {
            check_base_url(url)?;
        }
    }
    let key_var = agent
        .llm
        .api_key_env
        .clone()
        .unwrap_or_else(|| API_KEY_VAR.to_string());
    let key = env.get(&key_var).filter(|k| !k.is_empty()).cloned();
    let base_url = agent
        .llm
        .base_url
        .clone()
        .or_else(|| env.get(BASE_URL_VAR).filter(|u| !u.is_empty()).cloned());
    // A server on this machine (llama.cpp, Ollama, LM Studio, vLLM...) usually wants no key.
    let key_optional = base_url.as_deref().is_some_and(is_loopback_url);
    let (key, base_url) = match (key, base_url) {
        (None, Some(base_url)) if key_optional => (None, base_url),
        (None, _) => {
            return Err(NeedsError::NoApiKey {
                key_var,
                agent_home: agent.home.clone(),
            })
        }
        (Some(_), None) => return Err(NeedsError::NoEndpoint),
        (Some(key), Some(base_url)) => (Some(key), base_url),
    };
    Ok(LlmTarget::Http(
        Endpoint::new(base_url, key)
            .with_transport(transport(agent, env)?)
            .with_dialect(dialect(agent, env)?),
    ))
}

/// `DELTA_BASE_URL` must be an `http://` or `https://` URL with a host: anything else is
/// refused with the URL written as it should be.
fn check_base_url(url: &str) -> Result<(), NeedsError> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    let well_formed = host.is_some_and(|host| !host.is_empty())
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if well_formed {
        return Ok(());
    }
    let example = if url.contains("://") || url.trim().is_empty() {
        "http://127.0.0.1:8080/v1".to_owned()
    } else if is_loopback_url(&format!("http://{}", url.trim())) {
        format!("http://{}", url.trim())
    } else {
        format!("https://{}", url.trim())
    };
    Err(NeedsError::Invalid(format!(
        "{BASE_URL_VAR}='{url}' is not an http:// or https:// URL with a host; write it with its \
         scheme and the API's /v1 prefix, e.g. {BASE_URL_VAR}={example} (a model server on this \
         machine, such as llama.cpp, Ollama or LM Studio on http://127.0.0.1, needs no API key)"
    )))
}

/// `http://localhost…`, `http://127.x.x.x…` or `http://[::1]…`: an endpoint on this machine.
pub fn is_loopback_url(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The agent's `llm.stream`, `llm.tool_call_content`, `llm.max_tokens_field` and
/// `llm.system_role`, with [`STREAM_VAR`] over the first.
fn dialect(agent: &ResolvedAgent, env: &BTreeMap<String, String>) -> Result<Dialect, NeedsError> {
    let mut dialect = agent.llm.dialect;
    if let Some(raw) = env.get(STREAM_VAR).filter(|v| !v.trim().is_empty()) {
        dialect.stream = match raw.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => Some(true),
            "0" | "false" | "off" | "no" => Some(false),
            "auto" => None,
            _ => {
                return Err(NeedsError::Invalid(format!(
                    "{STREAM_VAR}='{raw}' is not on, off or auto; set {STREAM_VAR}=0 to send model \
                     calls without streaming, {STREAM_VAR}=1 to always stream, or unset it (auto: \
                     stream unless the endpoint cannot)"
                )))
            }
        };
    }
    Ok(dialect)
}

/// The agent's `llm.http2` / `llm.max_connections`, with [`HTTP2_VAR`] over the former.
fn transport(
    agent: &ResolvedAgent,
    env: &BTreeMap<String, String>,
) -> Result<HttpTransport, NeedsError> {
    let mut transport = agent.llm.transport;
    if let Some(raw) = env.get(HTTP2_VAR).filter(|v| !v.trim().is_empty()) {
        transport.http2 = Some(match raw.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => true,
            "0" | "false" | "off" | "no" => false,
            _ => {
                return Err(NeedsError::Invalid(format!(
                    "{HTTP2_VAR}='{raw}' is not on or off; set {HTTP2_VAR}=1 to speak HTTP/2 to the \
                     endpoint (also over plain http://), {HTTP2_VAR}=0 for HTTP/1.1 only, or unset it"
                )))
            }
        });
    }
    Ok(transport)
}

/// The agent with [`MODEL_VAR`] and [`CONTEXT_WINDOW_VAR`] applied.
pub fn with_env_model(
    agent: ResolvedAgent,
    env: &BTreeMap<String, String>,
) -> Result<ResolvedAgent, NeedsError> {
    with_context_window(with_model_override(agent, env), env)
}

/// Applies [`MODEL_VAR`] (if set) over the agent's model.
pub fn with_model_override(agent: ResolvedAgent, env: &BTreeMap<String, String>) -> ResolvedAgent {
    match env.get(MODEL_VAR).filter(|m| !m.is_empty()) {
        Some(model) => {
            let mut agent = agent;
            agent.llm.model = model.clone();
            agent
        }
        None => agent,
    }
}

/// Applies [`CONTEXT_WINDOW_VAR`] (if set) as the agent's `llm.context_window`, checked like
/// the key: a whole number of tokens in range, with room for a prompt beside `llm.max_tokens`.
pub fn with_context_window(
    agent: ResolvedAgent,
    env: &BTreeMap<String, String>,
) -> Result<ResolvedAgent, NeedsError> {
    let Some(raw) = env.get(CONTEXT_WINDOW_VAR).filter(|v| !v.trim().is_empty()) else {
        return Ok(agent);
    };
    let tokens = raw
        .trim()
        .replace('_', "")
        .parse::<u64>()
        .ok()
        .filter(|n| (MIN_CONTEXT_TOKENS..=MAX_CONTEXT_TOKENS).contains(n));
    let reply = agent.llm.max_tokens.map_or(0, u64::from);
    match tokens {
        Some(tokens) if reply + MIN_CONTEXT_TOKENS <= tokens => {
            let mut agent = agent;
            agent.llm.context_window = Some(tokens);
            agent.llm.context_window_from_env = true;
            Ok(agent)
        }
        Some(tokens) => Err(NeedsError::Invalid(format!(
            "{CONTEXT_WINDOW_VAR}={tokens} leaves less than {MIN_CONTEXT_TOKENS} tokens for the prompt beside `llm.max_tokens` ({reply}) of {}; set {CONTEXT_WINDOW_VAR} to the model's real window or lower `llm.max_tokens`",
            agent.config_file.display()
        ))),
        None => Err(NeedsError::Invalid(format!(
            "{CONTEXT_WINDOW_VAR}='{raw}' is not a number of tokens from {MIN_CONTEXT_TOKENS} to {MAX_CONTEXT_TOKENS}; set it to the model's context window, e.g. {CONTEXT_WINDOW_VAR}=8192, or unset it (delta then asks the server, then its model catalogue)"
        ))),
    }
}

/// `retry` with [`RETRY_BASE_MS_VAR`] (if set) as its first wait; the cap on a single wait
/// becomes 64 times the base so the number of attempts is unchanged.
pub fn with_retry_override(
    retry: RetryPolicy,
    env: &BTreeMap<String, String>,
) -> Result<RetryPolicy, NeedsError> {
    let Some(raw) = env.get(RETRY_BASE_MS_VAR).filter(|v| !v.trim().is_empty()) else {
        return Ok(retry);
    };
    let base_ms: u64 = raw.trim().parse().map_err(|_| {
        NeedsError::Invalid(format!(
            "{RETRY_BASE_MS_VAR}='{raw}' is not a whole number of milliseconds; \
             unset it or give e.g. {RETRY_BASE_MS_VAR}=10"
        ))
    })?;
    let mut retry = retry;
    retry.base_delay = Duration::from_millis(base_ms);
    retry.max_delay = Duration::from_millis(base_ms.saturating_mul(64));
    Ok(retry)
}

/// [`CREATION_LOCK_WAIT_VAR`], when set: at most 24 h.
pub fn creation_lock_wait(env: &BTreeMap<String, String>) -> Result<Option<Duration>, NeedsError> {
    let Some(raw) = env
        .get(CREATION_LOCK_WAIT_VAR)
        .filter(|v| !v.trim().is_empty())
    else {
        return Ok(None);
    };
    crate::duration::parse_duration(raw)
        .ok()
        .filter(|wait| *wait <= MAX_CREATION_LOCK_WAIT)
        .map(Some)
        .ok_or_else(|| {
            NeedsError::Invalid(format!(
                "{CREATION_LOCK_WAIT_VAR}='{raw}' is not a duration of at most 24h; unset it \
                 (30s by default) or give e.g. {CREATION_LOCK_WAIT_VAR}=2m"
            ))
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn loopback_endpoints_are_recognised() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434/v1",
            "http://LOCALHOST/v1",
            "http://[::1]:1234/v1",
            "http://127.1.2.3/v1",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "https://api.example.com/v1",
            "http://127.0.0.1.example.com/v1",
            "http://10.0.0.1/v1",
            "http://localhost@evil.example/v1",
            "localhost:8080",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

    /// Issue 31 item 16: a URL without its scheme was reported as a missing API key.
    #[test]
    fn a_base_url_without_a_scheme_is_refused_with_the_url_it_should_be() {
        for (url, fix) in [
            (
                "127.0.0.1:8080/v1",
                "DELTA_BASE_URL=http://127.0.0.1:8080/v1",
            ),
            (
                "localhost:11434/v1",
                "DELTA_BASE_URL=http://localhost:11434/v1",
            ),
            (
                "api.example.com/v1",
                "DELTA_BASE_URL=https://api.example.com/v1",
            ),
            ("ftp://host/v1", "DELTA_BASE_URL=http://127.0.0.1:8080/v1"),
            ("http:///v1", "DELTA_BASE_URL=http://127.0.0.1:8080/v1"),
        ] {
            match check_base_url(url) {
                Err(NeedsError::Invalid(message)) => {
                    assert!(message.contains(fix), "{url}: {message}");
                    assert!(message.contains("needs no API key"), "{message}");
                }
                other => panic!("{url}: {:?}", other.map_err(|e| e.to_string())),
            }
        }
        for url in ["http://127.0.0.1:8080/v1", "HTTPS://api.example.com/v1"] {
            assert!(check_base_url(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn retry_base_override_shortens_backoff() {
        let retry = with_retry_override(RetryPolicy::default(), &env(&[(RETRY_BASE_MS_VAR, "7")]));
        let retry = retry.map_err(|e| e.to_string());
        assert_eq!(
            retry.as_ref().map(|r| r.base_delay),
            Ok(Duration::from_millis(7))
        );
        assert_eq!(
            retry.map(|r| r.max_delay),
            Ok(Duration::from_millis(7 * 64))
        );
    }

    #[test]
    fn retry_base_override_absent_keeps_default() {
        let default = RetryPolicy::default().base_delay;
        let retry = with_retry_override(RetryPolicy::default(), &env(&[]));
        let retry = retry.map_err(|e| e.to_string());
        assert_eq!(retry.map(|r| r.base_delay), Ok(default));
    }

    #[test]
    fn retry_base_override_rejects_garbage_naming_the_variable() {
        match with_retry_override(RetryPolicy::default(), &env(&[(RETRY_BASE_MS_VAR, "fast")])) {
            Err(NeedsError::Invalid(message)) => {
                assert!(
                    message.contains(RETRY_BASE_MS_VAR) && message.contains("fast"),
                    "{message}"
                )
            }
            other => panic!("expected an invalid setting, got {:?}", other.map(|_| ())),
        }
    }

    /// A temporary agent folder (`name: needs`, model `m`) and a work folder beside it.
    fn agent_and_work() -> (tempfile::TempDir, ResolvedAgent, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("agent");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("agent.yaml"),
            "name: needs\nllm:\n  model: m\ntools: []\n",
        )
        .unwrap();
        std::fs::write(home.join("system_prompt.md"), "You help.\n").unwrap();
        std::fs::write(
            home.join("context.yaml"),
            "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n",
        )
        .unwrap();
        let agent = super::super::load_agent(&home).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        (dir, agent, work)
    }

    /// What `delta run` resolved in the binary, the library resolves for every embedder: the
    /// work folder's `.env` gives endpoint, key and model; a missing key is a typed error
    /// naming the variable; an endpoint on this machine needs none.
    #[test]
    fn run_needs_resolve_endpoint_key_and_model_from_the_env_cascade() {
        let (_dir, agent, work) = agent_and_work();
        std::fs::write(
            work.join(".env"),
            "DELTA_BASE_URL=https://llm.example.com/v1\nDELTA_API_KEY=sk-test\nDELTA_MODEL=big\n",
        )
        .unwrap();
        let needs = RunNeeds::resolve(agent.clone(), &work, &work, &env(&[]), None).unwrap();
        assert_eq!(needs.agent.llm.model, "big");
        assert_eq!(needs.env_files, [work.join(".env")]);
        match &needs.llm {
            LlmTarget::Http(endpoint) => {
                assert_eq!(endpoint.base_url, "https://llm.example.com/v1");
                assert_eq!(endpoint.api_key.as_deref(), Some("sk-test"));
            }
            other => panic!("{other:?}"),
        }

        std::fs::remove_file(work.join(".env")).unwrap();
        let remote = env(&[(BASE_URL_VAR, "https://llm.example.com/v1")]);
        match RunNeeds::resolve(agent.clone(), &work, &work, &remote, None) {
            Err(NeedsError::NoApiKey { key_var, .. }) => assert_eq!(key_var, API_KEY_VAR),
            other => panic!("{:?}", other.map(|n| n.llm)),
        }
        let local = env(&[(BASE_URL_VAR, "http://127.0.0.1:8080/v1")]);
        assert!(RunNeeds::resolve(agent, &work, &work, &local, None).is_ok());
    }

    #[test]
    fn a_creation_lock_wait_over_a_day_is_refused_naming_the_variable() {
        assert_eq!(
            creation_lock_wait(&env(&[(CREATION_LOCK_WAIT_VAR, "2m")])).ok(),
            Some(Some(Duration::from_secs(120)))
        );
        let refused = creation_lock_wait(&env(&[(CREATION_LOCK_WAIT_VAR, "25h")]));
        assert!(
            refused.is_err_and(|e| e.to_string().contains(CREATION_LOCK_WAIT_VAR)),
            "25h accepted"
        );
    }
}
