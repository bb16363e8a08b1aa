//! `delta continue`: resume, answer, extend or retry an existing run (spec §2.6.2 state
//! table). The run's agent is reloaded from its recorded home; the engine takes the run's
//! lock, so two processes can never drive one run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use delta_actors::agent::{load_agent, script_path};
use delta_actors::janitor::{prepare_continue, ContinueReadiness, JanitorAction};
use delta_actors::workspace::validate_run_id;
use delta_actors::{RunRequest, RunStart, RunStatus};

use crate::commands::engine::{
    parse_llm_timeout_arg, run_inputs, run_one, with_llm_timeout, RunInputs,
};
use crate::commands::prompt::TerminalPrompter;
use crate::error::CliError;
use crate::output::hints::model_flags;
use crate::output::{progress::Verbosity, Format};

#[derive(Debug, Clone, Args)]
#[command(after_help = concat!("What -m means depends on the run's status:
  INTERRUPTED        optional; appended as a new user message, then the run resumes
  WAITING_FOR_INPUT  required (or write .delta/<run>/interaction/response.txt); the answer to ask_human
  COMPLETED          required; the next instruction in the same conversation
  FAILED             optional; without it the same conversation is sent again (a connection
                     error, a timeout, a server that was down); with it, what to do differently
  RUNNING            the janitor checks the run: if its process is gone it is resumed,
                     if it is alive this command refuses (--force: ignore a different host)

--message-file FILE reads the message from FILE (`-`: standard input) instead of -m: an
argument is visible to every local user (ps, /proc/<pid>/cmdline), so pass passwords and other
secrets this way. The message is the file's text as is, less one trailing newline; it may
begin with `-`.

Examples:
  delta continue --run-id 20261122_101500_a1b2c3 -w ./ws
  delta continue --run-id job-7 -w ./ws -m \"yes, proceed\"
  printf '%s' \"$ANSWER\" | delta continue --run-id job-7 -w ./ws --message-file -
  delta continue --run-id job-7 -w ./ws      # retry a run that FAILED on a connection error
  delta list-runs -w ./ws --resumable

", crate::model_env_help!()))]
pub struct ContinueArgs {
    /// The run to continue (see `delta list-runs`).
    #[arg(long)]
    pub run_id: String,
    /// The workspace holding the run.
    #[arg(short = 'w', long = "work-dir")]
    pub work_dir: PathBuf,
    /// Message: an answer, a new instruction or a retry hint (see below).
    #[arg(short = 'm', long)]
    pub message: Option<String>,
    /// Read the message from FILE, `-` for standard input (keeps it out of the process list).
    #[arg(long, value_name = "FILE", conflicts_with = "message")]
    pub message_file: Option<PathBuf>,
    /// Iteration cap for this continuation, counted from where the run stands (default: the
    /// cap the run was given with --max-iterations, kept in its metadata, else the agent's).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_iterations: Option<u32>,
    /// Answer ask_human questions on this terminal.
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Take over a RUNNING run recorded on another host.
    #[arg(long)]
    pub force: bool,
    #[arg(long, value_enum, default_value_t = Format::Text, hide_possible_values = true,
          help = crate::output::RUN_RESULT_FORMAT_HELP)]
    pub format: Format,
    /// Use the built-in scripted model with this script (offline).
    #[arg(long, value_name = "FILE")]
    pub llm_script: Option<PathBuf>,
    /// Limit on each model call attempt, e.g. 90s or 2m (overrides agent.yaml's
    /// `llm.request_timeout`; default 600s). A timed-out attempt is retried.
    #[arg(long, value_name = "DURATION", value_parser = parse_llm_timeout_arg)]
    pub llm_timeout: Option<std::time::Duration>,
}

