//! `CliError`: the three outcomes a command can fail with, and their exit codes.
//!
//! Owns the mapping error → exit code (configuration 126, usage 2, runtime 1) used by
//! `main.rs` in one place. It does not print; `main.rs` writes `error: <message>`.

use std::fmt;

use delta_actors::agent::AgentError;

/// A failed command. The message is complete and user-facing (file, key, hint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// The agent or another configuration file is invalid (exit 126, spec §2.6.5).
    Config(String),
    /// The command line asks for something impossible (exit 2, like clap's own errors).
    Usage(String),
    /// Anything that went wrong while doing the work (exit 1).
    Runtime(String),
}

impl CliError {
    pub const CONFIG_EXIT: i32 = 126;
    pub const USAGE_EXIT: i32 = 2;
    pub const RUNTIME_EXIT: i32 = 1;

    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Config(_) => Self::CONFIG_EXIT,
            CliError::Usage(_) => Self::USAGE_EXIT,
            CliError::Runtime(_) => Self::RUNTIME_EXIT,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Config(m) | CliError::Usage(m) | CliError::Runtime(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for CliError {}

impl From<AgentError> for CliError {
    fn from(err: AgentError) -> Self {
        CliError::Config(err.to_string())
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
        let from_agent = CliError::from(AgentError::NoConfig { dir: "/x".into() });
        assert_eq!(from_agent.exit_code(), 126);
        assert!(from_agent.to_string().contains("/x"));
    }
}
