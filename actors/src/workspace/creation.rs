//! workspace::creation — the workspace's creation lock, `.delta/.creating.lock`: every new
//! run is created holding it shared, from the `mkdir` of its folder until its journal is
//! locked; a run folder without metadata (what a creator killed half-way leaves) is judged
//! and removed holding it exclusive.
//!
//! Why: between a creator's `mkdir` and the flock on its new journal there is an instant in
//! which its folder looks exactly like a killed creation's leftover. A second process given
//! the same run id at that instant removed the folder being created (both then failed). With
//! this lock the judge waits until no creation is half-way, without any timing rule; creators
//! share the lock, so thousands of runs starting at once never wait for each other.
//!
//! The wait is bounded and never silent ([`LockWait`]): any process of the user can take the
//! lock (a tool's daemon, by mistake or on purpose) and keep it, and a blocking `flock` then
//! hung every new run of the workspace, deaf to Ctrl-C. The lock is polled without blocking;
//! after a second the waiter is told which file it waits for and which process holds it
//! (from `/proc/locks`), a stop request ends the wait at once, and past the limit the run is
//! refused naming both.
//!
//! Must not: be held across anything slower than a few file-system calls, or be taken by
//! anything but run creation and the reclaim of unstarted run folders.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{control_dir, ensure_control_dir, WorkspaceError};

/// The lock's file name inside `.delta/` (a file, so run listings skip it; a dot name, so it
/// can never be a run id).
pub const CREATION_LOCK_FILE: &str = ".creating.lock";

/// How long a new run waits for the creation lock when its caller does not say: creators
/// hold it for a few file-system calls, so only a stuck or hostile holder keeps it longer.
pub const DEFAULT_CREATION_LOCK_WAIT: Duration = Duration::from_secs(30);

/// How long a wait lasts before the waiter is told who it waits for.
pub const SLOW_LOCK_NOTICE: Duration = Duration::from_secs(1);

/// The longest pause between two tries: also how late a stop request is seen.
const MAX_POLL_PAUSE: Duration = Duration::from_millis(50);

/// The most of `/proc/locks` read to name a holder (one line per lock on the machine).
const MAX_PROC_LOCKS_BYTES: u64 = 16 * 1024 * 1024;

/// Who is told, once, that the wait is slow (the line says which file and who holds it).
type SlowNotice = Box<dyn FnMut(&str) + Send>;

/// Asked between tries whether the wait should end now (Ctrl-C).
type StopAsked = Box<dyn Fn() -> bool + Send>;

/// How a wait for the creation lock goes: its limit, who is told when it is slow, and what
/// ends it early.
pub struct LockWait {
    limit: Duration,
    notice_after: Duration,
    on_slow: Option<SlowNotice>,
    stop: Option<StopAsked>,
    /// The notice was given (once for all the takes this wait is used for).
    told: bool,
}

impl LockWait {
    /// A wait of at most `limit`, told nothing, never stopped early.
    pub fn up_to(limit: Duration) -> LockWait {
        LockWait {
            limit,
            notice_after: SLOW_LOCK_NOTICE,
            on_slow: None,
            stop: None,
            told: false,
        }
    }

    /// `on_slow` gets, once per wait (however many takes use it), a line saying which file the
    /// wait is for and who holds it, when the wait has lasted [`SLOW_LOCK_NOTICE`] (or what
    /// [`LockWait::notice_after`] says).
    pub fn telling(mut self, on_slow: impl FnMut(&str) + Send + 'static) -> LockWait {
        self.on_slow = Some(Box::new(on_slow));
        self
    }

    /// When the notice is given (default [`SLOW_LOCK_NOTICE`]).
    pub fn notice_after(mut self, after: Duration) -> LockWait {
        self.notice_after = after;
        self
    }

    /// `stop` is asked between tries; `true` ends the wait with
    /// [`WorkspaceError::CreationLockWaitStopped`] (a Ctrl-C, a run's time limit).
    pub fn stopped_by(mut self, stop: impl Fn() -> bool + Send + 'static) -> LockWait {
        self.stop = Some(Box::new(stop));
        self
    }

    fn stop_requested(&self) -> bool {
        self.stop.as_ref().is_some_and(|stop| stop())
    }
}

impl Default for LockWait {
    /// [`DEFAULT_CREATION_LOCK_WAIT`], told nothing, never stopped early.
    fn default() -> LockWait {
        LockWait::up_to(DEFAULT_CREATION_LOCK_WAIT)
    }
}

/// The creation lock, held until dropped (closing the descriptor releases it).
#[derive(Debug)]
pub struct CreationLock {
    _file: File,
}

