//! `delta run`: start a new run of an agent (spec §2.6.1) as a batch of one through the
//! engine's Supervisor, print progress on stderr and the RunResult on stdout.

use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use delta_actors::agent::{load_agent, script_path};
use delta_actors::workspace::{
    create_workspace, last_used_workspace, list_workspaces, next_workspace_name, validate_run_id,
    RunPaths,
};
use delta_actors::{RunRequest, RunStart};

use crate::commands::engine::{
    parse_llm_timeout_arg, run_inputs, run_one, with_llm_timeout, RunInputs,
};
use crate::commands::prompt::TerminalPrompter;
use crate::error::CliError;
use crate::output::hints::model_flags;
use crate::output::{progress::Verbosity, Format};

#[derive(Debug, Args)]
#[command(after_help = concat!("Examples:
  cd my-agent && delta run -m \"Analyze sales data\"      # --agent defaults to the current folder
  delta run --agent ./my-agent -m \"Analyze sales data\" -y
  delta run -m \"Summarise DELTA.md\" -w ./workspace --format json
  delta run --agent examples/agents/hello-world -m \"Say hello\" -y \\
      --llm-script examples/agents/hello-world/llm-script.yaml
  delta run -m \"Summarise DELTA.md\" -w ./ws --llm-timeout 90s   # give up on a silent endpoint sooner
  delta run -m \"Summarise DELTA.md\" -w ./ws --budget-usd 0.50   # stop before passing 50 cents (docs/cost.md)
  DELTA_BASE_URL=http://127.0.0.1:8080/v1 delta run -m \"Say hello\" -y   # a llama.cpp server here

", crate::model_env_help!(), "
Exit codes: 0 COMPLETED, 1 FAILED, 101 WAITING_FOR_INPUT (answer with `delta continue`),
126 configuration error, 130 interrupted (Ctrl-C; resume with `delta continue`)."))]
pub struct RunArgs {
    /// Agent folder holding agent.yaml; optional, the current directory by default.
    #[arg(short = 'a', long, value_name = "DIR", default_value = ".")]
    pub agent: PathBuf,
    /// The task for the agent.
    #[arg(short = 'm', long)]
    pub message: String,
    /// Workspace the agent works in (created if missing). Default: <agent>/workspaces/W00N.
    #[arg(short = 'w', long = "work-dir")]
    pub work_dir: Option<PathBuf>,
    /// Iteration cap for this run (default: the agent's max_iterations, else 30).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_iterations: Option<u32>,
    /// Never ask: create the next workspace W00N.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Answer ask_human questions on this terminal instead of pausing the run.
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Run id to use (letters, digits, '.', '_', '-'; must not exist in the workspace).
    #[arg(long)]
    pub run_id: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Text, hide_possible_values = true,
          help = crate::output::RUN_RESULT_FORMAT_HELP)]
    pub format: Format,
    /// Use the built-in scripted model with this script instead of a real endpoint (offline).
    #[arg(long, value_name = "FILE")]
    pub llm_script: Option<PathBuf>,
    /// Limit on each model call attempt, e.g. 90s or 2m (overrides agent.yaml's
    /// `llm.request_timeout`; default 600s). A timed-out attempt is retried.
    #[arg(long, value_name = "DURATION", value_parser = parse_llm_timeout_arg)]
    pub llm_timeout: Option<std::time::Duration>,
    #[command(flatten)]
    pub budget: crate::commands::budget_args::BudgetArgs,
}

pub fn run(args: &RunArgs, verbosity: Verbosity) -> Result<i32, CliError> {
    let agent = load_agent(&args.agent)?;
    for warning in &agent.warnings {
        crate::notice!("warning: {warning}");
    }
    // Everything is validated before anything is created: a configuration error must not
    // leave an empty workspace behind or move LAST_USED.
    let choice = choose_workspace(&agent.home, args.work_dir.as_deref(), args.yes)?;
    if let Some(id) = &args.run_id {
        validate_run_id(id)?;
        // A folder without metadata.json is a run killed while being created: the engine
        // reclaims it, so only a started run blocks the id.
        if RunPaths::new(&choice.dir, id)
            .run_dir
            .join("metadata.json")
            .exists()
        {
            return Err(CliError::Config(format!(
                "run id '{id}' already exists in {}; choose a different id, or see the runs with `delta list-runs -w {}`",
                choice.dir.display(),
                choice.dir.display()
            )));
        }
    }
    let RunInputs {
        agent,
        env,
        llm,
        supervisor,
    } = run_inputs(agent, &choice.dir, args.llm_script.as_deref(), verbosity)?;
    let budget = args.budget.budget();
    if let Some(budget) = &budget {
        delta_actors::budget::check_priced(budget, &agent, &llm).map_err(CliError::Config)?;
    }
    let continue_flags = model_flags(
        script_path(&env, args.llm_script.as_deref()).as_deref(),
        args.llm_timeout,
        args.max_iterations,
        &std::env::current_dir()?,
    );
    // Said once, before the run: tools confined by nothing (issue 34).
    if let Some(notice) = agent
        .unsandboxed_notice(&env)
        .map_err(|e| CliError::Config(e.to_string()))?
    {
        crate::notice!("note: {notice}");
    }
    let (work_dir, workspace_id) = choice.create()?;
    let start = RunStart::New {
        task: args.message.clone(),
    };
    let agent = Arc::new(with_llm_timeout(agent, args.llm_timeout));
    let mut request = RunRequest::new(agent, work_dir, start, llm).with_env(Arc::new(env));
    request.run_id = args.run_id.clone();
    request.max_iterations = args.max_iterations;
    request.workspace_id = workspace_id;
    if let Some(budget) = budget {
        request = request.with_budget(Arc::new(delta_actors::budget::BudgetLedger::new(
            delta_actors::budget::BudgetScope::Run,
            budget,
            Default::default(),
        )));
    }
    if args.interactive {
        request = request.with_prompter(Arc::new(TerminalPrompter));
    }
    run_one(request, supervisor, verbosity, args.format, &continue_flags)
}

