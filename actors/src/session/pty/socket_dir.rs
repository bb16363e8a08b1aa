//! The private per-user socket folder: `$XDG_RUNTIME_DIR/delta` or `/tmp/delta-<uid>`, mode
//! 0700, owned by us, not a symlink — created if missing and verified on every use, refused
//! otherwise. Also builds short socket paths. No sockets are opened here.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use crate::session::error::SessionError;
use crate::session::files::check_private_dir;

/// Longest path a `sockaddr_un` holds on Linux, minus the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// The socket folder for this user, given `XDG_RUNTIME_DIR` (resolved at the edge).
pub fn default_runtime_dir(xdg_runtime_dir: Option<&OsStr>) -> PathBuf {
    match xdg_runtime_dir.filter(|dir| !dir.is_empty()) {
        Some(dir) => Path::new(dir).join("delta"),
        None => PathBuf::from(format!("/tmp/delta-{}", nix::unistd::geteuid())),
    }
}

/// Creates `dir` (0700) if missing, then checks it is a real folder owned by us that nobody
/// else can enter.
pub fn ensure_private_dir(dir: &Path) -> Result<(), SessionError> {
    if fs::symlink_metadata(dir).is_err() {
        let mut builder = fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        if let Err(e) = builder.create(dir) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(SessionError::io("cannot create socket folder", dir, e));
            }
        }
    }
    verify_private_dir(dir)
}

/// Refuses a folder that is a symlink, not ours, or open to group/others (the same check as
/// every private folder of the sessions and `delta serve`).
pub fn verify_private_dir(dir: &Path) -> Result<(), SessionError> {
    check_private_dir(dir).map_err(|problem| match problem {
        Ok(problem) => SessionError::UnsafeSocketDir {
            path: dir.to_path_buf(),
            reason: problem.to_string(),
        },
        Err(e) => SessionError::io("cannot inspect", dir, e),
    })
}

/// `<dir>/<hex>.sock` for session `sess_<hex>`, refused when too long for a Unix socket.
pub fn socket_path(dir: &Path, session_id: &str) -> Result<PathBuf, SessionError> {
    let short = session_id.strip_prefix("sess_").unwrap_or(session_id);
    let path = dir.join(format!("{short}.sock"));
    if path.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(SessionError::UnsafeSocketDir {
            path: dir.to_path_buf(),
            reason: format!(
                "socket path {} is longer than {MAX_SOCKET_PATH} bytes",
                path.display()
            ),
        });
    }
    Ok(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_folder_is_created_private_and_open_folders_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = default_runtime_dir(Some(tmp.path().as_os_str()));
        assert_eq!(dir, tmp.path().join("delta"));
        ensure_private_dir(&dir).unwrap();
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let err = ensure_private_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("755"), "{err}");
    }

    #[test]
    fn symlinks_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        ensure_private_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(verify_private_dir(&link).is_err());
    }

    #[test]
    fn without_xdg_the_folder_is_per_user_in_tmp() {
        let dir = default_runtime_dir(None);
        assert!(dir.starts_with("/tmp"));
        assert!(dir
            .to_string_lossy()
            .contains(&nix::unistd::geteuid().to_string()));
    }

    #[test]
    fn socket_paths_are_short_and_checked() {
        let path = socket_path(Path::new("/run/user/1000/delta"), "sess_0123456789ab").unwrap();
        assert_eq!(
            path,
            PathBuf::from("/run/user/1000/delta/0123456789ab.sock")
        );
        let long = PathBuf::from(format!("/{}", "x".repeat(120)));
        assert!(socket_path(&long, "sess_ab").is_err());
    }
}
