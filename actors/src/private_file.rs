//! Writing delta's own files beside a run or an orchestration: created with mode 0600
//! whatever the umask, never through a symbolic link, only into a regular file (a FIFO a
//! tool left in a file's place would block the open or the write), and rewritten without
//! leaving an older, longer text's tail behind.
//!
//! A ground-floor helper: `workspace`, `metadata`, `plan::state`, hooks, tools and the
//! cluster handoff all write through it, so it imports nothing of the engine but
//! [`crate::bounded_read`]. Must not: name or place files (the callers own their layouts).

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Creates or truncates `path` with mode 0600 (whatever the umask) and writes `bytes`: for
/// the files delta keeps beside a run (hook results, an orchestration's copies and summary,
/// sensitive answers). Never through a symbolic link, and only into a regular file.
pub(crate) fn write_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true).mode(0o600);
    open_own_file(path, &options)?.write_all(bytes)
}

/// Opens one of delta's own files for writing: `O_NOFOLLOW` (a link a tool put in its place
/// would send the write elsewhere) and regular files only (a FIFO would block the open, or
/// the write).
pub(crate) fn open_own_file(
    path: &Path,
    options: &std::fs::OpenOptions,
) -> io::Result<std::fs::File> {
    Ok(crate::bounded_read::open_with(
        path,
        options,
        crate::bounded_read::Links::Refuse,
    )?)
}

/// Writes `bytes` over `file` from its start and cuts off what an older, longer text left
/// behind; a file no longer than `bytes` is not truncated at all (ext4 charges a truncate
/// even to the same length).
pub(crate) fn overwrite(file: &mut std::fs::File, bytes: &[u8]) -> io::Result<()> {
    let old_len = file.metadata()?.len();
    file.write_all(bytes)?;
    let new_len = bytes.len() as u64;
    if old_len > new_len {
        file.set_len(new_len)?;
    }
    Ok(())
}
