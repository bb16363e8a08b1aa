//! Reading one context source file (a `file` source, or a generator's output): confined to
//! the agent folder and the workspace once symlinks are resolved, regular files only, and
//! read where it cannot stall the run's actor, its timeout or Ctrl-C.
//!
//! Why regular files only: a FIFO, a device or a socket can block a read forever (or never
//! end), and a directory has no text. The type is checked with `stat` before opening, and
//! again on the opened descriptor (opened `O_NONBLOCK`, so the open itself cannot wait for
//! a FIFO writer), so a file swapped in between is caught too.
//!
//! Where: when both folders sit on a known local file system (ext4, xfs, btrfs, tmpfs, ...:
//! checked once per run with `statfs`), a small file directly inside one of them is read on
//! the run's own thread. That read cannot hang (a regular, local file), and the trip to the
//! blocking pool ([`crate::blocking`]) it saves was the larger part of a context build's cost
//! (a thread wake-up each way, at every iteration). Anything else — a network or FUSE file
//! system, a file in a subfolder, a symlink, a file over [`INLINE_READ_MAX_BYTES`] — is read
//! on the pool as before, where a read that never returns is abandoned on cancellation.
//!
//! What is not read again: a file read inline whose `lstat` still shows the same inode, size,
//! mtime and ctime as when it was read is given from the run's copy (the usual system prompt,
//! read at every iteration, costs one `lstat` instead of six calls). A run keeps at most
//! [`KEPT_BYTES_MAX`] of such texts, so 10,000 runs in one process hold at most 2.5 GiB more
//! than their requests already do, and usually a few kilobytes each. Only a file that was
//! *settled* when read is kept: its ctime at least [`SETTLED_AFTER`] in the past. The kernel
//! sets ctime to the current time at every change (a user cannot set it), so any later
//! change shows a newer ctime, even one within the same timestamp tick as the read.
//!
//! Must not: read anything outside the two folders, block the caller's thread on a file
//! system that can hang, or give a kept copy of a file that may have changed since.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::{path_str, ContextError};
use crate::blocking::{run_blocking, BlockingError};

/// The largest file read on the run's own thread; a larger one goes to the blocking pool, so
/// no run waits on another's big read.
pub(super) const INLINE_READ_MAX_BYTES: u64 = 256 * 1024;

/// How long ago a file must have last changed (its ctime) for its text to be kept for the
/// next build: far above any file system's timestamp tick, so a change after the read
/// cannot carry the same ctime.
pub(super) const SETTLED_AFTER: Duration = Duration::from_secs(1);

/// Files kept per run: the usual agent has one to three `file` sources.
const KEPT_TEXTS_MAX: usize = 8;

/// Bytes of text kept per run; a file that would pass it is read every time, as before.
const KEPT_BYTES_MAX: usize = 256 * 1024;

/// File systems whose reads cannot hang on a network: a folder on any other (NFS, SMB, FUSE,
/// Lustre, ...) is read on the blocking pool.
const LOCAL_FILE_SYSTEMS: &[nix::sys::statfs::FsType] = {
    use nix::sys::statfs::*;
    &[
        EXT4_SUPER_MAGIC, // also ext2 and ext3: one magic
        XFS_SUPER_MAGIC,
        BTRFS_SUPER_MAGIC,
        TMPFS_MAGIC,
        OVERLAYFS_SUPER_MAGIC,
        F2FS_SUPER_MAGIC,
        REISERFS_SUPER_MAGIC,
        NILFS_SUPER_MAGIC,
        FsType(0x2FC1_2FC1),          // zfs
        FsType(0x8584_58F6_u32 as _), // ramfs
    ]
};

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
    /// The two folders resolved now (on the caller's thread: `canonicalize` and `statfs`,
    /// which can wait on a network file system), for a caller already on the blocking pool.
    /// Kept only when both resolve, as a source reader keeps them.
    pub fn resolved(agent_home: &Path, work_dir: &Path) -> ContextFolders {
        let folders = ContextFolders::default();
        folders.keep(SourceRoots::resolve(
            agent_home.to_path_buf(),
            work_dir.to_path_buf(),
        ));
        folders
    }

    fn take(&self) -> Option<SourceRoots> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn keep(&self, roots: SourceRoots) {
        if roots.resolved {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(roots);
        }
    }

    fn keep_some(&self, roots: Option<SourceRoots>) {
        if let Some(roots) = roots {
            self.keep(roots);
        }
    }
}

