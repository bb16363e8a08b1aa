//! `delta list-orchestrations`: the orchestrations of a workspace (id, status, run counts,
//! age, plan), newest first, read through `delta_actors::plan::state::list_orchestrations`.
//! A folder that cannot be read is listed as UNREADABLE with the reason.

use std::path::PathBuf;

use clap::Args;
use delta_actors::plan::state::list_orchestrations;

use crate::error::CliError;
use crate::output::orchestration_list::ListFormat;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  delta list-orchestrations -w ./ws
  delta list-orchestrations -w examples/plans/map-reduce/workspaces/W001 --format json
  delta orchestrate plan.yaml --resume \"$(delta list-orchestrations -w ws --format json | jq -r '.[0].orchestration_id')\" -w ws

Statuses: RUNNING (a process drives it now), COMPLETED, FAILED, INTERRUPTED (stopped, or its
process was killed: resume it with `delta orchestrate --resume <id> -w <workspace>`) and
UNREADABLE (its folder is damaged; the reason is shown).")]
pub struct ListOrchestrationsArgs {
    /// Workspace to list (default: the current directory).
    #[arg(short = 'w', long = "work-dir", default_value = ".")]
    pub work_dir: PathBuf,
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub format: ListFormat,
}

pub fn run(args: &ListOrchestrationsArgs) -> Result<i32, CliError> {
    let listings = list_orchestrations(&args.work_dir).map_err(|e| {
        CliError::Config(format!(
            "{e}; hint: pass the workspace the orchestration ran in with -w (the default is the \
             current folder)"
        ))
    })?;
    crate::output::orchestration_list::print(&args.work_dir, &listings, args.format);
    Ok(0)
}
