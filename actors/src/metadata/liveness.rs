//! The janitor's decision for a run whose metadata says RUNNING (spec §2.1.5, with the lock
//! as primary signal): [`assess_liveness`] (read-only) and [`try_take_over`] (race-free: it
//! takes the lock itself).
//!
//! pid/hostname only word the reason for humans and refuse touching a run started on
//! another host without `force`; a reused pid can never make a dead run look alive. Runs
//! that were never locked (the original engine does not lock) fall back to the original's
//! pid + process-name heuristic. This file never changes a run's status.

use std::path::Path;

use nix::errno::Errno;

use super::lock::{lock_is_held, RunLock, LOCK_FILE};
use super::{MetadataError, RunMetadata};

/// The janitor's view of a run whose metadata says RUNNING.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The lock is held: a live process owns the run; leave it alone.
    Alive {
        /// The owner's pid, as metadata.json records it.
        pid: u32,
        /// The owner's host, as metadata.json records it.
        hostname: String,
    },
    /// Nobody holds the lock: safe to mark INTERRUPTED.
    Orphaned {
        /// Why, for humans: the lock's state and what became of the recorded pid.
        reason: String,
    },
    /// Started on another host and no `force`: this host cannot judge.
    OtherHost {
        /// The host metadata.json names.
        hostname: String,
    },
}

/// Decides whether a RUNNING run is still owned: lock held → [`Liveness::Alive`]; lock free
/// and started on another host without `force` → [`Liveness::OtherHost`]; otherwise
/// [`Liveness::Orphaned`] with a reason naming the lock, pid and host.
///
/// A run with no lock file at all was never locked (the original engine does not lock);
/// for those the original's heuristic applies: a live pid on this host whose process name
/// matches the recorded one (or `node`/`delta`) means alive.
pub fn assess_liveness(
    run_dir: &Path,
    meta: &RunMetadata,
    this_host: &str,
    force: bool,
) -> Result<Liveness, MetadataError> {
    if lock_is_held(run_dir)? {
        return Ok(Liveness::Alive {
            pid: meta.pid,
            hostname: meta.hostname.clone(),
        });
    }
    let never_locked = !run_dir.join(LOCK_FILE).exists();
    Ok(judge_unlocked(
        run_dir,
        meta,
        this_host,
        force,
        never_locked,
    ))
}

/// The verdict for a run whose lock is free (or missing, when `never_locked`).
fn judge_unlocked(
    run_dir: &Path,
    meta: &RunMetadata,
    this_host: &str,
    force: bool,
    never_locked: bool,
) -> Liveness {
    let lock_path = run_dir.join(LOCK_FILE);
    let lock_state = if never_locked {
        format!("no lock file at {}", lock_path.display())
    } else {
        format!("lock on {} is free", lock_path.display())
    };
    if meta.hostname != this_host {
        if !force {
            return Liveness::OtherHost {
                hostname: meta.hostname.clone(),
            };
        }
        return Liveness::Orphaned {
            reason: format!(
                "{lock_state}; run was started by process {} on host '{}', which cannot be \
                 checked from '{this_host}' (--force given)",
                meta.pid, meta.hostname
            ),
        };
    }
    match probe_process(meta.pid) {
        ProcessState::Running { name } if never_locked && looks_like_owner(meta, &name) => {
            Liveness::Alive {
                pid: meta.pid,
                hostname: meta.hostname.clone(),
            }
        }
        state => Liveness::Orphaned {
            reason: format!("{lock_state}; {}", state.describe(meta.pid)),
        },
    }
}

/// Whether a live, unlocked process is plausibly the run's engine (`comm` is cut at 15
/// bytes, hence the prefix test; an unreadable name counts as a match, to stay safe).
fn looks_like_owner(meta: &RunMetadata, name: &Option<String>) -> bool {
    let Some(name) = name else {
        return true;
    };
    name.contains("node")
        || name.contains("delta")
        || (!name.is_empty() && meta.process_name.starts_with(name.as_str()))
}

/// Outcome of [`try_take_over`].
#[derive(Debug)]
pub(crate) enum Takeover {
    /// The lock was free and is now held by the caller; the previous owner is gone.
    /// `reason` says why the run was ownerless (for the INTERRUPTED journal event).
    Acquired {
        /// The run's lock, now the caller's.
        lock: RunLock,
        /// Why the run was ownerless.
        reason: String,
    },
    /// Another live owner holds the lock (or, for a never-locked run, is still running).
    Alive {
        /// The owner's pid, as recorded.
        pid: u32,
        /// The owner's host, as recorded.
        hostname: String,
    },
    /// Started on another host and no `force`; the lock was not kept.
    OtherHost {
        /// The host metadata.json names.
        hostname: String,
    },
}