/// A file to read: the source id, the path as written (variables expanded), and the most
/// bytes it may have (the source's `max_bytes`).
pub(super) struct SourceFile {
    pub(super) id: String,
    pub(super) path: String,
    pub(super) max_bytes: u64,
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

    /// Reads `files` in order: on this thread while the folders allow it (see the module
    /// header), the rest in one trip to the pool. Each must lie inside one of the two
    /// folders once symlinks are resolved; a relative path is taken from the workspace. The
    /// outer error is a refusal (outside the folders, not a regular file, cancelled: the
    /// first one stops the batch), the inner ones the ordinary read failures (missing,
    /// unreadable), which the caller maps according to `on_missing`.
    pub(super) async fn read(
        &mut self,
        files: Vec<SourceFile>,
        cancel: &CancellationToken,
    ) -> Result<Vec<io::Result<String>>, ContextError> {
        let mut roots = self.folders.take();
        let inline = match roots.as_mut().filter(|roots| roots.local) {
            Some(roots) => roots.read_inline_prefix(&files),
            None => Ok(Vec::new()),
        };
        let mut texts = match inline {
            Ok(texts) if texts.len() == files.len() => {
                self.folders.keep_some(roots);
                return Ok(texts);
            }
            Ok(texts) => texts,
            Err(refusal) => {
                self.folders.keep_some(roots);
                return Err(refusal);
            }
        };
        let rest: Vec<SourceFile> = files.into_iter().skip(texts.len()).collect();
        let first = rest
            .first()
            .map(|f| (f.id.clone(), f.path.clone()))
            .unwrap_or_default();
        let (agent_home, work_dir) = (self.agent_home.clone(), self.work_dir.clone());
        let (roots, read) = run_blocking(
            move || {
                let roots = roots.unwrap_or_else(|| SourceRoots::resolve(agent_home, work_dir));
                let read: Result<Vec<_>, _> = rest.iter().map(|f| roots.read_now(f)).collect();
                (roots, read)
            },
            cancel,
        )
        .await
        .map_err(|e| blocking_failure(e, &first.0, &first.1))?;
        self.folders.keep(roots);
        texts.extend(read?);
        Ok(texts)
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
    /// Both folders on a [`LOCAL_FILE_SYSTEMS`] file system: small files directly inside
    /// them may be read on the caller's thread.
    local: bool,
    /// Texts of settled files read inline, for the builds that follow (module header).
    kept: Vec<KeptText>,
    /// [`SETTLED_AFTER`] (tests shorten it).
    settled_after: Duration,
}

/// The text of a settled file, with what its `lstat` said when it was read.
#[derive(Debug, Clone)]
struct KeptText {
    path: PathBuf,
    stamp: FileStamp,
    max_bytes: u64,
    text: String,
}

/// What tells one version of a file from another: a change of content moves ctime (and the
/// size or mtime, usually); a file put in its place has another inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the file's last change (ctime, and mtime, which a user may set ahead) lies
    /// at least [`SETTLED_AFTER`] before `now`.
    fn settled_at(&self, now: SystemTime, settled_after: Duration) -> bool {
        let Ok(now) = now.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let limit = now.saturating_sub(settled_after);
        let before_limit =
            |(secs, nanos): (i64, i64)| match (u64::try_from(secs), u32::try_from(nanos)) {
                (Ok(secs), Ok(nanos)) => Duration::new(secs, nanos) <= limit,
                _ => false,
            };
        before_limit(self.ctime) && before_limit(self.mtime)
    }
}

