//! The open-files limit (`RLIMIT_NOFILE`) the engine needs, checked before any engine
//! thread starts: a limit below what the arbiters, a run's journal, lock and metadata, its
//! tool pipes and the model connection need used to panic while creating an arbiter. The
//! soft limit is raised toward the hard one when that is enough (as `delta bench` does);
//! otherwise the command stops with "too many open files (limit N; need about M)" and a hint.
//! Also words an EMFILE/ENFILE met later, at run time, the same way.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

use crate::error::CliError;

/// Descriptors of the process itself: stdio, logging, the supervisor's runtime, a run's
/// journal, lock and metadata, a tool's three pipes, the model connection, with headroom
/// (one run of the hello-world example needs 28 on a 2-core machine).
const BASE_OPEN_FILES: u64 = 32;
/// Each arbiter is a thread with its own runtime (event poll, waker, timers).
const PER_ARBITER: u64 = 4;
/// A waiting run holds 5–6 descriptors (DESIGN §7); a running tool adds its pipes.
const PER_PARALLEL_RUN: u64 = 8;

/// About how many descriptors an engine with `arbiters` threads driving `parallel` runs at
/// once needs.
pub fn open_files_needed(arbiters: usize, parallel: usize) -> u64 {
    BASE_OPEN_FILES
        .saturating_add(PER_ARBITER.saturating_mul(arbiters as u64))
        .saturating_add(PER_PARALLEL_RUN.saturating_mul(parallel as u64))
}

/// The hint every open-files error ends with.
fn raise_hint(needed: u64) -> String {
    format!(
        "hint: raise the limit for this shell with `ulimit -n {needed}` (the hard limit may \
         need `nofile` in /etc/security/limits.conf), or close what holds descriptors open"
    )
}

/// Makes sure the soft open-files limit is at least `needed`, raising it up to the hard
/// limit when that suffices. Exit 126 (the environment cannot run the command) otherwise.
pub fn ensure_open_files(needed: u64) -> Result<(), CliError> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| {
        CliError::Runtime(format!(
            "cannot read the open-files limit (RLIMIT_NOFILE): {e}"
        ))
    })?;
    if soft >= needed {
        return Ok(());
    }
    if hard >= needed && setrlimit(Resource::RLIMIT_NOFILE, needed, hard).is_ok() {
        tracing::info!(soft, needed, "raised the soft open-files limit");
        return Ok(());
    }
    Err(CliError::Config(format!(
        "too many open files (limit {soft}; need about {needed}): the open-files limit \
         (RLIMIT_NOFILE, hard limit {hard}) is too low for the engine to start; {}",
        raise_hint(needed)
    )))
}

/// For a batch whose parallelism is the user's choice: raises the soft limit toward `needed`
/// as far as the hard limit allows, and returns a warning (limit, need, a parallelism that
/// fits) when it stays below. Not an error: waiting runs often hold fewer descriptors than
/// the estimate, and a run that does hit the limit reports it with its own clear error.
pub fn raise_open_files_for(arbiters: usize, parallel: usize) -> Option<String> {
    let needed = open_files_needed(arbiters, parallel);
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= needed {
        return None;
    }
    let target = needed.min(hard);
    let soft = if setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        target
    } else {
        soft
    };
    if soft >= needed {
        return None;
    }
    let fits = soft
        .saturating_sub(open_files_needed(arbiters, 0))
        .checked_div(PER_PARALLEL_RUN)
        .unwrap_or(0)
        .max(1);
    Some(format!(
        "warning: {parallel} runs in flight may need about {needed} open files, but the limit \
         is {soft} (hard limit {hard}); runs may fail with \"too many open files\". Lower \
         --max-parallel to about {fits}, or raise the limit (`ulimit -n {needed}`; the hard \
         limit may need `nofile` in /etc/security/limits.conf)"
    ))
}

/// For an error met while working: when `message` reports EMFILE/ENFILE ("Too many open
/// files", os error 24/23), the current limit and how to raise it.
pub fn explain_open_files(message: &str, needed: u64) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    if lower.starts_with("too many open files (limit") {
        // Already worded by `ensure_open_files`.
        return None;
    }
    if !(lower.contains("too many open files")
        || lower.contains("os error 24")
        || lower.contains("os error 23"))
    {
        return None;
    }
    let limit = getrlimit(Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft.to_string())
        .unwrap_or_else(|_| "unknown".to_string());
    Some(format!(
        "too many open files (limit {limit}; need about {needed}); {}",
        raise_hint(needed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_grow_with_arbiters_and_runs_and_never_overflow() {
        assert_eq!(open_files_needed(1, 1), 32 + 4 + 8);
        assert!(open_files_needed(8, 100) > open_files_needed(1, 1));
        assert_eq!(open_files_needed(usize::MAX, usize::MAX), u64::MAX);
    }

    #[test]
    fn emfile_messages_are_explained_others_are_not() {
        let explained =
            explain_open_files("cannot create x: Too many open files (os error 24)", 76);
        let explained = explained.unwrap_or_default();
        assert!(
            explained.starts_with("too many open files (limit "),
            "{explained}"
        );
        assert!(explained.contains("need about 76") && explained.contains("ulimit -n 76"));
        assert_eq!(explain_open_files("No such file or directory", 76), None);
    }

    #[test]
    fn a_satisfied_limit_is_left_alone() {
        assert_eq!(ensure_open_files(1).map_err(|e| e.to_string()), Ok(()));
    }
}
