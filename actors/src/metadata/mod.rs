//! `metadata.json`: the run status record (spec §2.1.4), replaced atomically (write the
//! run's spare file, fsync, exchange it with the record, fsync dir), and read back whether it
//! was written by us or by the original TypeScript engine (reference §8.2). Run ownership
//! (the advisory lock) lives in `lock`, the janitor's liveness decision in `liveness`, the
//! redacting write path of a run with sensitive answers in `redact`, the read for views that
//! tolerates missing fields in `lenient`.
//!
//! This module never holds metadata in memory between calls and never decides status
//! transitions: callers read, change and write. It does not touch the journal.

mod lenient;
mod liveness;
mod lock;
mod recorded;
mod redact;

pub use lenient::read_metadata_lenient;
pub use liveness::{assess_liveness, Liveness};
pub(crate) use liveness::{try_take_over, Takeover};
pub use lock::{current_process_identity, lock_is_held, ProcessIdentity, RunLock, LOCK_FILE};
pub(crate) use redact::write_metadata_redacted;

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use crate::bounded_read::{self, Links, ReadError};
use crate::clock::now_rfc3339;
use crate::protocol::{RecordedError, RunStatus, TokenUsage};

/// File name of the metadata record inside a run directory.
pub const METADATA_FILE: &str = "metadata.json";
/// The run's spare record: the next version is written here, then exchanged with
/// [`METADATA_FILE`] (see [`write_metadata_with`]). Hidden, and never read.
pub const METADATA_SPARE: &str = ".metadata.json.next";
/// `max_iterations` assumed for original-engine runs, which did not record it (its default).
pub const ORIGINAL_DEFAULT_MAX_ITERATIONS: u32 = 30;

/// The status record of one run. Times are UTC RFC 3339 with milliseconds; fields a record
/// of the original engine lacks read as their defaults.
///
/// `error` is the short form (`{type, message}`): the structured detail of a failure is in
/// the journal's `ERROR` event. Progress fields (`iterations`, `usage`) are rewritten while
/// the run goes (at most every 2 s); status fields at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMetadata {
    /// The run's id, equal to its folder's name under `.delta/` (readers trust the folder).
    pub run_id: String,
    /// The agent workspace's name (`W001`) when the run used one.
    #[serde(default)]
    pub workspace_id: Option<String>,
    /// `name` from the agent's `agent.yaml`.
    pub agent_name: String,
    /// The run's status; RUNNING also when its owner died (the janitor's job to find).
    pub status: RunStatus,
    /// When the run was created.
    pub created_at: String,
    /// The last write of this record.
    pub updated_at: String,
    /// When the run last reached a final status; `None` while it runs.
    #[serde(default)]
    pub end_time: Option<String>,
    /// The task the run was started with.
    pub initial_message: String,
    /// The same text under the original engine's name (reference §8.2), which its tests and
    /// users' scripts read. Always equal to `initial_message`.
    #[serde(default)]
    pub task: String,
    /// Iterations so far, counted over the run's whole life.
    #[serde(default)]
    pub iterations: u32,
    /// The iteration cap of the run's last start or continuation.
    #[serde(default)]
    pub max_iterations: u32,
    /// The cap the run was explicitly given (`delta run --max-iterations`, a request's
    /// `max_iterations`), kept so that a later `delta continue` without the flag goes on
    /// with it instead of the agent's default; `None` when the agent's setting applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations_requested: Option<u32>,
    /// Why the run failed or stopped: `{"type": ..., "message": ...}` (the older
    /// `"type: message"` string is read too).
    #[serde(default)]
    pub error: Option<RecordedError>,
    /// The agent's folder.
    pub agent_home: String,
    /// The run's workspace (where its tools start; the record is in its `.delta/`).
    pub work_dir: String,
    /// The pid of the process that last took the run (for people and the original
    /// engine's heuristic; ownership is the lock's).
    #[serde(default)]
    pub pid: u32,
    /// The host of that process; another host's run is only taken with `--force`.
    #[serde(default)]
    pub hostname: String,
    /// Milliseconds since the Unix epoch when the owning process started.
    #[serde(default)]
    pub start_time_unix: u64,
    /// The executable name of that process (e.g. `delta`).
    #[serde(default)]
    pub process_name: String,
    /// The final answer, once COMPLETED.
    #[serde(default)]
    pub result: Option<String>,
    /// Token usage of the run's last start or continuation.
    #[serde(default)]
    pub usage: TokenUsage,
    /// Token usage over the run's whole life: every start and continuation (a plan's
    /// retries continue the run, so they are in it too), every attempt of every model call.
    /// Records written before this field read it as zero: see
    /// [`RunMetadata::usage_so_far`].
    #[serde(default)]
    pub cumulative_usage: TokenUsage,
    /// Dollars of the run's last start or continuation (unknown when a call's model had no
    /// price). Absent in records written before delta priced calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::protocol::CostTally>,
    /// Dollars over the run's whole life, like `cumulative_usage`. Absent in older records:
    /// see [`RunMetadata::cost_so_far`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cumulative_cost: Option<crate::protocol::CostTally>,
    /// Wall time of the run's last start or continuation so far, in milliseconds (final
    /// once the run ended). Absent in records written before it existed: see
    /// [`RunMetadata::last_duration_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The orchestration the run belongs to, for runs of a plan.
    #[serde(default)]
    pub orchestration_id: Option<String>,
    /// The span of the run's last start, when it was traced (W3C trace context): a later
    /// continuation's span links to it, so a trace viewer leads from one start to the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::protocol::TraceSpan>,
    /// The model's context window the run's budget was based on, and where it came from
    /// (agent.yaml, `DELTA_CONTEXT_WINDOW`, the server, a refusal, the catalogue); absent
    /// when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<crate::llm::ContextWindow>,
}

