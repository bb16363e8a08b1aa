//! Writing metadata.json without sensitive answers: the record's free text (the task, the
//! final answer, the error, and any text field added later) is passed through the run's
//! [`SecretSet`] on the way to disk; the caller's record keeps the real values.
//!
//! Must not: redact the fields readers match on (ids, names, paths, times, status).

use std::path::Path;

use serde_json::Value;

use super::{write_metadata_with, MetadataError, RunMetadata, METADATA_FILE};
use crate::redact::SecretSet;

/// Fields that identify or locate the run rather than carry conversation text. Everything
/// else is redacted, so a new text field is covered without being listed.
const NOT_FREE_TEXT: [&str; 13] = [
    "run_id",
    "workspace_id",
    "orchestration_id",
    "agent_name",
    "status",
    "created_at",
    "updated_at",
    "end_time",
    "start_time",
    "agent_home",
    "work_dir",
    "hostname",
    "process_name",
];

/// [`write_metadata_with`], with every sensitive answer in the record's free text replaced
/// by its marker.
pub(crate) fn write_metadata_redacted(
    run_dir: &Path,
    meta: &RunMetadata,
    durable: bool,
    secrets: &SecretSet,
) -> Result<(), MetadataError> {
    if secrets.is_empty() {
        return write_metadata_with(run_dir, meta, durable);
    }
    let shown = redacted(meta, secrets)
        .map_err(|e| MetadataError::io("serialize", &run_dir.join(METADATA_FILE), e))?;
    write_metadata_with(run_dir, &shown, durable)
}

fn redacted(meta: &RunMetadata, secrets: &SecretSet) -> std::io::Result<RunMetadata> {
    let mut value = serde_json::to_value(meta).map_err(std::io::Error::other)?;
    if let Value::Object(fields) = &mut value {
        for (key, field) in fields.iter_mut() {
            if !NOT_FREE_TEXT.contains(&key.as_str()) {
                secrets.redact_json(field);
            }
        }
    }
    serde_json::from_value(value).map_err(std::io::Error::other)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::metadata::read_metadata;
    use crate::redact::marker;

    const CANARY: &str = "canary-2025-x";

    #[test]
    fn free_text_fields_are_redacted_and_identifiers_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let mut meta = RunMetadata::new_running(
            "r1",
            "agent",
            &format!("task with {CANARY}"),
            tmp.path(),
            tmp.path(),
            5,
        );
        meta.result = Some(format!("answer {CANARY}"));
        meta.error = Some(crate::protocol::RecordedError::from_legacy(&format!(
            "llm_error: echoed {CANARY}"
        )));
        let secrets = SecretSet::new([("call_1", CANARY)]);
        write_metadata_redacted(tmp.path(), &meta, false, &secrets).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(METADATA_FILE)).unwrap();
        assert!(!text.contains(CANARY), "{text}");
        let back = read_metadata(tmp.path()).unwrap();
        assert_eq!(back.result, Some(format!("answer {}", marker("call_1"))));
        assert_eq!(back.run_id, "r1");
        assert_eq!(back.created_at, meta.created_at);
        assert_eq!(
            meta.result,
            Some(format!("answer {CANARY}")),
            "caller's copy"
        );
    }

    /// Guards the list above: any string field of the record holding a secret is either
    /// redacted or deliberately an identifier.
    #[test]
    fn every_other_string_field_is_redacted() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = RunMetadata::new_running("r1", "a", "t", tmp.path(), tmp.path(), 5);
        let mut value = serde_json::to_value(&meta).unwrap();
        for (key, field) in value.as_object_mut().unwrap() {
            if (field.is_string() || field.is_null()) && !NOT_FREE_TEXT.contains(&key.as_str()) {
                *field = Value::String(CANARY.to_string());
            }
        }
        let filled: RunMetadata = serde_json::from_value(value).unwrap();
        assert_eq!(filled.initial_message, CANARY);
        let secrets = SecretSet::new([("call_1", CANARY)]);
        let shown = serde_json::to_string(&redacted(&filled, &secrets).unwrap()).unwrap();
        assert!(!shown.contains(CANARY), "{shown}");
    }
}
