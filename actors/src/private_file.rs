//! Writing delta's own files beside a run or an orchestration: created with mode 0600
//! whatever the umask, never through a symbolic link, only into a regular file (a FIFO a
//! tool left in a file's place would block the open or the write), never into a file that
//! has another name (a hard link a tool planted: the write would change the file under its
//! other name, anywhere on the file system), and rewritten without leaving an older, longer
//! text's tail behind.
//!
//! Every writer of delta's files checks a file's names on the descriptor it writes through,
//! before its first write ([`refuse_other_names`]); a file is never truncated at its open,
//! since an `O_TRUNC` open would empty a hard-linked file before the check could refuse it.
//!
//! A ground-floor helper: `workspace`, `metadata`, `journal`, `plan::state`, hooks, tools,
//! sessions and the cluster handoff all write through it, so it imports nothing of the
//! engine but [`crate::bounded_read`]. Must not: name or place files (the callers own their
//! layouts).

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// A file delta was about to write has other names (hard links) besides the one delta
/// gives it. Its text is a reason to print after the file's path.
#[derive(Debug, thiserror::Error)]
#[error(
    "it has {links} names (hard links), so writing it would also change the file under its \
     other name; delta writes only files that are its own (hint: something other than delta \
     linked it there; remove it, and delta makes its own again)"
)]
pub struct OtherNames {
    /// The file's link count.
    pub links: u64,
}

/// Creates or rewrites `path` with mode 0600 (whatever the umask) and writes `bytes`: for
/// the files delta keeps beside a run (hook results, an orchestration's copies and summary,
/// sensitive answers). Never through a symbolic link, only into a regular file with no
/// other name.
pub(crate) fn write_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false).mode(0o600);
    write_own_file(path, &options, bytes).map(drop)
}

/// Opens one of delta's own files for writing: `O_NOFOLLOW` (a link a tool put in its place
/// would send the write elsewhere), regular files only (a FIFO would block the open, or the
/// write), and no other name ([`refuse_other_names`]). `options` must not truncate: the
/// check comes after the open (use [`overwrite_from`]).
pub(crate) fn open_own_file(path: &Path, options: &std::fs::OpenOptions) -> io::Result<File> {
    open_own_file_and_len(path, options).map(|(file, _)| file)
}

/// [`open_own_file`] then [`overwrite_from`] with `bytes`, on the one `fstat` the open made (a
/// run writes a dozen such files per iteration: the two further `fstat`s were a tenth of
/// its system calls). The written file, for a caller that syncs it.
pub(crate) fn write_own_file(
    path: &Path,
    options: &std::fs::OpenOptions,
    bytes: &[u8],
) -> io::Result<File> {
    let (mut file, len) = open_own_file_and_len(path, options)?;
    overwrite_from(&mut file, len, bytes)?;
    Ok(file)
}

/// [`open_own_file`], with the file's length as its open found it (for [`overwrite_from`]).
pub(crate) fn open_own_file_and_len(
    path: &Path,
    options: &std::fs::OpenOptions,
) -> io::Result<(File, u64)> {
    let (file, meta) =
        crate::bounded_read::open_with_metadata(path, options, crate::bounded_read::Links::Refuse)?;
    refuse_other_names_of(&meta, None)?;
    Ok((file, meta.len()))
}

/// Refuses `file` when it has a name besides the one it was opened by (a link count above
/// 1), or besides that one and `partner` when `partner` is a second name delta itself gives
/// the same file (a run's `lock`, which is a hard link to its `journal.jsonl`). Checked on
/// the descriptor, so what is refused is the file that would be written.
pub(crate) fn refuse_other_names(file: &File, partner: Option<&Path>) -> io::Result<()> {
    refuse_other_names_of(&file.metadata()?, partner)
}

/// [`refuse_other_names`] on the `fstat` of the descriptor to be written.
fn refuse_other_names_of(meta: &std::fs::Metadata, partner: Option<&Path>) -> io::Result<()> {
    let own_names = match partner {
        // The name itself, never what a link there points to.
        Some(partner) => match std::fs::symlink_metadata(partner) {
            Ok(other) if other.dev() == meta.dev() && other.ino() == meta.ino() => 2,
            _ => 1,
        },
        None => 1,
    };
    if meta.nlink() > own_names {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            OtherNames {
                links: meta.nlink(),
            },
        ));
    }
    Ok(())
}

/// Whether `error` is [`refuse_other_names`]'s refusal.
pub(crate) fn is_other_names(error: &io::Error) -> bool {
    other_names(error).is_some()
}

/// [`refuse_other_names`]'s refusal in `error`, if that is what it is.
pub(crate) fn other_names(error: &io::Error) -> Option<&OtherNames> {
    error.get_ref()?.downcast_ref::<OtherNames>()
}

/// Writes `bytes` over `file` (`old_len` bytes long, as its open found it) from its start
/// and cuts off what an older, longer text left behind; a file no longer than `bytes` is not
/// truncated at all (ext4 charges a truncate even to the same length).
pub(crate) fn overwrite_from(file: &mut File, old_len: u64, bytes: &[u8]) -> io::Result<()> {
    file.write_all(bytes)?;
    let new_len = bytes.len() as u64;
    if old_len > new_len {
        file.set_len(new_len)?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "private_file_tests.rs"]
mod every_writer;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_a_second_name_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let users = dir.path().join("users-file");
        std::fs::write(&users, "the user's text\n").unwrap();
        let own = dir.path().join("record.json");
        std::fs::hard_link(&users, &own).unwrap();
        let error = write_private_file(&own, b"{}").unwrap_err();
        assert!(is_other_names(&error), "{error}");
        assert!(
            error.to_string().contains("2 names (hard links)"),
            "{error}"
        );
        assert_eq!(
            std::fs::read_to_string(&users).unwrap(),
            "the user's text\n"
        );
        // Its own again (the other name gone), it is written.
        std::fs::remove_file(&users).unwrap();
        write_private_file(&own, b"{}").unwrap();
        assert_eq!(std::fs::read(&own).unwrap(), b"{}");
    }

    #[test]
    fn a_second_name_delta_gives_the_file_itself_is_allowed_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal.jsonl");
        std::fs::write(&journal, "").unwrap();
        let lock = dir.path().join("lock");
        std::fs::hard_link(&journal, &lock).unwrap();
        let file = File::open(&journal).unwrap();
        refuse_other_names(&file, Some(&lock)).unwrap();
        assert!(refuse_other_names(&file, None).is_err());
        // A third name is someone else's.
        std::fs::hard_link(&journal, dir.path().join("elsewhere")).unwrap();
        assert!(refuse_other_names(&file, Some(&lock)).is_err());
    }
}
