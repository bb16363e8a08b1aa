//! The advisory lock (`flock` on `<session>/lock`) that serialises execs of one session
//! across processes. Dies with its holder, so no stale-lock guessing. Owns nothing else.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::session::error::SessionError;

const LOCK_FILE: &str = "lock";

/// Held while alive; unlocked on drop.
#[derive(Debug)]
pub(crate) struct SessionLock {
    _flock: Flock<File>,
}

impl SessionLock {
    /// Waits for the lock on a blocking thread.
    pub(crate) async fn acquire(dir: &Path) -> Result<SessionLock, SessionError> {
        let path = dir.join(LOCK_FILE);
        let file = open(&path)?;
        let locked =
            tokio::task::spawn_blocking(move || Flock::lock(file, FlockArg::LockExclusive))
                .await
                .map_err(|e| lock_error(&path, e.to_string()))?;
        locked
            .map(|flock| SessionLock { _flock: flock })
            .map_err(|(_, errno)| lock_error(&path, errno.to_string()))
    }

    /// `None` when someone else holds it.
    pub(crate) fn try_acquire(dir: &Path) -> Result<Option<SessionLock>, SessionError> {
        let path = dir.join(LOCK_FILE);
        let file = open(&path)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(flock) => Ok(Some(SessionLock { _flock: flock })),
            Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(lock_error(&path, errno.to_string())),
        }
    }
}

fn open(path: &Path) -> Result<File, SessionError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| SessionError::io("cannot open lock file", path, e))
}

fn lock_error(path: &Path, reason: String) -> SessionError {
    SessionError::Lock {
        path: PathBuf::from(path),
        reason,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_blocks_try_acquire_until_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let held = SessionLock::try_acquire(tmp.path()).unwrap().unwrap();
        assert!(SessionLock::try_acquire(tmp.path()).unwrap().is_none());
        drop(held);
        assert!(SessionLock::try_acquire(tmp.path()).unwrap().is_some());
    }
}
