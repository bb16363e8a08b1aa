//! Where `delta serve` and `delta relay` take their bearer token from: the command's
//! environment variable (`DELTA_SERVE_TOKEN`, `DELTA_RELAY_TOKEN`) or `--token-file PATH`,
//! never the command line.
//!
//! Why: a process's argv is world-readable (`/proc/<pid>/cmdline`, `ps`), so a token given as
//! `--token T` is the key to the server for every local user; its environment is readable by
//! its own user only. `--token` is still recognised, only to refuse it (exit 2) with how to
//! pass the token instead.
//!
//! A token file must be a regular file, not a symbolic link, owned by the user running delta,
//! with no permission for group or others (0600 or stricter), and at most
//! [`MAX_TOKEN_FILE_BYTES`]; it is opened without following links and without blocking (a FIFO
//! is refused, not waited on). One trailing newline is ignored.
//!
//! Must not: print, log or echo a token (error messages name the source, never the value).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::CliError;

/// Largest token file read: a token is at most a few hundred characters.
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// A command's token options, as given.
pub struct TokenOptions<'a> {
    /// `--token`, only present to refuse it.
    pub argv_token: Option<&'a str>,
    /// `--token-file PATH`.
    pub token_file: Option<&'a Path>,
    /// The environment variable that may hold the token.
    pub env_var: &'static str,
}

/// Where a token came from, for messages (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// `--token-file PATH`.
    File(PathBuf),
    /// The command's environment variable.
    Env(&'static str),
}

impl std::fmt::Display for TokenOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenOrigin::File(path) => write!(f, "--token-file {}", path.display()),
            TokenOrigin::Env(var) => f.write_str(var),
        }
    }
}

/// A token and where it came from.
pub struct GivenToken {
    /// The token.
    pub value: String,
    /// Its source, to name in messages.
    pub origin: TokenOrigin,
}

/// The token the user gave, if any: `--token-file` first, then `options.env_var` (an empty
/// variable counts as unset). `--token` on the command line is refused with exit 2.
pub fn resolve_token(
    options: &TokenOptions<'_>,
    env: &BTreeMap<String, String>,
) -> Result<Option<GivenToken>, CliError> {
    if options.argv_token.is_some() {
        return Err(CliError::Usage(format!(
            "--token puts the token on the command line, which every local user can read \
             (ps, /proc/<pid>/cmdline): set {var} in the environment or use --token-file FILE \
             (a file only you can read: chmod 600 FILE) instead, and choose a new token, since \
             this one has been visible",
            var = options.env_var
        )));
    }
    if let Some(path) = options.token_file {
        let value = read_token_file(path)?;
        return Ok(Some(GivenToken {
            value,
            origin: TokenOrigin::File(path.to_path_buf()),
        }));
    }
    Ok(env
        .get(options.env_var)
        .filter(|value| !value.is_empty())
        .map(|value| GivenToken {
            value: value.clone(),
            origin: TokenOrigin::Env(options.env_var),
        }))
}

/// Checks a token against a command's rules: `min..=256` printable ASCII characters
/// without spaces (it travels in an HTTP header).
pub fn check_token(token: &GivenToken, min: usize) -> Result<(), CliError> {
    let value = &token.value;
    if value.len() < min || value.len() > 256 {
        return Err(CliError::Usage(format!(
            "{}: use {min}-256 characters (the token is the server's only lock; \
             `openssl rand -hex 16` makes a good one)",
            token.origin
        )));
    }
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(CliError::Usage(format!(
            "{}: use printable ASCII characters without spaces (the token travels in an \
             HTTP header)",
            token.origin
        )));
    }
    Ok(())
}

