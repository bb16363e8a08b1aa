//! `delta-sessions-pty`: experimental PTY sessions (spec v1.4). Thin: clap parsing →
//! `delta_actors::session::pty::PtySessions` → pretty JSON on stdout (`read` prints raw text).
//! Usage errors: clap's text on stderr, exit 2. Other errors: message on stderr,
//! `{"error": ...}` on stdout, exit 1. The hidden `__holder`
//! subcommand is this binary re-executed as a session's detached holder. Owns no PTY logic.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use delta_actors::session::pty::escape::parse_escapes;
use delta_actors::session::pty::holder::{run_holder, HolderArgs};
use delta_actors::session::pty::socket_dir::default_runtime_dir;
use delta_actors::session::pty::{PtyConfig, PtySessions, ReadOptions, TerminalSize};
use delta_actors::session::SessionError;
use serde_json::json;

#[path = "../output/session_cli.rs"]
mod session_cli;
use session_cli::{current_dir, pretty};

const PROGRAM: &str = "delta-sessions-pty";

/// Longest `read --timeout` (one day); `--wait` waits without limit.
const MAX_READ_TIMEOUT_MS: u64 = 86_400_000;

const AFTER_HELP: &str = "\
Examples:
  id=$(delta-sessions-pty start python3 -i | jq -r .session_id)
  delta-sessions-pty read \"$id\" --timeout 2000          # the banner and the >>> prompt
  printf 'x = 6 * 7\\nprint(x)\\n' | delta-sessions-pty write \"$id\"
  delta-sessions-pty read \"$id\" --timeout 1000          # 42
  delta-sessions-pty write-key \"$id\" ctrl+d             # named keys: enter, arrow_up, f1, ...
  delta-sessions-pty end \"$id\"

Output: JSON on stdout (read: the program's output as raw text). Exit codes: 0 success,
1 error (message on stderr, {\"error\": ...} on stdout), 2 usage error.";

#[derive(Debug, Parser)]
#[command(
    name = "delta-sessions-pty",
    version,
    about = "[EXPERIMENTAL] Interactive programs (shells, REPLs, menus) in a PTY held by a detached process",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Folder holding PTY sessions [default: <cwd>/.sessions-pty]
    #[arg(
        long,
        global = true,
        env = "DELTA_SESSIONS_PTY_DIR",
        value_name = "DIR"
    )]
    sessions_dir: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a program in a PTY; everything after it (its own --flags too) is passed verbatim.
    /// Options go before the program: `start --cols 80 --rows 24 python3 -i`
    Start {
        /// Terminal width the program sees
        #[arg(long, default_value_t = TerminalSize::DEFAULT.cols, value_parser = clap::value_parser!(u16).range(2..=1000))]
        cols: u16,
        /// Terminal height the program sees
        #[arg(long, default_value_t = TerminalSize::DEFAULT.rows, value_parser = clap::value_parser!(u16).range(2..=1000))]
        rows: u16,
        #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Send stdin to the program (escapes: \n \r \t \b \f \v \xHH \uHHHH \\)
    Write {
        session_id: String,
        /// Send stdin as is, without escape parsing
        #[arg(long)]
        raw: bool,
    },
    /// Send a named key (arrow_down, enter, ctrl+c, f1, page_up, ...)
    WriteKey { session_id: String, key: String },
    /// Print buffered output (raw text) and clear it
    Read {
        session_id: String,
        /// Wait up to this many milliseconds for new output (at most one day)
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=MAX_READ_TIMEOUT_MS))]
        timeout: Option<u64>,
        /// Wait without limit for new output
        #[arg(long)]
        wait: bool,
        /// Stream output until the program exits
        #[arg(long)]
        follow: bool,
        /// Print only the last N lines
        #[arg(long, value_name = "N")]
        lines: Option<usize>,
    },
    /// Stop the program (SIGTERM, up to 5 s, SIGKILL) and remove the session
    End { session_id: String },
    /// List the sessions of the folder
    List,
    /// Show whether a session's program is alive, and its uptime
    Status { session_id: String },
    /// Remove sessions whose program has exited
    Cleanup,
    #[command(name = "__holder", hide = true)]
    Holder {
        session_id: String,
        session_dir: PathBuf,
        socket: PathBuf,
        work_dir: PathBuf,
        #[arg(long, default_value_t = TerminalSize::DEFAULT.cols)]
        cols: u16,
        #[arg(long, default_value_t = TerminalSize::DEFAULT.rows)]
        rows: u16,
        /// Keep no input.log (delta serve's workers).
        #[arg(long)]
        no_input_log: bool,
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
}

