//! Small file helpers shared by the shell and PTY sessions and `delta serve`: private folders
//! (created 0700, an existing one checked, never chmod-ed nor followed through a symlink),
//! private files (0600), atomic replacement, session ids and timestamps. Knows nothing about
//! shells.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::error::{DirProblem, SessionError};

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

/// Makes sure `dir` is a private folder: a missing one is created with mode 0700 (missing
/// parents too, like `mkdir -p -m 700`); an existing one must already be a real folder (not
/// a symlink) of this user that nobody else may enter. It is never chmod-ed: pointed at the
/// system temp folder or a shared one, it used to make that folder 0700.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), SessionError> {
    let created = match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(|e| SessionError::io("cannot create folder", parent, e))?;
            }
            match DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                Err(e) => return Err(SessionError::io("cannot create folder", dir, e)),
            }
        }
        Err(e) => return Err(SessionError::io("cannot create folder", dir, e)),
    };
    // A folder just made 0700 (or narrower, by the umask) is private; anything else is
    // checked, as is one that appeared between our attempt and now.
    if created {
        return Ok(());
    }
    check_private_dir(dir).map_err(|problem| match problem {
        Ok(problem) => SessionError::NotPrivate {
            path: dir.to_path_buf(),
            problem,
        },
        Err(e) => SessionError::io("cannot inspect", dir, e),
    })
}

/// Whether `dir` (not followed if a symlink) is a folder of this user that nobody else may
/// enter. The outer error is the problem, or (inner `Err`) why it could not be looked at.
pub(crate) fn check_private_dir(dir: &Path) -> Result<(), Result<DirProblem, std::io::Error>> {
    let meta = fs::symlink_metadata(dir).map_err(Err)?;
    if meta.file_type().is_symlink() {
        return Err(Ok(DirProblem::Symlink));
    }
    if !meta.is_dir() {
        return Err(Ok(DirProblem::NotAFolder));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(Ok(DirProblem::OtherOwner {
            owner: meta.uid(),
            me,
        }));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(Ok(DirProblem::OpenMode { mode }));
    }
    Ok(())
}

/// Opens `path` for writing with mode 0600, emptied. Never through a link (symbolic or
/// hard: emptied only once it is known to be the session's own file) nor into a FIFO.
pub(crate) fn create_private_file(path: &Path) -> Result<File, SessionError> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(false).mode(0o600);
    crate::private_file::open_own_file(path, &options)
        .and_then(|file| file.set_len(0).map(|()| file))
        .map_err(|e| SessionError::io("cannot write", path, e))
}

/// Opens `path` for appending with mode 0600; never through a link (symbolic or hard) nor
/// into a FIFO.
pub(crate) fn append_private_file(path: &Path) -> Result<File, SessionError> {
    let mut options = OpenOptions::new();
    options.append(true).create(true).mode(0o600);
    crate::private_file::open_own_file(path, &options)
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

    /// Regression (issue 24 item 5): an existing folder was chmod-ed to 0700, so a state
    /// folder pointed at the system temp folder (or a shared one) locked everybody else out.
    #[test]
    fn an_existing_open_folder_is_refused_and_left_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        for mode in [0o1777, 0o755, 0o750, 0o701] {
            let shared = tmp.path().join(format!("shared-{mode:o}"));
            fs::create_dir(&shared).unwrap();
            fs::set_permissions(&shared, fs::Permissions::from_mode(mode)).unwrap();
            let err = create_private_dir(&shared).unwrap_err();
            assert!(
                matches!(
                    err,
                    SessionError::NotPrivate {
                        problem: DirProblem::OpenMode { .. },
                        ..
                    }
                ),
                "{err}"
            );
            let text = err.to_string();
            assert!(
                text.contains("chmod 700") && text.contains(&*shared.to_string_lossy()),
                "{text}"
            );
            assert_eq!(
                fs::metadata(&shared).unwrap().permissions().mode() & 0o7777,
                mode
            );
        }
    }

    /// Regression (issue 24 item 5): a symlink was followed and its target chmod-ed.
    #[test]
    fn a_symlink_is_refused_and_its_target_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        fs::create_dir(&target).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = create_private_dir(&link).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::NotPrivate {
                    problem: DirProblem::Symlink,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o755
        );
        // Even a link to a private folder of ours: a link can be re-pointed later.
        fs::set_permissions(&target, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(create_private_dir(&link).is_err());
    }

    #[test]
    fn another_users_folder_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let foreign = tmp.path().join("foreign");
        fs::create_dir(&foreign).unwrap();
        fs::set_permissions(&foreign, fs::Permissions::from_mode(0o700)).unwrap();
        let me = nix::unistd::geteuid();
        // As root, a folder handed to `nobody`; otherwise `/`, which is root's.
        let foreign = if me.is_root() {
            nix::unistd::chown(&foreign, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            foreign
        } else {
            PathBuf::from("/")
        };
        let err = create_private_dir(&foreign).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::NotPrivate {
                    problem: DirProblem::OtherOwner { .. },
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn an_existing_private_folder_and_missing_parents_are_fine() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("x/y/z");
        create_private_dir(&dir).unwrap();
        for made in [tmp.path().join("x"), tmp.path().join("x/y"), dir.clone()] {
            assert_eq!(
                fs::metadata(&made).unwrap().permissions().mode() & 0o777,
                0o700
            );
        }
        create_private_dir(&dir).unwrap();
        let file = dir.join("f");
        fs::write(&file, b"").unwrap();
        let err = create_private_dir(&file).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::NotPrivate {
                    problem: DirProblem::NotAFolder,
                    ..
                }
            ),
            "{err}"
        );
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