impl SourceRoots {
    fn resolve(agent_home: PathBuf, work_dir: PathBuf) -> SourceRoots {
        let resolve = |p: PathBuf| match std::fs::canonicalize(&p) {
            Ok(resolved) => (resolved, true),
            Err(_) => (p, false),
        };
        let (agent_home, home_resolved) = resolve(agent_home);
        let (work_dir, work_resolved) = resolve(work_dir);
        let resolved = home_resolved && work_resolved;
        SourceRoots {
            local: resolved && on_local_file_system(&agent_home) && on_local_file_system(&work_dir),
            agent_home,
            work_dir,
            resolved,
            kept: Vec::new(),
            settled_after: SETTLED_AFTER,
        }
    }

    /// Reads files of `files` on this thread, in order, while each can be read here
    /// ([`Self::read_inline`]); the texts of that prefix (the rest go to the pool).
    fn read_inline_prefix(
        &mut self,
        files: &[SourceFile],
    ) -> Result<Vec<io::Result<String>>, ContextError> {
        let mut texts = Vec::with_capacity(files.len());
        for file in files {
            match self.read_inline(file) {
                Some(text) => texts.push(text?),
                None => break,
            }
        }
        Ok(texts)
    }

    /// [`Self::read_now`] without resolving symlinks, for a regular file of at most
    /// [`INLINE_READ_MAX_BYTES`] directly inside one of the (resolved) folders: `lstat`,
    /// `open(O_NOFOLLOW)`, `fstat`, `read`. The name is not a symlink (checked, then enforced
    /// by the open), so the file is the folder's own: the confinement `canonicalize` would
    /// prove, at a third of the system calls. `None` when the file does not qualify (a
    /// symlink, a subfolder, `..`, too big): the caller reads it the full way. A settled
    /// file unchanged since its last read is not opened again (module header).
    fn read_inline(
        &mut self,
        source: &SourceFile,
    ) -> Option<Result<io::Result<String>, ContextError>> {
        let (id, written) = (source.id.as_str(), source.path.as_str());
        let path = self.work_dir.join(written);
        let directly_inside = matches!(path.components().next_back(), Some(Component::Normal(_)))
            && path
                .parent()
                .is_some_and(|parent| parent == self.agent_home || parent == self.work_dir);
        if !directly_inside {
            return None;
        }
        // Before the `lstat`: a file settled then is settled when it is read.
        let now = SystemTime::now();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) => return Some(Ok(Err(e))),
        };
        if meta.file_type().is_symlink() || meta.len() > INLINE_READ_MAX_BYTES {
            return None;
        }
        if !meta.is_file() {
            return Some(Err(not_regular(id, written, &meta.file_type())));
        }
        let stamp = FileStamp::of(&meta);
        if let Some(kept) = self.kept.iter().find(|kept| kept.path == path) {
            if kept.stamp == stamp && kept.max_bytes == source.max_bytes {
                return Some(Ok(Ok(kept.text.clone())));
            }
        }
        let file = match open_nonblocking(&path, libc::O_NOFOLLOW) {
            Ok(file) => file,
            // Swapped for a symlink since the `lstat`.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return None,
            Err(e) => return Some(Ok(Err(e))),
        };
        let meta = match file.metadata() {
            Ok(meta) => meta,
            Err(e) => return Some(Ok(Err(e))),
        };
        if !meta.is_file() {
            return Some(Err(not_regular(id, written, &meta.file_type())));
        }
        if meta.len() > INLINE_READ_MAX_BYTES.min(source.max_bytes) {
            return None;
        }
        let read = read_text(file, meta.len(), source);
        // The opened file is the one the `lstat` saw, unchanged since a settled moment.
        if let Ok(Ok(text)) = &read {
            if FileStamp::of(&meta) == stamp && stamp.settled_at(now, self.settled_after) {
                self.keep_text(path, stamp, source.max_bytes, text);
            }
        }
        Some(read)
    }

    fn keep_text(&mut self, path: PathBuf, stamp: FileStamp, max_bytes: u64, text: &str) {
        self.kept.retain(|kept| kept.path != path);
        if self.kept.len() >= KEPT_TEXTS_MAX {
            self.kept.remove(0);
        }
        let kept_bytes: usize = self.kept.iter().map(|kept| kept.text.len()).sum();
        if kept_bytes + text.len() > KEPT_BYTES_MAX {
            return;
        }
        self.kept.push(KeptText {
            path,
            stamp,
            max_bytes,
            text: text.to_owned(),
        });
    }

    /// One file of [`SourceReader::read`], on the calling thread.
    fn read_now(&self, source: &SourceFile) -> Result<io::Result<String>, ContextError> {
        let (id, written) = (source.id.as_str(), source.path.as_str());
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
        // `stat` first: opening some devices has effects of its own.
        match std::fs::metadata(&resolved) {
            Ok(meta) if !meta.is_file() => return Err(not_regular(id, written, &meta.file_type())),
            Ok(_) => {}
            Err(e) => return Ok(Err(e)),
        }
        let file = match open_nonblocking(&resolved, 0) {
            Ok(file) => file,
            Err(e) => return Ok(Err(e)),
        };
        match file.metadata() {
            Ok(meta) if !meta.is_file() => Err(not_regular(id, written, &meta.file_type())),
            Ok(meta) => read_text(file, meta.len(), source),
            Err(e) => Ok(Err(e)),
        }
    }
}

