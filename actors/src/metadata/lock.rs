//! Run ownership: the advisory lock on `<run_dir>/lock` (flock, exclusive, non-blocking)
//! and this process's identity as recorded in metadata.
//!
//! The lock is the primary liveness signal: the kernel drops it when the owning process
//! dies, and its descriptor is close-on-exec so tool processes never inherit it. Judging a
//! run from the lock is `liveness`'s job; this file never reads or changes metadata.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::MetadataError;

/// File name of the lock inside a run directory.
pub const LOCK_FILE: &str = "lock";

/// Who this process is, as recorded in metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// This process's id.
    pub pid: u32,
    /// This host's name (`localhost` when it cannot be read).
    pub hostname: String,
    /// The executable's file name (`delta` when it cannot be read).
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
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

    /// Tool processes are spawned while a run holds its lock. If one inherited the lock's
    /// descriptor, an orphaned tool would keep a crashed run looking alive forever.
    #[test]
    fn owner_crash_releases_the_lock_even_with_live_children() {
        use std::os::fd::AsRawFd;
        let tmp = tempfile::tempdir().unwrap();
        let lock = RunLock::try_acquire(tmp.path()).unwrap().unwrap();
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"ready\n").unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n", "cat has exec'd");
        // A crash closes our descriptor without the unlock that Drop would do.
        let fd = lock._lock.as_raw_fd();
        std::mem::forget(lock);
        nix::unistd::close(fd).unwrap();
        let held_after_crash = lock_is_held(tmp.path()).unwrap();
        drop(stdin);
        child.wait().unwrap();
        assert!(
            !held_after_crash,
            "the child process inherited the run lock"
        );
    }
}