/// Race-free form of [`assess_liveness`] for the janitor and `continue --force`: instead
/// of probing and then acting (a concurrent `continue` could claim the run in between), it
/// takes the lock itself. On [`Takeover::Acquired`] the caller owns the run and may write
/// INTERRUPTED (or RUNNING) knowing nobody else can. Otherwise the lock is not kept.
pub(crate) fn try_take_over(
    run_dir: &Path,
    meta: &RunMetadata,
    this_host: &str,
    force: bool,
) -> Result<Takeover, MetadataError> {
    let never_locked = !run_dir.join(LOCK_FILE).exists();
    let Some(lock) = RunLock::try_acquire(run_dir)? else {
        return Ok(Takeover::Alive {
            pid: meta.pid,
            hostname: meta.hostname.clone(),
        });
    };
    let verdict = judge_unlocked(run_dir, meta, this_host, force, never_locked);
    if never_locked && !matches!(verdict, Liveness::Orphaned { .. }) {
        // Leave a never-locked run as we found it: a lock file left behind would make the
        // next check judge it by the lock alone and call the live owner orphaned. Removed
        // while we still hold the lock, so nobody else can be holding this file.
        let _ = std::fs::remove_file(run_dir.join(LOCK_FILE));
    }
    Ok(match verdict {
        Liveness::Orphaned { reason } => Takeover::Acquired { lock, reason },
        Liveness::Alive { pid, hostname } => Takeover::Alive { pid, hostname },
        Liveness::OtherHost { hostname } => Takeover::OtherHost { hostname },
    })
}

/// What `kill(pid, 0)` (and `/proc/<pid>/comm`) say about a recorded pid.
enum ProcessState {
    NotRecorded,
    Gone,
    Running { name: Option<String> },
    Unknown(Errno),
}

fn probe_process(pid: u32) -> ProcessState {
    let Some(raw) = i32::try_from(pid).ok().filter(|p| *p > 0) else {
        return ProcessState::NotRecorded;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Err(Errno::ESRCH) => ProcessState::Gone,
        Ok(()) | Err(Errno::EPERM) => ProcessState::Running {
            name: std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|n| n.trim().to_string()),
        },
        Err(errno) => ProcessState::Unknown(errno),
    }
}

impl ProcessState {
    fn describe(&self, pid: u32) -> String {
        match self {
            ProcessState::NotRecorded => "no owning process was recorded".to_string(),
            ProcessState::Gone => format!("process {pid} no longer exists"),
            ProcessState::Running { name } => format!(
                "process {pid}{} exists but does not hold the lock (pid reused, or an engine \
                 that does not lock)",
                name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
            ),
            ProcessState::Unknown(errno) => format!("process {pid} could not be checked ({errno})"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::metadata::current_process_identity;
    use crate::metadata::tests::sample;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    #[test]
    fn held_lock_means_alive_even_on_another_host() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = sample("r");
        let _lock = RunLock::try_acquire(tmp.path()).unwrap().unwrap();
        let verdict = assess_liveness(tmp.path(), &meta, "some-other-host", false).unwrap();
        assert_eq!(
            verdict,
            Liveness::Alive {
                pid: meta.pid,
                hostname: meta.hostname.clone()
            }
        );
    }

    #[test]
    fn free_lock_on_another_host_needs_force() {
        let tmp = tempfile::tempdir().unwrap();
        let mut meta = sample("r");
        meta.hostname = "host-a".into();
        assert_eq!(
            assess_liveness(tmp.path(), &meta, "host-b", false).unwrap(),
            Liveness::OtherHost {
                hostname: "host-a".into()
            }
        );
        let Liveness::Orphaned { reason } =
            assess_liveness(tmp.path(), &meta, "host-b", true).unwrap()
        else {
            panic!("expected Orphaned");
        };
        assert!(
            reason.contains("host-a") && reason.contains("--force"),
            "{reason}"
        );
    }

    #[test]
    fn free_lock_with_live_pid_is_orphaned_as_pid_reuse() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = sample("r"); // our own pid: alive, but we hold no lock
        drop(RunLock::try_acquire(tmp.path()).unwrap());
        let Liveness::Orphaned { reason } =
            assess_liveness(tmp.path(), &meta, &meta.hostname, false).unwrap()
        else {
            panic!("expected Orphaned");
        };
        assert!(reason.contains("is free"), "{reason}");
        assert!(reason.contains("does not hold the lock"), "{reason}");
    }

    /// A child process takes the lock (python's flock), so liveness follows the child's
    /// life: alive while it holds the lock, orphaned with "no longer exists" once reaped.
    #[test]
    fn lock_held_by_a_child_process_dies_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        let lock_path = tmp.path().join(LOCK_FILE);
        let script = "import fcntl, sys\n\
                      f = open(sys.argv[1], 'a')\n\
                      fcntl.flock(f, fcntl.LOCK_EX)\n\
                      print('locked', flush=True)\n\
                      sys.stdin.read()\n";
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&lock_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed by the test suite");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");

