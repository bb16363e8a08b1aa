//! `CliError`: why a command failed, with the library error that caused it as its source,
//! and the one mapping from a failure to its exit code (configuration 126, usage 2,
//! runtime 1, interrupted before anything was created 130) that `main.rs` applies.
//!
//! It does not print; `main.rs` writes `error: <message>`. The message is the library
//! error's own text (file, key, hint), unchanged: a variant wrapping one is `transparent`.

use std::path::PathBuf;

use delta_actors::agent::AgentError;
use delta_actors::janitor::ContinueError;
use delta_actors::llm::scripted::ScriptError;
use delta_actors::plan::state::StateError;
use delta_actors::plan::PlanError;
use delta_actors::workspace::WorkspaceError;
use delta_actors::EngineError;

/// A failed command. Every message is complete and user-facing (file, key, hint).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The agent or another configuration file is invalid, in the CLI's own words (exit
    /// 126, spec §2.6.5).
    #[error("{0}")]
    Config(String),
    /// The command line asks for something impossible (exit 2, like clap's own errors).
    #[error("{0}")]
    Usage(String),
    /// Anything that went wrong while doing the work, in the CLI's own words (exit 1).
    #[error("{0}")]
    Runtime(String),
    /// No API key for an agent's model endpoint (exit 126). Where to put it depends on
    /// where the runs execute: with `--executor slurm` only the orchestrating process's
    /// environment, since the jobs read the `.env` files of the shared folders.
    #[error("{}", no_api_key_text(key_var, agent_home, *slurm))]
    NoApiKey {
        /// The variable the agent reads its key from (`DELTA_API_KEY` unless
        /// `llm.api_key_env` says).
        key_var: String,
        /// The agent's folder.
        agent_home: PathBuf,
        /// The runs are Slurm jobs (`--executor slurm`).
        slurm: bool,
    },
    /// No model endpoint: neither `DELTA_BASE_URL` nor the agent's `llm.base_url` is set
    /// (exit 126; like [`CliError::NoApiKey`], a warning under `orchestrate --dry-run`).
    #[error(
        "no model endpoint: set DELTA_BASE_URL (or `llm.base_url` in agent.yaml) to your \
         provider's OpenAI-compatible base URL, including /v1"
    )]
    NoEndpoint,
    /// The agent folder is invalid (exit 126).
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The agent of one of the plan's stages is invalid (exit 126).
    #[error("{}: stage `{stage}`: {source}", plan.display())]
    StageAgent {
        /// The plan file.
        plan: PathBuf,
        /// The stage's id.
        stage: String,
        /// What is wrong with its agent.
        source: Box<AgentError>,
    },
    /// The plan is invalid (exit 126).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The scripted model's script is invalid (exit 126).
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// A run id or a workspace is invalid, or a run is missing (exit 126).
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// An orchestration id is invalid, or the orchestration cannot be resumed (exit 126).
    #[error(transparent)]
    Orchestration(#[from] StateError),
    /// The run cannot be continued (exit 126; 1 when its record cannot be written).
    #[error(transparent)]
    Continue(#[from] ContinueError),
    /// The engine refused a request (exit 126) or could not run it (exit 1).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// `delta mock-llm` could not serve its script (exit 126).
    #[error(transparent)]
    MockLlm(#[from] delta_actors::llm::scripted::ServeError),
    /// `delta serve` could not start or stopped on an error (exit 126).
    #[error(transparent)]
    Serve(#[from] delta_actors::api::serve::ServeError),
    /// The tool spawner process could not be started (exit 1).
    #[error(transparent)]
    ToolSpawner(#[from] delta_actors::tool::spawner::StartError),
    /// A signal (Ctrl-C, SIGTERM) stopped the command before it created anything to
    /// resume, e.g. while a new run waited for its workspace's creation lock (exit 130).
    #[error("{0}")]
    Interrupted(String),
    /// The operating system refused the CLI something it needs (a signal handler, the
    /// current folder, the terminal) (exit 1).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The text of [`CliError::NoApiKey`]: where the key goes, and the offline alternative.
fn no_api_key_text(key_var: &str, agent_home: &std::path::Path, slurm: bool) -> String {
    if slurm {
        return format!(
            "no API key: {key_var} is not set.\n\
             With --executor slurm, set it in the environment of this `delta orchestrate` only, e.g.\n  \
             export {key_var}=sk-...\n\
             with DELTA_BASE_URL set to your provider's OpenAI-compatible URL including /v1: the relay \
             of the orchestrating process makes the jobs' model calls with it, so the key never \
             reaches a node. Not in a .env file on the shared filesystem (workspace, plan or agent \
             folder, project root): the jobs can read those.\n\
             To try it offline with the built-in scripted model instead: --llm-script <script.yaml> \
             (the relay serves it to the jobs; see docs/llm-script.md)."
        );
    }
    format!(
        "no API key: {key_var} is not set.\n\
         Set it in the environment or in a .env file (workspace, agent folder or project root), e.g.\n  \
         echo '{key_var}=sk-...' >> {}/.env\n\
         and set DELTA_BASE_URL to your provider's OpenAI-compatible URL including /v1.\n\
         A model server on this machine needs no key: DELTA_BASE_URL=http://127.0.0.1:8080/v1 \
         (llama.cpp, Ollama, LM Studio, vLLM) is called without one.\n\
         To run offline with the built-in scripted model instead: --llm-script <script.yaml> (see docs/llm-script.md).",
        agent_home.display()
    )
}

/// What a run needs, refused by the library: a missing key or endpoint keeps its own words
/// (exit 126 with the fixes); the rest are configuration errors in the library's words.
impl From<delta_actors::agent::NeedsError> for CliError {
    fn from(error: delta_actors::agent::NeedsError) -> CliError {
        use delta_actors::agent::NeedsError;
        match error {
            NeedsError::NoApiKey {
                key_var,
                agent_home,
            } => CliError::NoApiKey {
                key_var,
                agent_home,
                slurm: false,
            },
            NeedsError::NoEndpoint => CliError::NoEndpoint,
            NeedsError::Script(error) => CliError::Script(error),
            NeedsError::Env(error) => CliError::Agent(error),
            NeedsError::Invalid(message) => CliError::Config(message),
        }
    }
}

impl CliError {
    pub const CONFIG_EXIT: u8 = 126;
    pub const USAGE_EXIT: u8 = 2;
    pub const RUNTIME_EXIT: u8 = 1;
    pub const INTERRUPTED_EXIT: u8 = 130;

    /// The same error as `delta orchestrate --executor slurm` words it (a missing key is
    /// set on the orchestrating host only).
    pub fn under_slurm(self) -> CliError {
        match self {
            CliError::NoApiKey {
                key_var,
                agent_home,
                ..
            } => CliError::NoApiKey {
                key_var,
                agent_home,
                slurm: true,
            },
            other => other,
        }
    }

    /// The process exit code for this failure: the one place that decides it.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => Self::USAGE_EXIT,
            CliError::Config(_)
            | CliError::NoApiKey { .. }
            | CliError::NoEndpoint
            | CliError::Agent(_)
            | CliError::StageAgent { .. }
            | CliError::Plan(_)
            | CliError::Script(_)
            | CliError::Workspace(_)
            | CliError::Orchestration(_)
            | CliError::MockLlm(_)
            | CliError::Serve(_)
            | CliError::Engine(EngineError::Rejected(_)) => Self::CONFIG_EXIT,
            // Nobody drives the run but its record cannot be written: a full disk, not a
            // bad request.
            CliError::Continue(ContinueError::CannotRecord { .. }) => Self::RUNTIME_EXIT,
            CliError::Continue(_) => Self::CONFIG_EXIT,
            CliError::Interrupted(_) => Self::INTERRUPTED_EXIT,
            CliError::Runtime(_)
            | CliError::Engine(_)
            | CliError::ToolSpawner(_)
            | CliError::Io(_) => Self::RUNTIME_EXIT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(CliError::Config(String::new()).exit_code(), 126);
        assert_eq!(CliError::Usage(String::new()).exit_code(), 2);
        assert_eq!(CliError::Runtime(String::new()).exit_code(), 1);
        assert_eq!(CliError::Interrupted(String::new()).exit_code(), 130);
        let from_agent = CliError::from(AgentError::NoConfig { dir: "/x".into() });
        assert_eq!(from_agent.exit_code(), 126);
        assert!(from_agent.to_string().contains("/x"));
    }

    #[test]
    fn engine_refusals_are_configuration_errors_and_failures_are_not() {
        let refused = CliError::from(EngineError::Rejected("run 'x' is locked".into()));
        assert_eq!(refused.exit_code(), 126);
        assert_eq!(refused.to_string(), "run 'x' is locked");
        assert_eq!(CliError::from(EngineError::Stopped).exit_code(), 1);
    }

    #[test]
    fn a_run_whose_record_cannot_be_written_is_a_runtime_failure() {
        let cannot = CliError::from(ContinueError::CannotRecord {
            run_id: "r".into(),
            reason: "no owning process was recorded".into(),
            error: "disk full".into(),
        });
        assert_eq!(cannot.exit_code(), 1);
        let waiting = CliError::from(ContinueError::NeedsAnswer {
            run_id: "r".into(),
            response_file: "/w/.delta/r/interaction/response.txt".into(),
        });
        assert_eq!(waiting.exit_code(), 126);
    }

    #[test]
    fn a_wrapped_library_error_keeps_its_words_and_kind() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let error = CliError::from(io);
        assert_eq!(error.to_string(), "denied");
        assert_eq!(error.exit_code(), 1);
        let invalid = WorkspaceError::InvalidRunId {
            id: "../x".into(),
            reason: "it starts with '.'".into(),
        };
        let text = invalid.to_string();
        let error = CliError::from(invalid);
        assert_eq!(error.to_string(), text);
        assert!(matches!(error, CliError::Workspace(_)));
    }
}
