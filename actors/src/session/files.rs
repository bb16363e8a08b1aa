//! Small file helpers shared by the shell and PTY sessions: private folders (0700), private
//! files (0600), atomic replacement, session ids and timestamps. Knows nothing about shells.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::error::SessionError;

/// A fresh session id: `sess_` and 12 hex digits of a v4 UUID.
pub fn new_session_id() -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("sess_{}", &hex[..12])
}

/// Ids become path segments and socket names, so only `sess_<hex>` is accepted.
pub fn is_valid_session_id(id: &str) -> bool {
    id.strip_prefix("sess_").is_some_and(|hex| {
        !hex.is_empty() && hex.len() <= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

pub(crate) fn check_session_id(id: &str) -> Result<(), SessionError> {
    if is_valid_session_id(id) {
        Ok(())
    } else {
        Err(SessionError::InvalidId { id: id.to_string() })
    }
}

pub(crate) use crate::clock::now_rfc3339;

/// Creates `dir` (and missing parents) and makes `dir` itself 0700.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), SessionError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| SessionError::io("cannot create folder", dir, e))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| SessionError::io("cannot set mode 0700 on", dir, e))
}

/// Opens `path` for writing with mode 0600, truncating it.
pub(crate) fn create_private_file(path: &Path) -> Result<File, SessionError> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| SessionError::io("cannot write", path, e))
}

/// Opens `path` for appending with mode 0600.
pub(crate) fn append_private_file(path: &Path) -> Result<File, SessionError> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| SessionError::io("cannot append to", path, e))
}

/// Writes `bytes` to a fresh file (0600) at `path`, replacing any old one by unlinking it
/// first: truncating an existing file costs milliseconds on ext4 (auto_da_alloc flushes it
/// on close), unlink + create costs microseconds. Not atomic; see [`replace_private`].
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), SessionError> {
    remove_if_present(path)?;
    create_private_file(path)?
        .write_all(bytes)
        .map_err(|e| SessionError::io("cannot write", path, e))
}

pub(crate) fn remove_if_present(path: &Path) -> Result<(), SessionError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SessionError::io("cannot remove", path, e)),
    }
}

/// Replaces `path` atomically (temp file in the same folder, then rename), mode 0600.
pub(crate) fn replace_private(path: &Path, bytes: &[u8]) -> Result<(), SessionError> {
    let tmp = temp_sibling(path);
    write_private(&tmp, bytes)?;
    fs::rename(&tmp, path).map_err(|e| SessionError::io("cannot replace", path, e))
}

fn temp_sibling(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(".tmp{}", fastrand::u32(..)));
    path.with_file_name(name)
}

/// Closes every file descriptor above stderr. Session processes outlive the command that
/// started them (a holder, a shell's background job), so they must not keep open the pipes a
/// careless caller leaked to us: a tool runner waiting for their EOF would hang. Call it
/// first thing in `main`, before anything else opens files.
pub fn close_inherited_fds() {
    let Ok(entries) = fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        let _ = nix::unistd::close(fd);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_fresh_and_valid() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert!(is_valid_session_id(&a), "{a}");
    }

    #[test]
    fn ids_that_could_escape_a_folder_are_rejected() {
        for bad in [
            "",
            "sess_",
            "../sess_ab",
            "sess_ab/..",
            "sess_zz",
            "abc",
            "sess_ab cd",
        ] {
            assert!(!is_valid_session_id(bad), "{bad}");
        }
    }

    #[test]
    fn private_dir_and_files_have_private_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_private_dir(&dir).unwrap();
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let file = dir.join("f");
        replace_private(&file, b"x").unwrap();
        let mode = fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(fs::read(&file).unwrap(), b"x");
    }
}