        let mut meta = sample("r");
        meta.pid = child.id();
        assert!(lock_is_held(tmp.path()).unwrap());
        assert!(RunLock::try_acquire(tmp.path()).unwrap().is_none());
        assert_eq!(
            assess_liveness(tmp.path(), &meta, &meta.hostname, false).unwrap(),
            Liveness::Alive {
                pid: child.id(),
                hostname: meta.hostname.clone()
            }
        );

        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"bye").unwrap();
        drop(stdin);
        assert!(child.wait().unwrap().success());

        assert!(!lock_is_held(tmp.path()).unwrap());
        let Liveness::Orphaned { reason } =
            assess_liveness(tmp.path(), &meta, &meta.hostname, false).unwrap()
        else {
            panic!("expected Orphaned");
        };
        assert!(
            reason.contains(&format!("process {} no longer exists", child.id())),
            "{reason}"
        );
        assert!(
            reason.contains(&lock_path.display().to_string()),
            "{reason}"
        );
        assert!(RunLock::try_acquire(tmp.path()).unwrap().is_some());
    }

    #[test]
    fn take_over_holds_the_lock_or_reports_the_owner() {
        let tmp = tempfile::tempdir().unwrap();
        let mut meta = sample("r");
        drop(RunLock::try_acquire(tmp.path()).unwrap());
        let Takeover::Acquired { lock, reason } =
            try_take_over(tmp.path(), &meta, &meta.hostname, false).unwrap()
        else {
            panic!("expected Acquired");
        };
        assert!(reason.contains("is free"), "{reason}");
        assert!(lock_is_held(tmp.path()).unwrap());
        assert!(matches!(
            try_take_over(tmp.path(), &meta, &meta.hostname, false).unwrap(),
            Takeover::Alive { .. }
        ));
        drop(lock);

        meta.hostname = "host-a".into();
        assert!(matches!(
            try_take_over(tmp.path(), &meta, "host-b", false).unwrap(),
            Takeover::OtherHost { ref hostname } if hostname == "host-a"
        ));
        assert!(
            !lock_is_held(tmp.path()).unwrap(),
            "OtherHost must not keep the lock"
        );
        let Takeover::Acquired { reason, .. } =
            try_take_over(tmp.path(), &meta, "host-b", true).unwrap()
        else {
            panic!("expected Acquired with --force");
        };
        assert!(reason.contains("--force"), "{reason}");
    }

    #[test]
    fn unrecorded_pid_is_worded() {
        assert_eq!(
            probe_process(0).describe(0),
            "no owning process was recorded"
        );
    }

    /// Runs of the original engine never have a lock file: a live pid whose name matches
    /// keeps them alive, a different program on that pid does not.
    #[test]
    fn never_locked_runs_fall_back_to_pid_and_name() {
        let tmp = tempfile::tempdir().unwrap();
        let me = current_process_identity();
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // An echo through cat proves the exec happened (the name is "cat" from then on).
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"ready\n").unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        let mut meta = sample("r");
        meta.pid = child.id();
        meta.process_name = "cat".into();
        let alive = assess_liveness(tmp.path(), &meta, &me.hostname, false).unwrap();
        let take_over = try_take_over(tmp.path(), &meta, &me.hostname, false).unwrap();
        let lock_kept = lock_is_held(tmp.path()).unwrap();
        let lock_file_left = tmp.path().join(LOCK_FILE).exists();
        meta.process_name = "postgres".into();
        let other_program = assess_liveness(tmp.path(), &meta, &me.hostname, false).unwrap();
        drop(stdin);
        child.wait().unwrap();

        assert!(matches!(alive, Liveness::Alive { .. }), "{alive:?}");
        assert!(matches!(take_over, Takeover::Alive { .. }), "{take_over:?}");
        assert!(!lock_kept);
        assert!(!lock_file_left, "a never-locked run stays never-locked");
        let Liveness::Orphaned { reason } = other_program else {
            panic!("a different program on the pid is not the owner: {other_program:?}");
        };
        assert!(
            reason.contains("no lock file") && reason.contains("(cat)"),
            "{reason}"
        );
    }
}