impl RunMetadata {
    /// A fresh RUNNING record owned by this process, timestamps set to now.
    pub fn new_running(
        run_id: &str,
        agent_name: &str,
        initial_message: &str,
        agent_home: &Path,
        work_dir: &Path,
        max_iterations: u32,
    ) -> RunMetadata {
        let now = now_rfc3339();
        let identity = current_process_identity();
        RunMetadata {
            run_id: run_id.to_string(),
            workspace_id: None,
            agent_name: agent_name.to_string(),
            status: RunStatus::Running,
            created_at: now.clone(),
            updated_at: now,
            end_time: None,
            initial_message: initial_message.to_string(),
            task: initial_message.to_string(),
            iterations: 0,
            max_iterations,
            max_iterations_requested: None,
            error: None,
            agent_home: agent_home.to_string_lossy().into_owned(),
            work_dir: work_dir.to_string_lossy().into_owned(),
            pid: identity.pid,
            hostname: identity.hostname,
            start_time_unix: identity.start_time_unix,
            process_name: identity.process_name,
            result: None,
            usage: TokenUsage::default(),
            cumulative_usage: TokenUsage::default(),
            cost: None,
            cumulative_cost: None,
            duration_ms: None,
            orchestration_id: None,
            trace: None,
            context_window: None,
        }
    }