/// Reads a token file after checking it is private (see the module docs).
fn read_token_file(path: &Path) -> Result<String, CliError> {
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                CliError::Config(format!(
                    "--token-file {shown}: is a symbolic link; point --token-file at the file \
                     itself (a link could be switched to another file)"
                ))
            } else {
                CliError::Config(format!("--token-file {shown}: cannot open it: {e}"))
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|e| CliError::Config(format!("--token-file {shown}: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(CliError::Config(format!(
            "--token-file {shown}: not a regular file; write the token into a plain file \
             (chmod 600)"
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(CliError::Config(format!(
            "--token-file {shown}: owned by uid {}, not by you (uid {me}): another user could \
             have written or read it; create your own file (chmod 600)",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CliError::Config(format!(
            "--token-file {shown}: mode {mode:04o} lets other users read or change it: run \
             `chmod 600 {shown}` (and choose a new token if others could read this one)"
        )));
    }
    if meta.len() > MAX_TOKEN_FILE_BYTES {
        return Err(CliError::Config(format!(
            "--token-file {shown}: {} bytes, more than a token ({MAX_TOKEN_FILE_BYTES} bytes \
             at most): is it the right file?",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::Config(format!("--token-file {shown}: cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(CliError::Config(format!(
            "--token-file {shown}: grew past {MAX_TOKEN_FILE_BYTES} bytes while read: is it \
             the right file?"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::Config(format!(
            "--token-file {shown}: not UTF-8 text; write the token as plain text"
        ))
    })?;
    let token = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if token.is_empty() {
        return Err(CliError::Config(format!(
            "--token-file {shown}: empty; write the token into it (e.g. `openssl rand -hex 16 \
             > {shown}`)"
        )));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn options<'a>(file: Option<&'a Path>, argv: Option<&'a str>) -> TokenOptions<'a> {
        TokenOptions {
            argv_token: argv,
            token_file: file,
            env_var: "DELTA_TEST_TOKEN",
        }
    }

    fn private_file(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("token");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    #[test]
    fn a_private_file_wins_over_the_environment_and_loses_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = private_file(dir.path(), "from-the-file-0123\n");
        let env = BTreeMap::from([("DELTA_TEST_TOKEN".to_owned(), "from-env".to_owned())]);
        let token = resolve_token(&options(Some(&path), None), &env)
            .unwrap()
            .unwrap();
        assert_eq!(token.value, "from-the-file-0123");
        assert_eq!(token.origin, TokenOrigin::File(path));
        let token = resolve_token(&options(None, None), &env).unwrap().unwrap();
        assert_eq!(token.value, "from-env");
        let empty = BTreeMap::from([("DELTA_TEST_TOKEN".to_owned(), String::new())]);
        assert!(resolve_token(&options(None, None), &empty)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_token_on_the_command_line_is_refused_without_echoing_it() {
        let err = resolve_token(&options(None, Some("s3cret-value")), &BTreeMap::new())
            .err()
            .unwrap();
        assert!(matches!(err, CliError::Usage(_)));
        let text = err.to_string();
        assert!(text.contains("DELTA_TEST_TOKEN") && text.contains("--token-file"));
        assert!(!text.contains("s3cret-value"), "{text}");
    }

    #[test]
    fn token_files_that_are_not_private_regular_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = private_file(dir.path(), "a-token-0123456789");
        let refused = |path: &Path| {
            let err = resolve_token(&options(Some(path), None), &BTreeMap::new())
                .err()
                .unwrap();
            assert!(matches!(err, CliError::Config(_)), "{err}");
            err.to_string()
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(refused(&path).contains("chmod 600"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(refused(&link).contains("symbolic link"));
        assert!(refused(dir.path()).contains("not a regular file"));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(refused(&fifo).contains("not a regular file"));
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(10_000)).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(refused(&big).contains("more than a token"));
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(refused(&empty).contains("empty"));
        assert!(refused(&dir.path().join("missing")).contains("cannot open"));
    }

    #[test]
    fn check_token_names_the_source_not_the_value() {
        let token = GivenToken {
            value: "short".into(),
            origin: TokenOrigin::Env("DELTA_TEST_TOKEN"),
        };
        let text = check_token(&token, 16).err().unwrap().to_string();
        assert!(text.contains("DELTA_TEST_TOKEN") && text.contains("16-256"));
        assert!(!text.contains("short,"), "{text}");
        let spaced = GivenToken {
            value: "has a space in it 0123".into(),
            origin: TokenOrigin::Env("DELTA_TEST_TOKEN"),
        };
        assert!(check_token(&spaced, 16).is_err());
    }
}
