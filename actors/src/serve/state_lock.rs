//! One `delta serve` per state folder: an exclusive `flock` on `<state>/serve.lock`, held for
//! the server's life (the kernel drops it when the process dies, even on SIGKILL, so a stale
//! lock never blocks a restart). The file records the holder's pid and, once it listens, its
//! address, so a second server can say which one is in the way. Two servers on one folder
//! used to revive each other's deleted workers and overwrite each other's `sessions.json`.
//!
//! Must not: be inherited by the workers' holders (the file is opened close-on-exec and
//! holders close every inherited descriptor), or the lock would outlive the server.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use super::error::ServeError;

pub const LOCK_FILE: &str = "serve.lock";
/// The most of the lock file a waiting server reads (it holds a pid and an address).
const MAX_RECORD_BYTES: u64 = 4096;

/// What the lock file says about its holder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    /// `host:port`, once the holder listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// The state folder, locked for this process while the value lives.
#[derive(Debug)]
pub struct StateLock {
    file: File,
    path: PathBuf,
}

impl StateLock {
    /// Locks `state_dir` (which must exist) or says who holds it.
    pub fn acquire(state_dir: &Path) -> Result<StateLock, ServeError> {
        let path = state_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| ServeError::io("cannot open", &path, e))?;
        // The holder's pid and address are written into it: never into a second name
        // (hard link) of another file.
        crate::private_file::refuse_other_names(&file, None)
            .map_err(|e| ServeError::io("cannot write", &path, e))?;
        // SAFETY: flock only reads the descriptor number, which `file` keeps open.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if locked != 0 {
            return match Errno::last() {
                Errno::EWOULDBLOCK => {
                    let holder = read_holder(&mut file);
                    Err(ServeError::StateInUse {
                        dir: state_dir.to_path_buf(),
                        pid: holder.as_ref().map(|h| h.pid),
                        address: holder.and_then(|h| h.address),
                    })
                }
                errno => Err(ServeError::io("cannot lock", &path, errno.into())),
            };
        }
        let mut lock = StateLock { file, path };
        lock.record(&LockHolder {
            pid: std::process::id(),
            address: None,
        })?;
        Ok(lock)
    }

    /// Records the address this server listens on, for a second server to name.
    pub fn record_address(&mut self, address: &str) -> Result<(), ServeError> {
        self.record(&LockHolder {
            pid: std::process::id(),
            address: Some(address.to_string()),
        })
    }

    fn record(&mut self, holder: &LockHolder) -> Result<(), ServeError> {
        let bytes = serde_json::to_vec(holder).unwrap_or_default();
        let written = self
            .file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)))
            .and_then(|_| self.file.write_all(&bytes));
        written.map_err(|e| ServeError::io("cannot write", &self.path, e))
    }
}

/// What a held lock file says (nothing if it is being written or unreadable).
fn read_holder(file: &mut File) -> Option<LockHolder> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(MAX_RECORD_BYTES).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_first_holder_and_a_dropped_lock_is_free_again() {
        let tmp = tempfile::tempdir().unwrap();
        let mut first = StateLock::acquire(tmp.path()).unwrap();
        first.record_address("127.0.0.1:7777").unwrap();
        // flock belongs to the open file description: a second open in the same process
        // conflicts like another process would.
        let err = StateLock::acquire(tmp.path()).unwrap_err();
        let ServeError::StateInUse { pid, address, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(
            (*pid, address.as_deref()),
            (Some(std::process::id()), Some("127.0.0.1:7777"))
        );
        let text = err.to_string();
        assert!(
            text.contains("127.0.0.1:7777") && text.contains("--state-dir"),
            "{text}"
        );
        drop(first);
        StateLock::acquire(tmp.path()).unwrap();
    }

    #[test]
    fn a_symlinked_lock_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::write(&elsewhere, "keep me").unwrap();
        std::os::unix::fs::symlink(&elsewhere, tmp.path().join(LOCK_FILE)).unwrap();
        assert!(StateLock::acquire(tmp.path()).is_err());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "keep me");
    }
}
