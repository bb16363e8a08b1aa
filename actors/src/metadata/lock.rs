//! Run ownership: the advisory lock on `<run_dir>/lock` (flock, exclusive, non-blocking),
//! this process's identity, and the janitor's liveness decision for a RUNNING run.
//!
//! The lock is the primary signal: the kernel drops it when the owning process dies, so a
//! reused pid can never make a dead run look alive (spec §2.1.5 relied on pid + process
//! name). pid/hostname are only used to word the reason for humans and to refuse touching a
//! run started on another host without `--force`. This file never changes a run's status.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::{MetadataError, RunMetadata};

/// File name of the lock inside a run directory.
pub const LOCK_FILE: &str = "lock";

/// Who this process is, as recorded in metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub hostname: String,
    pub process_name: String,
    /// Milliseconds since the Unix epoch; taken the first time the identity is asked for
    /// in this process (the engine asks at start-up), then stable.
    pub start_time_unix: u64,
}

/// This process's identity (pid, hostname, executable name, start time). Computed once
/// per process and then cloned: thousands of runs ask for it.
pub fn current_process_identity() -> ProcessIdentity {
    static IDENTITY: OnceLock<ProcessIdentity> = OnceLock::new();
    IDENTITY
        .get_or_init(|| ProcessIdentity {
            pid: std::process::id(),
            hostname: this_hostname(),
            process_name: std::env::current_exe()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "delta".to_string()),
            start_time_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
        })
        .clone()
}

fn this_hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// The exclusive lock on `<run_dir>/lock`; the run is owned while this value lives.
/// flock locks belong to an open file description, so a second `try_acquire` — even in
/// the same process — sees the lock as held.
#[derive(Debug)]
pub struct RunLock {
    _lock: Flock<File>,
    path: PathBuf,
}

impl RunLock {
    /// Takes the lock without waiting: `Ok(None)` when someone else holds it.
    pub fn try_acquire(run_dir: &Path) -> Result<Option<RunLock>, MetadataError> {
        let path = run_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| MetadataError::io("open lock file", &path, e))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(RunLock { _lock: lock, path })),
            Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(MetadataError::io("lock", &path, io::Error::from(errno))),
        }
    }

    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Whether some open file description holds the run's lock (probe; nothing is kept, and a
/// missing lock file means nobody holds it).
pub fn lock_is_held(run_dir: &Path) -> Result<bool, MetadataError> {
    let path = run_dir.join(LOCK_FILE);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(MetadataError::io("open lock file", &path, e)),
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_probe) => Ok(false),
        Err((_, Errno::EWOULDBLOCK)) => Ok(true),
        Err((_, errno)) => Err(MetadataError::io(
            "probe lock",
            &path,
            io::Error::from(errno),
        )),
    }
}

/// The janitor's view of a run whose metadata says RUNNING.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The lock is held: a live process owns the run; leave it alone.
    Alive { pid: u32, hostname: String },
    /// Nobody holds the lock: safe to mark INTERRUPTED. `reason` is for humans.
    Orphaned { reason: String },
    /// Started on another host and no `force`: this host cannot judge.
    OtherHost { hostname: String },
}

/// Decides whether a RUNNING run is still owned: lock held → [`Liveness::Alive`]; lock free
/// and started on another host without `force` → [`Liveness::OtherHost`]; otherwise
/// [`Liveness::Orphaned`] with a reason naming the lock, pid and host.
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
    let lock_path = run_dir.join(LOCK_FILE);
    let lock_free = format!("lock on {} is free", lock_path.display());
    if meta.hostname != this_host {
        if !force {
            return Ok(Liveness::OtherHost {
                hostname: meta.hostname.clone(),
            });
        }
        return Ok(Liveness::Orphaned {
            reason: format!(
                "{lock_free}; run was started by process {} on host '{}', which cannot be \
                 checked from '{this_host}' (--force given)",
                meta.pid, meta.hostname
            ),
        });
    }
    let process = describe_process(meta.pid);
    Ok(Liveness::Orphaned {
        reason: format!("{lock_free}; {process}"),
    })
}

