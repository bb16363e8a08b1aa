//! The tool compiler's errors: [`CompileError`], why one tool definition does not compile
//! (its `Display` is the complete user-facing message: file, tool or key, hint; agent loading
//! turns it into an `AgentError` with the same text), and [`ArgumentError`], why a model's
//! arguments do not fit a tool (user tools and the built-in `ask_human` alike).
//!
//! Must not: decide exit codes (agent loading and the binary do) or print.

use std::path::{Path, PathBuf};

use crate::yaml::{FieldError, UnknownKeyError};

/// A tool definition that does not compile. Every variant names the file that defines the
/// tool and ends with a `hint:` line telling the user what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// A key of the tool's entry has the wrong shape, before or apart from the tool's name:
    /// `message` names the key path (for example `tools[2].name`).
    #[error("`{}`: {message}\n  hint: {hint}", file.display())]
    Field {
        /// The file that defines the tool.
        file: PathBuf,
        /// What is wrong, naming the key path.
        message: String,
        /// What to write instead.
        hint: String,
    },

    /// A key a tool entry (or a parameter entry) does not have.
    #[error(transparent)]
    UnknownKey(UnknownKeyError),

    /// The tool named `tool` is wrong: its name, template or parameters.
    #[error("`{}`: tool `{tool}`: {message}\n  hint: {hint}", file.display())]
    Tool {
        /// The file that defines the tool.
        file: PathBuf,
        /// The tool's name.
        tool: String,
        /// What is wrong.
        message: String,
        /// What to write instead.
        hint: String,
    },
}

impl CompileError {
    /// The file that defines the tool.
    pub fn file(&self) -> &Path {
        match self {
            CompileError::Field { file, .. } | CompileError::Tool { file, .. } => file,
            CompileError::UnknownKey(unknown) => &unknown.file,
        }
    }
}

impl From<FieldError> for CompileError {
    fn from(error: FieldError) -> Self {
        match error {
            FieldError::Invalid {
                file,
                message,
                hint,
            } => CompileError::Field {
                file,
                message,
                hint,
            },
            FieldError::UnknownKey(unknown) => CompileError::UnknownKey(unknown),
        }
    }
}

/// Bad model arguments; `Display` is the message the model sees as the tool result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgumentError(pub String);
