//! The commands delta prints for the user to type next (`Resume with:`, `Answer with:`,
//! the forced-exit note, `list-orchestrations`' resume hint): each one exact, runnable from
//! any folder, quoted for a POSIX shell, with the flags the first command had that the next
//! one needs again (`--llm-script`, `--llm-timeout`, `--max-iterations`).
//!
//! Must not: print (callers decide where the text goes).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The program to name in printed commands: as invoked when invoked by a path (made
/// absolute from `cwd`), else `delta` (found on PATH).
pub fn program_for_hints(cwd: &Path) -> String {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .filter(|argv0| argv0.components().count() > 1)
        .map_or_else(
            || "delta".to_owned(),
            |argv0| cwd.join(argv0).to_string_lossy().into_owned(),
        )
}

/// The flags a later `delta continue` needs to go on as this command did: `--llm-script`
/// (absolute; from the flag or `DELTA_LLM_SCRIPT`), `--llm-timeout`, and the run's
/// `--max-iterations` when it was given one (the run keeps it anyway: the flag shows it).
pub fn model_flags(
    script: Option<&Path>,
    llm_timeout: Option<Duration>,
    max_iterations: Option<u32>,
    cwd: &Path,
) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(script) = script {
        flags.extend([
            "--llm-script".to_owned(),
            cwd.join(script).to_string_lossy().into_owned(),
        ]);
    }
    if let Some(limit) = llm_timeout {
        flags.extend([
            "--llm-timeout".to_owned(),
            format!("{}ms", limit.as_millis()),
        ]);
    }
    if let Some(cap) = max_iterations {
        flags.extend(["--max-iterations".to_owned(), cap.to_string()]);
    }
    flags
}

/// `delta continue --run-id ID -w WORKSPACE` plus `flags`, quoted for a POSIX shell (the
/// workspace made absolute from the current folder).
pub fn continue_command(run_id: &str, workspace: &Path, flags: &[String]) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut argv = vec![
        program_for_hints(&cwd),
        "continue".to_owned(),
        "--run-id".to_owned(),
        run_id.to_owned(),
        "-w".to_owned(),
        cwd.join(workspace).to_string_lossy().into_owned(),
    ];
    argv.extend_from_slice(flags);
    shell_words::join(argv)
}
