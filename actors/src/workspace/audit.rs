//! io/ audit file names and the JSON writer for them (spec §1.2):
//! `io/invocations/<ts>_<iteration>.json`, `io/tool_executions/<ts>_<tool>.json`,
//! `io/hooks/<hook>_<ts>.json`, with `ts` = UTC `YYYYMMDDTHHMMSS.mmmZ`.
//!
//! A record is created with `O_EXCL`, so two records in the same millisecond get `_2`,
//! `_3`, … suffixes and nothing is ever overwritten. A model call's and a tool call's record
//! are created and written in one open when there is something to write; a tool call's name
//! is chosen when it starts ([`ToolRecordNames`], in memory: the run's lock makes its process
//! the only writer of its records) so that its full-output files can be named after it. Names
//! that come from a model (tool names) are sanitized to `[A-Za-z0-9_.-]` first. Records of a
//! run with sensitive answers are redacted. This file does not decide what goes into a record.

use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{RunPaths, WorkspaceError};
use crate::private_file::{open_own_file_and_len, overwrite_from};
use crate::redact::SecretSet;

/// Upper bound on suffix probing; past it a random suffix is used (never reached in practice).
const MAX_SUFFIX: u32 = 10_000;
const MAX_COMPONENT_LEN: usize = 100;

fn audit_timestamp() -> String {
    chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string()
}

/// Makes `raw` safe as part of a file name: characters outside `[A-Za-z0-9_.-]` become `_`,
/// the result is at most 100 bytes, and an empty name becomes `_`.
pub fn sanitize_file_component(raw: &str) -> String {
    let mut clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_COMPONENT_LEN)
        .collect();
    if clean.is_empty() || clean.chars().all(|c| c == '.') {
        clean = clean.replace('.', "_");
        if clean.is_empty() {
            clean.push('_');
        }
    }
    clean
}

/// Reserves `<dir>/<stem>.json`, or `<stem>_2.json`, `<stem>_3.json`, … if taken. If the
/// directory is unusable the first candidate is returned and the later write reports it.
fn reserve(dir: &Path, stem: &str) -> PathBuf {
    create_unique(dir, stem).0
}

/// Creates and writes the record of one LLM call, `io/invocations/<ts>_<iteration>.json`,
/// in one open (reserving the name first, as the other records do, costs a second open of
/// the file at every iteration). Returns the record's path, also when writing failed (the
/// error names it).
///
/// `record` is serialized straight to text: going through a `serde_json::Value` first
/// copied the whole conversation into a tree at every iteration. Only a run with sensitive
/// answers pays for the tree, which redaction needs.
pub fn write_invocation_record(
    paths: &RunPaths,
    iteration: u32,
    record: &impl serde::Serialize,
    secrets: &SecretSet,
) -> (PathBuf, Result<(), WorkspaceError>) {
    let stem = format!("{}_{iteration}", audit_timestamp());
    create_and_write(&paths.invocations_dir, &stem, record, secrets)
}

/// Writes one failed attempt's record, `io/invocations/<ts>_<iteration>_attempt<attempt>.json`,
/// as the attempt fails (see [`write_invocation_record`]).
pub fn write_attempt_record(
    paths: &RunPaths,
    iteration: u32,
    attempt: u32,
    record: &impl serde::Serialize,
    secrets: &SecretSet,
) -> (PathBuf, Result<(), WorkspaceError>) {
    let stem = format!("{}_{iteration}_attempt{attempt}", audit_timestamp());
    create_and_write(&paths.invocations_dir, &stem, record, secrets)
}

/// Creates `<dir>/<stem>.json` (see [`create_unique`]) and writes `record` into it as pretty
/// JSON, redacted when `secrets` is not empty, in one open. Returns the record's path, also
/// when writing failed (the error names it).
fn create_and_write(
    dir: &Path,
    stem: &str,
    record: &impl serde::Serialize,
    secrets: &SecretSet,
) -> (PathBuf, Result<(), WorkspaceError>) {
    let (path, file) = create_unique(dir, stem);
    let bytes = if secrets.is_empty() {
        serde_json::to_vec_pretty(record)
    } else {
        serde_json::to_value(record).and_then(|mut shown| {
            secrets.redact_json(&mut shown);
            serde_json::to_vec_pretty(&shown)
        })
    };
    let bytes = match bytes {
        Ok(mut bytes) => {
            bytes.push(b'\n');
            bytes
        }
        Err(e) => {
            let error = WorkspaceError::io("serialize JSON for", &path, io::Error::other(e));
            return (path, Err(error));
        }
    };
    let written = match file {
        Some(mut file) => file
            .write_all(&bytes)
            .map_err(|e| WorkspaceError::io("write", &path, e)),
        None => write_bytes(&path, &bytes),
    };
    (path, written)
}

