//! `delta list-runs`: the runs of a workspace, newest first (spec §2.6.4). The janitor runs
//! first, so a run whose process died shows as INTERRUPTED rather than a stale RUNNING. A run
//! folder whose metadata cannot be read is never hidden: it is listed as UNREADABLE with the
//! reason (text, json) or named on stderr (raw, whose stdout feeds `continue --run-id`).

use std::path::PathBuf;

use clap::Args;
use delta_actors::janitor::{recover_orphaned_runs, JanitorAction};
use delta_actors::workspace::{list_runs_with_warnings, RunSummary};
use delta_actors::RunStatus;

use crate::error::CliError;
use crate::output::Format;

#[derive(Debug, Args)]
#[command(
    after_help = "A run folder whose metadata.json is missing or corrupt is listed as UNREADABLE with
the reason (`error` in JSON; named on stderr with --format raw, and left out by the filters).

Examples:
  delta list-runs -w ./ws
  delta list-runs -w ./ws --resumable --first --format raw     # the id of the newest resumable run
  delta continue --run-id \"$(delta list-runs -w ./ws --resumable --first --format raw)\" -w ./ws"
)]
pub struct ListRunsArgs {
    /// Workspace to list (default: the current directory).
    #[arg(short = 'w', long = "work-dir", default_value = ".")]
    pub work_dir: PathBuf,
    /// Only runs `delta continue` resumes where they stopped: INTERRUPTED (continued as
    /// it is) and WAITING_FOR_INPUT (continued with the answer). COMPLETED and FAILED runs
    /// are extended or retried with a new message (`-m`), not resumed: list them with
    /// `--status`.
    #[arg(long)]
    pub resumable: bool,
    /// Only runs with this status (e.g. FAILED).
    #[arg(long, value_parser = parse_status)]
    pub status: Option<RunStatus>,
    /// Only the newest matching run.
    #[arg(long)]
    pub first: bool,
    /// What stdout carries: text (one aligned row per run), json (an array of runs, with the
    /// original engine's field names too), raw (run ids, one per line).
    #[arg(long, value_enum, default_value_t = Format::Text, hide_possible_values = true)]
    pub format: Format,
}

fn parse_status(s: &str) -> Result<RunStatus, String> {
    RunStatus::parse(s).ok_or_else(|| {
        format!("unknown status '{s}': use RUNNING, WAITING_FOR_INPUT, COMPLETED, FAILED or INTERRUPTED")
    })
}

/// What `--resumable` keeps: the runs `delta continue` picks up where they stopped (the
/// original engine's meaning). A RUNNING run whose process died was already marked
/// INTERRUPTED by the janitor above; one that is alive is not resumable.
fn is_resumable(status: RunStatus) -> bool {
    matches!(status, RunStatus::Interrupted | RunStatus::WaitingForInput)
}

pub fn run(args: &ListRunsArgs) -> Result<i32, CliError> {
    if !args.work_dir.join(".delta").is_dir() {
        return Err(CliError::Config(format!(
            "no .delta folder in {}: this is not a delta workspace (runs live in <workspace>/.delta/<run_id>/).\nHint: pass the workspace with -w, e.g. delta list-runs -w <agent>/workspaces/W001",
            args.work_dir.display()
        )));
    }
    for action in recover_orphaned_runs(&args.work_dir) {
        match action {
            JanitorAction::Interrupted { run_id, reason } => {
                crate::notice!("janitor: run {run_id} was RUNNING but {reason}; marked INTERRUPTED")
            }
            JanitorAction::Settled { run_id, status } => {
                crate::notice!("janitor: run {run_id} had finished ({status}) before its process died; record repaired")
            }
            JanitorAction::CannotRecord {
                run_id,
                reason,
                error,
            } => crate::notice!(
                "janitor: run {run_id} is RUNNING but {reason}; it could not be marked INTERRUPTED: {error}"
            ),
            JanitorAction::SkippedOtherHost { .. } => {}
        }
    }
    let listing = list_runs_with_warnings(&args.work_dir)?;
    let mut runs: Vec<RunSummary> = listing
        .runs
        .into_iter()
        .filter(|r| !args.resumable || is_resumable(r.status))
        .filter(|r| args.status.is_none_or(|s| r.status == s))
        .collect();
    if args.first {
        runs.truncate(1);
    }
    // An unreadable run has no status: it matches no filter, but a plain listing shows it.
    let filtered = args.resumable || args.status.is_some() || args.first;
    let unreadable = if filtered {
        &[][..]
    } else {
        &listing.skipped[..]
    };
    crate::output::runs::print(&runs, unreadable, args.format);
    Ok(0)
}
