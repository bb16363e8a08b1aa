//! `delta-sessions`: persistent shell sessions for agents (spec v1.5). Thin: clap parsing →
//! `delta_actors::SessionManager` → pretty JSON on stdout. Usage errors:
//! clap's text on stderr, exit 2. Other errors: message on stderr, `{"error": ...}` on stdout,
//! exit 1. A failing command is exit 0 with its `exit_code` in the JSON, unless `exec --raw`
//! asks for the original engine's contract (its output as is, its exit code). Owns no
//! session logic.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use delta_actors::session::shell::{
    ExecOptions, ExecOutcome, ShellConfig, ShellMetadata, ShellStatus, StartOptions,
    DEFAULT_OUTPUT_CAP,
};
use delta_actors::session::SessionError;
use delta_actors::SessionManager;
use serde::Serialize;
use serde_json::json;

#[path = "../output/session_cli.rs"]
mod session_cli;
use session_cli::{current_dir, pretty};

const PROGRAM: &str = "delta-sessions";

const AFTER_HELP: &str = "\
Examples:
  id=$(delta-sessions start | jq -r .session_id)      # a bash session (or: start sh)
  delta-sessions exec \"$id\" 'cd /tmp && export N=1'
  echo 'pwd; echo $N' | delta-sessions exec \"$id\"     # the command from stdin: /tmp and 1
  delta-sessions exec --raw \"$id\" 'ls missing'       # raw output, exit with the command's code
  delta-sessions end \"$id\" && delta-sessions cleanup

Output: JSON on stdout (exec: stdout, stderr, exit_code, ...; exit 0 whatever the command's
code, unless --raw). Exit codes: 0 success, 1 error (message on stderr, {\"error\": ...} on
stdout), 2 usage error. Interactive programs (python3, REPLs) need delta-sessions-pty.";

#[derive(Debug, Parser)]
#[command(
    name = "delta-sessions",
    version,
    about = "Persistent shell sessions: cwd, variables, functions, aliases and options survive between execs",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Folder holding the sessions [default: <cwd>/.sessions]
    #[arg(long, global = true, env = "DELTA_SESSIONS_DIR", value_name = "DIR")]
    sessions_dir: Option<PathBuf>,

    /// Extra variable never saved into session state (repeatable; also
    /// DELTA_SESSIONS_SECRET_VARS, comma-separated). DELTA_API_KEY is always secret.
    #[arg(long = "secret-var", global = true, value_name = "NAME")]
    secret_vars: Vec<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a session (bash by default; sh; or a path to one of them)
    Start { shell: Option<String> },
    /// Run a command (argument, or all of stdin) in a session; options go before the command
    Exec {
        session_id: String,
        /// The command text; several words are joined with spaces. Omit it to read stdin.
        #[arg(num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
        /// Kill the command's process group after this many milliseconds (at most one day)
        #[arg(long, default_value_t = 120_000, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
        timeout: u64,
        /// Bytes of stdout and of stderr returned (the full text stays in the session folder)
        #[arg(long, default_value_t = DEFAULT_OUTPUT_CAP, value_name = "BYTES")]
        max_output: usize,
        /// Print the command's stdout and stderr as they are (no JSON) and exit with its exit
        /// code, like the original engine's delta-sessions (124 on timeout)
        #[arg(long)]
        raw: bool,
    },
    /// Terminate a session (its folder stays until `cleanup`)
    End { session_id: String },
    /// List the sessions of the folder
    List,
    /// Show one session's metadata and whether an exec is running
    Status { session_id: String },
    /// Remove terminated sessions
    Cleanup,
}

fn main() -> ExitCode {
    let cli = match session_cli::start::<Cli>() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return session_cli::fail(PROGRAM, &format!("cannot start the async runtime: {e}"))
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(Output::Json(json)) => session_cli::succeed(&json),
        Ok(Output::Raw(outcome)) => print_raw(&outcome),
        Err(e) => session_cli::fail_with(PROGRAM, &e),
    }
}