    /// Wall time of the run's last driving: `duration_ms`, or for an older record that
    /// ended, the time from its creation to its end (0 when that cannot be told).
    pub fn last_duration_ms(&self) -> u64 {
        if let Some(duration) = self.duration_ms {
            return duration;
        }
        let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
        match (
            parse(&self.created_at),
            self.end_time.as_deref().and_then(parse),
        ) {
            (Some(start), Some(end)) => {
                u64::try_from((end - start).num_milliseconds()).unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// The run's usage over its whole life as recorded: `cumulative_usage`, or `usage` for a
    /// record written before the cumulative figure existed (or by the original engine).
    pub fn usage_so_far(&self) -> TokenUsage {
        if self.cumulative_usage == TokenUsage::default() {
            self.usage
        } else {
            self.cumulative_usage
        }
    }

    /// The run's dollars over its whole life as recorded: `cumulative_cost`; for a record
    /// written before delta priced calls, nothing when it used no tokens, else unknown (its
    /// tokens were never priced).
    pub fn cost_so_far(&self) -> crate::protocol::CostTally {
        match &self.cumulative_cost {
            Some(cost) => cost.clone(),
            None if self.usage_so_far().is_zero() => crate::protocol::CostTally::default(),
            None => crate::protocol::CostTally::unknown("(earlier starts, recorded unpriced)"),
        }
    }

    /// Records `identity` as the owner (on every resume, so the janitor never looks at a
    /// dead original pid — reference §19 item 9) and bumps `updated_at`.
    pub fn claim(&mut self, identity: &ProcessIdentity) {
        self.pid = identity.pid;
        self.hostname = identity.hostname.clone();
        self.process_name = identity.process_name.clone();
        self.start_time_unix = identity.start_time_unix;
        self.touch();
    }

    /// Sets `updated_at` to now.
    pub fn touch(&mut self) {
        self.updated_at = now_rfc3339();
    }
}

/// Errors of the metadata layer; every message names the file and gives a hint.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// The run folder has no metadata.json (not a run, or one whose creation was cut short).
    #[error(
        "metadata file {} not found; hint: is {} a delta run directory? list runs with \
         `delta list-runs -w <work-dir>`",
        path.display(), path.parent().map(Path::display).unwrap_or(path.display())
    )]
    NotFound {
        /// The metadata.json looked for.
        path: PathBuf,
    },
    /// A file operation on the record, its spare or the lock failed.
    #[error("cannot {action} {}: {source}; hint: check that the run directory exists and is writable", path.display())]
    Io {
        /// What was being done, as a verb phrase (`read`, `write`, `fsync`, `replace`,
        /// `lock`...).
        action: &'static str,
        /// The file it was done to.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// A file delta was about to write is not its own: a second name (hard link) of
    /// another file (the reason says so, with its hint). Nothing was written.
    #[error("refusing to write {}: {source}", path.display())]
    NotOwn {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        #[source]
        source: io::Error,
    },
    /// The file is not one delta reads: a FIFO, a device, a symbolic link, far too big...
    /// (the reason says which, with its hint).
    #[error("cannot read {}: {reason}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why it was not read.
        #[source]
        reason: crate::bounded_read::ReadError,
    },
    /// The file exists but is not a run record (ours or the original engine's), even on a
    /// second read.
    #[error(
        "metadata file {} is not valid run metadata: {message}; hint: restore it from a backup \
         or remove the run directory",
        path.display()
    )]
    Parse {
        /// The file that does not parse.
        path: PathBuf,
        /// The JSON parser's complaint.
        message: String,
    },
}

