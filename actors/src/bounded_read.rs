//! bounded_read — the one way delta opens and reads a file that a tool may have replaced:
//! the run folders under `<workspace>/.delta/` (metadata, journal, lock, `secrets/`,
//! orchestration files), `sessions.json`, the `.env` files, ...
//!
//! Each read is bounded in time and in memory. Opened `O_NONBLOCK` (a FIFO without a writer
//! would block the open forever) and `O_NOFOLLOW` when the name is delta's own (a symlink to
//! `/dev/zero` or to a file elsewhere is refused, never followed); the opened descriptor must
//! be a regular file (`fstat`: no FIFO, device, socket or directory), at most `max_bytes`
//! long (checked before reading, and again while reading, since the file may grow), and, for
//! journals, at most `max_lines` lines. Where a link may be followed (a file the user names
//! or keeps, such as `.env`), the target's type is checked before opening it: opening some
//! devices has effects of its own.
//!
//! What it cannot bound: a read from a file system that stops answering (a hung NFS or FUSE
//! mount). Callers that scan many folders run those scans where they can be abandoned
//! (`serve`'s runs view gives each workspace a deadline).
//!
//! Must not: write, create or parse anything; know any file's format (callers do, and name
//! the file in their errors, with this module's reason after it).

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// How much of a file a reader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Most bytes.
    pub max_bytes: u64,
    /// Most lines (`\n`-terminated, a last unterminated one counted too), for line-based
    /// files; `None`: not counted.
    pub max_lines: Option<u64>,
}

impl Limit {
    /// At most `max_bytes` bytes, lines not counted.
    pub const fn bytes(max_bytes: u64) -> Limit {
        Limit {
            max_bytes,
            max_lines: None,
        }
    }

    /// This limit, also at most `max_lines` lines.
    pub const fn lines(self, max_lines: u64) -> Limit {
        Limit {
            max_bytes: self.max_bytes,
            max_lines: Some(max_lines),
        }
    }
}

const MIB: u64 = 1024 * 1024;

/// A run's `metadata.json` (the task is in it).
pub const METADATA: Limit = Limit::bytes(64 * MIB);
/// A run's or an orchestration's `journal.jsonl`: far beyond any run delta can drive (each
/// tool result is cut to a few KiB for the model), small enough to read into memory.
pub const JOURNAL: Limit = Limit::bytes(512 * MIB).lines(4_000_000);
/// A small JSON record delta writes (an orchestration's `summary.json`, `vars.json`, serve's
/// `sessions.json`).
pub const RECORD: Limit = Limit::bytes(64 * MIB);
/// One sensitive answer under a run's `secrets/`, or an answer file.
pub const ANSWER: Limit = Limit::bytes(MIB);
/// A configuration file a user keeps beside an agent or a workspace (`.env`, agent files).
pub const CONFIG: Limit = Limit::bytes(16 * MIB);
/// A one-line marker file (`LAST_USED`, a pid, an error message left for the next reader).
pub const MARKER: Limit = Limit::bytes(64 * 1024);

/// Whether the last component of a path may be a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// delta's own name in delta's own folder: a link there was put by someone else
    /// (`O_NOFOLLOW`).
    Refuse,
    /// A file the user names or keeps (it may be a link to the real one): followed, but
    /// only to a regular file.
    Follow,
}

/// Why a file was not read. Its text is a reason to print after the file's path.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The system's own error (`NotFound` included).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The name is a symbolic link where delta keeps a file of its own.
    #[error(
        "it is a symbolic link, and delta does not follow links for its own files (hint: \
         something other than delta replaced it; remove the link, and restore the file if \
         you have it)"
    )]
    Symlink,
    /// A FIFO, device, socket or directory.
    #[error(
        "it is a {kind}, not a regular file (hint: delta reads only plain files here; \
         something other than delta put it there: remove it)"
    )]
    NotRegular {
        /// What it is, in words.
        kind: &'static str,
    },
    /// Over the byte limit.
    #[error(
        "it is larger than {limit} bytes, the most delta reads of this file (hint: delta \
         did not write it this large; move it away)"
    )]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// Over the line limit.
    #[error(
        "it has more than {limit} lines, the most delta reads of this file (hint: delta did \
         not write it this long; move it away)"
    )]
    TooManyLines {
        /// The limit.
        limit: u64,
    },
}

