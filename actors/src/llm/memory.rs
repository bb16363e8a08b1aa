//! What delta learned about an endpoint and a model, kept across processes: one private JSON
//! file in the user's cache (`$XDG_CACHE_HOME/delta/endpoints.json`, chosen by the CLI), so
//! that a second `delta run` against llama-cpp-python does not pay again for what the first
//! found out (that it refuses `content: null`, cannot stream a tool call, sends no usage in
//! its streams).
//!
//! The file (`version: 1`):
//! ```json
//! {"version": 1, "endpoints": {"http://127.0.0.1:18090/v1": {"smollm2": {
//!   "learned_at": "2026-05-02T10:00:00.000Z", "stream": false,
//!   "tool_call_content": "empty_string", "context_window": 4096}}}}
//! ```
//! Endpoints are named by their base URL without user-info, query or fragment (where a key
//! could hide); no key, header or request is ever written. Per endpoint and model:
//! `stream` (`false`: do not stream), `stream_options` (`false`: stream without it),
//! `tool_call_content`, `max_tokens_field`, `system_role` (the agent.yaml spellings),
//! `sampling` (`false`: send no sampling parameters), and `context_window` (the model's
//! window in tokens, for the context budget to learn and read: [`EndpointMemory::remember`]
//! with [`Remembered::context_window`]). Fields a newer delta writes are kept as they are.
//! What holds for the endpoint whatever the model is kept under the model name `*`
//! ([`ENDPOINT_WIDE`]): `http2` (`true`: an `http://` endpoint answered HTTP/2 without
//! negotiation, h2c; `false`: it speaks HTTP/1.1 only; see `h2c.rs`).
//!
//! An entry older than [`STALE_AFTER`] is forgotten (the next call finds out again, and the
//! entry is written anew): servers get upgraded. A remembered setting the endpoint refuses
//! later is learned again once (see `learned.rs`).
//!
//! Written atomically (a private temporary file in the same folder, renamed over the old
//! one), mode 0600 in a 0700 folder, at most [`MAX_ENTRIES`] entries (the oldest go first)
//! and [`MAX_FILE_BYTES`] bytes. A file that is unreadable, too large or not this format is
//! ignored with a warning in the log, and replaced at the next lesson: it is a cache.
//! Two processes learning at the same instant may lose one lesson (learned again later);
//! within a process the read-change-write of each lesson holds one lock, so two lessons
//! learned at once (a model's detail and the endpoint's HTTP version) are both kept.
//!
//! Must not: decide what a refusal teaches (`refusal.rs`, `learned.rs`), hold the file open,
//! or write anything secret.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::bounded_read::{self, Limit, Links};

/// An entry older than this is forgotten.
pub const STALE_AFTER: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most endpoint-and-model entries kept.
pub const MAX_ENTRIES: usize = 256;
/// Largest file read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Longest model name or base URL remembered (longer ones are not).
const MAX_NAME_BYTES: usize = 512;
/// The file format's version.
const VERSION: u32 = 1;
/// Held by [`EndpointMemory::remember`] from its read to its write.
static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// The entry of an endpoint that holds what is true of it for every model (no model is
/// named `*`).
pub const ENDPOINT_WIDE: &str = "*";

/// What is remembered for one endpoint and model. `None` fields are not known.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Remembered {
    /// When the entry was last written (RFC 3339, UTC).
    #[serde(default)]
    pub learned_at: String,
    /// `false`: the endpoint is not streamed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// `false`: streams are asked for without `stream_options`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<bool>,
    /// `json_null` or `empty_string`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_content: Option<String>,
    /// `max_tokens` or `max_completion_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<String>,
    /// `system`, `developer` or `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_role: Option<String>,
    /// `false`: no temperature, top_p or penalties are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<bool>,
    /// The model's context window on this endpoint, in tokens, once something learned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// On the [`ENDPOINT_WIDE`] entry of an `http://` endpoint: `true` when it answered
    /// HTTP/2 without negotiation (h2c), `false` when it speaks HTTP/1.1 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2: Option<bool>,
    /// Fields of a newer delta, kept untouched.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct MemoryFile {
    version: u32,
    /// Base URL → model → what is remembered.
    #[serde(default)]
    endpoints: BTreeMap<String, BTreeMap<String, Remembered>>,
}

/// The memory file of one process (cheap to share behind an `Arc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointMemory {
    path: PathBuf,
}

impl EndpointMemory {
    /// The memory kept in `path` (created at the first lesson).
    pub fn new(path: impl Into<PathBuf>) -> EndpointMemory {
        EndpointMemory { path: path.into() }
    }

