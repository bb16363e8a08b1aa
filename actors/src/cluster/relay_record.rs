//! cluster::relay_record — `<orchestration dir>/slurm/relay.json`: where the orchestration's
//! relay listened and the SHA-256 digests of the tokens its jobs were given. A resumed
//! orchestration listens on the same address and accepts those tokens again, so jobs that
//! kept running while the orchestrating process was dead reach the model once it is back.
//! Only digests are written: a digest cannot be sent as a token.
//!
//! Must not: write a token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a resumed orchestration needs of its earlier relays.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayRecord {
    /// The address the latest relay listened on; `None` when no relay was recorded.
    pub listen: Option<SocketAddr>,
    /// Hex SHA-256 digests of the tokens given to jobs, oldest first, at most 64.
    pub token_digests: Vec<String>,
}

/// At most this many digests are kept (one per start or resume).
const DIGESTS: usize = 64;

/// The largest record read back.
const RECORD_BYTES: u64 = 64 * 1024;

/// Where the record is kept: `<orchestration dir>/slurm/relay.json`.
pub fn record_path(orchestration_dir: &Path) -> PathBuf {
    orchestration_dir.join("slurm").join("relay.json")
}

/// The record, or an empty one when there is none (or it does not read). Bounded: 64 digests
/// and an address are well under 64 KiB, so a larger file is not ours to parse.
pub fn read_record(orchestration_dir: &Path) -> RelayRecord {
    crate::input::read_bounded(&record_path(orchestration_dir), RECORD_BYTES)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// Records `listen` and adds `digest` (the oldest dropped past the cap).
pub fn write_record(
    orchestration_dir: &Path,
    listen: SocketAddr,
    digest: String,
) -> std::io::Result<()> {
    let mut record = read_record(orchestration_dir);
    record.listen = Some(listen);
    record.token_digests.push(digest);
    let excess = record.token_digests.len().saturating_sub(DIGESTS);
    record.token_digests.drain(..excess);
    let path = record_path(orchestration_dir);
    if let Some(parent) = path.parent() {
        super::create_private_dirs(parent)?;
    }
    let spare = path.with_extension("json.tmp");
    let text = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
    crate::workspace::write_private_file(&spare, &text)?;
    std::fs::rename(spare, path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn digests_accumulate_and_no_token_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let token = "secret-token-0123456789";
        write_record(dir.path(), addr, crate::relay::token_digest(token)).unwrap();
        write_record(dir.path(), addr, "d2".into()).unwrap();
        let record = read_record(dir.path());
        assert_eq!(record.listen, Some(addr));
        assert_eq!(record.token_digests.len(), 2);
        let text = std::fs::read_to_string(record_path(dir.path())).unwrap();
        assert!(!text.contains(token));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(record_path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "mode {mode:o}");
    }

    #[test]
    fn an_oversized_record_reads_as_none_instead_of_being_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let path = record_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let digests = vec!["d".repeat(64); 2000];
        let huge = serde_json::json!({"listen": "127.0.0.1:4000", "token_digests": digests});
        std::fs::write(&path, huge.to_string()).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > RECORD_BYTES);
        assert_eq!(read_record(dir.path()).token_digests.len(), 0);
    }
}
