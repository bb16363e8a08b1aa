//! The one timestamp format of journal lines, metadata and audit records: UTC, RFC 3339 with
//! milliseconds, e.g. `2026-11-22T01:42:34.123Z`. On the ground floor, so every layer that
//! stamps something uses it without importing the layer that owns a file format.

/// The current time in the engine's timestamp format.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
