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
//! Must not: be held across anything slower than a few file-system calls, or be taken by
//! anything but run creation and the reclaim of unstarted run folders.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{control_dir, ensure_control_dir, WorkspaceError};

/// The lock's file name inside `.delta/` (a file, so run listings skip it; a dot name, so it
/// can never be a run id).
pub const CREATION_LOCK_FILE: &str = ".creating.lock";

/// The creation lock, held until dropped (closing the descriptor releases it).
#[derive(Debug)]
pub struct CreationLock {
    _file: File,
}

impl CreationLock {
    /// Held by a creator of a new run (shared: creators never wait for each other). Creates
    /// `.delta/` when it is missing.
    pub fn creating(work_dir: &Path) -> Result<CreationLock, WorkspaceError> {
        CreationLock::take(work_dir, libc::LOCK_SH)
    }

    /// Held while a run folder without metadata is judged and removed (exclusive: no
    /// creation is half-way while it is held).
    pub fn judging(work_dir: &Path) -> Result<CreationLock, WorkspaceError> {
        CreationLock::take(work_dir, libc::LOCK_EX)
    }

    fn take(work_dir: &Path, operation: libc::c_int) -> Result<CreationLock, WorkspaceError> {
        let path = control_dir(work_dir).join(CREATION_LOCK_FILE);
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
        };
        let not_own = |what: &str| WorkspaceError::NotOwnFile {
            path: path.clone(),
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
            _ => WorkspaceError::io("open the creation lock", &path, e),
        })?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(not_own("not a regular file"));
        }
        loop {
            // SAFETY: flock only reads the descriptor number, which `file` keeps open.
            if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
                return Ok(CreationLock { _file: file });
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(WorkspaceError::io("lock", &path, error));
            }
        }
    }
}