/// The workspace folder, canonical; a missing or unreadable one is a configuration error
/// that says what `-w` must point at.
fn resolve_work_dir(work_dir: &Path) -> Result<PathBuf, CliError> {
    let hint = "hint: -w is the workspace holding the run (the folder that contains .delta/), \
         e.g. -w my-agent/workspaces/W001; `delta list-runs -w <folder>` shows its runs";
    match work_dir.canonicalize() {
        Ok(dir) if dir.is_dir() => Ok(dir),
        Ok(_) => Err(CliError::Config(format!(
            "work dir {} is not a folder; {hint}",
            work_dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(CliError::Config(format!(
            "work dir {} does not exist; {hint}",
            work_dir.display()
        ))),
        Err(e) => Err(CliError::Config(format!(
            "cannot open work dir {}: {e}; {hint}",
            work_dir.display()
        ))),
    }
}

pub fn run(args: &ContinueArgs, verbosity: Verbosity) -> Result<i32, CliError> {
    let with_file_message;
    let args = match &args.message_file {
        Some(file) => {
            with_file_message = ContinueArgs {
                message: Some(read_message_file(file)?),
                ..args.clone()
            };
            &with_file_message
        }
        None => args,
    };
    validate_run_id(&args.run_id)?;
    let work_dir = resolve_work_dir(&args.work_dir)?;
    let readiness = prepare_continue(&work_dir, &args.run_id, args.message.as_deref(), args.force)?;
    let meta = match readiness {
        ContinueReadiness::Ready { janitor, metadata } => {
            match janitor {
                Some(JanitorAction::Interrupted { reason, .. }) => crate::notice!(
                    "janitor: run {} was RUNNING but {reason}; marked INTERRUPTED",
                    args.run_id
                ),
                Some(JanitorAction::Settled { status, .. }) => note_settled(&args.run_id, status),
                // The other actions are refusals: `prepare_continue` returns them as errors.
                _ => {}
            }
            metadata
        }
        ContinueReadiness::Finished { status, result } => {
            note_settled(&args.run_id, status);
            // Nothing left to do: report the run's own outcome, as its process would have.
            let continue_flags = model_flags(
                args.llm_script.as_deref(),
                args.llm_timeout,
                args.max_iterations,
                &std::env::current_dir()?,
            );
            crate::output::run_result::print(&result, args.format, &continue_flags);
            return Ok(result.exit_code());
        }
    };
    let agent = load_agent(Path::new(&meta.agent_home))?;
    for warning in &agent.warnings {
        crate::notice!("warning: {warning}");
    }
    let RunInputs {
        agent,
        env,
        llm,
        supervisor,
    } = run_inputs(agent, &work_dir, args.llm_script.as_deref(), verbosity)?;
    // The cap the run was given keeps applying until another is given (issue 31 item 15:
    // a continuation fell back to the agent's cap, `[iteration 2/6]` after `--max-iterations 20`).
    let max_iterations = args.max_iterations.or(meta.max_iterations_requested);
    let continue_flags = model_flags(
        script_path(&env, args.llm_script.as_deref()).as_deref(),
        args.llm_timeout,
        max_iterations,
        &std::env::current_dir()?,
    );
    let start = RunStart::Continue {
        message: args.message.clone(),
        force: args.force,
    };
    let agent = Arc::new(with_llm_timeout(agent, args.llm_timeout));
    let mut request = RunRequest::new(agent, work_dir, start, llm)
        .with_run_id(args.run_id.clone())
        .with_env(Arc::new(env));
    request.max_iterations = max_iterations;
    request.workspace_id = meta.workspace_id.clone();
    request.orchestration_id = meta.orchestration_id.clone();
    if args.interactive {
        request = request.with_prompter(Arc::new(TerminalPrompter));
    }
    run_one(request, supervisor, verbosity, args.format, &continue_flags)
}

/// The janitor found the run finished in its journal and recorded that (stderr).
fn note_settled(run_id: &str, status: RunStatus) {
    crate::notice!(
        "janitor: run {run_id} had already finished ({status}) before its process died; its record is repaired"
    );
}

/// The most a `--message-file` may hold.
const MAX_MESSAGE_FILE_BYTES: u64 = 1024 * 1024;

/// The message of `--message-file FILE` (`-`: standard input): the text as is, less one
/// trailing newline. A FIFO or device is refused rather than waited on; the size is capped.
fn read_message_file(file: &Path) -> Result<String, CliError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let named = if file == Path::new("-") {
        "standard input".to_string()
    } else {
        file.display().to_string()
    };
    let bad = |reason: String| CliError::Config(format!("--message-file {named}: {reason}"));
    let reader: Box<dyn Read> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(file)
            .map_err(|e| bad(format!("{e}")))?;
        let is_file = opened.metadata().map(|m| m.is_file()).unwrap_or(false);
        if !is_file {
            return Err(bad(
                "not a regular file; pass `-` to read standard input".into()
            ));
        }
        Box::new(opened)
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_MESSAGE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(format!("{e}")))?;
    if bytes.len() as u64 > MAX_MESSAGE_FILE_BYTES {
        return Err(bad(format!(
            "more than {MAX_MESSAGE_FILE_BYTES} bytes; a message is text for the model"
        )));
    }
    let mut text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}