impl MetadataError {
    pub(crate) fn io(action: &'static str, path: &Path, source: io::Error) -> MetadataError {
        if crate::private_file::is_other_names(&source) {
            return MetadataError::NotOwn {
                path: path.to_path_buf(),
                source,
            };
        }
        MetadataError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Atomically replaces `<run_dir>/metadata.json` with `meta` (2-space pretty JSON): the
/// run's spare file is written and fsynced, exchanged with the record, and the directory is
/// fsynced so the exchange survives a crash. Readers never see a half file.
pub fn write_metadata(run_dir: &Path, meta: &RunMetadata) -> Result<(), MetadataError> {
    write_metadata_with(run_dir, meta, true)
}

/// [`write_metadata`], with the two fsyncs only when `durable`. Without them the
/// replacement is still atomic for readers, it just may not survive a power loss; the run
/// loop uses that for its progress updates, which would otherwise serialise every run
/// sharing an arbiter thread on fsyncs.
pub fn write_metadata_with(
    run_dir: &Path,
    meta: &RunMetadata,
    durable: bool,
) -> Result<(), MetadataError> {
    let target = run_dir.join(METADATA_FILE);
    let mut bytes = serde_json::to_vec_pretty(meta)
        .map_err(|e| MetadataError::io("serialize", &target, io::Error::other(e)))?;
    bytes.push(b'\n');
    write_spare_and_swap(run_dir, &target, &bytes, durable)?;
    if !durable {
        return Ok(());
    }
    // O_DIRECTORY: a FIFO put in the folder's place fails the open instead of blocking it.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(run_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| MetadataError::io("fsync directory", run_dir, e))
}

/// Writes `bytes` to the run's spare file [`METADATA_SPARE`] and swaps it with `target`
/// (`renameat2(RENAME_EXCHANGE)`), so the previous record becomes the next spare.
///
/// Why not a fresh temp file renamed over the record: every such rename frees an inode, and
/// on ext4 without a journal (common on cloud VMs) the inode allocator skips inodes freed in
/// the last 60 s (300 s while their inode-table block is dirty) one by one, so a thousand
/// concurrent runs each replacing their record a few times made every later file creation in
/// the workspace scan thousands of inodes (measured: 2–12 s of kernel time in a 1,000-run
/// orchestration; BENCHMARKS.md, "Filesystem"). Exchanging frees nothing. The first
/// write of a run (no record yet) and filesystems without RENAME_EXCHANGE fall back to a
/// plain rename, which is just as atomic. A reader that opened the old record a moment
/// before it became the spare may see it rewritten; [`read_metadata`] re-reads on a parse
/// failure for that reason. Only the run's lock holder writes, so one spare is enough.
fn write_spare_and_swap(
    run_dir: &Path,
    target: &Path,
    bytes: &[u8],
    durable: bool,
) -> Result<(), MetadataError> {
    let spare = run_dir.join(METADATA_SPARE);
    // Not O_TRUNC: ext4 flushes a file truncated to zero when it is closed (its
    // `auto_da_alloc` guard for replace-by-truncate), which put a disk write on the run's
    // thread at every update. The old text is overwritten and cut to the new length instead.
    // The run dir is private, but a planted symlink or hard link must still not redirect
    // the write, nor a FIFO block it. (A hard link planted as metadata.json becomes the
    // spare at the next exchange: it is refused here, before anything is written.)
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false).mode(0o600);
    let (mut file, old_len) = crate::private_file::open_own_file_and_len(&spare, &options)
        .map_err(|e| MetadataError::io("create", &spare, e))?;
    crate::private_file::overwrite_from(&mut file, old_len, bytes)
        .map_err(|e| MetadataError::io("write", &spare, e))?;
    if durable {
        file.sync_all()
            .map_err(|e| MetadataError::io("fsync", &spare, e))?;
    }
    drop(file);
    let exchanged = nix::fcntl::renameat2(
        None,
        &spare,
        None,
        target,
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    );
    match exchanged {
        Ok(()) => Ok(()),
        // No record yet (first write), or a filesystem that cannot exchange.
        Err(Errno::ENOENT | Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => {
            std::fs::rename(&spare, target).map_err(|e| MetadataError::io("replace", target, e))
        }
        Err(errno) => Err(MetadataError::io(
            "replace",
            target,
            io::Error::from_raw_os_error(errno as i32),
        )),
    }
}

/// Reads `<run_dir>/metadata.json`, ours or the original engine's (converted by
/// `from_original`). A record that does not parse is read once more: the file this reader
/// opened may have become the writer's spare and be mid-rewrite (see
/// [`write_metadata_with`]); a second open gets the current record.
pub fn read_metadata(run_dir: &Path) -> Result<RunMetadata, MetadataError> {
    read_twice_if_torn(run_dir, Fields::Whole)
}

/// Whether a record must have every field ([`read_metadata`]) or may lack some
/// ([`read_metadata_lenient`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fields {
    Whole,
    Lenient,
}

fn read_twice_if_torn(run_dir: &Path, fields: Fields) -> Result<RunMetadata, MetadataError> {
    match read_metadata_once(run_dir, fields) {
        Err(MetadataError::Parse { .. }) => read_metadata_once(run_dir, fields),
        other => other,
    }
}

fn read_metadata_once(run_dir: &Path, fields: Fields) -> Result<RunMetadata, MetadataError> {
    let path = run_dir.join(METADATA_FILE);
    let bytes = match bounded_read::read(&path, bounded_read::METADATA, Links::Refuse) {
        Ok(bytes) => bytes,
        Err(e) if e.is_not_found() => return Err(MetadataError::NotFound { path }),
        Err(ReadError::Io(e)) => return Err(MetadataError::io("read", &path, e)),
        Err(reason) => return Err(MetadataError::Unreadable { path, reason }),
    };
    let parse_error = |message: String| MetadataError::Parse {
        path: path.clone(),
        message,
    };
    let mut value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| parse_error(e.to_string()))?;
    let Some(object) = value.as_object_mut() else {
        return Err(parse_error("expected a JSON object".to_string()));
    };
    if !object.contains_key("created_at") && object.contains_key("start_time") {
        return from_original(run_dir, object).map_err(parse_error);
    }
    if fields == Fields::Lenient {
        lenient::fill_missing_fields(run_dir, object);
    }
    let mut meta: RunMetadata =
        serde_json::from_value(value).map_err(|e| parse_error(e.to_string()))?;
    if meta.task.is_empty() {
        // Written before `task` was recorded.
        meta.task = meta.initial_message.clone();
    }
    Ok(meta)
}

