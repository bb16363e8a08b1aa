//! Run ownership: the advisory lock on `<run_dir>/lock` (flock, exclusive, non-blocking)
//! and this process's identity as recorded in metadata.
//!
//! The lock is the primary liveness signal: the kernel drops it when the owning process
//! dies, and its descriptor is close-on-exec so tool processes never inherit it. Judging a
//! run from the lock is `liveness`'s job; this file never reads or changes metadata.
//!
//! One descriptor per run: a run created by this version has `lock` as a second name (hard
//! link) of its `journal.jsonl`, so the flock on the journal's own descriptor *is* the run
//! lock ([`RunLock::on_new_journal`]), and `continue` appends through the descriptor it
//! locked ([`RunLock::shares_file_with`]). Whoever opens `lock` — an older version, the
//! janitor, `list-runs` — locks or probes that same inode, so the rule "the run is owned
//! while someone holds the flock on `<run_dir>/lock`" is unchanged. Runs locked by older
//! versions keep a separate `lock` file; they are locked through it as before (two
//! descriptors for such a run). flock, not an fcntl/OFD lock: older versions flock `lock`,
//! and on Linux flock and fcntl locks do not see each other.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::MetadataError;
use crate::bounded_read::{self, Links};

/// File name of the lock inside a run directory.
pub const LOCK_FILE: &str = "lock";

/// The run's journal, the lock's one other name (see the file header).
const JOURNAL_NAME: &str = "journal.jsonl";

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
/// the same process — sees the lock as held. The descriptor may be shared with the run's
/// journal (see the file header); dropping the lock unlocks it explicitly either way.
#[derive(Debug)]
pub struct RunLock {
    file: Arc<File>,
    path: PathBuf,
}

/// `flock(2)` on `file` without waiting; `Ok(false)` when another description holds it.
fn flock_nonblocking(file: &File, operation: libc::c_int) -> io::Result<bool> {
    // SAFETY: flock only reads the descriptor number, which `file` keeps open.
    let rc = unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    match Errno::last() {
        Errno::EWOULDBLOCK => Ok(false),
        errno => Err(io::Error::from(errno)),
    }
}

impl RunLock {
    /// Takes the lock without waiting: `Ok(None)` when someone else holds it.
    pub fn try_acquire(run_dir: &Path) -> Result<Option<RunLock>, MetadataError> {
        let path = run_dir.join(LOCK_FILE);
        let mut options = OpenOptions::new();
        options
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600);
        // Not through a link, and only a regular file: `continue` reads and appends the
        // journal through this descriptor.
        let file = bounded_read::open_with(&path, &options, Links::Refuse)
            .map_err(|e| MetadataError::io("open lock file", &path, e.into()))?;
        // Nor a second name of another file: its one other name may be the run's journal.
        crate::private_file::refuse_other_names(&file, Some(&run_dir.join(JOURNAL_NAME)))
            .map_err(|e| MetadataError::io("open lock file", &path, e))?;
        match flock_nonblocking(&file, libc::LOCK_EX) {
            Ok(true) => Ok(Some(RunLock {
                file: Arc::new(file),
                path,
            })),
            Ok(false) => Ok(None),
            Err(e) => Err(MetadataError::io("lock", &path, e)),
        }
    }

    /// Locks a run through the descriptor of its freshly created journal and gives the run
    /// its `lock` name as a hard link to that journal, so the run holds one descriptor for
    /// both. `Ok(None)` when `lock` already exists (another process got to the new run
    /// folder first: an older version creates a plain `lock` file) or is held; the caller
    /// then takes the lock the old way, with [`RunLock::try_acquire`].
    pub fn on_new_journal(
        run_dir: &Path,
        journal_path: &Path,
        journal: Arc<File>,
    ) -> Result<Option<RunLock>, MetadataError> {
        let path = run_dir.join(LOCK_FILE);
        match flock_nonblocking(&journal, libc::LOCK_EX) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => return Err(MetadataError::io("lock", journal_path, e)),
        }
        let lock = RunLock {
            file: journal,
            path,
        };
        match std::fs::hard_link(journal_path, &lock.path) {
            Ok(()) => Ok(Some(lock)),
            // Dropping `lock` unlocks the journal again.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(MetadataError::io("link lock file", &lock.path, e)),
        }
    }

    /// Locks a run folder that has no metadata yet, so it can be removed: a process killed
    /// while creating a run leaves one. A run being created right now holds the flock on its
    /// journal from just after creating it, before its `lock` name links to that journal, so
    /// the journal is locked first; then `lock` (an older version's separate file), unless it
    /// is the journal itself. `Ok(None)` when either is held.
    pub(crate) fn try_acquire_unstarted(
        run_dir: &Path,
        journal_path: &Path,
    ) -> Result<Option<UnstartedRunLock>, MetadataError> {
        let journal = match bounded_read::open(journal_path, Links::Refuse).map_err(io::Error::from)
        {
            Ok(file) => match flock_nonblocking(&file, libc::LOCK_EX) {
                Ok(true) => Some(file),
                Ok(false) => return Ok(None),
                Err(e) => return Err(MetadataError::io("lock", journal_path, e)),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(MetadataError::io("open", journal_path, e)),
        };
        let lock_path = run_dir.join(LOCK_FILE);
        let lock_is_the_journal = match (&journal, std::fs::metadata(&lock_path)) {
            (Some(journal), Ok(lock)) => journal
                .metadata()
                .is_ok_and(|j| j.dev() == lock.dev() && j.ino() == lock.ino()),
            _ => false,
        };
        let lock = if lock_is_the_journal {
            None
        } else {
            match RunLock::try_acquire(run_dir)? {
                Some(lock) => Some(lock),
                None => return Ok(None),
            }
        };
        Ok(Some(UnstartedRunLock {
            _journal: journal,
            _lock: lock,
        }))
    }

    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The locked descriptor when it is also `path`'s file (the run's `lock` is a link to
    /// its journal): the journal appends through it instead of opening a second descriptor.
    /// `None` for a run locked by an older version (a separate `lock` file) or when `path`
    /// cannot be read.
    pub fn shares_file_with(&self, path: &Path) -> Option<Arc<File>> {
        let locked = self.file.metadata().ok()?;
        // The name itself, not what it links to: a journal replaced by a link to this very
        // file is not the run's journal any more (the open refuses it by name).
        let other = std::fs::symlink_metadata(path).ok()?;
        (locked.dev() == other.dev() && locked.ino() == other.ino()).then(|| self.file.clone())
    }
}

