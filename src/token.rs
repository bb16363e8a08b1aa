//! Where `delta serve` and `delta relay` take their bearer token from: the command's
//! environment variable (`DELTA_SERVE_TOKEN`, `DELTA_RELAY_TOKEN`) or a token file named by
//! `--token-file PATH` (or, for a command that has one, by an environment variable such as
//! `DELTA_SERVE_TOKEN_FILE`, so the file's path is on no command line either), never the
//! command line.
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
    /// The environment variable that may name a token file instead of `--token-file`, for a
    /// command that has one.
    pub file_env_var: Option<&'static str>,
    /// The environment variable that may hold the token.
    pub env_var: &'static str,
}

/// Where a token came from, for messages (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// `--token-file PATH`.
    File(PathBuf),
    /// A token file named by the command's file variable (`DELTA_SERVE_TOKEN_FILE`).
    EnvFile(&'static str, PathBuf),
    /// The command's environment variable.
    Env(&'static str),
}

impl TokenOrigin {
    /// The token file it was read from, if any.
    pub fn file(&self) -> Option<&Path> {
        match self {
            TokenOrigin::File(path) | TokenOrigin::EnvFile(_, path) => Some(path),
            TokenOrigin::Env(_) => None,
        }
    }
}

impl std::fmt::Display for TokenOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenOrigin::File(path) => write!(f, "--token-file {}", path.display()),
            TokenOrigin::EnvFile(var, path) => write!(f, "{var}={}", path.display()),
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

/// The token the user gave, if any: `--token-file` first, then the file named by
/// `options.file_env_var`, then `options.env_var` (an empty variable counts as unset).
/// `--token` on the command line is refused with exit 2.
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
    let named_file = options
        .token_file
        .map(|path| (path.to_path_buf(), TokenOrigin::File(path.to_path_buf())));
    let env_file = || {
        let var = options.file_env_var?;
        env.get(var).filter(|path| !path.is_empty()).map(|path| {
            (
                PathBuf::from(path),
                TokenOrigin::EnvFile(var, PathBuf::from(path)),
            )
        })
    };
    if let Some((path, origin)) = named_file.or_else(env_file) {
        let value = read_token_file(&path, &origin)?;
        return Ok(Some(GivenToken { value, origin }));
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

/// Reads a token file after checking it is private (see the module docs); messages begin
/// with `origin` (`--token-file PATH` or `VAR=PATH`).
fn read_token_file(path: &Path, origin: &TokenOrigin) -> Result<String, CliError> {
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                CliError::Config(format!(
                    "{origin}: is a symbolic link; name the file itself (a link \
                     could be switched to another file)"
                ))
            } else {
                CliError::Config(format!("{origin}: cannot open it: {e}"))
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|e| CliError::Config(format!("{origin}: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(CliError::Config(format!(
            "{origin}: not a regular file; write the token into a plain file \
             (chmod 600)"
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(CliError::Config(format!(
            "{origin}: owned by uid {}, not by you (uid {me}): another user could \
             have written or read it; create your own file (chmod 600)",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CliError::Config(format!(
            "{origin}: mode {mode:04o} lets other users read or change it: run \
             `chmod 600 {shown}` (and choose a new token if others could read this one)"
        )));
    }
    if meta.len() > MAX_TOKEN_FILE_BYTES {
        return Err(CliError::Config(format!(
            "{origin}: {} bytes, more than a token ({MAX_TOKEN_FILE_BYTES} bytes \
             at most): is it the right file?",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::Config(format!("{origin}: cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(CliError::Config(format!(
            "{origin}: grew past {MAX_TOKEN_FILE_BYTES} bytes while read: is it \
             the right file?"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::Config(format!(
            "{origin}: not UTF-8 text; write the token as plain text"
        ))
    })?;
    let token = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if token.is_empty() {
        return Err(CliError::Config(format!(
            "{origin}: empty; write the token into it (e.g. `openssl rand -hex 16 \
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
            file_env_var: Some("DELTA_TEST_TOKEN_FILE"),
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

    /// Issue 31 item 7: the file may be named in the environment, so its path is on no
    /// command line; `--token-file` still wins, and messages name the variable.
    #[test]
    fn a_token_file_named_by_the_environment_is_read_and_named_in_messages() {
        let dir = tempfile::tempdir().unwrap();
        let path = private_file(dir.path(), "from-the-env-file-0123\n");
        let env = BTreeMap::from([
            (
                "DELTA_TEST_TOKEN_FILE".to_owned(),
                path.display().to_string(),
            ),
            ("DELTA_TEST_TOKEN".to_owned(), "from-env".to_owned()),
        ]);
        let token = resolve_token(&options(None, None), &env).unwrap().unwrap();
        assert_eq!(token.value, "from-the-env-file-0123");
        assert_eq!(
            token.origin,
            TokenOrigin::EnvFile("DELTA_TEST_TOKEN_FILE", path.clone())
        );
        assert_eq!(token.origin.file(), Some(path.as_path()));
        let other = dir.path().join("other");
        std::fs::write(&other, "from-the-named-file-0123").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
        let token = resolve_token(&options(Some(&other), None), &env)
            .unwrap()
            .unwrap();
        assert_eq!(token.value, "from-the-named-file-0123");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let text = resolve_token(&options(None, None), &env)
            .err()
            .unwrap()
            .to_string();
        assert!(
            text.starts_with(&format!("DELTA_TEST_TOKEN_FILE={}:", path.display()))
                && text.contains("chmod 600"),
            "{text}"
        );
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
