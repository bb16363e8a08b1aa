//! Which shells a file-backed session can keep state for, how to start them, and the
//! initial state files written at `start`. Owns the wrapper texts (static, never spliced).
//! Must not run processes.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::session::error::SessionError;

const BASH_WRAPPER: &str = include_str!("scripts/wrapper.bash");
const POSIX_WRAPPER: &str = include_str!("scripts/wrapper.sh");

/// Variables the shell owns or recomputes; restoring them would be wrong or impossible.
const SHELL_OWNED_VARS: &[&str] = &["PWD", "SHLVL", "_", "PPID", "OPTIND"];

/// How state is saved and restored: full `declare -p`/`declare -f`/`alias`/`shopt` for bash,
/// `set`/`export -p`/`set +o` for POSIX sh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShellFlavor {
    /// bash: variables, functions, aliases and options persist.
    Bash,
    /// A POSIX sh (sh, dash, ash): cwd, variables, exports and `set -o` persist.
    Posix,
}

impl ShellFlavor {
    /// Classifies `command` (a name on PATH or a path) by its file name.
    pub fn of(command: &str) -> Result<Self, SessionError> {
        let name = Path::new(command)
            .file_name()
            .and_then(OsStr::to_str)
            .unwrap_or(command);
        match name {
            "bash" => Ok(ShellFlavor::Bash),
            "sh" | "dash" | "ash" => Ok(ShellFlavor::Posix),
            _ => Err(SessionError::NotAShell {
                command: command.to_string(),
            }),
        }
    }

    pub(crate) fn wrapper(self) -> &'static str {
        match self {
            ShellFlavor::Bash => BASH_WRAPPER,
            ShellFlavor::Posix => POSIX_WRAPPER,
        }
    }

    /// Arguments that go before `-c <wrapper>`: no profile, no rc file (a login shell costs
    /// ~175 ms, and rc files would change the session behind its back).
    pub(crate) fn startup_flags(self) -> &'static [&'static str] {
        match self {
            ShellFlavor::Bash => &["--noprofile", "--norc"],
            ShellFlavor::Posix => &[],
        }
    }

    /// `env.sh` for a new session: the caller's environment minus secrets, as exports.
    pub(crate) fn initial_state<'a>(
        self,
        env: impl Iterator<Item = (&'a OsStr, &'a OsStr)>,
        secrets: &[String],
    ) -> Vec<u8> {
        let keyword: &[u8] = match self {
            ShellFlavor::Bash => b"declare -x ",
            ShellFlavor::Posix => b"export ",
        };
        let mut out = Vec::new();
        for (name, value) in env {
            let Some(name) = name.to_str() else { continue };
            if !is_identifier(name)
                || SHELL_OWNED_VARS.contains(&name)
                || secrets.iter().any(|s| s == name)
            {
                continue;
            }
            out.extend_from_slice(keyword);
            out.extend_from_slice(name.as_bytes());
            out.push(b'=');
            out.extend_from_slice(&single_quote(value.as_bytes()));
            out.push(b'\n');
        }
        out
    }

    /// `options.sh` for a new session: bash sessions expand aliases, like an interactive shell.
    pub(crate) fn initial_options(self) -> &'static [u8] {
        match self {
            ShellFlavor::Bash => b"shopt -s expand_aliases\n",
            ShellFlavor::Posix => b"",
        }
    }
}

/// Resolves `command` to an executable path: paths are taken as given, names via `PATH`.
pub(crate) fn resolve_shell(
    command: &str,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, SessionError> {
    let not_found = || SessionError::ShellNotFound {
        command: command.to_string(),
    };
    if command.contains('/') {
        let path = PathBuf::from(command);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(not_found())
        };
    }
    let default_path = OsString::from("/usr/local/bin:/usr/bin:/bin");
    let search = path_var.unwrap_or(&default_path);
    std::env::split_paths(search)
        .map(|dir| dir.join(command))
        .find(|candidate| candidate.is_file())
        .ok_or_else(not_found)
}

pub(crate) fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b == b'_' || b.is_ascii_alphabetic())
        && bytes.all(|b| b == b'_' || b.is_ascii_alphanumeric())
}

/// POSIX single quoting: every byte literal, `'` written as `'\''`.
fn single_quote(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(b'\'');
    for &b in value {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn shells_are_classified_and_repls_refused_with_a_pty_hint() {
        assert_eq!(ShellFlavor::of("bash").unwrap(), ShellFlavor::Bash);
        assert_eq!(
            ShellFlavor::of("/usr/local/bin/bash").unwrap(),
            ShellFlavor::Bash
        );
        assert_eq!(ShellFlavor::of("sh").unwrap(), ShellFlavor::Posix);
        let err = ShellFlavor::of("python3").unwrap_err().to_string();
        assert!(err.contains("delta-sessions-pty start python3"), "{err}");
    }

    #[test]
    fn initial_state_quotes_values_and_drops_secrets_and_odd_names() {
        let env = [
            ("HOME", "/home/o'neil"),
            ("DELTA_API_KEY", "sk-secret"),
            ("MY_KEY", "k"),
            ("BASH_FUNC_f%%", "() { :; }"),
            ("PWD", "/x"),
        ];
        let secrets = vec!["DELTA_API_KEY".to_string(), "MY_KEY".to_string()];
        let state = ShellFlavor::Bash.initial_state(
            env.iter().map(|(k, v)| (OsStr::new(k), OsStr::new(v))),
            &secrets,
        );
        let text = String::from_utf8(state).unwrap();
        assert_eq!(text, "declare -x HOME='/home/o'\\''neil'\n");
    }

    #[test]
    fn wrappers_take_everything_from_arguments() {
        for flavor in [ShellFlavor::Bash, ShellFlavor::Posix] {
            assert!(flavor.wrapper().contains("command.sh"));
            assert!(!flavor.wrapper().contains("EOF"));
        }
    }
}