/// Converts an original-engine record (`start_time`, `agent_ref`, `task`,
/// `iterations_completed`, …; reference §8.2). The work dir is derived from the run
/// directory (`<work>/.delta/<id>`), the agent name from the agent path, and
/// `max_iterations` is the original default, as the original never recorded it.
fn from_original(
    run_dir: &Path,
    object: &serde_json::Map<String, serde_json::Value>,
) -> Result<RunMetadata, String> {
    let text = |key: &str| object.get(key).and_then(|v| v.as_str()).map(str::to_string);
    let number = |key: &str| object.get(key).and_then(serde_json::Value::as_u64);
    let run_id = text("run_id").ok_or("original-engine metadata without run_id")?;
    let status_text = text("status").ok_or("original-engine metadata without status")?;
    let status = RunStatus::parse(&status_text).ok_or_else(|| {
        format!("unknown status '{status_text}' (expected RUNNING, WAITING_FOR_INPUT, COMPLETED, FAILED or INTERRUPTED)")
    })?;
    let created_at = text("start_time").unwrap_or_default();
    let end_time = text("end_time");
    let agent_home = text("agent_ref").unwrap_or_default();
    let agent_name = Path::new(&agent_home)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| agent_home.clone());
    let work_dir = run_dir
        .parent()
        .and_then(Path::parent)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(RunMetadata {
        run_id,
        workspace_id: None,
        agent_name,
        status,
        updated_at: end_time.clone().unwrap_or_else(|| created_at.clone()),
        created_at,
        end_time,
        initial_message: text("task").unwrap_or_default(),
        task: text("task").unwrap_or_default(),
        iterations: number("iterations_completed")
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        max_iterations: ORIGINAL_DEFAULT_MAX_ITERATIONS,
        max_iterations_requested: None,
        error: text("error").map(|e| RecordedError::from_legacy(&e)),
        agent_home,
        work_dir,
        pid: number("pid")
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        hostname: text("hostname").unwrap_or_default(),
        start_time_unix: number("start_time_unix").unwrap_or(0),
        process_name: text("process_name").unwrap_or_default(),
        result: None,
        usage: TokenUsage::default(),
        cumulative_usage: TokenUsage::default(),
        cost: None,
        cumulative_cost: None,
        duration_ms: None,
        orchestration_id: None,
        trace: None,
        context_window: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    pub(super) fn sample(run_id: &str) -> RunMetadata {
        RunMetadata::new_running(
            run_id,
            "hello",
            "say hi",
            Path::new("/agents/hello"),
            Path::new("/work"),
            30,
        )
    }

    fn dir_entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn new_running_records_this_process() {
        let meta = sample("r1");
        assert_eq!(meta.status, RunStatus::Running);
        assert_eq!(meta.pid, std::process::id());
        assert!(!meta.hostname.is_empty());
        assert!(meta.start_time_unix > 0);
        assert_eq!(meta.created_at, meta.updated_at);
        assert_eq!(meta.agent_home, "/agents/hello");
    }

    #[test]
    fn write_then_read_round_trips_and_leaves_only_the_spare() {
        let tmp = tempfile::tempdir().unwrap();
        let mut meta = sample("r1");
        meta.usage.input_tokens = 12;
        meta.result = Some("done".into());
        write_metadata(tmp.path(), &meta).unwrap();
        meta.status = RunStatus::Completed;
        meta.end_time = Some(now_rfc3339());
        write_metadata(tmp.path(), &meta).unwrap();
        assert_eq!(read_metadata(tmp.path()).unwrap(), meta);
        assert_eq!(dir_entries(tmp.path()), [METADATA_SPARE, METADATA_FILE]);
    }

    #[test]
    fn replacing_the_record_swaps_two_inodes_and_frees_none() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let inode = |name: &str| std::fs::metadata(tmp.path().join(name)).unwrap().ino();
        let mut meta = sample("r1");
        write_metadata(tmp.path(), &meta).unwrap();
        let first = inode(METADATA_FILE);
        meta.iterations = 1;
        write_metadata_with(tmp.path(), &meta, false).unwrap();
        let second = inode(METADATA_FILE);
        assert_ne!(first, second);
        assert_eq!(
            inode(METADATA_SPARE),
            first,
            "the old record became the spare"
        );
        meta.iterations = 2;
        write_metadata(tmp.path(), &meta).unwrap();
        assert_eq!(inode(METADATA_FILE), first, "the spare was reused");
        assert_eq!(inode(METADATA_SPARE), second);
        assert_eq!(read_metadata(tmp.path()).unwrap(), meta);
    }

    /// Issue 11 item 19: the original engine's tests and users' scripts read `task`.
    #[test]
    fn record_carries_task_beside_initial_message() {
        let tmp = tempfile::tempdir().unwrap();
        let meta =
            RunMetadata::new_running("r1", "a", "Count the files", Path::new("/a"), tmp.path(), 3);
        write_metadata(tmp.path(), &meta).unwrap();
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join(METADATA_FILE)).unwrap())
                .unwrap();
        assert_eq!(written["task"], "Count the files");
        assert_eq!(written["initial_message"], "Count the files");
        // A record written before `task` existed reads back with it filled in.
        let mut older = written.clone();
        older.as_object_mut().unwrap().remove("task");
        std::fs::write(tmp.path().join(METADATA_FILE), older.to_string()).unwrap();
        assert_eq!(read_metadata(tmp.path()).unwrap().task, "Count the files");
    }

    #[test]
    fn written_file_is_two_space_pretty_json_with_spec_keys() {
        let tmp = tempfile::tempdir().unwrap();
        write_metadata(tmp.path(), &sample("r1")).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(METADATA_FILE)).unwrap();
        assert!(text.starts_with("{\n  \"run_id\": \"r1\",\n"), "{text}");
        assert!(text.contains("\n  \"status\": \"RUNNING\",\n"), "{text}");
        assert!(text.contains("\n  \"end_time\": null,\n"), "{text}");
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn failed_write_names_the_file_and_keeps_the_old_record() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = sample("r1");
        write_metadata(tmp.path(), &meta).unwrap();
        // A directory where the spare should go makes the write fail before any swap.
        std::fs::create_dir(tmp.path().join(METADATA_SPARE)).unwrap();
        let mut newer = meta.clone();
        newer.iterations = 5;
        let err = write_metadata(tmp.path(), &newer).unwrap_err();
        assert!(err.to_string().contains(METADATA_SPARE), "{err}");
        assert_eq!(read_metadata(tmp.path()).unwrap(), meta);
    }

    #[test]
    fn a_symlinked_spare_is_refused_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside.txt");
        std::fs::write(&outside, "keep").unwrap();
        let run_dir = tmp.path().join("run");
        std::fs::create_dir(&run_dir).unwrap();
        std::os::unix::fs::symlink(&outside, run_dir.join(METADATA_SPARE)).unwrap();
        assert!(write_metadata(&run_dir, &sample("r1")).is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    }

    #[test]
    fn missing_and_corrupt_records_name_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let err = read_metadata(tmp.path()).unwrap_err();
        assert!(matches!(err, MetadataError::NotFound { .. }));
        assert!(err.to_string().contains("metadata.json"));
        std::fs::write(tmp.path().join(METADATA_FILE), "[1]").unwrap();
        let err = read_metadata(tmp.path()).unwrap_err();
        assert!(matches!(err, MetadataError::Parse { .. }));
        assert!(err.to_string().contains("expected a JSON object"), "{err}");
        std::fs::write(tmp.path().join(METADATA_FILE), r#"{"run_id":"x"}"#).unwrap();
        assert!(matches!(
            read_metadata(tmp.path()).unwrap_err(),
            MetadataError::Parse { .. }
        ));
    }

    #[test]
    fn original_engine_record_is_converted() {
        let tmp = tempfile::tempdir().unwrap();
        let run_dir = tmp.path().join("W001/.delta/20261122_014234_915ade");
        std::fs::create_dir_all(&run_dir).unwrap();
        let original = serde_json::json!({
            "run_id": "20261122_014234_915ade",
            "start_time": "2026-11-22T01:42:34.120Z",
            "agent_ref": "/home/u/agents/hello",
            "task": "List the files",
            "status": "COMPLETED",
            "iterations_completed": 2,
            "pid": 4242,
            "hostname": "box",
            "start_time_unix": 1795398154120u64,
            "process_name": "node",
            "end_time": "2026-11-22T01:42:40.500Z"
        });
        std::fs::write(run_dir.join(METADATA_FILE), original.to_string()).unwrap();
        let meta = read_metadata(&run_dir).unwrap();
        assert_eq!(meta.run_id, "20261122_014234_915ade");
        assert_eq!(meta.status, RunStatus::Completed);
        assert_eq!(meta.created_at, "2026-11-22T01:42:34.120Z");
        assert_eq!(meta.updated_at, "2026-11-22T01:42:40.500Z");
        assert_eq!(meta.end_time.as_deref(), Some("2026-11-22T01:42:40.500Z"));
        assert_eq!(meta.initial_message, "List the files");
        assert_eq!(meta.iterations, 2);
        assert_eq!(meta.max_iterations, ORIGINAL_DEFAULT_MAX_ITERATIONS);
        assert_eq!(meta.agent_home, "/home/u/agents/hello");
        assert_eq!(meta.agent_name, "hello");
        assert_eq!(meta.work_dir, tmp.path().join("W001").to_string_lossy());
        assert_eq!((meta.pid, meta.hostname.as_str()), (4242, "box"));
        assert_eq!(meta.process_name, "node");
    }

    #[test]
    fn original_record_with_unknown_status_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join(METADATA_FILE),
            r#"{"run_id":"r","start_time":"t","status":"PAUSED"}"#,
        )
        .unwrap();
        let message = read_metadata(tmp.path()).unwrap_err().to_string();
        assert!(message.contains("unknown status 'PAUSED'"), "{message}");
    }

    #[test]
    fn claim_refreshes_owner_fields() {
        let mut meta = sample("r1");
        meta.pid = 1;
        meta.hostname = "elsewhere".into();
        meta.updated_at = "2000-01-01T00:00:00.000Z".into();
        let me = current_process_identity();
        meta.claim(&me);
        assert_eq!(meta.pid, me.pid);
        assert_eq!(meta.hostname, me.hostname);
        assert_ne!(meta.updated_at, "2000-01-01T00:00:00.000Z");
    }
}