impl CreationLock {
    /// Held by a creator of a new run (shared: creators never wait for each other). Creates
    /// `.delta/` when it is missing.
    pub fn creating(work_dir: &Path, wait: &mut LockWait) -> Result<CreationLock, WorkspaceError> {
        CreationLock::take(work_dir, libc::LOCK_SH, wait)
    }

    /// Held while a run folder without metadata is judged and removed (exclusive: no
    /// creation is half-way while it is held).
    pub fn judging(work_dir: &Path, wait: &mut LockWait) -> Result<CreationLock, WorkspaceError> {
        CreationLock::take(work_dir, libc::LOCK_EX, wait)
    }

    fn take(
        work_dir: &Path,
        operation: libc::c_int,
        wait: &mut LockWait,
    ) -> Result<CreationLock, WorkspaceError> {
        let path = control_dir(work_dir).join(CREATION_LOCK_FILE);
        let file = open_lock_file(work_dir, &path)?;
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match try_flock(&file, operation) {
                Ok(true) => return Ok(CreationLock { _file: file }),
                Ok(false) => {}
                Err(error) => return Err(WorkspaceError::io("lock", &path, error)),
            }
            if wait.stop_requested() {
                return Err(WorkspaceError::CreationLockWaitStopped {
                    holder: holder_of(&file),
                    path,
                });
            }
            let waited = started.elapsed();
            if waited >= wait.limit {
                return Err(WorkspaceError::CreationLockHeld {
                    holder: holder_of(&file),
                    waited_secs: waited.as_secs_f64(),
                    work_dir: work_dir.to_path_buf(),
                    path,
                });
            }
            if !wait.told && waited >= wait.notice_after {
                wait.told = true;
                if let Some(on_slow) = wait.on_slow.as_mut() {
                    on_slow(&slow_notice(&path, &holder_of(&file), wait.limit));
                }
            }
            std::thread::sleep(pause.min(wait.limit.saturating_sub(waited)));
            pause = (pause * 2).min(MAX_POLL_PAUSE);
        }
    }
}

/// Opens (or creates) the lock file: never through a link, only a regular file.
fn open_lock_file(work_dir: &Path, path: &Path) -> Result<File, WorkspaceError> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    let not_own = |what: &str| WorkspaceError::NotOwnFile {
        path: path.to_path_buf(),
        what: what.to_owned(),
    };
    let file = match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            ensure_control_dir(work_dir)?;
            open()
        }
        opened => opened,
    }
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => not_own("a symbolic link"),
        Some(libc::EISDIR) => not_own("a folder"),
        _ => WorkspaceError::io("open the creation lock", path, e),
    })?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(not_own("not a regular file"));
    }
    Ok(file)
}

/// `flock(2)` without waiting: `Ok(false)` when another open file description holds it.
fn try_flock(file: &File, operation: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: flock only reads the descriptor number, which `file` keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(error),
        }
    }
}

/// The line a slow wait is announced with.
fn slow_notice(path: &Path, holder: &str, limit: Duration) -> String {
    format!(
        "waiting for the workspace's creation lock {}, held by {holder}: no new run can be \
         created in this workspace while it is held (giving up after {} s; Ctrl-C stops the wait)",
        path.display(),
        limit.as_secs()
    )
}

/// Who holds the lock on `file`, in words: the processes `/proc/locks` names (with their
/// command names), or a phrase saying it does not tell.
fn holder_of(file: &File) -> String {
    let unknown = || "another process (/proc/locks does not say which)".to_string();
    let Ok(meta) = file.metadata() else {
        return unknown();
    };
    let mut text = String::new();
    let read = File::open("/proc/locks")
        .and_then(|f| f.take(MAX_PROC_LOCKS_BYTES).read_to_string(&mut text));
    if read.is_err() {
        return unknown();
    }
    let pids = flock_holders(&text, meta.dev(), meta.ino());
    if pids.is_empty() {
        return unknown();
    }
    let named: Vec<String> = pids
        .iter()
        .take(3)
        .map(|&pid| match command_name(pid) {
            Some(name) => format!("process {pid} ({name})"),
            None => format!("process {pid}"),
        })
        .collect();
    let more = pids.len().saturating_sub(named.len());
    if more > 0 {
        format!("{} and {more} more", named.join(", "))
    } else {
        named.join(", ")
    }
}