/// Creates `<dir>/<stem>.json` (or `_2`, `_3`, … when taken) and returns it open. A new
/// run has its `io/` folders from the start; one missing (a run folder of an older version)
/// is made (mode 0700) with its first record, but not its parents: a run folder deleted
/// under a live run is not brought back. When the directory is unusable: the first
/// candidate and no file (the write then reports why).
fn create_unique(dir: &Path, stem: &str) -> (PathBuf, Option<std::fs::File>) {
    let first = dir.join(format!("{stem}.json"));
    let mut made_dir = false;
    let mut attempt = 1;
    while attempt <= MAX_SUFFIX {
        let candidate = if attempt == 1 {
            first.clone()
        } else {
            dir.join(format!("{stem}_{attempt}.json"))
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&candidate)
        {
            Ok(file) => return (candidate, Some(file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => attempt += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !made_dir => {
                made_dir = true;
                match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(_) => return (first, None),
                }
            }
            Err(_) => return (first, None),
        }
    }
    let random = uuid::Uuid::new_v4().simple().to_string();
    (dir.join(format!("{stem}_{random}.json")), None)
}

/// A fresh path for the record of one LLM call: `io/invocations/<ts>_<iteration>.json`
/// (the engine creates it and writes it in one open: [`write_invocation_record`]).
#[cfg(test)]
pub fn invocation_record_path(paths: &RunPaths, iteration: u32) -> PathBuf {
    reserve(
        &paths.invocations_dir,
        &format!("{}_{iteration}", audit_timestamp()),
    )
}

/// The names a run gives its tool records, `<ts>_<tool>`, with `_2`, `_3`, … for a second
/// and third call of the same tool started in the same millisecond (parallel calls). Kept in
/// memory, not reserved on disk: only the process holding the run's lock writes its records,
/// and a record an earlier process left under the same name (a clock stepped back) is still
/// never overwritten: records and output files are created with `O_EXCL`.
#[derive(Debug, Default)]
pub struct ToolRecordNames {
    millisecond: String,
    given: Vec<String>,
}

impl ToolRecordNames {
    /// The name of a tool call starting now.
    pub fn next(&mut self, paths: &RunPaths, tool_name: &str) -> ToolRecordName {
        let now = audit_timestamp();
        if now != self.millisecond {
            self.millisecond = now;
            self.given.clear();
        }
        let base = format!(
            "{}_{}",
            self.millisecond,
            sanitize_file_component(tool_name)
        );
        let mut stem = base.clone();
        let mut suffix = 1;
        while self.given.contains(&stem) {
            suffix += 1;
            stem = format!("{base}_{suffix}");
        }
        self.given.push(stem.clone());
        ToolRecordName {
            dir: paths.tool_executions_dir.clone(),
            stem,
        }
    }
}

/// Where one tool call's audit files go: `io/tool_executions/<stem>.json`, created when the
/// call ends, and its full outputs `<stem>.stdout` / `<stem>.stderr`, created with their
/// first byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRecordName {
    dir: PathBuf,
    stem: String,
}

impl ToolRecordName {
    /// `<stem>.<extension>` beside the record (`stdout`, `stderr`).
    pub fn output_file(&self, extension: &str) -> PathBuf {
        self.dir.join(format!("{}.{extension}", self.stem))
    }

    /// The record's path if nothing is in the way.
    #[cfg(test)]
    pub fn record_path(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.stem))
    }

    /// Creates the record and writes `record` into it, in one open: `<stem>.json`, or
    /// `<stem>_2.json`, … if an earlier process left one of that name. Returns the path.
    pub fn write(
        &self,
        record: &impl serde::Serialize,
        secrets: &SecretSet,
    ) -> (PathBuf, Result<(), WorkspaceError>) {
        create_and_write(&self.dir, &self.stem, record, secrets)
    }
}

/// A fresh path for the record of one hook execution: `io/hooks/<hook>_<ts>.json`.
pub fn hook_record_path(paths: &RunPaths, hook_name: &str) -> PathBuf {
    reserve(
        &paths.hooks_dir,
        &format!(
            "{}_{}",
            sanitize_file_component(hook_name),
            audit_timestamp()
        ),
    )
}

/// Writes `value` as 2-space pretty JSON plus a newline; new files get mode 0600.
///
/// Not with `O_TRUNC`: ext4 flushes a file truncated to zero at close (`auto_da_alloc`), a
/// disk write on the run's thread for every record (records are reserved empty first). An
/// existing file is overwritten and cut to the new length instead.
pub fn write_json_file(path: &Path, value: &serde_json::Value) -> Result<(), WorkspaceError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| WorkspaceError::io("serialize JSON for", path, io::Error::other(e)))?;
    bytes.push(b'\n');
    write_bytes(path, &bytes)
}

