//! Reading one context source file (a `file` source, or a generator's output): confined to
//! the agent folder and the workspace once symlinks are resolved, regular files only, and
//! read on the blocking pool ([`crate::blocking`]) so a read that never returns cannot stall
//! the run's actor, its timeout or Ctrl-C.
//!
//! Why regular files only: a FIFO, a device or a socket can block a read forever (or never
//! end), and a directory has no text. The type is checked with `stat` before opening, and
//! again on the opened descriptor (opened `O_NONBLOCK`, so the open itself cannot wait for
//! a FIFO writer), so a file swapped in between is caught too.
//!
//! Must not: read anything outside the two folders, or block the caller's thread.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use super::{path_str, ContextError};
use crate::blocking::{run_blocking, BlockingError};

/// Reads the context files of one build on the blocking pool, a batch per trip: consecutive
/// `file` sources (the usual system prompt + workspace guide) cost one trip, not one each.
/// The two allowed folders are resolved on the first trip and kept in `folders`.
#[derive(Debug)]
pub(super) struct SourceReader<'a> {
    agent_home: PathBuf,
    work_dir: PathBuf,
    folders: &'a ContextFolders,
}

/// The two folders context files may be read from, with symlinks resolved once and kept for
/// the builds that follow (a run's: its agent folder and workspace do not change). Kept only
/// when both resolved; a folder that does not exist yet is resolved again next time.
#[derive(Debug, Default)]
pub struct ContextFolders(Mutex<Option<SourceRoots>>);

impl ContextFolders {
    fn take(&self) -> Option<SourceRoots> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn keep(&self, roots: SourceRoots) {
        if roots.resolved {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(roots);
        }
    }
}

/// A file to read: the source id and the path as written (variables expanded).
pub(super) struct SourceFile {
    pub(super) id: String,
    pub(super) path: String,
}

impl<'a> SourceReader<'a> {
    pub(super) fn new(
        agent_home: &Path,
        work_dir: &Path,
        folders: &'a ContextFolders,
    ) -> SourceReader<'a> {
        SourceReader {
            agent_home: agent_home.to_path_buf(),
            work_dir: work_dir.to_path_buf(),
            folders,
        }
    }

    /// Reads `files` in order, in one trip to the pool. Each must lie inside one of the two
    /// folders once symlinks are resolved; a relative path is taken from the workspace. The
    /// outer error is a refusal (outside the folders, not a regular file, cancelled: the
    /// first one stops the batch), the inner ones the ordinary read failures (missing,
    /// unreadable), which the caller maps according to `on_missing`.
    pub(super) async fn read(
        &mut self,
        files: Vec<SourceFile>,
        cancel: &CancellationToken,
    ) -> Result<Vec<io::Result<String>>, ContextError> {
        let first = files
            .first()
            .map(|f| (f.id.clone(), f.path.clone()))
            .unwrap_or_default();
        let roots = self.folders.take();
        let (agent_home, work_dir) = (self.agent_home.clone(), self.work_dir.clone());
        let (roots, texts) = run_blocking(
            move || {
                let roots = roots.unwrap_or_else(|| SourceRoots::resolve(agent_home, work_dir));
                let texts: Result<Vec<_>, _> = files
                    .iter()
                    .map(|f| roots.read_now(&f.id, &f.path))
                    .collect();
                (roots, texts)
            },
            cancel,
        )
        .await
        .map_err(|e| blocking_failure(e, &first.0, &first.1))?;
        self.folders.keep(roots);
        texts
    }
}

/// The two folders source files may be read from, the agent folder and the workspace, with
/// symlinks resolved (as given where they cannot be).
#[derive(Debug, Clone)]
struct SourceRoots {
    agent_home: PathBuf,
    work_dir: PathBuf,
    /// Both folders resolved (else one is as given, and worth resolving again).
    resolved: bool,
}

impl SourceRoots {
    fn resolve(agent_home: PathBuf, work_dir: PathBuf) -> SourceRoots {
        let resolve = |p: PathBuf| match std::fs::canonicalize(&p) {
            Ok(resolved) => (resolved, true),
            Err(_) => (p, false),
        };
        let (agent_home, home_resolved) = resolve(agent_home);
        let (work_dir, work_resolved) = resolve(work_dir);
        SourceRoots {
            agent_home,
            work_dir,
            resolved: home_resolved && work_resolved,
        }
    }

    /// One file of [`SourceReader::read`], on the calling thread.
    fn read_now(&self, id: &str, written: &str) -> Result<io::Result<String>, ContextError> {
        let resolved = match std::fs::canonicalize(self.work_dir.join(written)) {
            Ok(resolved) => resolved,
            Err(e) => return Ok(Err(e)),
        };
        if !resolved.starts_with(&self.agent_home) && !resolved.starts_with(&self.work_dir) {
            return Err(ContextError::OutsideAllowedFolders {
                id: id.to_string(),
                path: written.to_string(),
                resolved: path_str(&resolved),
                agent_home: path_str(&self.agent_home),
                work_dir: path_str(&self.work_dir),
            });
        }
        let not_regular = |file_type: &FileType| ContextError::NotRegularFile {
            id: id.to_string(),
            path: written.to_string(),
            kind: describe(file_type).to_string(),
        };
        // `stat` first: opening some devices has effects of its own.
        match std::fs::metadata(&resolved) {
            Ok(meta) if !meta.is_file() => return Err(not_regular(&meta.file_type())),
            Ok(_) => {}
            Err(e) => return Ok(Err(e)),
        }
        let mut file = match open_nonblocking(&resolved) {
            Ok(file) => file,
            Err(e) => return Ok(Err(e)),
        };
        match file.metadata() {
            Ok(meta) if !meta.is_file() => return Err(not_regular(&meta.file_type())),
            Ok(_) => {}
            Err(e) => return Ok(Err(e)),
        }
        let mut text = String::new();
        Ok(file.read_to_string(&mut text).map(|_| text))
    }
}