/// The pids `/proc/locks` (its text) gives as holders (not waiters) of a flock on the file
/// `dev`/`ino`, in order, each once; pids it cannot show (another pid namespace: 0 or -1)
/// are left out.
fn flock_holders(proc_locks: &str, dev: u64, ino: u64) -> Vec<u32> {
    // /proc/locks writes the device as "%02x:%02x" (major, minor) and then the inode.
    let file_id = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    let mut pids = Vec::new();
    for line in proc_locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter has "->" after the id.
        let [_, kind, _, _, pid, id, ..] = fields.as_slice() else {
            continue;
        };
        if *kind != "FLOCK" || *id != file_id {
            continue;
        }
        if let Ok(pid) = pid.parse::<u32>() {
            if pid > 0 && !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// `/proc/<pid>/comm`, the process's command name, when it can be read.
fn command_name(pid: u32) -> Option<String> {
    let mut name = String::new();
    File::open(PathBuf::from(format!("/proc/{pid}/comm")))
        .and_then(|f| f.take(64).read_to_string(&mut name))
        .ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};

    #[test]
    fn proc_locks_holders_are_read_for_the_file_only_and_waiters_are_left_out() {
        let dev = libc::makedev(0xfd, 0x01);
        let text = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:77 0 EOF\n\
                    1: -> FLOCK  ADVISORY  READ 5151 fd:01:77 0 EOF\n\
                    2: FLOCK  ADVISORY  READ 1717 fd:01:770 0 EOF\n\
                    3: POSIX  ADVISORY  WRITE 99 fd:01:77 0 EOF\n\
                    4: FLOCK  ADVISORY  READ 3131 fd:02:77 0 EOF\n\
                    5: FLOCK  ADVISORY  READ 0 fd:01:77 0 EOF\n\
                    6: FLOCK  ADVISORY  READ 4242 fd:01:77 0 EOF\n";
        assert_eq!(flock_holders(text, dev, 77), [4242]);
        assert!(flock_holders("", dev, 77).is_empty());
    }

    /// A holder in another process: its own `flock` command on the lock file (`-o`: the
    /// command it runs does not inherit the lock, so killing `flock` releases it).
    fn hold_with_flock(path: &Path) -> std::process::Child {
        let mut child = std::process::Command::new("flock")
            .args(["-x", "-o"])
            .arg(path)
            .args(["-c", "echo held; exec cat"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "held\n");
        child
    }

    /// Regression: a process of the user holding the lock hung every new run forever,
    /// silently. The wait now says who holds which file, and gives up at its limit naming
    /// both.
    #[test]
    fn a_held_creation_lock_is_announced_with_its_holder_and_given_up_at_the_limit() {
        let work = tempfile::tempdir().unwrap();
        drop(CreationLock::creating(work.path(), &mut LockWait::default()).unwrap());
        let path = control_dir(work.path()).join(CREATION_LOCK_FILE);
        let mut holder = hold_with_flock(&path);
        let (told, notices) = mpsc::channel();
        let mut wait = LockWait::up_to(Duration::from_millis(300))
            .notice_after(Duration::ZERO)
            .telling(move |line| told.send(line.to_string()).unwrap());
        let error = CreationLock::creating(work.path(), &mut wait).unwrap_err();
        let notices: Vec<String> = notices.try_iter().collect();
        assert_eq!(notices.len(), 1, "{notices:?}");
        let holder_words = format!("process {}", holder.id());
        for text in [&notices[0], &error.to_string()] {
            assert!(text.contains(".creating.lock"), "{text}");
            assert!(text.contains(&holder_words), "{text}");
        }
        assert!(
            matches!(error, WorkspaceError::CreationLockHeld { .. }),
            "{error:?}"
        );
        holder.kill().unwrap();
        holder.wait().unwrap();
        // Free again, it is taken at once.
        CreationLock::creating(work.path(), &mut LockWait::up_to(Duration::ZERO)).unwrap();
    }

    /// A stop request (Ctrl-C) ends the wait at once, however long its limit.
    #[test]
    fn a_stop_request_ends_the_wait_for_a_held_lock() {
        let work = tempfile::tempdir().unwrap();
        let _held = CreationLock::judging(work.path(), &mut LockWait::default()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (waiting, waits) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let mut wait = LockWait::up_to(Duration::from_secs(3600))
            .notice_after(Duration::ZERO)
            .telling(move |_| waiting.send(()).unwrap())
            .stopped_by(move || flag.load(Ordering::SeqCst));
        let work_dir = work.path().to_path_buf();
        let waiter = std::thread::spawn(move || CreationLock::creating(&work_dir, &mut wait));
        waits.recv_timeout(Duration::from_secs(20)).unwrap();
        stop.store(true, Ordering::SeqCst);
        let error = waiter.join().unwrap().unwrap_err();
        assert!(
            matches!(error, WorkspaceError::CreationLockWaitStopped { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("no run was created"), "{error}");
    }
}
