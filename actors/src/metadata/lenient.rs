//! A lenient read of `metadata.json` for listings and views (`delta serve`'s run inspector
//! and batch view): a record some of whose fields are missing (cut down by hand, written by
//! a tool, or by an older delta) still reads, its missing fields as their defaults, so a
//! view shows what the record does say. The status is the one field a record cannot do
//! without.
//!
//! Must not: write anything, or be used where a run is taken or changed: the engine reads
//! with [`super::read_metadata`], which refuses a record that is not whole.

use std::path::Path;

use serde_json::{Map, Value};

use super::{read_twice_if_torn, Fields, MetadataError, RunMetadata};

/// The fields [`RunMetadata`] cannot read without, filled in when missing (the run id from
/// its folder's name, the others empty). A field renamed in `RunMetadata` and not here makes
/// the lenient read of a partial record fail, which the tests below catch.
const REQUIRED_TEXT: [&str; 7] = [
    "run_id",
    "agent_name",
    "created_at",
    "updated_at",
    "initial_message",
    "agent_home",
    "work_dir",
];

/// Reads `<run_dir>/metadata.json` as [`super::read_metadata`] does (bounded, never through a
/// link, the original engine's records converted, read again when caught mid-exchange),
/// except that missing fields other than `status` read as their defaults.
pub fn read_metadata_lenient(run_dir: &Path) -> Result<RunMetadata, MetadataError> {
    read_twice_if_torn(run_dir, Fields::Lenient)
}

/// Completes a record of our format with the fields it lacks (see [`REQUIRED_TEXT`]).
pub(super) fn fill_missing_fields(run_dir: &Path, object: &mut Map<String, Value>) {
    for key in REQUIRED_TEXT {
        if object.contains_key(key) {
            continue;
        }
        let default = match key {
            "run_id" => run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            _ => String::new(),
        };
        object.insert(key.to_string(), Value::String(default));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::protocol::RunStatus;

    fn record(text: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("metadata.json"), text).unwrap();
        tmp
    }

    #[test]
    fn a_partial_record_reads_with_defaults_and_a_whole_one_as_the_strict_read_does() {
        let tmp = record(
            r#"{"status":"RUNNING","created_at":"2026-11-26T10:00:02.000Z","iterations":2,
                "usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4},"error":"llm_error: x"}"#,
        );
        let strict = super::super::read_metadata(tmp.path()).unwrap_err();
        assert!(matches!(strict, MetadataError::Parse { .. }), "{strict}");
        let meta = read_metadata_lenient(tmp.path()).unwrap();
        assert_eq!(meta.status, RunStatus::Running);
        assert_eq!(
            (
                meta.iterations,
                meta.usage.total_tokens,
                meta.created_at.as_str()
            ),
            (2, 4, "2026-11-26T10:00:02.000Z")
        );
        let folder = tmp.path().file_name().unwrap().to_string_lossy();
        assert_eq!(meta.run_id, folder);
        assert_eq!(meta.agent_name, "");
        assert_eq!(meta.error.unwrap().to_string(), "llm_error: x");
        let whole = super::super::tests::sample("r1");
        super::super::write_metadata(tmp.path(), &whole).unwrap();
        assert_eq!(read_metadata_lenient(tmp.path()).unwrap(), whole);
    }

    #[test]
    fn a_record_without_a_status_or_not_json_or_a_link_is_still_refused() {
        let tmp = record(r#"{"agent_name":"a"}"#);
        let error = read_metadata_lenient(tmp.path()).unwrap_err();
        assert!(error.to_string().contains("status"), "{error}");
        let tmp = record("{not json");
        assert!(matches!(
            read_metadata_lenient(tmp.path()),
            Err(MetadataError::Parse { .. })
        ));
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/hostname", tmp.path().join("metadata.json")).unwrap();
        let error = read_metadata_lenient(tmp.path()).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(matches!(
            read_metadata_lenient(&tmp.path().join("none")),
            Err(MetadataError::NotFound { .. })
        ));
    }
}
