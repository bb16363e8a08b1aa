//! The cache of a `computed_file` generator (`cache: {strategy: file_hash, invalidate_on:
//! [globs]}`, spec §2.4.8): the generator runs again only when its command, its output path
//! or the contents of a file its globs match changed since the run that wrote the output.
//!
//! The key is a SHA-256 of the command, the output path and each matched file's path and
//! contents (files in sorted order). It is kept per workspace, in
//! `.delta/context-cache/<hash of the source id>.json` (0600), so later runs in the same
//! workspace reuse it. Hashing runs on the blocking pool, within [`MAX_CACHE_FILES`] files and
//! [`MAX_CACHE_BYTES`] bytes; only regular files are read (a FIFO is hashed by its path).
//!
//! Must not: run the generator, or read anything a glob does not name.

use std::io::Read;
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA256};

use super::{path_str, CancellationToken, ContextError, ContextInputs};
use crate::blocking::{run_blocking, BlockingError};
use crate::bounded_read::{Limit, Links};

/// The most files the globs of one cache may match.
pub const MAX_CACHE_FILES: usize = 10_000;
/// The most bytes of those files hashed.
pub const MAX_CACHE_BYTES: u64 = 256 * 1024 * 1024;
/// The folder of the stored keys, under the workspace's `.delta/`.
const CACHE_FOLDER: &str = "context-cache";

/// What a cache key is made of.
pub(super) struct GeneratorCacheKey<'a> {
    pub(super) id: &'a str,
    pub(super) argv: &'a [String],
    pub(super) output_path: &'a str,
    pub(super) invalidate_on: &'a [String],
}

/// A cache's answer for one build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheOutcome {
    /// The source's id.
    pub source: String,
    /// The stored key matched (the generator did not run).
    pub hit: bool,
    /// The key (SHA-256, hex).
    pub key: String,
}

impl GeneratorCacheKey<'_> {
    /// Computes the key and compares it with the stored one.
    pub(super) async fn check(
        &self,
        inputs: &ContextInputs<'_>,
        cancel: &CancellationToken,
    ) -> Result<CacheOutcome, ContextError> {
        let id = self.id.to_string();
        let mut prefix = Context::new(&SHA256);
        prefix.update(b"delta context cache v1\n");
        for arg in self.argv {
            prefix.update(arg.as_bytes());
            prefix.update(b"\0");
        }
        prefix.update(b"\n");
        prefix.update(self.output_path.as_bytes());
        prefix.update(b"\n");
        let patterns: Vec<PathBuf> = self
            .invalidate_on
            .iter()
            .map(|p| absolute_pattern(p, inputs.agent_home, inputs.work_dir))
            .collect();
        let store = stored_key_path(inputs.work_dir, self.id);
        let key_id = id.clone();
        let computed = run_blocking(
            move || -> Result<(String, Option<String>), ContextError> {
                let key = hash_files(prefix, &patterns, &key_id)?;
                Ok((key, read_stored(&store)))
            },
            cancel,
        )
        .await
        .map_err(|e| match e {
            BlockingError::Cancelled => ContextError::Cancelled,
            BlockingError::Failed(message) => ContextError::FileUnreadable {
                id: id.clone(),
                path: "cache.invalidate_on".into(),
                message,
            },
        })??;
        let (key, stored) = computed;
        Ok(CacheOutcome {
            hit: stored.as_deref() == Some(key.as_str()),
            source: id,
            key,
        })
    }
}

impl CacheOutcome {
    /// Keeps the key for the next build (best effort: a cache that cannot be written only
    /// makes the next build run the generator again).
    pub(super) fn store(&self, inputs: &ContextInputs<'_>) {
        let path = stored_key_path(inputs.work_dir, &self.source);
        if let Some(folder) = path.parent() {
            let _ = std::fs::create_dir_all(folder);
        }
        let text = serde_json::json!({"source": self.source, "key": self.key}).to_string();
        let _ = crate::private_file::write_private_file(&path, text.as_bytes());
    }
}

/// A glob of `invalidate_on` as an absolute pattern: under the agent folder for
/// `${AGENT_HOME}/`, else under the workspace (the folders' own names escaped).
fn absolute_pattern(pattern: &str, agent_home: &Path, work_dir: &Path) -> PathBuf {
    let (base, relative) = match pattern.strip_prefix("${AGENT_HOME}/") {
        Some(rest) => (agent_home, rest),
        None => (work_dir, pattern.strip_prefix("${CWD}/").unwrap_or(pattern)),
    };
    PathBuf::from(glob::Pattern::escape(&path_str(base))).join(relative)
}

/// `.delta/context-cache/<first 16 hex of SHA-256(id)>.json`: the id is text from
/// context.yaml and never becomes a path itself.
fn stored_key_path(work_dir: &Path, id: &str) -> PathBuf {
    let digest = ring::digest::digest(&SHA256, id.as_bytes());
    work_dir
        .join(".delta")
        .join(CACHE_FOLDER)
        .join(format!("{}.json", &hex(digest.as_ref())[..16]))
}

fn read_stored(path: &Path) -> Option<String> {
    let text =
        crate::bounded_read::read_to_string(path, Limit::bytes(64 * 1024), Links::Refuse).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value.get("key")?.as_str().map(str::to_owned)
}

/// The key: `prefix` then each matched file's path and contents, in path order.
fn hash_files(mut hash: Context, patterns: &[PathBuf], id: &str) -> Result<String, ContextError> {
    let options = glob::MatchOptions {
        require_literal_leading_dot: true,
        ..glob::MatchOptions::new()
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for pattern in patterns {
        let Ok(paths) = glob::glob_with(&path_str(pattern), options) else {
            continue;
        };
        for path in paths.flatten() {
            files.push(path);
            if files.len() > MAX_CACHE_FILES {
                return Err(too_much(id, format!("more than {MAX_CACHE_FILES} files")));
            }
        }
    }
    files.sort();
    files.dedup();
    let mut total: u64 = 0;
    let mut buffer = vec![0u8; 64 * 1024];
    for path in files {
        hash.update(path_str(&path).as_bytes());
        hash.update(b"\0");
        let Ok(mut file) = crate::bounded_read::open(&path, Links::Follow) else {
            // A folder, a FIFO, a file gone since the glob: its path alone counts.
            hash.update(b"-\n");
            continue;
        };
        loop {
            let read = match file.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            total += read as u64;
            if total > MAX_CACHE_BYTES {
                return Err(too_much(id, format!("more than {MAX_CACHE_BYTES} bytes")));
            }
            hash.update(&buffer[..read]);
        }
        hash.update(b"\n");
    }
    Ok(hex(hash.finish().as_ref()))
}

fn too_much(id: &str, what: String) -> ContextError {
    ContextError::CacheTooLarge {
        id: id.to_string(),
        what,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