/// Held while an unstarted run's folder is removed ([`RunLock::try_acquire_unstarted`]);
/// dropping it releases both locks.
pub(crate) struct UnstartedRunLock {
    _journal: Option<File>,
    _lock: Option<RunLock>,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // The journal may keep this descriptor open after the lock is released.
        let _ = flock_nonblocking(&self.file, libc::LOCK_UN);
    }
}

/// Whether some open file description holds the run's lock (probe; nothing is kept, and a
/// missing lock file means nobody holds it).
pub fn lock_is_held(run_dir: &Path) -> Result<bool, MetadataError> {
    let path = run_dir.join(LOCK_FILE);
    let file = match bounded_read::open(&path, Links::Refuse) {
        Ok(file) => file,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(MetadataError::io("open lock file", &path, e.into())),
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

    /// One descriptor per run: a new run's lock is the flock on its journal's descriptor,
    /// and `lock` names the journal's inode, so a process that opens `lock` the way older
    /// versions do (read-write, create, flock) is refused while the run is owned.
    #[test]
    fn a_new_run_is_locked_through_its_journal_descriptor() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let journal_path = tmp.path().join("journal.jsonl");
        let journal = Arc::new(File::create(&journal_path).unwrap());
        let lock = RunLock::on_new_journal(tmp.path(), &journal_path, journal.clone())
            .unwrap()
            .expect("a fresh folder");
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&tmp.path().join(LOCK_FILE)), ino(&journal_path));
        assert!(lock_is_held(tmp.path()).unwrap());
        assert!(RunLock::try_acquire(tmp.path()).unwrap().is_none());
        let shared = lock.shares_file_with(&journal_path).expect("same inode");
        assert!(Arc::ptr_eq(&shared, &journal));
        drop(shared);
        // The journal keeps its descriptor open after the run lets go of the lock.
        drop(lock);
        assert!(!lock_is_held(tmp.path()).unwrap());
        let again = RunLock::try_acquire(tmp.path()).unwrap().expect("released");
        assert!(again.shares_file_with(&journal_path).is_some());
        drop(journal);
    }

    /// A `lock` file that exists before the journal is linked (an older version created it
    /// in the same folder) is not replaced: the caller falls back to locking that file.
    #[test]
    fn an_existing_lock_file_is_left_to_the_old_way() {
        let tmp = tempfile::tempdir().unwrap();
        let journal_path = tmp.path().join("journal.jsonl");
        let journal = Arc::new(File::create(&journal_path).unwrap());
        std::fs::write(tmp.path().join(LOCK_FILE), "").unwrap();
        assert!(
            RunLock::on_new_journal(tmp.path(), &journal_path, journal.clone())
                .unwrap()
                .is_none()
        );
        let lock = RunLock::try_acquire(tmp.path()).unwrap().unwrap();
        assert!(lock.shares_file_with(&journal_path).is_none());
        // The journal itself was left unlocked.
        assert!(flock_nonblocking(&File::open(&journal_path).unwrap(), libc::LOCK_EX).unwrap());
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
        let fd = lock.file.as_raw_fd();
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
