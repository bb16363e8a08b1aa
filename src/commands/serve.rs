//! `delta serve`: the session/worker server — agents and terminals in PTYs that survive page
//! reloads and server restarts, watched and steered from a browser, plus the runs and
//! orchestrations of workspaces. Resolves the options (address, token, folders, binaries)
//! and hands them to `delta_actors::api::serve::run`; prints the URL.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;
use delta_actors::api::serve::{new_token, run as run_server, PathContext, ServeOptions};
use delta_actors::session::pty::socket_dir::default_runtime_dir;

use crate::error::CliError;
use crate::token::{check_token, resolve_token, GivenToken, TokenOptions};

/// The environment variable that may hold a fixed token.
pub const SERVE_TOKEN_VAR: &str = "DELTA_SERVE_TOKEN";
/// The environment variable that may name a token file (its path is then on no command line).
pub const SERVE_TOKEN_FILE_VAR: &str = "DELTA_SERVE_TOKEN_FILE";

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  delta serve                                 http://127.0.0.1:7777/#token=..., a fresh token
  delta serve -w ./ws --listen 127.0.0.1:0    also show the runs of ./ws; any free port
  DELTA_SERVE_TOKEN=s3cret-token delta serve --listen 0.0.0.0:7777   reachable from other hosts
  DELTA_SERVE_TOKEN_FILE=~/.config/delta/serve-token delta serve   the token from a file (chmod 600)
  delta serve --token-file ./one-time-token --unlink-token-file     read it, then remove it

The first line on stdout is the page's URL with the token in its fragment (`/#token=...`,
which the browser never sends to a server): open it once; the page keeps the token in this
browser's storage for this address and port (no cookie), so reloads and new tabs work.
Scripts send `Authorization: Bearer <token>`.
Workers run in detached holders: stopping the server (Ctrl-C, or even SIGKILL) stops no
program; the next `delta serve` with the same --state-dir re-attaches to them.
Agents: built-ins `shell` and `delta` (`delta run -i` on the session folder's agent, or on
one it asks for; offline with DELTA_LLM_SCRIPT=FILE in the server's environment); add more in
~/.config/delta/serve.yaml (see docs/serve.md). Runs & batches: #/runs on the page, where it
opens when -w is given. A link's token is kept only once the server confirms it, and after a
connection loss an open tab sends its token only to the server start it logged in to.
A fixed token comes from DELTA_SERVE_TOKEN, or from a file (yours, mode 0600, not a symbolic
link) named by DELTA_SERVE_TOKEN_FILE or --token-file, never from the command line: every
local user can read a process's arguments, so `--token` is refused, and the variable keeps
even the file's path off it. The server's environment and memory are closed to your other
processes (it is not dumpable), but the workers run as you: --unlink-token-file removes the
file once read so they cannot read it later. Never reuse a fixed token on a shared host
(docs/serve.md, \"The token\").")]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free one. Other than loopback needs a fixed
    /// token (DELTA_SERVE_TOKEN, DELTA_SERVE_TOKEN_FILE or --token-file).
    #[arg(long, default_value = "127.0.0.1:7777", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Refused (a command line is readable by every local user): use DELTA_SERVE_TOKEN or
    /// --token-file.
    #[arg(long, hide = true, value_name = "TOKEN", allow_hyphen_values = true)]
    pub token: Option<String>,
    /// Read a fixed token from FILE (yours, mode 0600, not a symlink) instead of
    /// DELTA_SERVE_TOKEN; DELTA_SERVE_TOKEN_FILE=FILE does the same without putting the
    /// path on the command line [default: a random token per start]
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Remove the token file (--token-file or DELTA_SERVE_TOKEN_FILE) once it is read, so
    /// the workers, which run as you, cannot read it while the server runs.
    #[arg(long)]
    pub unlink_token_file: bool,
    /// A workspace whose runs and orchestrations the page shows (repeatable).
    #[arg(short = 'w', long = "work-dir", value_name = "DIR")]
    pub work_dirs: Vec<PathBuf>,
    /// Where sessions.json and the workers' PTY folders live
    /// [default: $XDG_STATE_HOME/delta/serve or ~/.local/state/delta/serve]
    #[arg(long, env = "DELTA_SERVE_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Agent definitions [default: ~/.config/delta/serve.yaml, if present]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}

