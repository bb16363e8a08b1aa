//! `delta completions SHELL` and `delta man`: the shell completion scripts (clap_complete)
//! and the manual pages (clap_mangen), generated from the command line's own clap
//! definition, so they never drift from `--help`. `scripts/install.sh` installs both.
//!
//! Must not: describe a flag itself (the clap definition in `cli.rs` and `commands/` does),
//! or write stdout but through `crate::output`.

use std::path::PathBuf;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::Cli;
use crate::error::CliError;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples (scripts/install.sh installs bash, zsh and fish completions itself):
  delta completions bash > ~/.local/share/bash-completion/completions/delta
  delta completions zsh > ~/.zfunc/_delta        # with fpath+=(~/.zfunc) before compinit in ~/.zshrc
  delta completions fish > ~/.config/fish/completions/delta.fish
  delta completions powershell >> $PROFILE

A new shell picks the script up; in bash, `source` the file to try it in the current one."
)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  delta man | man -l -                    # read delta(1) now
  delta man --dir ~/.local/share/man/man1 # delta.1 and one page per command: man delta-orchestrate

scripts/install.sh writes them to PREFIX/share/man/man1.")]
pub struct ManArgs {
    /// Write delta.1 and a page per command (delta-run.1, delta-orchestrate.1, ...) into
    /// this folder (created if missing) instead of printing delta.1 on stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The program name the scripts and pages use.
const BIN_NAME: &str = "delta";

pub fn completions(args: &CompletionsArgs) -> Result<i32, CliError> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, BIN_NAME, &mut script);
    crate::output::emit(&String::from_utf8_lossy(&script));
    Ok(0)
}

pub fn man(args: &ManArgs) -> Result<i32, CliError> {
    let command = Cli::command();
    match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| {
                CliError::Config(format!(
                    "man --dir {}: cannot create it: {e}",
                    dir.display()
                ))
            })?;
            clap_mangen::generate_to(command, dir).map_err(|e| {
                CliError::Runtime(format!(
                    "man --dir {}: cannot write a page: {e}",
                    dir.display()
                ))
            })?;
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command).render(&mut page)?;
            crate::output::emit(&String::from_utf8_lossy(&page));
        }
    }
    Ok(0)
}