/// Opens for reading without waiting: a FIFO without a writer would block a plain open.
/// `O_NONBLOCK` changes nothing for the regular file that is then read.
fn open_nonblocking(path: &Path, extra_flags: libc::c_int) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | extra_flags)
        .open(path)
}

/// Reads `file` (of `size` bytes, as `fstat` said) as UTF-8 text, at most the source's
/// `max_bytes`: a larger file (or one that grew past it while read) is refused, naming the
/// source and the setting. Through `Take`, not `File::read_to_string`, which would ask the
/// kernel for the size again (`fstat`, `lseek`).
fn read_text(
    file: File,
    size: u64,
    source: &SourceFile,
) -> Result<io::Result<String>, ContextError> {
    if size > source.max_bytes {
        return Err(too_large(source));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    if let Err(e) = file
        .take(source.max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
    {
        return Ok(Err(e));
    }
    if bytes.len() as u64 > source.max_bytes {
        return Err(too_large(source));
    }
    Ok(String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    }))
}

fn too_large(source: &SourceFile) -> ContextError {
    ContextError::SourceTooLarge {
        id: source.id.clone(),
        path: source.path.clone(),
        limit: source.max_bytes,
    }
}

/// Whether `path` is on one of the [`LOCAL_FILE_SYSTEMS`] (false when `statfs` fails).
fn on_local_file_system(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|fs| LOCAL_FILE_SYSTEMS.contains(&fs.filesystem_type()))
}

