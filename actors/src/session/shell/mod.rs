//! File-backed shell sessions (`delta-sessions`, spec v1.5). A session is a folder
//! `<sessions_dir>/<id>/` (0700) laid out as the spec says, plus a few files: `metadata.json`,
//! the saved shell state (`env.sh`: variables, functions, aliases; `options.sh`;
//! `work_dir.txt`; all files 0600), the last exec's full `stdout.log`/`stderr.log`,
//! `history.log` and a `lock` file. There is no long-lived process: each exec is a fresh shell
//! (see `exec.rs`), so state survives separate invocations and crashes.
//!
//! [`ShellSessions`] manages the folder (start, list, status, end, cleanup); [`ShellSession`]
//! is one session (exec, end). Serialising execs in-process is the `SessionActor`'s job; the
//! `lock` file serialises separate processes. Nothing here reads the process environment or
//! cwd: [`StartOptions`] carries them in. No actix, no printing.

mod exec;
mod flavor;
mod lock;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use exec::{ExecOutcome, TIMEOUT_EXIT_CODE};
pub use flavor::ShellFlavor;

use super::error::SessionError;
use super::files::{
    check_session_id, create_private_dir, now_rfc3339, replace_private, write_private,
};
use crate::bounded_read::{self, Links};
use lock::SessionLock;

/// The variable that carries the engine's API key; never saved into a session.
pub const DELTA_API_KEY_VAR: &str = "DELTA_API_KEY";
/// Default per-exec timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(120_000);
/// Default cap on each of stdout and stderr returned to the caller.
pub const DEFAULT_OUTPUT_CAP: usize = 1024 * 1024;

pub(crate) const METADATA_FILE: &str = "metadata.json";

/// Where sessions live and which variables are secret.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// The folder holding one folder per session (the CLI's default: `.sessions`).
    pub sessions_dir: PathBuf,
    /// Variable names never written into state (always includes `DELTA_API_KEY`).
    pub secret_vars: Vec<String>,
}

impl ShellConfig {
    /// Sessions in `sessions_dir`, with `DELTA_API_KEY` as the only secret variable.
    pub fn new(sessions_dir: impl Into<PathBuf>) -> Self {
        ShellConfig {
            sessions_dir: sessions_dir.into(),
            secret_vars: vec![DELTA_API_KEY_VAR.to_string()],
        }
    }

    /// Adds secret variable names (e.g. the agent's key variable); duplicates and names that
    /// cannot be shell variables are ignored.
    pub fn with_secret_vars(mut self, names: impl IntoIterator<Item = String>) -> Self {
        for name in names {
            if flavor::is_identifier(&name) && !self.secret_vars.contains(&name) {
                self.secret_vars.push(name);
            }
        }
        self
    }
}

/// What `start` needs from the caller: the shell, the starting folder and environment.
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// `bash` (default), `sh`, or a path to one of them.
    pub shell: Option<String>,
    /// The session's first working directory.
    pub work_dir: PathBuf,
    /// The session's first environment (secret variables are left out of the saved state).
    pub env: Vec<(OsString, OsString)>,
}

impl StartOptions {
    /// The current process's cwd and environment; for binaries, at the edge.
    pub fn from_current_process(shell: Option<String>) -> Result<Self, SessionError> {
        let work_dir = std::env::current_dir()
            .map_err(|e| SessionError::io("cannot read the current folder", ".", e))?;
        Ok(StartOptions {
            shell,
            work_dir,
            env: std::env::vars_os().collect(),
        })
    }
}

/// Per-exec limits.
#[derive(Debug, Clone, Copy)]
pub struct ExecOptions {
    /// Wall-clock limit (default 120 s); on expiry the shell's group is killed and the exit
    /// code is 124.
    pub timeout: Duration,
    /// Bytes of each stream returned to the caller; the full text stays in the session folder.
    pub output_cap: usize,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            timeout: DEFAULT_TIMEOUT,
            output_cap: DEFAULT_OUTPUT_CAP,
        }
    }
}

/// Whether a shell session takes commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShellStatus {
    /// It takes commands.
    Active,
    /// `end` was called; `cleanup` removes it.
    Terminated,
}

