//! `AgentError`: every way loading an agent folder can fail, as one typed error whose
//! `Display` is the complete user-facing message (file, key, hint).
//!
//! Owns only the error type, its constructors and its conversions from the errors of the
//! YAML accessor and the tool compiler; it must not decide exit codes (the `delta`
//! binary maps every `AgentError` to a configuration error, exit 126) and never prints.

use std::path::{Path, PathBuf};

use crate::tool::compile::CompileError;
use crate::yaml::{FieldError, UnknownKeyError};

/// A configuration error found while loading an agent. Every variant names the file involved
/// and ends with a `hint:` line telling the user what to do.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The path given for the agent does not exist.
    #[error("agent path `{}` does not exist\n  hint: pass the agent folder (the one holding agent.yaml) or the path of its agent.yaml", path.display())]
    NotFound {
        /// The path as given.
        path: PathBuf,
    },

    /// The folder holds neither `agent.yaml` nor `config.yaml`.
    #[error("no agent.yaml (or legacy config.yaml) in `{}`\n  hint: create an agent with `delta init <name>`, or pass the folder that holds agent.yaml", dir.display())]
    NoConfig {
        /// The folder (canonical).
        dir: PathBuf,
    },

    /// A file exists (or must exist) but could not be read.
    #[error("cannot read `{}`: {source}\n  hint: {hint}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
        /// What to check.
        hint: String,
    },

    /// A YAML file does not parse. `message` carries the line and column (a tab in the
    /// indentation is named as such).
    #[error("`{}` is not valid YAML: {message}\n  hint: {hint}", file.display())]
    Yaml {
        /// The file.
        file: PathBuf,
        /// The parser's complaint, with line and column.
        message: String,
        /// How to fix it.
        hint: String,
    },

    /// `context.yaml` is missing: the message carries the ready-to-paste default recipe.
    #[error("`{}` not found: every agent needs a context.yaml (it is the recipe of what the model sees)\n  hint: create it with this default recipe:\n\n{recipe}", path.display())]
    MissingContext {
        /// The context.yaml looked for.
        path: PathBuf,
        /// The default recipe, to paste into it.
        recipe: &'static str,
    },

    /// A `.env` file has a line that is not `KEY=VALUE`.
    #[error("`{}` line {line}: {message}\n  hint: {hint}", file.display())]
    EnvFile {
        /// The `.env` file.
        file: PathBuf,
        /// The line's number, 1-based.
        line: usize,
        /// What is wrong with the line.
        message: String,
        /// How to write it.
        hint: String,
    },

    /// A key the file's format does not have at that place (agent.yaml, context.yaml,
    /// hooks.yaml, a tools file). An error unless agent.yaml says `strict: false`.
    #[error(transparent)]
    UnknownKey(UnknownKeyError),

    /// Anything else that is wrong with the content of a file: `message` names the key path
    /// (for example `llm.temperature` or ``tool `grep`: ...``).
    #[error("`{}`: {message}\n  hint: {hint}", file.display())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// What is wrong, naming the key path.
        message: String,
        /// What to write instead.
        hint: String,
    },
}

impl AgentError {
    /// Shorthand for [`AgentError::Invalid`].
    pub fn invalid(file: &Path, message: impl Into<String>, hint: impl Into<String>) -> Self {
        AgentError::Invalid {
            file: file.to_path_buf(),
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// Shorthand for [`AgentError::Io`].
    pub fn io(file: &Path, source: std::io::Error, hint: impl Into<String>) -> Self {
        AgentError::Io {
            file: file.to_path_buf(),
            source,
            hint: hint.into(),
        }
    }

    /// The file this error is about.
    pub fn file(&self) -> &Path {
        match self {
            AgentError::NotFound { path } => path,
            AgentError::NoConfig { dir } => dir,
            AgentError::Io { file, .. }
            | AgentError::Yaml { file, .. }
            | AgentError::EnvFile { file, .. }
            | AgentError::Invalid { file, .. } => file,
            AgentError::UnknownKey(unknown) => &unknown.file,
            AgentError::MissingContext { path, .. } => path,
        }
    }
}

/// A key of the wrong shape is an [`AgentError::Invalid`], an unknown one an
/// [`AgentError::UnknownKey`], with the same text.
impl From<FieldError> for AgentError {
    fn from(error: FieldError) -> Self {
        match error {
            FieldError::Invalid {
                file,
                message,
                hint,
            } => AgentError::Invalid {
                file,
                message,
                hint,
            },
            FieldError::UnknownKey(unknown) => AgentError::UnknownKey(unknown),
        }
    }
}

/// A tool that does not compile is an [`AgentError::Invalid`] of the file defining it, with
/// the same text (``tool `name`: …`` when the tool's name is known).
impl From<CompileError> for AgentError {
    fn from(error: CompileError) -> Self {
        match error {
            CompileError::Field {
                file,
                message,
                hint,
            } => AgentError::Invalid {
                file,
                message,
                hint,
            },
            CompileError::Tool {
                file,
                tool,
                message,
                hint,
            } => AgentError::Invalid {
                file,
                message: format!("tool `{tool}`: {message}"),
                hint,
            },
            CompileError::UnknownKey(unknown) => AgentError::UnknownKey(unknown),
        }
    }
}