fn not_regular(id: &str, written: &str, file_type: &FileType) -> ContextError {
    ContextError::NotRegularFile {
        id: id.to_string(),
        path: written.to_string(),
        kind: describe(file_type).to_string(),
    }
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
            max_bytes: crate::agent::DEFAULT_SOURCE_MAX_BYTES,
        };
        let mut texts = reader.read(vec![file], &CancellationToken::new()).await?;
        Ok(texts.remove(0))
    }

    /// The refusal of a FIFO as a context source.
    fn assert_refused_as_fifo(refused: &ContextError) {
        assert!(
            matches!(refused, ContextError::NotRegularFile { kind, .. } if kind.contains("FIFO")),
            "{refused:?}"
        );
    }

    /// A batch of one file source.
    fn one(path: &str) -> Vec<SourceFile> {
        vec![SourceFile {
            id: "s".into(),
            path: path.into(),
            max_bytes: crate::agent::DEFAULT_SOURCE_MAX_BYTES,
        }]
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
        assert_refused_as_fifo(&refused);
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
                max_bytes: crate::agent::DEFAULT_SOURCE_MAX_BYTES,
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

    /// Once the folders are resolved (and local), a small file directly inside one is read
    /// on the caller's thread: it is read even with the token already cancelled, where the
    /// blocking pool would answer `Cancelled` at once. A file in a subfolder or over the
    /// inline cap still takes the pool.
    #[tokio::test]
    async fn small_files_directly_inside_local_folders_are_read_on_the_callers_thread() {
        let tmp = folders();
        std::fs::write(tmp.path().join("ws/a.md"), "workspace text").unwrap();
        std::fs::write(tmp.path().join("agent/prompt.md"), "agent text").unwrap();
        std::fs::create_dir(tmp.path().join("ws/sub")).unwrap();
        std::fs::write(tmp.path().join("ws/sub/b.md"), "nested").unwrap();
        let big = "x".repeat(INLINE_READ_MAX_BYTES as usize + 1);
        std::fs::write(tmp.path().join("ws/big.md"), &big).unwrap();
        let folders = ContextFolders::default();
        let (home, work) = (tmp.path().join("agent"), tmp.path().join("ws"));
        let mut reader = SourceReader::new(&home, &work, &folders);
        reader
            .read(one("a.md"), &CancellationToken::new())
            .await
            .unwrap();
        let kept = folders.0.lock().unwrap().clone().unwrap();
        assert!(
            kept.local,
            "{} is not on a file system this test knows as local",
            tmp.path().display()
        );
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let agent_file = format!("{}/prompt.md", kept.agent_home.display());
        let texts = reader
            .read(
                one("a.md").into_iter().chain(one(&agent_file)).collect(),
                &cancelled,
            )
            .await
            .unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "workspace text");
        assert_eq!(texts[1].as_ref().unwrap(), "agent text");
        for pooled in ["sub/b.md", "big.md"] {
            let refused = reader.read(one(pooled), &cancelled).await.unwrap_err();
            assert!(
                matches!(refused, ContextError::Cancelled),
                "{pooled}: {refused:?}"
            );
        }
        let texts = reader
            .read(one("big.md"), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(texts[0].as_ref().unwrap().len(), big.len());
    }

    /// The inline read keeps every refusal of the full one: a FIFO is refused without
    /// blocking, a symlink out of the folders is refused after resolution.
    #[tokio::test]
    async fn an_inline_read_refuses_what_the_full_read_refuses() {
        let tmp = folders();
        std::fs::write(tmp.path().join("ws/a.md"), "text").unwrap();
        nix::unistd::mkfifo(
            &tmp.path().join("ws/fifo.md"),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .unwrap();
        std::fs::write(tmp.path().join("outside.md"), "secret").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside.md"), tmp.path().join("ws/out.md"))
            .unwrap();
        let folders = ContextFolders::default();
        let mut reader =
            SourceReader::new(&tmp.path().join("agent"), &tmp.path().join("ws"), &folders);
        let cancel = CancellationToken::new();
        reader.read(one("a.md"), &cancel).await.unwrap();
        let refused = tokio::time::timeout(
            Duration::from_secs(10),
            reader.read(one("fifo.md"), &cancel),
        )
        .await
        .expect("reading a FIFO must not block")
        .unwrap_err();
        assert_refused_as_fifo(&refused);
        let refused = reader.read(one("out.md"), &cancel).await.unwrap_err();
        assert!(
            matches!(refused, ContextError::OutsideAllowedFolders { .. }),
            "{refused:?}"
        );
        let missing = reader.read(one("missing.md"), &cancel).await.unwrap();
        assert_eq!(
            missing[0].as_ref().unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    /// A reader for `<tmp>/agent` and `<tmp>/ws` that has read `first` once (so its folders
    /// are resolved), with files counting as settled as soon as they are written.
    async fn reader_settling_at_once<'a>(
        tmp: &Path,
        folders: &'a ContextFolders,
        first: &str,
    ) -> SourceReader<'a> {
        let mut reader = SourceReader::new(&tmp.join("agent"), &tmp.join("ws"), folders);
        reader
            .read(one(first), &CancellationToken::new())
            .await
            .unwrap();
        let mut roots = folders.0.lock().unwrap();
        let roots = roots.as_mut().expect("the folders are resolved");
        assert!(
            roots.local,
            "{} is not on a known local file system",
            tmp.display()
        );
        roots.settled_after = Duration::ZERO;
        roots.kept.clear();
        reader
    }

    fn kept_texts(folders: &ContextFolders) -> Vec<String> {
        let roots = folders.0.lock().unwrap();
        roots
            .iter()
            .flat_map(|r| r.kept.iter().map(|k| k.text.clone()))
            .collect()
    }

    /// The system prompt read at every iteration: a settled file unchanged since its last
    /// read is given from the run's copy (the copy, marked here, is what comes back).
    #[tokio::test]
    async fn a_settled_unchanged_file_is_given_from_the_runs_copy() {
        let tmp = folders();
        std::fs::write(tmp.path().join("ws/prompt.md"), "the prompt").unwrap();
        let folders = ContextFolders::default();
        let mut reader = reader_settling_at_once(tmp.path(), &folders, "prompt.md").await;
        let cancel = CancellationToken::new();
        let texts = reader.read(one("prompt.md"), &cancel).await.unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "the prompt");
        assert_eq!(kept_texts(&folders), ["the prompt"]);
        folders.0.lock().unwrap().as_mut().unwrap().kept[0].text = "from the copy".into();
        let texts = reader.read(one("prompt.md"), &cancel).await.unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "from the copy");
    }

    /// Any change the `lstat` can see is read again: another size, another file renamed
    /// into its place (another inode), and a file too recent to be kept is never kept.
    #[tokio::test]
    async fn a_changed_or_recent_file_is_read_again() {
        let tmp = folders();
        let prompt = tmp.path().join("ws/prompt.md");
        std::fs::write(&prompt, "version 1").unwrap();
        let folders = ContextFolders::default();
        let mut reader = reader_settling_at_once(tmp.path(), &folders, "prompt.md").await;
        let cancel = CancellationToken::new();
        reader.read(one("prompt.md"), &cancel).await.unwrap();
        std::fs::write(&prompt, "version 2, longer").unwrap();
        let texts = reader.read(one("prompt.md"), &cancel).await.unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "version 2, longer");
        std::fs::write(tmp.path().join("ws/next.md"), "version 3, longer").unwrap();
        std::fs::rename(tmp.path().join("ws/next.md"), &prompt).unwrap();
        let texts = reader.read(one("prompt.md"), &cancel).await.unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "version 3, longer");
        assert_eq!(kept_texts(&folders), ["version 3, longer"]);

        folders.0.lock().unwrap().as_mut().unwrap().settled_after = SETTLED_AFTER;
        folders.0.lock().unwrap().as_mut().unwrap().kept.clear();
        std::fs::write(&prompt, "just written").unwrap();
        let texts = reader.read(one("prompt.md"), &cancel).await.unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "just written");
        assert!(
            kept_texts(&folders).is_empty(),
            "{:?}",
            kept_texts(&folders)
        );
    }

    /// A kept copy is never given for what took the file's place: a FIFO is refused without
    /// blocking, a symlink out of the folders is refused, a removed file is missing.
    #[tokio::test]
    async fn a_kept_file_replaced_by_a_fifo_a_symlink_or_nothing_is_not_given_from_the_copy() {
        let tmp = folders();
        let prompt = tmp.path().join("ws/prompt.md");
        std::fs::write(tmp.path().join("outside.md"), "secret").unwrap();
        let folders = ContextFolders::default();
        std::fs::write(&prompt, "kept").unwrap();
        let mut reader = reader_settling_at_once(tmp.path(), &folders, "prompt.md").await;
        let cancel = CancellationToken::new();
        let keep = |reader: &mut SourceReader<'_>| {
            std::fs::write(&prompt, "kept").unwrap();
            let kept =
                futures_util::FutureExt::now_or_never(reader.read(one("prompt.md"), &cancel));
            assert_eq!(kept.unwrap().unwrap()[0].as_ref().unwrap(), "kept");
            assert_eq!(kept_texts(&folders), ["kept"]);
            std::fs::remove_file(&prompt).unwrap();
        };
        keep(&mut reader);
        nix::unistd::mkfifo(&prompt, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let refused = tokio::time::timeout(
            Duration::from_secs(10),
            reader.read(one("prompt.md"), &cancel),
        )
        .await
        .expect("reading a FIFO must not block")
        .unwrap_err();
        assert_refused_as_fifo(&refused);
        std::fs::remove_file(&prompt).unwrap();
        keep(&mut reader);
        std::os::unix::fs::symlink(tmp.path().join("outside.md"), &prompt).unwrap();
        let refused = reader.read(one("prompt.md"), &cancel).await.unwrap_err();
        assert!(
            matches!(refused, ContextError::OutsideAllowedFolders { .. }),
            "{refused:?}"
        );
        std::fs::remove_file(&prompt).unwrap();
        keep(&mut reader);
        let missing = reader.read(one("prompt.md"), &cancel).await.unwrap();
        assert_eq!(
            missing[0].as_ref().unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    /// What a run keeps is bounded: a file that would take it past [`KEPT_BYTES_MAX`] is
    /// read every time instead.
    #[tokio::test]
    async fn a_run_keeps_at_most_its_byte_cap_of_texts() {
        let tmp = folders();
        let half = "x".repeat(KEPT_BYTES_MAX / 2 + 1);
        std::fs::write(tmp.path().join("ws/a.md"), &half).unwrap();
        std::fs::write(tmp.path().join("ws/b.md"), &half).unwrap();
        let folders = ContextFolders::default();
        let mut reader = reader_settling_at_once(tmp.path(), &folders, "a.md").await;
        let cancel = CancellationToken::new();
        let both: Vec<SourceFile> = one("a.md").into_iter().chain(one("b.md")).collect();
        let texts = reader.read(both, &cancel).await.unwrap();
        assert!(texts
            .iter()
            .all(|t| t.as_ref().unwrap().len() == half.len()));
        assert_eq!(kept_texts(&folders).len(), 1);
    }

    #[test]
    fn a_file_is_settled_only_when_both_its_times_are_old_enough() {
        let meta = std::fs::metadata(env!("CARGO_MANIFEST_DIR")).unwrap();
        let stamp = FileStamp::of(&meta);
        let now = SystemTime::now();
        assert!(!stamp.settled_at(UNIX_EPOCH, Duration::ZERO));
        assert!(stamp.settled_at(now + Duration::from_secs(5), Duration::from_secs(1)));
        let ahead = FileStamp {
            mtime: (i64::MAX / 2, 0),
            ..stamp
        };
        assert!(!ahead.settled_at(now + Duration::from_secs(5), Duration::from_secs(1)));
    }

    /// A run resolves its folders on its take's trip to the blocking pool: its first build
    /// then reads inline (even with the token cancelled, where the pool would refuse), and
    /// a folder that does not resolve is left for the first build, as before.
    #[tokio::test]
    async fn folders_resolved_at_the_take_let_the_first_read_be_inline() {
        let tmp = folders();
        std::fs::write(tmp.path().join("ws/a.md"), "text").unwrap();
        let (home, work) = (tmp.path().join("agent"), tmp.path().join("ws"));
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let folders = ContextFolders::resolved(&home, &work);
        let texts = SourceReader::new(&home, &work, &folders)
            .read(one("a.md"), &cancelled)
            .await
            .unwrap();
        assert_eq!(texts[0].as_ref().unwrap(), "text");
        let unresolved = ContextFolders::resolved(&tmp.path().join("no-agent"), &work);
        assert!(unresolved.0.lock().unwrap().is_none());
    }

    #[tokio::test]
    async fn a_folder_that_does_not_exist_yet_is_resolved_again_next_time() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        let folders = ContextFolders::default();
        let mut reader =
            SourceReader::new(&tmp.path().join("agent"), &tmp.path().join("ws"), &folders);
        reader
            .read(one("missing.md"), &CancellationToken::new())
            .await
            .unwrap();
        assert!(folders.0.lock().unwrap().is_none());
    }
}