/// `token` as a URL fragment value: everything but unreserved characters percent-encoded
/// (the page decodes it), so a fixed token holding `#`, `%` or `&` reaches the page intact.
fn fragment_encode(token: &str) -> String {
    token
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Removes the token file once read, when asked (`--unlink-token-file`).
fn unlink_token_file(given: &GivenToken) -> Result<(), CliError> {
    let Some(path) = given.origin.file() else {
        return Err(CliError::Usage(format!(
            "--unlink-token-file: the token came from {}, not from a file; name the file with --token-file FILE or {SERVE_TOKEN_FILE_VAR}=FILE, or drop --unlink-token-file",
            given.origin
        )));
    };
    std::fs::remove_file(path).map_err(|e| {
        CliError::Config(format!(
            "{}: --unlink-token-file could not remove it ({e}); remove it yourself, or drop --unlink-token-file",
            given.origin
        ))
    })
}

pub fn run(args: &ServeArgs) -> Result<i32, CliError> {
    let given = resolve_token(
        &TokenOptions {
            argv_token: args.token.as_deref(),
            token_file: args.token_file.as_deref(),
            file_env_var: Some(SERVE_TOKEN_FILE_VAR),
            env_var: SERVE_TOKEN_VAR,
        },
        &crate::commands::engine::process_env(),
    )?;
    if args.unlink_token_file && given.is_none() {
        return Err(CliError::Usage(format!(
            "--unlink-token-file: no token file was given; name it with --token-file FILE or {SERVE_TOKEN_FILE_VAR}=FILE"
        )));
    }
    let token = match given {
        Some(given) => {
            check_token(&given, 8)?;
            if given.value.contains(';') {
                return Err(CliError::Usage(format!(
                    "{}: use a token without `;`",
                    given.origin
                )));
            }
            if args.unlink_token_file {
                unlink_token_file(&given)?;
            }
            given.value
        }
        None if !args.listen.ip().is_loopback() => {
            return Err(CliError::Config(format!(
                "--listen {} is reachable from other hosts: refusing to start with a random token; set DELTA_SERVE_TOKEN or DELTA_SERVE_TOKEN_FILE=FILE, or pass --token-file FILE (or listen on 127.0.0.1)",
                args.listen
            )))
        }
        None => new_token(),
    };
    let state_dir = match &args.state_dir {
        Some(dir) => absolute(dir)?,
        None => std::env::var_os("XDG_STATE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| home().map(|h| h.join(".local/state")))
            .map(|base| base.join("delta/serve"))
            .ok_or_else(|| {
                CliError::Usage("cannot find a state folder: set HOME or pass --state-dir".into())
            })?,
    };
    let mut workspaces = Vec::new();
    for dir in &args.work_dirs {
        if !dir.is_dir() {
            return Err(CliError::Usage(format!(
                "-w {}: no such folder",
                dir.display()
            )));
        }
        workspaces.push(
            std::fs::canonicalize(dir)
                .map_err(|e| CliError::Usage(format!("-w {}: {e}", dir.display())))?,
        );
    }
    let (config, explicit) = match &args.config {
        Some(path) => (Some(absolute(path)?), true),
        None => (home().map(|h| h.join(".config/delta/serve.yaml")), false),
    };
    let delta_exe = std::env::current_exe()
        .map_err(|e| CliError::Runtime(format!("cannot locate the delta binary: {e}")))?;
    let holder_exe = delta_exe.with_file_name("delta-sessions-pty");
    if !holder_exe.is_file() {
        return Err(CliError::Config(format!(
            "{} is missing: delta serve runs each worker under it; install it beside delta (cargo install builds both)",
            holder_exe.display()
        )));
    }
    let options = ServeOptions {
        listen: args.listen,
        token: token.clone(),
        state_dir: state_dir.clone(),
        runtime_dir: default_runtime_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref()),
        holder_exe,
        delta_exe,
        agents_config: config,
        agents_config_explicit: explicit,
        workspaces,
        http_workers: 2,
        paths: PathContext {
            base_dir: std::env::current_dir()?,
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
        },
    };
    run_server(options, move |ready| {
        crate::output::emit(&format!(
            "http://{}/#token={}\n",
            ready.address,
            fragment_encode(&token)
        ));
        crate::notice!("delta serve listening on http://{} (state in {}, {} session(s); Ctrl-C stops the server, not the workers)", ready.address, state_dir.display(), ready.sessions);
        if let Some(backup) = ready.migrated_backup {
            crate::notice!(
                "migrated an old-format sessions.json; the original is kept as {}",
                backup.display()
            );
        }
    })?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::fragment_encode;

    #[test]
    fn a_fixed_token_reaches_the_page_intact_through_the_fragment() {
        assert_eq!(fragment_encode("0123abcdef"), "0123abcdef");
        assert_eq!(fragment_encode("a#b%c&d/e"), "a%23b%25c%26d%2Fe");
    }
}
