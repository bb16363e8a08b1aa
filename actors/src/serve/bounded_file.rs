//! Bounded reads of the files of a run or an orchestration for the page's batch view and run
//! inspector: scheduling journals, io/ records and tool outputs, which agents' tools can
//! replace (they run as the same user, in the workspace). Each file is opened
//! `O_NONBLOCK | O_NOFOLLOW` (a FIFO without a writer would block the open forever, a link
//! could point at `/dev/zero` or outside the run), must be a regular file (`fstat`), and is
//! read up to a cap: whole when small enough, else refused, or (for outputs) its head and
//! tail only.
//!
//! Opening is the engine-wide bounded reader's (`crate::bounded_read`); what this adds is
//! what the views need on top of it: a size cap that says the size ([`read_capped`]), a
//! live file's new bytes ([`read_from`]) and a large output's head and tail
//! ([`read_head_tail`]). A run's journal and record have readers of their own in the
//! journal and metadata modules ([`super::run_files`]).
//!
//! Must not: write, create or follow anything; know any file's format.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file does not exist.
    #[error("it does not exist")]
    Missing,
    /// A symbolic link where delta keeps a file of its own.
    #[error("it is a symbolic link, which delta does not follow here (something other than delta put it there)")]
    Symlink,
    /// A FIFO, a device, a socket or a folder.
    #[error("it is a {0}, not a regular file (something other than delta put it there)")]
    NotRegular(&'static str),
    /// Larger than the cap of its kind.
    #[error("it is {size} bytes, more than the {cap} bytes read of such a file")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// Any other failure of the system.
    #[error("{0}")]
    Io(io::Error),
}

impl FileError {
    /// The file is not there (yet): not an error for a file that comes later.
    pub fn is_missing(&self) -> bool {
        matches!(self, FileError::Missing)
    }
}

/// Opens a regular file without following a link and without blocking on a FIFO (the
/// engine's own rules: [`crate::bounded_read::open`]); returns it with its size.
pub fn open_regular(path: &Path) -> Result<(File, u64), FileError> {
    use crate::bounded_read::{open, Links, ReadError};
    let file = open(path, Links::Refuse).map_err(|e| match e {
        e if e.is_not_found() => FileError::Missing,
        ReadError::Symlink => FileError::Symlink,
        ReadError::NotRegular { kind } => FileError::NotRegular(kind),
        other => FileError::Io(other.into()),
    })?;
    let size = file.metadata().map_err(FileError::Io)?.len();
    Ok((file, size))
}

/// The whole file, when it is at most `cap` bytes (re-checked while reading: it may grow).
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, FileError> {
    let (file, size) = open_regular(path)?;
    if size > cap {
        return Err(FileError::TooLarge { size, cap });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(FileError::Io)?;
    if bytes.len() as u64 > cap {
        return Err(FileError::TooLarge {
            size: bytes.len() as u64,
            cap,
        });
    }
    Ok(bytes)
}

/// At most `cap` bytes from `offset` on (for a file read in steps, such as a scheduling
/// journal); nothing when the file is not longer than `offset`.
pub fn read_from(path: &Path, offset: u64, cap: u64) -> Result<Vec<u8>, FileError> {
    let (mut file, size) = open_regular(path)?;
    if offset >= size {
        return Ok(Vec::new());
    }
    file.seek(SeekFrom::Start(offset)).map_err(FileError::Io)?;
    let mut bytes = Vec::with_capacity((size - offset).min(cap) as usize);
    file.take(cap)
        .read_to_end(&mut bytes)
        .map_err(FileError::Io)?;
    Ok(bytes)
}

/// A file's head and tail, as text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeadTail {
    /// The first bytes (all of them when the file is small).
    pub head: String,
    /// The last bytes, when the file is larger than head + tail; empty otherwise.
    pub tail: String,
    /// The file's size.
    pub bytes: u64,
    /// Bytes between the head and the tail that were not read.
    pub omitted: u64,
}

/// The first `head` and last `tail` bytes of a file (all of it when it is not larger than
/// both), decoded as UTF-8 with replacement.
pub fn read_head_tail(path: &Path, head: u64, tail: u64) -> Result<HeadTail, FileError> {
    let (mut file, size) = open_regular(path)?;
    let mut first = Vec::new();
    (&mut file)
        .take(head.saturating_add(tail).min(size))
        .read_to_end(&mut first)
        .map_err(FileError::Io)?;
    if size <= head.saturating_add(tail) {
        return Ok(HeadTail {
            head: String::from_utf8_lossy(&first).into_owned(),
            tail: String::new(),
            bytes: size,
            omitted: 0,
        });
    }
    first.truncate(head as usize);
    file.seek(SeekFrom::Start(size - tail))
        .map_err(FileError::Io)?;
    let mut last = Vec::new();
    file.take(tail)
        .read_to_end(&mut last)
        .map_err(FileError::Io)?;
    Ok(HeadTail {
        head: String::from_utf8_lossy(&first).into_owned(),
        tail: String::from_utf8_lossy(&last).into_owned(),
        bytes: size,
        omitted: size - head - tail,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_link_and_a_folder_are_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read_capped(&fifo, 10),
            Err(FileError::NotRegular(_))
        ));
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        assert!(matches!(read_capped(&link, 10), Err(FileError::Symlink)));
        assert!(matches!(
            read_capped(tmp.path(), 10),
            Err(FileError::NotRegular("directory"))
        ));
        assert!(read_capped(&tmp.path().join("none"), 10)
            .unwrap_err()
            .is_missing());
    }

    #[test]
    fn caps_offsets_and_head_and_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, "0123456789").unwrap();
        assert!(matches!(
            read_capped(&path, 9),
            Err(FileError::TooLarge { size: 10, cap: 9 })
        ));
        assert_eq!(read_capped(&path, 10).unwrap(), b"0123456789");
        assert_eq!(read_from(&path, 4, 3).unwrap(), b"456");
        assert!(read_from(&path, 10, 3).unwrap().is_empty());
        let cut = read_head_tail(&path, 3, 2).unwrap();
        assert_eq!(
            (cut.head.as_str(), cut.tail.as_str(), cut.omitted),
            ("012", "89", 5)
        );
        let whole = read_head_tail(&path, 8, 2).unwrap();
        assert_eq!((whole.head.as_str(), whole.omitted), ("0123456789", 0));
    }
}