impl ReadError {
    /// The file does not exist (nor does a folder on its path).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

impl From<ReadError> for io::Error {
    /// For callers whose errors carry an `io::Error`: the system's error as it was, else an
    /// `InvalidData` error whose text is the reason.
    fn from(error: ReadError) -> io::Error {
        match error {
            ReadError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// What a file type is, in words ("FIFO", "directory", ...).
pub fn describe(file_type: &std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "FIFO (named pipe)"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Opens `path` for reading: a regular file, never blocking on the open (see the module
/// header). The descriptor is back in blocking mode.
pub fn open(path: &Path, links: Links) -> Result<File, ReadError> {
    let mut options = OpenOptions::new();
    options.read(true);
    open_with(path, &options, links)
}

/// Opens `path` with `options` (read, write, append, create...) under the same rules as
/// [`open`]: regular file only, `O_NOFOLLOW` with [`Links::Refuse`], no blocking open.
pub fn open_with(path: &Path, options: &OpenOptions, links: Links) -> Result<File, ReadError> {
    open_with_metadata(path, options, links).map(|(file, _)| file)
}

/// [`open_with`], with the opened file's metadata (the `fstat` the type check made), for
/// callers that need its size or link count too.
pub fn open_with_metadata(
    path: &Path,
    options: &OpenOptions,
    links: Links,
) -> Result<(File, std::fs::Metadata), ReadError> {
    if links == Links::Follow {
        // The target's type before opening it: opening some devices does something.
        match std::fs::metadata(path) {
            Ok(meta) if !meta.is_file() => {
                return Err(ReadError::NotRegular {
                    kind: describe(&meta.file_type()),
                })
            }
            Ok(_) => {}
            // Let the open report it (or create the file).
            Err(_) => {}
        }
    }
    let mut options = options.clone();
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    options.custom_flags(flags);
    let file = options.open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) if links == Links::Refuse => ReadError::Symlink,
        // A FIFO without a reader (opened for writing), a socket: say what it is.
        Some(libc::ENXIO | libc::ENODEV | libc::EOPNOTSUPP) => {
            match std::fs::symlink_metadata(path) {
                Ok(meta) if !meta.is_file() => ReadError::NotRegular {
                    kind: describe(&meta.file_type()),
                },
                _ => ReadError::Io(e),
            }
        }
        _ => ReadError::Io(e),
    })?;
    let meta = file.metadata()?;
    check_regular_type(&meta)?;
    clear_nonblocking(&file)?;
    Ok((file, meta))
}

/// Refuses anything but a regular file, checked on the descriptor.
pub fn check_regular(file: &File) -> Result<(), ReadError> {
    check_regular_type(&file.metadata()?)
}

fn check_regular_type(meta: &std::fs::Metadata) -> Result<(), ReadError> {
    let file_type = meta.file_type();
    if file_type.is_file() {
        Ok(())
    } else {
        Err(ReadError::NotRegular {
            kind: describe(&file_type),
        })
    }
}

fn clear_nonblocking(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFL/F_SETFL on a descriptor `file` keeps open; no memory is touched.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Reads all of `path` (see [`open`]) within `limit`.
pub fn read(path: &Path, limit: Limit, links: Links) -> Result<Vec<u8>, ReadError> {
    read_open(&open(path, links)?, limit)
}

/// [`read`], as UTF-8 text (invalid UTF-8 is an `InvalidData` I/O error).
pub fn read_to_string(path: &Path, limit: Limit, links: Links) -> Result<String, ReadError> {
    String::from_utf8(read(path, limit, links)?).map_err(|_| {
        ReadError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })
}

/// Reads `file` (a regular file opened by [`open`]/[`open_with`]) from its current offset to
/// the end, within `limit`.
pub fn read_open(file: &File, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let size = file.metadata()?.len();
    if size > limit.max_bytes {
        return Err(ReadError::TooLarge {
            limit: limit.max_bytes,
        });
    }
    // One byte past the limit tells a file that grew since the `fstat`.
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    file.take(limit.max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit.max_bytes {
        return Err(ReadError::TooLarge {
            limit: limit.max_bytes,
        });
    }
    if let Some(max_lines) = limit.max_lines {
        let newlines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
        let unterminated = u64::from(bytes.last().is_some_and(|b| *b != b'\n'));
        if newlines + unterminated > max_lines {
            return Err(ReadError::TooManyLines { limit: max_lines });
        }
    }
    Ok(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn fifo(dir: &Path, name: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        path
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metadata.json");
        std::fs::write(&path, "{}\n").unwrap();
        assert_eq!(read(&path, METADATA, Links::Refuse).unwrap(), b"{}\n");
        assert_eq!(
            read_to_string(&path, METADATA, Links::Follow).unwrap(),
            "{}\n"
        );
    }

    /// Regression (issue 24): a FIFO in place of a file delta reads hung the reader for good.
    #[test]
    fn a_fifo_is_refused_at_once_whichever_the_link_rule() {
        let dir = tempfile::tempdir().unwrap();
        let path = fifo(dir.path(), "journal.jsonl");
        let started = Instant::now();
        for links in [Links::Refuse, Links::Follow] {
            let error = read(&path, JOURNAL, links).unwrap_err();
            assert!(
                matches!(error, ReadError::NotRegular { kind } if kind.starts_with("FIFO")),
                "{error}"
            );
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// Regression (issue 24): a symlink to /dev/zero read until memory ran out.
    #[test]
    fn a_link_to_a_device_is_refused_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metadata.json");
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(matches!(
            read(&path, METADATA, Links::Refuse).unwrap_err(),
            ReadError::Symlink
        ));
        let error = read(&path, METADATA, Links::Follow).unwrap_err();
        assert!(
            matches!(
                error,
                ReadError::NotRegular {
                    kind: "character device"
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("not a regular file"));
    }

    #[test]
    fn a_link_to_a_regular_file_is_followed_only_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real.env");
        std::fs::write(&target, "A=1\n").unwrap();
        let link = dir.path().join(".env");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(read(&link, CONFIG, Links::Follow).unwrap(), b"A=1\n");
        assert!(matches!(
            read(&link, CONFIG, Links::Refuse).unwrap_err(),
            ReadError::Symlink
        ));
    }

    #[test]
    fn a_fifo_opened_for_writing_is_refused_at_once_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = fifo(dir.path(), "journal.jsonl");
        let mut append = OpenOptions::new();
        append.append(true).create(true);
        let error = open_with(&path, &append, Links::Refuse).unwrap_err();
        assert!(
            matches!(error, ReadError::NotRegular { kind } if kind.starts_with("FIFO")),
            "{error}"
        );
    }

    #[test]
    fn a_directory_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let error = read(dir.path(), RECORD, Links::Refuse).unwrap_err();
        assert!(matches!(error, ReadError::NotRegular { kind: "directory" }));
    }

    #[test]
    fn sizes_and_lines_over_the_limit_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        std::fs::write(&path, "a\nb\nc").unwrap();
        assert!(matches!(
            read(&path, Limit::bytes(4), Links::Refuse).unwrap_err(),
            ReadError::TooLarge { limit: 4 }
        ));
        assert_eq!(
            read(&path, Limit::bytes(5), Links::Refuse).unwrap().len(),
            5
        );
        assert!(matches!(
            read(&path, Limit::bytes(100).lines(2), Links::Refuse).unwrap_err(),
            ReadError::TooManyLines { limit: 2 }
        ));
        assert!(read(&path, Limit::bytes(100).lines(3), Links::Refuse).is_ok());
    }

    #[test]
    fn missing_is_a_not_found_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let error = read(&dir.path().join("nope"), RECORD, Links::Refuse).unwrap_err();
        assert!(error.is_not_found());
        assert_eq!(io::Error::from(error).kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn an_opened_file_is_back_in_blocking_mode() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        std::fs::write(&path, "").unwrap();
        let file = open(&path, Links::Refuse).unwrap();
        // SAFETY: F_GETFL on a descriptor the test holds.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
    }
}
