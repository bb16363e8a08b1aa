//! `io/reply.partial`: the model reply a run is receiving right now, for a separate process
//! to watch (`delta serve`'s run inspector shows it growing). One small JSON object,
//! [`PartialReply`], rewritten in place (no new inode per write or per model call: freeing
//! inodes slows every later file creation on ext4, see BENCHMARKS.md) and marked `complete`
//! when the reply is whole; the THOUGHT in the journal then holds the reply for good.
//!
//! The file is opened `O_NOFOLLOW` and created 0600: a link planted in its place by a tool is
//! refused, not written through. A reader may catch a write half done: the object then does
//! not parse (the bytes of the previous, longer text follow it until the length is cut), and
//! the reader keeps what it had.
//!
//! Must not: decide when to write (the run's model step does, at most every
//! [`MIN_REWRITE_INTERVAL`]), or redact (the text it is given is already redacted).

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The file's name under a run's `io/`.
pub const PARTIAL_REPLY_FILE: &str = "reply.partial";

/// How often, at most, the file is rewritten while a reply streams.
pub const MIN_REWRITE_INTERVAL: Duration = Duration::from_millis(250);

/// The reply so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialReply {
    /// The iteration whose model call this is.
    pub iteration: u32,
    /// The reply is whole (its THOUGHT follows in the journal), or the call ended without
    /// one (failed, stopped).
    pub complete: bool,
    /// The reply's text so far.
    pub content: String,
    /// The reasoning text so far (models that send it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    /// When this was written (UTC, RFC 3339 with milliseconds).
    pub updated_at: String,
}

/// `<run_dir>/io/reply.partial`.
pub fn partial_reply_path(run_dir: &Path) -> PathBuf {
    run_dir.join("io").join(PARTIAL_REPLY_FILE)
}

/// Writes `reply` over the file at `path` (created 0600 if missing; never through a link,
/// symbolic or hard, and only into a regular file). A refused file is an `InvalidData`
/// error whose text says why.
pub fn write_partial_reply(path: &Path, reply: &PartialReply) -> io::Result<()> {
    let bytes = serde_json::to_vec(reply).map_err(io::Error::other)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false).mode(0o600);
    crate::private_file::write_own_file(path, &options, &bytes).map(drop)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_shorter_reply_replaces_a_longer_one_and_a_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(PARTIAL_REPLY_FILE);
        let long = PartialReply {
            iteration: 1,
            content: "a long first reply".into(),
            ..PartialReply::default()
        };
        write_partial_reply(&path, &long).unwrap();
        let short = PartialReply {
            iteration: 2,
            content: "b".into(),
            ..PartialReply::default()
        };
        write_partial_reply(&path, &short).unwrap();
        let read: PartialReply = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(read, short);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let target = tmp.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(write_partial_reply(&link, &short).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