/// Writes `bytes` as the whole text of `path` (created with mode 0600 when missing), the
/// way [`write_json_file`] describes.
fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false).mode(0o600);
    let (mut file, old_len) =
        open_own_file_and_len(path, &options).map_err(|e| WorkspaceError::io("open", path, e))?;
    overwrite_from(&mut file, old_len, bytes).map_err(|e| WorkspaceError::io("write", path, e))
}

/// [`write_json_file`] with every sensitive answer in `value` (strings and keys) replaced by
/// its marker: the audit copy of what the model or a tool saw never holds the answer.
pub fn write_redacted_json_file(
    path: &Path,
    value: &serde_json::Value,
    secrets: &SecretSet,
) -> Result<(), WorkspaceError> {
    if secrets.is_empty() {
        return write_json_file(path, value);
    }
    let mut shown = value.clone();
    secrets.redact_json(&mut shown);
    write_json_file(path, &shown)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::workspace::create_run_dir;
    use std::os::unix::fs::PermissionsExt;

    fn file_name(path: &Path) -> String {
        path.file_name().unwrap().to_string_lossy().into_owned()
    }

    fn is_audit_timestamp(ts: &str) -> bool {
        chrono::NaiveDateTime::parse_from_str(ts, "%Y%m%dT%H%M%S%.3fZ").is_ok() && ts.len() == 20
    }

    #[test]
    fn sanitize_keeps_safe_chars_only() {
        assert_eq!(sanitize_file_component("list_files"), "list_files");
        assert_eq!(sanitize_file_component("a/../b c"), "a_.._b_c");
        assert_eq!(sanitize_file_component(".."), "__");
        assert_eq!(sanitize_file_component(""), "_");
        assert_eq!(sanitize_file_component("ü"), "_");
        assert_eq!(sanitize_file_component(&"x".repeat(300)).len(), 100);
    }

    #[test]
    fn record_names_follow_the_spec_shapes() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = create_run_dir(tmp.path(), "r").unwrap();

        let invocation = invocation_record_path(&paths, 7);
        assert_eq!(invocation.parent().unwrap(), paths.invocations_dir);
        let name = file_name(&invocation);
        let (ts, rest) = name.split_once('_').unwrap();
        assert!(is_audit_timestamp(ts), "{name}");
        assert_eq!(rest, "7.json");

        let tool = ToolRecordNames::default()
            .next(&paths, "../../etc/passwd")
            .record_path();
        assert_eq!(tool.parent().unwrap(), paths.tool_executions_dir);
        let name = file_name(&tool);
        let (ts, rest) = name.split_once('_').unwrap();
        assert!(is_audit_timestamp(ts), "{name}");
        assert_eq!(rest, ".._.._etc_passwd.json");

        let hook = hook_record_path(&paths, "pre_llm_req");
        assert_eq!(hook.parent().unwrap(), paths.hooks_dir);
        let name = file_name(&hook);
        let ts = name
            .strip_prefix("pre_llm_req_")
            .and_then(|n| n.strip_suffix(".json"))
            .unwrap();
        assert!(is_audit_timestamp(ts), "{name}");
    }

    #[test]
    fn reserved_paths_are_never_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = create_run_dir(tmp.path(), "r").unwrap();
        // Fifty calls of one tool (most in the same millisecond) get fifty names, and their
        // records fifty files.
        let mut names = ToolRecordNames::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let name = names.next(&paths, "echo");
            let (path, written) = name.write(&serde_json::json!({}), &SecretSet::default());
            written.unwrap();
            assert!(seen.insert(name.output_file("stdout")));
            assert!(seen.insert(path));
        }
        assert_eq!(
            std::fs::read_dir(&paths.tool_executions_dir)
                .unwrap()
                .count(),
            50
        );
        // The same stem taken twice gets a numeric suffix.
        let first = reserve(&paths.hooks_dir, "fixed");
        let second = reserve(&paths.hooks_dir, "fixed");
        let third = reserve(&paths.hooks_dir, "fixed");
        assert_eq!(file_name(&first), "fixed.json");
        assert_eq!(file_name(&second), "fixed_2.json");
        assert_eq!(file_name(&third), "fixed_3.json");
    }

    /// A record of the same name left by an earlier process (its clock was ahead) is kept:
    /// the new one takes `_2`.
    #[test]
    fn a_tool_record_never_overwrites_one_an_earlier_process_left() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = create_run_dir(tmp.path(), "r").unwrap();
        let name = ToolRecordNames::default().next(&paths, "echo");
        std::fs::create_dir_all(&paths.tool_executions_dir).unwrap();
        std::fs::write(name.record_path(), "earlier").unwrap();
        let (path, written) = name.write(&serde_json::json!({"new": 1}), &SecretSet::default());
        written.unwrap();
        assert_eq!(
            std::fs::read_to_string(name.record_path()).unwrap(),
            "earlier"
        );
        assert!(file_name(&path).ends_with("_echo_2.json"), "{path:?}");
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("\"new\": 1"));
    }

    #[test]
    fn a_new_run_has_its_three_io_folders_private_from_the_start() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = create_run_dir(tmp.path(), "r").unwrap();
        for dir in [
            &paths.invocations_dir,
            &paths.tool_executions_dir,
            &paths.hooks_dir,
        ] {
            let mode = std::fs::metadata(dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{dir:?}");
            assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0, "{dir:?}");
        }
    }

    /// A run folder made without them (older versions made both with their first record)
    /// gets them, private, when a record needs them.
    #[test]
    fn tool_and_hook_folders_missing_from_an_older_run_appear_private_with_their_first_record() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = create_run_dir(tmp.path(), "r").unwrap();
        std::fs::remove_dir(&paths.tool_executions_dir).unwrap();
        std::fs::remove_dir(&paths.hooks_dir).unwrap();
        let name = ToolRecordNames::default().next(&paths, "echo");
        assert!(!paths.tool_executions_dir.exists(), "named, not created");
        let (tool, written) = name.write(&serde_json::json!({}), &SecretSet::default());
        written.unwrap();
        assert!(tool.is_file(), "{tool:?}");
        let hook = hook_record_path(&paths, "on_error");
        assert!(hook.is_file(), "{hook:?}");
        for dir in [&paths.tool_executions_dir, &paths.hooks_dir] {
            let mode = std::fs::metadata(dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{dir:?}");
        }
        // A run folder removed under the run is not rebuilt by a record.
        std::fs::remove_dir_all(&paths.run_dir).unwrap();
        let (lost, written) = ToolRecordNames::default()
            .next(&paths, "echo")
            .write(&serde_json::json!({}), &SecretSet::default());
        assert!(written.is_err(), "{lost:?}");
        assert!(!lost.exists() && !paths.run_dir.exists(), "{lost:?}");
    }

    #[test]
    fn write_json_file_is_pretty_and_private() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.json");
        write_json_file(&path, &serde_json::json!({"a": [1, 2]})).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "{\n  \"a\": [\n    1,\n    2\n  ]\n}\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn redacted_records_hold_markers_instead_of_answers() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.json");
        let secrets = SecretSet::new([("call_1", "canary-55")]);
        let value = serde_json::json!({"request": {"content": "pw canary-55"}});
        write_redacted_json_file(&path, &value, &secrets).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("canary-55"), "{text}");
        assert!(text.contains(&crate::redact::marker("call_1")), "{text}");
    }

    #[test]
    fn invocation_records_are_written_in_one_go_and_never_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = create_run_dir(tmp.path(), "r").unwrap();
        let secrets = SecretSet::new([("call_1", "canary-9")]);
        let value = serde_json::json!({"request": "pw canary-9"});
        let (first, written) = write_invocation_record(&paths, 3, &value, &secrets);
        written.unwrap();
        let (second, written) = write_invocation_record(&paths, 3, &value, &SecretSet::default());
        written.unwrap();
        assert_ne!(first, second);
        assert!(file_name(&first).ends_with("_3.json"), "{first:?}");
        let text = std::fs::read_to_string(&first).unwrap();
        assert!(
            !text.contains("canary-9") && text.ends_with("}\n"),
            "{text}"
        );
        assert!(std::fs::read_to_string(&second)
            .unwrap()
            .contains("canary-9"));
        let mode = std::fs::metadata(&first).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let gone = tmp.path().join("gone");
        let missing = RunPaths::new(&gone, "r");
        let (path, written) = write_invocation_record(&missing, 1, &value, &secrets);
        assert!(written
            .unwrap_err()
            .to_string()
            .contains(&path.display().to_string()));
    }

    #[test]
    fn rewriting_a_longer_file_leaves_only_the_new_text() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.json");
        write_json_file(&path, &serde_json::json!({"long": "x".repeat(100)})).unwrap();
        write_json_file(&path, &serde_json::json!(1)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
    }

    #[test]
    fn write_json_file_names_the_path_on_error() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("missing-dir/x.json");
        let message = write_json_file(&path, &serde_json::json!(1))
            .unwrap_err()
            .to_string();
        assert!(message.contains("missing-dir/x.json"), "{message}");
        assert!(message.contains("hint"), "{message}");
    }
}