/// A shell session as reported by `list`/`status`: `metadata.json` (written at `start` and
/// `end`) with `work_dir`, `execution_count` and `last_executed_at` brought up to date from
/// `work_dir.txt` and `history.log`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShellMetadata {
    /// The session's id (`sess_` plus hex digits).
    pub session_id: String,
    /// The shell as asked for (`bash`, `sh`, or a path).
    pub command: String,
    /// The shell's resolved path.
    pub shell_path: PathBuf,
    /// How its state is saved.
    pub flavor: ShellFlavor,
    /// When it started (UTC, RFC 3339).
    pub created_at: String,
    /// When the last exec ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_executed_at: Option<String>,
    /// Whether it takes commands.
    pub status: ShellStatus,
    /// The working directory the last exec left.
    pub work_dir: PathBuf,
    /// Execs run so far.
    pub execution_count: u64,
}

/// Result of `cleanup`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CleanupReport {
    /// Ids of the sessions removed.
    pub cleaned: Vec<String>,
    /// Ids of the sessions left (active, in use, or unreadable).
    pub remaining: Vec<String>,
}

/// The sessions of one folder.
#[derive(Debug, Clone)]
pub struct ShellSessions {
    config: Arc<ShellConfig>,
}

impl ShellSessions {
    /// The sessions of `config.sessions_dir` (nothing is created until `start`).
    pub fn new(config: ShellConfig) -> Self {
        ShellSessions {
            config: Arc::new(config),
        }
    }

    /// The configuration given.
    pub fn config(&self) -> &ShellConfig {
        &self.config
    }

    /// Creates a session folder with the initial state. Refuses non-shells (REPLs belong
    /// to `delta-sessions-pty`).
    pub fn start(&self, options: &StartOptions) -> Result<ShellMetadata, SessionError> {
        let command = options.shell.clone().unwrap_or_else(|| "bash".to_string());
        let flavor = ShellFlavor::of(&command)?;
        let path_var = options
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let shell_path = flavor::resolve_shell(&command, path_var)?;
        create_private_dir(&self.config.sessions_dir)?;
        let id = super::files::new_session_id();
        let dir = self.config.sessions_dir.join(&id);
        create_private_dir(&dir)?;
        let env = options
            .env
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()));
        write_private(
            &dir.join(exec::STATE_FILE),
            &flavor.initial_state(env, &self.config.secret_vars),
        )?;
        write_private(&dir.join(exec::OPTIONS_FILE), flavor.initial_options())?;
        write_private(
            &dir.join(exec::CWD_FILE),
            options.work_dir.as_os_str().as_encoded_bytes(),
        )?;
        let metadata = ShellMetadata {
            session_id: id,
            command,
            shell_path,
            flavor,
            created_at: now_rfc3339(),
            last_executed_at: None,
            status: ShellStatus::Active,
            work_dir: options.work_dir.clone(),
            execution_count: 0,
        };
        write_metadata(&dir, &metadata)?;
        Ok(metadata)
    }

    /// Opens an existing session (active or terminated).
    pub fn open(&self, id: &str) -> Result<ShellSession, SessionError> {
        check_session_id(id)?;
        let dir = self.config.sessions_dir.join(id);
        if !dir.join(METADATA_FILE).is_file() {
            return Err(SessionError::NotFound {
                id: id.to_string(),
                dir: self.config.sessions_dir.clone(),
            });
        }
        Ok(ShellSession {
            id: id.to_string(),
            dir,
            config: Arc::clone(&self.config),
        })
    }

    /// Every session with readable metadata, oldest first.
    pub fn list(&self) -> Result<Vec<ShellMetadata>, SessionError> {
        let mut sessions: Vec<ShellMetadata> = self
            .session_dirs()?
            .into_iter()
            .filter_map(|(_, dir)| describe(&dir).ok())
            .collect();
        sessions.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(sessions)
    }

    /// Metadata of one session, plus whether an exec holds it right now.
    pub fn status(&self, id: &str) -> Result<(ShellMetadata, bool), SessionError> {
        let session = self.open(id)?;
        let busy = SessionLock::try_acquire(&session.dir)?.is_none();
        Ok((describe(&session.dir)?, busy))
    }

    /// Removes terminated sessions. Active sessions, sessions in use and folders this tool
    /// did not write (unreadable metadata) are left alone.
    pub fn cleanup(&self) -> Result<CleanupReport, SessionError> {
        let mut report = CleanupReport::default();
        for (id, dir) in self.session_dirs()? {
            let terminated = matches!(
                read_metadata(&dir),
                Ok(ShellMetadata {
                    status: ShellStatus::Terminated,
                    ..
                })
            );
            let lock = if terminated {
                SessionLock::try_acquire(&dir)?
            } else {
                None
            };
            match lock {
                Some(_held) => {
                    fs::remove_dir_all(&dir)
                        .map_err(|e| SessionError::io("cannot remove", &dir, e))?;
                    report.cleaned.push(id);
                }
                None => report.remaining.push(id),
            }
        }
        Ok(report)
    }

    fn session_dirs(&self) -> Result<Vec<(String, PathBuf)>, SessionError> {
        let root = &self.config.sessions_dir;
        let entries = match fs::read_dir(root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SessionError::io("cannot list", root, e)),
        };
        let mut dirs: Vec<(String, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let id = entry.file_name().into_string().ok()?;
                (super::files::is_valid_session_id(&id) && entry.path().is_dir())
                    .then(|| (id, entry.path()))
            })
            .collect();
        dirs.sort();
        Ok(dirs)
    }
}