/// What a successful command prints.
enum Output {
    Json(String),
    /// `exec --raw`: the command's own streams and exit code.
    Raw(ExecOutcome),
}

/// Writes the command's stdout and stderr as they are and exits with its code (0-255). A cut
/// stream gets a note on stderr naming the file with the full text.
fn print_raw(outcome: &ExecOutcome) -> ExitCode {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(outcome.stdout.as_bytes());
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(outcome.stderr.as_bytes());
    if outcome.truncated {
        for file in [&outcome.stdout_file, &outcome.stderr_file]
            .into_iter()
            .flatten()
        {
            let _ = writeln!(
                stderr,
                "{PROGRAM}: output cut; full text in {}",
                file.display()
            );
        }
    }
    if outcome.timed_out {
        let _ = writeln!(
            stderr,
            "{PROGRAM}: the command timed out after {} ms",
            outcome.execution_time_ms
        );
    }
    let _ = stderr.flush();
    ExitCode::from(u8::try_from(outcome.exit_code.clamp(0, 255)).unwrap_or(u8::MAX))
}

async fn run(cli: Cli) -> Result<Output, SessionError> {
    let cwd = current_dir()?;
    // Absolute, so paths reported in the JSON stay valid from any folder.
    let sessions_dir = cwd.join(
        cli.sessions_dir
            .unwrap_or_else(|| PathBuf::from(".sessions")),
    );
    let env_secrets = std::env::var("DELTA_SESSIONS_SECRET_VARS").unwrap_or_default();
    let secrets = cli
        .secret_vars
        .into_iter()
        .chain(env_secrets.split(',').map(|s| s.trim().to_string()));
    let config = ShellConfig::new(sessions_dir).with_secret_vars(secrets);
    let manager = SessionManager::new(config)?;
    let json = match cli.command {
        Command::Start { shell } => {
            let meta = manager.start_session(&StartOptions::from_current_process(shell)?)?;
            Output::Json(pretty(&StartReply {
                session_id: meta.session_id,
                command: meta.command,
                work_dir: meta.work_dir,
                status: meta.status,
            }))
        }
        Command::Exec {
            session_id,
            command,
            timeout,
            max_output,
            raw,
        } => {
            let command = if command.is_empty() {
                read_stdin(&session_id)?
            } else {
                command.join(" ")
            };
            let options = ExecOptions {
                timeout: Duration::from_millis(timeout),
                output_cap: max_output,
            };
            let outcome = manager.exec(&session_id, &command, options).await?;
            if raw {
                Output::Raw(outcome)
            } else {
                Output::Json(pretty(&outcome))
            }
        }
        Command::End { session_id } => {
            let meta = manager.end(&session_id).await?;
            Output::Json(pretty(
                &json!({"status": meta.status, "session_id": meta.session_id}),
            ))
        }
        Command::List => Output::Json(pretty(&manager.list()?)),
        Command::Status { session_id } => {
            let (metadata, busy) = manager.status(&session_id)?;
            Output::Json(pretty(&StatusReply { metadata, busy }))
        }
        Command::Cleanup => Output::Json(pretty(&manager.cleanup()?)),
    };
    Ok(json)
}

fn read_stdin(session_id: &str) -> Result<String, SessionError> {
    let empty = || SessionError::EmptyCommand {
        id: session_id.to_string(),
    };
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(empty());
    }
    let mut command = String::new();
    stdin
        .read_to_string(&mut command)
        .map_err(|e| SessionError::Io {
            action: "cannot read the command from",
            path: PathBuf::from("<stdin>"),
            source: e,
        })?;
    if command.trim().is_empty() {
        return Err(empty());
    }
    Ok(command)
}

#[derive(Serialize)]
struct StartReply {
    session_id: String,
    command: String,
    work_dir: PathBuf,
    status: ShellStatus,
}

#[derive(Serialize)]
struct StatusReply {
    #[serde(flatten)]
    metadata: ShellMetadata,
    /// An exec is running in the session right now.
    busy: bool,
}