/// The workspace a run will use, chosen but not created yet.
struct WorkspaceChoice {
    /// Absolute path (it may not exist yet).
    dir: PathBuf,
    /// `Some((agent home, W00N))` for an agent workspace, recorded in LAST_USED on creation.
    agent_workspace: Option<(PathBuf, String)>,
}

impl WorkspaceChoice {
    /// Creates the folder (and, for an agent workspace, records it as last used); returns
    /// its canonical path and the workspace id.
    fn create(self) -> Result<(PathBuf, Option<String>), CliError> {
        match self.agent_workspace {
            Some((agent_home, name)) => {
                let existed = self.dir.is_dir();
                let dir = create_workspace(&agent_home, &name)?;
                if !existed {
                    crate::notice!("Using new workspace {name}");
                }
                Ok((dir, Some(name)))
            }
            None => {
                let dir = &self.dir;
                std::fs::create_dir_all(dir).map_err(|e| {
                    CliError::Config(format!("cannot create work dir {}: {e}", dir.display()))
                })?;
                let dir = dir.canonicalize().map_err(|e| {
                    CliError::Config(format!("cannot resolve work dir {}: {e}", dir.display()))
                })?;
                Ok((dir, None))
            }
        }
    }
}

/// `-w` wins; otherwise the agent's workspaces: a new one with `-y` or without a terminal,
/// else a menu on stderr. Nothing is created here.
fn choose_workspace(
    agent_home: &Path,
    explicit: Option<&Path>,
    yes: bool,
) -> Result<WorkspaceChoice, CliError> {
    if let Some(dir) = explicit {
        let dir = std::path::absolute(dir).map_err(|e| {
            CliError::Config(format!("cannot resolve work dir {}: {e}", dir.display()))
        })?;
        return Ok(WorkspaceChoice {
            dir,
            agent_workspace: None,
        });
    }
    let existing = list_workspaces(agent_home)?;
    let interactive = !yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let name = if !interactive || existing.is_empty() {
        next_workspace_name(agent_home)?
    } else {
        menu(agent_home, &existing)?
    };
    Ok(WorkspaceChoice {
        dir: agent_home.join("workspaces").join(&name),
        agent_workspace: Some((agent_home.to_path_buf(), name)),
    })
}

fn menu(agent_home: &Path, existing: &[String]) -> Result<String, CliError> {
    let last = last_used_workspace(agent_home);
    let next = next_workspace_name(agent_home)?;
    crate::notice!("Workspaces in {}/workspaces:", agent_home.display());
    for (i, name) in existing.iter().enumerate() {
        let mark = if Some(name) == last.as_ref() {
            "  (last used)"
        } else {
            ""
        };
        crate::notice!("  {}. {name}{mark}", i + 1);
    }
    crate::notice!("  n. new workspace ({next})");
    let default = last
        .clone()
        .filter(|l| existing.contains(l))
        .unwrap_or_else(|| next.clone());
    loop {
        crate::output::prompt(&format!("Choose a workspace [Enter = {default}]: "));
        let mut line = String::new();
        let read = std::io::stdin().lock().read_line(&mut line)?;
        if read == 0 {
            return Ok(default);
        }
        let answer = line.trim();
        if answer.is_empty() {
            return Ok(default);
        }
        if answer.eq_ignore_ascii_case("n") || answer.eq_ignore_ascii_case("new") {
            return Ok(next);
        }
        if let Ok(k) = answer.parse::<usize>() {
            if (1..=existing.len()).contains(&k) {
                return Ok(existing[k - 1].clone());
            }
        }
        crate::notice!(
            "Please answer with a number from 1 to {}, 'n', or Enter.",
            existing.len()
        );
    }
}