/// One session: what a `SessionActor` owns.
#[derive(Debug, Clone)]
pub struct ShellSession {
    id: String,
    dir: PathBuf,
    config: Arc<ShellConfig>,
}

impl ShellSession {
    /// The session's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Current metadata (see [`ShellMetadata`]).
    pub fn metadata(&self) -> Result<ShellMetadata, SessionError> {
        describe(&self.dir)
    }

    /// Runs `command` in the session; see `exec.rs` for the mechanics.
    pub async fn exec(
        &self,
        command: &str,
        options: ExecOptions,
    ) -> Result<ExecOutcome, SessionError> {
        exec::exec(self, command, options).await
    }

    /// Marks the session terminated (after any running exec finished); `cleanup` removes it.
    pub async fn end(&self) -> Result<ShellMetadata, SessionError> {
        let _lock = SessionLock::acquire(&self.dir).await?;
        let mut metadata = read_metadata(&self.dir)?;
        metadata.status = ShellStatus::Terminated;
        write_metadata(&self.dir, &metadata)?;
        describe(&self.dir)
    }
}

pub(crate) fn read_metadata(dir: &Path) -> Result<ShellMetadata, SessionError> {
    let path = dir.join(METADATA_FILE);
    let bytes = bounded_read::read(&path, bounded_read::RECORD, Links::Refuse)
        .map_err(|e| SessionError::io("cannot read", &path, e.into()))?;
    serde_json::from_slice(&bytes).map_err(|e| SessionError::CorruptMetadata {
        path,
        reason: e.to_string(),
    })
}

/// `metadata.json` plus the live fields derived from `work_dir.txt` and `history.log`.
fn describe(dir: &Path) -> Result<ShellMetadata, SessionError> {
    let mut metadata = read_metadata(dir)?;
    if let Ok(cwd) = bounded_read::read(
        &dir.join(exec::CWD_FILE),
        bounded_read::MARKER,
        Links::Refuse,
    ) {
        metadata.work_dir = PathBuf::from(exec::cwd_from_bytes(&cwd));
    }
    let history = bounded_read::read_to_string(
        &dir.join(exec::HISTORY_FILE),
        bounded_read::JOURNAL,
        Links::Refuse,
    );
    if let Ok(history) = history {
        metadata.execution_count = history.lines().count() as u64;
        metadata.last_executed_at = history
            .lines()
            .last()
            .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .and_then(|entry| entry["timestamp"].as_str().map(str::to_string));
    }
    Ok(metadata)
}

pub(crate) fn write_metadata(dir: &Path, metadata: &ShellMetadata) -> Result<(), SessionError> {
    let path = dir.join(METADATA_FILE);
    let bytes = serde_json::to_vec_pretty(metadata).map_err(|e| SessionError::CorruptMetadata {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    replace_private(&path, &bytes)
}

#[cfg(test)]
mod tests;