    /// Where it is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is remembered for `model` on the endpoint at `base_url`, unless it is stale or
    /// the endpoint cannot be named without a secret.
    pub fn recall(&self, base_url: &str, model: &str) -> Option<Remembered> {
        let url = memory_url(base_url)?;
        let file = self.read();
        let entry = file.endpoints.get(&url)?.get(model)?;
        (!is_stale(&entry.learned_at)).then(|| entry.clone())
    }

    /// Changes the entry of `model` on `base_url` with `update` (a stale entry starts over)
    /// and writes the file. `Ok(false)`: nothing was written (an endpoint or model that
    /// cannot be remembered).
    pub fn remember(
        &self,
        base_url: &str,
        model: &str,
        update: impl FnOnce(&mut Remembered),
    ) -> io::Result<bool> {
        let Some(url) = memory_url(base_url) else {
            return Ok(false);
        };
        if model.is_empty() || model.len() > MAX_NAME_BYTES {
            return Ok(false);
        }
        // One read-change-write at a time in this process: calls learning at once must not
        // each write the file as they read it, losing the other's lesson.
        let _writing = WRITING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut file = self.read();
        let models = file.endpoints.entry(url).or_default();
        let entry = models.entry(model.to_owned()).or_default();
        if is_stale(&entry.learned_at) {
            *entry = Remembered::default();
        }
        update(entry);
        entry.learned_at = crate::clock::now_rfc3339();
        file.version = VERSION;
        keep_newest(&mut file, MAX_ENTRIES);
        self.write(&file)?;
        Ok(true)
    }

    /// The context window remembered for `model` on `base_url`, in tokens (for the
    /// context budget; see [`Remembered::context_window`]).
    pub fn context_window(&self, base_url: &str, model: &str) -> Option<u64> {
        self.recall(base_url, model)?.context_window
    }

    /// Remembers `tokens` as `model`'s context window on `base_url`.
    pub fn remember_context_window(
        &self,
        base_url: &str,
        model: &str,
        tokens: u64,
    ) -> io::Result<bool> {
        self.remember(base_url, model, |entry| entry.context_window = Some(tokens))
    }

    /// Whether the `http://` endpoint at `base_url` speaks HTTP/2 without negotiation, as
    /// an earlier process found out (see [`Remembered::http2`]).
    pub fn http2(&self, base_url: &str) -> Option<bool> {
        self.recall(base_url, ENDPOINT_WIDE)?.http2
    }

    /// Remembers whether the endpoint at `base_url` speaks HTTP/2 without negotiation.
    pub fn remember_http2(&self, base_url: &str, speaks_h2c: bool) -> io::Result<bool> {
        self.remember(base_url, ENDPOINT_WIDE, |entry| {
            entry.http2 = Some(speaks_h2c)
        })
    }

    /// The file's contents, or nothing (a missing, unreadable, oversized or foreign file:
    /// warned about in the log, except a missing one).
    fn read(&self) -> MemoryFile {
        let bytes =
            match bounded_read::read(&self.path, Limit::bytes(MAX_FILE_BYTES), Links::Refuse) {
                Ok(bytes) => bytes,
                Err(e) if e.is_not_found() => return MemoryFile::default(),
                Err(e) => {
                    tracing::warn!(
                    "{} is ignored: {e} (delta rewrites it at its next lesson about an endpoint)",
                    self.path.display()
                );
                    return MemoryFile::default();
                }
            };
        match serde_json::from_slice::<MemoryFile>(&bytes) {
            Ok(file) if file.version == VERSION => file,
            Ok(file) => {
                tracing::warn!(
                    "{} is ignored: it is version {} of the format, this delta reads version {VERSION}",
                    self.path.display(),
                    file.version
                );
                MemoryFile::default()
            }
            Err(e) => {
                tracing::warn!(
                    "{} is ignored: it is not delta's endpoint memory ({e}); delta rewrites it at its next lesson",
                    self.path.display()
                );
                MemoryFile::default()
            }
        }
    }

    /// Writes `file` atomically: a new private file beside the old one, renamed over it.
    fn write(&self, file: &MemoryFile) -> io::Result<()> {
        let text = serde_json::to_vec_pretty(file).map_err(io::Error::other)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(io::Error::other(format!(
                "the endpoint memory would be larger than {MAX_FILE_BYTES} bytes"
            )));
        }
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "endpoints.json".to_owned());
        let temporary = dir.join(format!(
            ".{name}.{}.{:08x}.tmp",
            std::process::id(),
            fastrand::u32(..)
        ));
        let mut options = std::fs::OpenOptions::new();
        // create_new: never through a link or into someone's file left at that name.
        options.write(true).create_new(true).mode(0o600);
        let written = options.open(&temporary).and_then(|mut out| {
            out.write_all(&text)?;
            out.write_all(b"\n")?;
            out.sync_all()
        });
        let renamed = written.and_then(|()| std::fs::rename(&temporary, &self.path));
        if renamed.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        renamed
    }
}