/// What a successful command prints.
enum Output {
    Json(String),
    Raw(String),
    Nothing,
}

fn main() -> ExitCode {
    let cli = match session_cli::start::<Cli>() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match run(cli) {
        Ok(Output::Json(json)) => session_cli::succeed(&json),
        Ok(Output::Raw(text)) => {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Ok(Output::Nothing) => ExitCode::SUCCESS,
        Err(e) => session_cli::fail_with(PROGRAM, &e),
    }
}

fn run(cli: Cli) -> Result<Output, SessionError> {
    if let Command::Holder {
        session_id,
        session_dir,
        socket,
        work_dir,
        cols,
        rows,
        no_input_log,
        command,
    } = cli.command
    {
        run_holder(HolderArgs {
            session_id,
            session_dir,
            socket_path: socket,
            work_dir,
            size: TerminalSize { cols, rows },
            command,
            input_log: !no_input_log,
        })?;
        return Ok(Output::Nothing);
    }
    let cwd = current_dir()?;
    let holder_exe = std::env::current_exe().map_err(|e| SessionError::Io {
        action: "cannot locate this program",
        path: PathBuf::from("delta-sessions-pty"),
        source: e,
    })?;
    let config = PtyConfig {
        // Absolute, because the holder runs with the started program's folder as its cwd.
        sessions_dir: cwd.join(
            cli.sessions_dir
                .unwrap_or_else(|| PathBuf::from(".sessions-pty")),
        ),
        runtime_dir: default_runtime_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref()),
        holder_exe,
    };
    let sessions = PtySessions::new(config);
    let output = match cli.command {
        Command::Start {
            cols,
            rows,
            command,
        } => Output::Json(pretty(&sessions.start(
            &command,
            &cwd,
            TerminalSize { cols, rows },
        )?)),
        Command::Write { session_id, raw } => {
            let mut input = Vec::new();
            std::io::stdin()
                .read_to_end(&mut input)
                .map_err(|e| SessionError::Io {
                    action: "cannot read input from",
                    path: PathBuf::from("<stdin>"),
                    source: e,
                })?;
            let data = if raw {
                input
            } else {
                parse_escapes(&String::from_utf8_lossy(&input))
            };
            let bytes = sessions.write(&session_id, &data)?;
            Output::Json(pretty(
                &json!({"status": "sent", "bytes": bytes, "session_id": session_id}),
            ))
        }
        Command::WriteKey { session_id, key } => {
            sessions.write_key(&session_id, &key)?;
            Output::Json(pretty(
                &json!({"status": "sent", "key": key, "session_id": session_id}),
            ))
        }
        Command::Read {
            session_id,
            timeout,
            wait,
            follow,
            lines,
        } => {
            if follow {
                let mut stdout = std::io::stdout();
                sessions.follow(&session_id, &mut |chunk| {
                    stdout.write_all(chunk.as_bytes())?;
                    stdout.flush()
                })?;
                Output::Nothing
            } else {
                let options = ReadOptions {
                    timeout_ms: timeout,
                    wait,
                    lines,
                };
                Output::Raw(sessions.read(&session_id, options)?)
            }
        }
        Command::End { session_id } => {
            sessions.end(&session_id)?;
            Output::Json(pretty(
                &json!({"status": "terminated", "session_id": session_id}),
            ))
        }
        Command::List => Output::Json(pretty(&sessions.list()?)),
        Command::Status { session_id } => Output::Json(pretty(&sessions.status(&session_id)?)),
        Command::Cleanup => Output::Json(pretty(&sessions.cleanup()?)),
        Command::Holder { .. } => Output::Nothing,
    };
    Ok(output)
}