/// Opens for reading without waiting: a FIFO without a writer would block a plain open.
/// `O_NONBLOCK` changes nothing for the regular file that is then read.
fn open_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// What a non-regular file is, for the error message.
fn describe(file_type: &FileType) -> &'static str {
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

fn blocking_failure(error: BlockingError, id: &str, path: &str) -> ContextError {
    match error {
        BlockingError::Cancelled => ContextError::Cancelled,
        BlockingError::Failed(message) => ContextError::FileUnreadable {
            id: id.to_string(),
            path: path.to_string(),
            message,
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Reads one source through a reader for `<tmp>/agent` and `<tmp>/ws`.
    async fn read_one(
        tmp: &Path,
        id: &str,
        path: &str,
    ) -> Result<io::Result<String>, ContextError> {
        let folders = ContextFolders::default();
        let mut reader = SourceReader::new(&tmp.join("agent"), &tmp.join("ws"), &folders);
        let file = SourceFile {
            id: id.into(),
            path: path.into(),
        };
        let mut texts = reader.read(vec![file], &CancellationToken::new()).await?;
        Ok(texts.remove(0))
    }

    fn folders() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("agent")).unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        tmp
    }

    /// Regression: a FIFO as a context source hung the run forever (the read waited for a
    /// writer on the actor's thread). It is refused at once, naming the source and the kind.
    #[tokio::test]
    async fn context_source_fifo_is_refused_without_blocking() {
        let tmp = folders();
        let fifo = tmp.path().join("ws/notes.md");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let refused = tokio::time::timeout(
            Duration::from_secs(10),
            read_one(tmp.path(), "notes", "notes.md"),
        )
        .await
        .expect("reading a FIFO source must not block")
        .unwrap_err();
        assert!(
            matches!(&refused, ContextError::NotRegularFile { kind, .. } if kind.contains("FIFO")),
            "{refused:?}"
        );
        let text = refused.to_string();
        assert!(text.contains("context source 'notes'"), "{text}");
        assert!(text.contains("notes.md"), "{text}");
        assert!(text.contains("hint:"), "{text}");
    }

    #[tokio::test]
    async fn directories_and_devices_are_refused_as_non_regular() {
        let tmp = folders();
        std::fs::create_dir(tmp.path().join("ws/dir.md")).unwrap();
        let refused = read_one(tmp.path(), "d", "dir.md").await.unwrap_err();
        assert!(refused.to_string().contains("is a directory"), "{refused}");
        // A symlink to a device inside the workspace resolves outside it: confinement first.
        std::os::unix::fs::symlink("/dev/zero", tmp.path().join("ws/zero.md")).unwrap();
        let refused = read_one(tmp.path(), "z", "zero.md").await.unwrap_err();
        assert!(
            matches!(refused, ContextError::OutsideAllowedFolders { .. }),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn a_batch_reads_regular_files_and_reports_missing_ones_as_io_errors() {
        let tmp = folders();
        std::fs::write(tmp.path().join("ws/a.md"), "text").unwrap();
        let folders = ContextFolders::default();
        let mut reader =
            SourceReader::new(&tmp.path().join("agent"), &tmp.path().join("ws"), &folders);
        let files = ["a.md", "missing.md", "a.md"]
            .iter()
            .map(|path| SourceFile {
                id: "s".into(),
                path: path.to_string(),
            })
            .collect();
        let texts = reader.read(files, &CancellationToken::new()).await.unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "text");
        assert_eq!(
            texts[1].as_ref().unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(texts[2].as_ref().unwrap(), "text");
    }

    #[tokio::test]
    async fn resolved_folders_are_kept_for_the_next_read_and_still_confine_it() {
        let tmp = folders();
        std::fs::write(tmp.path().join("ws/a.md"), "text").unwrap();
        std::fs::write(tmp.path().join("outside.md"), "secret").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside.md"), tmp.path().join("ws/out.md"))
            .unwrap();
        let folders = ContextFolders::default();
        let (home, work) = (tmp.path().join("agent"), tmp.path().join("ws"));
        let one = |path: &str| {
            vec![SourceFile {
                id: "s".into(),
                path: path.into(),
            }]
        };
        let cancel = CancellationToken::new();
        let mut reader = SourceReader::new(&home, &work, &folders);
        reader.read(one("a.md"), &cancel).await.unwrap();
        assert!(
            folders.0.lock().unwrap().is_some(),
            "kept after the first read"
        );
        let mut next_build = SourceReader::new(&home, &work, &folders);
        let refused = next_build.read(one("out.md"), &cancel).await.unwrap_err();
        assert!(
            matches!(refused, ContextError::OutsideAllowedFolders { .. }),
            "{refused:?}"
        );
        let texts = next_build.read(one("a.md"), &cancel).await.unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "text");
    }

    #[tokio::test]
    async fn a_folder_that_does_not_exist_yet_is_resolved_again_next_time() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        let folders = ContextFolders::default();
        let mut reader =
            SourceReader::new(&tmp.path().join("agent"), &tmp.path().join("ws"), &folders);
        let file = vec![SourceFile {
            id: "s".into(),
            path: "missing.md".into(),
        }];
        reader.read(file, &CancellationToken::new()).await.unwrap();
        assert!(folders.0.lock().unwrap().is_none());
    }
}