/// The name an endpoint is remembered under: its base URL without user-info, query or
/// fragment, and without a trailing slash; `None` when it is not a URL, or too long.
pub fn memory_url(base_url: &str) -> Option<String> {
    let mut url = reqwest::Url::parse(base_url.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    url.set_query(None);
    url.set_fragment(None);
    let text = url.as_str().trim_end_matches('/').to_owned();
    (text.len() <= MAX_NAME_BYTES).then_some(text)
}

/// An entry written longer than [`STALE_AFTER`] ago, or at no readable time.
fn is_stale(learned_at: &str) -> bool {
    let Ok(at) = chrono::DateTime::parse_from_rfc3339(learned_at) else {
        return true;
    };
    let age = chrono::Utc::now().signed_duration_since(at.with_timezone(&chrono::Utc));
    age.to_std().is_ok_and(|age| age > STALE_AFTER)
}

/// Drops the oldest entries beyond `max`, and endpoints left without a model.
fn keep_newest(file: &mut MemoryFile, max: usize) {
    let mut all: Vec<(String, String, String)> = file
        .endpoints
        .iter()
        .flat_map(|(url, models)| {
            models
                .iter()
                .map(move |(model, e)| (e.learned_at.clone(), url.clone(), model.clone()))
        })
        .collect();
    if all.len() <= max {
        return;
    }
    all.sort();
    for (_, url, model) in all.iter().take(all.len() - max) {
        if let Some(models) = file.endpoints.get_mut(url) {
            models.remove(model);
        }
    }
    file.endpoints.retain(|_, models| !models.is_empty());
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_endpoint_is_named_without_secrets() {
        assert_eq!(
            memory_url("https://user:pa55@Host.example:8443/v1/?api-key=sk-123#frag").as_deref(),
            Some("https://host.example:8443/v1")
        );
        assert_eq!(
            memory_url("http://127.0.0.1:18090/v1").as_deref(),
            Some("http://127.0.0.1:18090/v1")
        );
        assert_eq!(memory_url("not a url"), None);
        assert_eq!(memory_url("file:///etc/passwd"), None);
    }

    /// Lessons survive the process (a new memory on the same file reads them), the file is
    /// private in a private folder, and nothing of the key or the URL's secrets is in it.
    #[test]
    fn lessons_are_kept_privately_and_without_secrets() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("cache/delta/endpoints.json");
        let url = "http://me:hunter2@127.0.0.1:18090/v1?key=sk-secret";
        let memory = EndpointMemory::new(&path);
        assert_eq!(memory.recall(url, "smollm2"), None);
        assert!(memory
            .remember(url, "smollm2", |r| {
                r.stream = Some(false);
                r.tool_call_content = Some("empty_string".into());
            })
            .unwrap());
        let again = EndpointMemory::new(&path);
        let recalled = again
            .recall("http://127.0.0.1:18090/v1/", "smollm2")
            .unwrap();
        assert_eq!(recalled.stream, Some(false));
        assert_eq!(recalled.tool_call_content.as_deref(), Some("empty_string"));
        assert_eq!(again.recall(url, "other-model"), None);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let text = std::fs::read_to_string(&path).unwrap();
        for secret in ["hunter2", "sk-secret", "me:"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("endpoints.json")]);
    }

    #[test]
    fn a_stale_entry_is_forgotten_and_started_over() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("endpoints.json");
        std::fs::write(
            &path,
            r#"{"version":1,"endpoints":{"http://h/v1":{"m":{"learned_at":"2020-01-01T00:00:00.000Z","stream":false,"sampling":false,"from_the_future":{"a":1}}}}}"#,
        )
        .unwrap();
        let memory = EndpointMemory::new(&path);
        assert_eq!(
            memory.recall("http://h/v1", "m"),
            None,
            "older than 30 days"
        );
        memory
            .remember("http://h/v1", "m", |r| {
                r.system_role = Some("developer".into())
            })
            .unwrap();
        let fresh = memory.recall("http://h/v1", "m").unwrap();
        assert_eq!(fresh.system_role.as_deref(), Some("developer"));
        assert_eq!(fresh.stream, None, "the stale lessons were not revived");
    }

    /// A newer delta's fields are kept; the context budget's window is a field like the
    /// others.
    #[test]
    fn unknown_fields_and_the_context_window_are_kept() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("endpoints.json");
        let memory = EndpointMemory::new(&path);
        assert_eq!(memory.context_window("http://h/v1", "m"), None);
        assert!(memory
            .remember_context_window("http://h/v1", "m", 4096)
            .unwrap());
        assert_eq!(memory.context_window("http://h/v1/", "m"), Some(4096));
        memory
            .remember("http://h/v1", "m", |r| {
                r.other.insert("from_the_future".into(), Value::from(7));
            })
            .unwrap();
        memory
            .remember("http://h/v1", "m", |r| r.stream = Some(false))
            .unwrap();
        let entry = memory.recall("http://h/v1", "m").unwrap();
        assert_eq!(entry.context_window, Some(4096));
        assert_eq!(entry.other["from_the_future"], 7);
        assert_eq!(entry.stream, Some(false));
    }

    /// A foreign, broken or oversized file is ignored (nothing recalled) and replaced by the
    /// next lesson; a link in its place is never followed.
    #[test]
    fn a_broken_file_is_ignored_and_replaced() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("endpoints.json");
        for junk in [
            b"[1,2,3]".to_vec(),
            b"{\"version\":99,\"endpoints\":{}}".to_vec(),
            vec![b' '; MAX_FILE_BYTES as usize + 1],
        ] {
            std::fs::write(&path, junk).unwrap();
            let memory = EndpointMemory::new(&path);
            assert_eq!(memory.recall("http://h/v1", "m"), None);
            memory
                .remember("http://h/v1", "m", |r| r.sampling = Some(false))
                .unwrap();
            assert_eq!(
                memory.recall("http://h/v1", "m").unwrap().sampling,
                Some(false)
            );
        }
        let elsewhere = root.path().join("elsewhere.json");
        std::fs::write(&elsewhere, "precious").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let memory = EndpointMemory::new(&path);
        assert_eq!(memory.recall("http://h/v1", "m"), None);
        memory
            .remember("http://h/v1", "m", |r| r.stream = Some(false))
            .unwrap();
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }

    /// Lessons learned at once in one process (a model's detail on one thread, the
    /// endpoint's HTTP version on another) are all kept: each read-change-write holds the
    /// lock, so none writes the file as it was before another's lesson.
    #[test]
    fn lessons_learned_at_once_in_a_process_are_all_kept() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("endpoints.json");
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                let memory = EndpointMemory::new(&path);
                std::thread::spawn(move || {
                    for n in 0..10 {
                        memory
                            .remember("http://h/v1", &format!("m{thread}-{n}"), |r| {
                                r.sampling = Some(false)
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let memory = EndpointMemory::new(&path);
        for thread in 0..4 {
            for n in 0..10 {
                assert!(
                    memory
                        .recall("http://h/v1", &format!("m{thread}-{n}"))
                        .is_some(),
                    "m{thread}-{n} lost"
                );
            }
        }
    }

    /// A hand-edited `http2` that is not a boolean: the file is not this format, so nothing
    /// is recalled (the endpoint is asked again) and the next lesson replaces it.
    #[test]
    fn an_http2_that_is_not_a_boolean_is_not_recalled() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("endpoints.json");
        let memory = EndpointMemory::new(&path);
        memory.remember_http2("http://h/v1", true).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"http2\": true"), "{text}");
        std::fs::write(&path, text.replace("\"http2\": true", "\"http2\": \"yes\"")).unwrap();
        assert_eq!(memory.http2("http://h/v1"), None);
        memory.remember_http2("http://h/v1", false).unwrap();
        assert_eq!(memory.http2("http://h/v1"), Some(false));
    }

    #[test]
    fn the_oldest_entries_go_first_beyond_the_bound() {
        let mut file = MemoryFile::default();
        for (i, at) in ["2026-01-03", "2026-01-01", "2026-01-02"]
            .iter()
            .enumerate()
        {
            file.endpoints
                .entry(format!("http://h{i}/v1"))
                .or_default()
                .insert(
                    "m".into(),
                    Remembered {
                        learned_at: format!("{at}T00:00:00.000Z"),
                        ..Remembered::default()
                    },
                );
        }
        keep_newest(&mut file, 2);
        let left: Vec<_> = file.endpoints.keys().cloned().collect();
        assert_eq!(left, vec!["http://h0/v1", "http://h2/v1"]);
    }
}