/// Outcome of [`try_take_over`].
#[derive(Debug)]
pub enum Takeover {
    /// The lock was free and is now held by the caller; the previous owner is gone.
    /// `reason` says why the run was ownerless (for the INTERRUPTED journal event).
    Acquired { lock: RunLock, reason: String },
    /// Another live owner holds the lock.
    Alive { pid: u32, hostname: String },
    /// Started on another host and no `force`; the lock was not kept.
    OtherHost { hostname: String },
}

/// Race-free form of [`assess_liveness`] for the janitor and `continue --force`: instead
/// of probing and then acting (a concurrent `continue` could claim the run in between), it
/// takes the lock itself. On [`Takeover::Acquired`] the caller owns the run and may write
/// INTERRUPTED (or RUNNING) knowing nobody else can.
pub fn try_take_over(
    run_dir: &Path,
    meta: &RunMetadata,
    this_host: &str,
    force: bool,
) -> Result<Takeover, MetadataError> {
    let Some(lock) = RunLock::try_acquire(run_dir)? else {
        return Ok(Takeover::Alive {
            pid: meta.pid,
            hostname: meta.hostname.clone(),
        });
    };
    let lock_free = format!("lock on {} was free", lock.path().display());
    if meta.hostname != this_host {
        if !force {
            return Ok(Takeover::OtherHost {
                hostname: meta.hostname.clone(),
            });
        }
        let reason = format!(
            "{lock_free}; run was started by process {} on host '{}', which cannot be checked \
             from '{this_host}' (--force given)",
            meta.pid, meta.hostname
        );
        return Ok(Takeover::Acquired { lock, reason });
    }
    let reason = format!("{lock_free}; {}", describe_process(meta.pid));
    Ok(Takeover::Acquired { lock, reason })
}

/// Words what `kill(pid, 0)` says about the recorded pid.
fn describe_process(pid: u32) -> String {
    let Some(raw) = i32::try_from(pid).ok().filter(|p| *p > 0) else {
        return "no owning process was recorded".to_string();
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Err(Errno::ESRCH) => format!("process {pid} no longer exists"),
        Ok(()) | Err(Errno::EPERM) => format!(
            "process {pid} exists but does not hold the lock (pid reused, or an engine that \
             does not lock)"
        ),
        Err(errno) => format!("process {pid} could not be checked ({errno})"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::metadata::tests::sample;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    #[test]
    fn second_acquire_in_the_same_process_sees_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(!lock_is_held(tmp.path()).unwrap());
        let lock = RunLock::try_acquire(tmp.path())
            .unwrap()
            .expect("free lock");
        assert_eq!(lock.path(), tmp.path().join("lock"));
        assert!(RunLock::try_acquire(tmp.path()).unwrap().is_none());
        assert!(lock_is_held(tmp.path()).unwrap());
        drop(lock);
        assert!(!lock_is_held(tmp.path()).unwrap());
        assert!(RunLock::try_acquire(tmp.path()).unwrap().is_some());
    }

    #[test]
    fn probing_does_not_steal_or_keep_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        for _ in 0..3 {
            assert!(!lock_is_held(tmp.path()).unwrap());
        }
        let _held = RunLock::try_acquire(tmp.path()).unwrap().unwrap();
        for _ in 0..3 {
            assert!(lock_is_held(tmp.path()).unwrap());
        }
    }

    #[test]
    fn missing_run_dir_is_an_error_naming_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let err = RunLock::try_acquire(&tmp.path().join("nope")).unwrap_err();
        assert!(err.to_string().contains("nope/lock"), "{err}");
    }

    #[test]
    fn identity_is_stable_within_a_process() {
        let a = current_process_identity();
        let b = current_process_identity();
        assert_eq!(a, b);
        assert_eq!(a.pid, std::process::id());
        assert!(!a.process_name.is_empty());
    }

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
        let Takeover::Acquired { lock, reason } =
            try_take_over(tmp.path(), &meta, &meta.hostname, false).unwrap()
        else {
            panic!("expected Acquired");
        };
        assert!(reason.contains("was free"), "{reason}");
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
        assert_eq!(describe_process(0), "no owning process was recorded");
    }
}
