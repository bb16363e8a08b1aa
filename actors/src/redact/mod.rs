//! Keeping sensitive `ask_human` answers out of everything a run writes (DESIGN §4).
//!
//! A sensitive answer lives in one 0600 file under the run's `secrets/` folder; its id is
//! the file name. Every writer of the run (journal, metadata.json, io/ audit records, full
//! tool outputs, engine.log, RunEvents, the RunResult) passes its text through the run's
//! [`SecretSet`], which replaces each occurrence of each answer with a marker such as
//! `[REDACTED: sensitive answer kept in secrets/call_1_0]`. Readers that hand text back to
//! the model (the journal reader of `continue`) restore the markers, so the model and the
//! tools keep seeing the real value.
//!
//! Decisions:
//! - Only answers of at least [`MIN_SECRET_CHARS`] characters are searched for in free text:
//!   a one-letter answer would turn every such letter of every record into a marker. The
//!   field that holds the answer itself is always a marker, whatever its length.
//! - Overlapping secrets: the longest match starting leftmost wins, and text already inside
//!   a marker is never redacted again (so redacting twice changes nothing).
//! - Spellings: raw, JSON-escaped once or twice (several encoders' styles) and shell-quoted
//!   (`forms.rs`); each restores to its own spelling.
//! - Full tool outputs are redacted while they stream, holding back only as many bytes as
//!   the longest spelling, so a secret split across two reads is still found ([`StreamRedactor`]).
//!
//! Must not: import actix, write files other than reading `secrets/`, or print.

mod forms;
mod stream;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::bounded_read::{self, Links};
use aho_corasick::{AhoCorasick, Input, MatchKind};
use serde_json::Value;

pub use forms::MARKER_PREFIX;
pub use stream::StreamRedactor;

use forms::{parse_marker, Form};

/// Shortest answer searched for in free text (see the module docs).
pub const MIN_SECRET_CHARS: usize = 4;

/// The marker standing for the secret `id` where its value appeared as is.
pub fn marker(id: &str) -> String {
    forms::marker(id, Form::Raw)
}

/// The id (and file name under `secrets/`) of the answer to the call `action_id`: the
/// characters `[A-Za-z0-9_-]` kept, others replaced by `_`.
pub fn secret_id(action_id: &str) -> String {
    let id: String = action_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() {
        "_".to_string()
    } else {
        id
    }
}

/// What to do where a pattern matched.
enum Action {
    /// A spelling of a secret: write this marker instead.
    Replace(String),
    /// The start of a marker: copy the marker through unchanged.
    Marker,
}

struct Compiled {
    /// Every known secret by id (restoring needs them all, even short ones).
    values: BTreeMap<String, String>,
    /// Spellings of the secrets long enough to search for, plus [`MARKER_PREFIX`].
    matcher: Option<AhoCorasick>,
    actions: Vec<Action>,
    /// Longest pattern in bytes (how much a stream must hold back).
    window: usize,
}

/// An immutable set of secret values, compiled for searching. Cheap to clone.
#[derive(Clone, Default)]
pub struct SecretSet {
    inner: Option<Arc<Compiled>>,
}

impl std::fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.debug_struct("SecretSet")
            .field("secrets", &self.ids().count())
            .finish()
    }
}

impl PartialEq for SecretSet {
    fn eq(&self, other: &SecretSet) -> bool {
        self.values() == other.values()
    }
}

impl Eq for SecretSet {}

impl SecretSet {
    /// A set of `(id, value)` pairs. Empty values are ignored.
    pub fn new<I, K, V>(secrets: I) -> SecretSet
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let values: BTreeMap<String, String> = secrets
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        if values.is_empty() {
            return SecretSet::default();
        }
        let mut patterns: Vec<String> = vec![MARKER_PREFIX.to_string()];
        let mut actions = vec![Action::Marker];
        // Longest values first: where two secrets share a spelling, one marker must win.
        let mut searchable: Vec<(&String, &String)> = values
            .iter()
            .filter(|(_, v)| v.chars().count() >= MIN_SECRET_CHARS)
            .collect();
        searchable.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        for (id, value) in searchable {
            for (form, text) in forms::spellings(value) {
                if !patterns.contains(&text) {
                    patterns.push(text);
                    actions.push(Action::Replace(forms::marker(id, form)));
                }
            }
        }
        let window = patterns.iter().map(String::len).max().unwrap_or(0);
        let matcher = if actions.len() > 1 {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .ok()
        } else {
            None
        };
        SecretSet {
            inner: Some(Arc::new(Compiled {
                values,
                matcher,
                actions,
                window,
            })),
        }
    }

    /// The answers stored under `dir` (the run's `secrets/` folder), by file name. A missing
    /// folder is an empty set; an unreadable file (one that is not a plain file delta wrote:
    /// a FIFO, a link, over [`bounded_read::ANSWER`]) is skipped.
    pub fn load_dir(dir: &Path) -> SecretSet {
        let mut secrets = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let read = bounded_read::read_to_string(
                    &entry.path(),
                    bounded_read::ANSWER,
                    Links::Refuse,
                );
                if let Ok(value) = read {
                    secrets.push((name, value));
                }
            }
        }
        SecretSet::new(secrets)
    }

    /// This set plus the secret `id`.
    pub fn with(&self, id: &str, value: &str) -> SecretSet {
        let mut values = self.values().cloned().unwrap_or_default();
        values.insert(id.to_string(), value.to_string());
        SecretSet::new(values)
    }

    fn values(&self) -> Option<&BTreeMap<String, String>> {
        self.inner.as_ref().map(|c| &c.values)
    }

    fn ids(&self) -> impl Iterator<Item = &String> {
        self.values().into_iter().flat_map(|v| v.keys())
    }

    /// No secret at all (nothing to redact or restore).
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// The value of the secret `id`.
    pub fn get(&self, id: &str) -> Option<&str> {
        self.values()?.get(id).map(String::as_str)
    }

    fn searcher(&self) -> Option<(&AhoCorasick, &Compiled)> {
        let compiled = self.inner.as_deref()?;
        Some((compiled.matcher.as_ref()?, compiled))
    }

    /// `text` with every occurrence of every secret replaced by its marker.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.redact_bytes(text.as_bytes()) {
            None => Cow::Borrowed(text),
            // Patterns are whole UTF-8 sequences, so replacing them keeps the text valid.
            Some(bytes) => Cow::Owned(
                String::from_utf8(bytes)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            ),
        }
    }

    /// [`SecretSet::redact`] in place.
    pub fn redact_string(&self, text: &mut String) {
        if let Cow::Owned(redacted) = self.redact(text) {
            *text = redacted;
        }
    }

    /// Redacts every string and every object key inside `value`.
    pub fn redact_json(&self, value: &mut Value) {
        if self.searcher().is_some() {
            map_json(value, &|text| self.redact(text));
        }
    }

    /// `bytes` with every secret replaced, or `None` when nothing was found.
    fn redact_bytes(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let (matcher, compiled) = self.searcher()?;
        let mut out: Option<Vec<u8>> = None;
        let mut copied = 0;
        let mut at = 0;
        while at < bytes.len() {
            let Some(found) = matcher.find(Input::new(bytes).span(at..bytes.len())) else {
                break;
            };
            match &compiled.actions[found.pattern().as_usize()] {
                Action::Marker => {
                    at = parse_marker(&bytes[found.start()..])
                        .map_or(found.end(), |(_, _, len)| found.start() + len);
                }
                Action::Replace(marker) => {
                    let buffer = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
                    buffer.extend_from_slice(&bytes[copied..found.start()]);
                    buffer.extend_from_slice(marker.as_bytes());
                    copied = found.end();
                    at = found.end();
                }
            }
        }
        out.map(|mut buffer| {
            buffer.extend_from_slice(&bytes[copied..]);
            buffer
        })
    }

    /// `text` with every marker of a known secret replaced by the secret, spelled as it was.
    pub fn restore<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Some(values) = self.values() else {
            return Cow::Borrowed(text);
        };
        if !text.contains(MARKER_PREFIX) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(MARKER_PREFIX) {
            out.push_str(&rest[..start]);
            let tail = &rest[start..];
            match parse_marker(tail.as_bytes()) {
                Some((id, form, len)) if values.contains_key(id) => {
                    if let Some(value) = values.get(id) {
                        out.push_str(&form.encode(value));
                    }
                    rest = &tail[len..];
                }
                _ => {
                    out.push_str(MARKER_PREFIX);
                    rest = &tail[MARKER_PREFIX.len()..];
                }
            }
        }
        out.push_str(rest);
        Cow::Owned(out)
    }

    /// [`SecretSet::restore`] in place.
    pub fn restore_string(&self, text: &mut String) {
        if let Cow::Owned(restored) = self.restore(text) {
            *text = restored;
        }
    }

    /// Restores every string and every object key inside `value`.
    pub fn restore_json(&self, value: &mut Value) {
        if !self.is_empty() {
            map_json(value, &|text| self.restore(text));
        }
    }

    /// A redactor for a stream written piece by piece (a tool's full output).
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor::new(self.clone())
    }
}

/// Applies `change` to every string and object key of `value`.
fn map_json(value: &mut Value, change: &dyn Fn(&str) -> Cow<'_, str>) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(changed) = change(text) {
                *text = changed;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| map_json(v, change)),
        Value::Object(fields) => {
            let renamed = fields.keys().any(|k| matches!(change(k), Cow::Owned(_)));
            if renamed {
                let old = std::mem::take(fields);
                for (key, mut v) in old {
                    map_json(&mut v, change);
                    fields.insert(change(&key).into_owned(), v);
                }
            } else {
                fields.values_mut().for_each(|v| map_json(v, change));
            }
        }
        _ => {}
    }
}

/// The run's secrets, shared by every writer of the run and grown when a sensitive answer
/// arrives; writers take a [`SecretSet`] snapshot per write.
#[derive(Clone, Default)]
pub struct Redactor {
    current: Arc<RwLock<SecretSet>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Redactor").field(&self.snapshot()).finish()
    }
}

impl Redactor {
    /// A redactor starting with the answers stored under `secrets_dir` (an earlier start of
    /// the run), so they apply from the first write of a continuation.
    pub fn load(secrets_dir: &Path) -> Redactor {
        Redactor::with_set(SecretSet::load_dir(secrets_dir))
    }

    fn with_set(set: SecretSet) -> Redactor {
        Redactor {
            current: Arc::new(RwLock::new(set)),
        }
    }

    /// Adds a secret; every later write redacts it.
    pub fn add(&self, id: &str, value: &str) {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        *current = current.with(id, value);
    }

    /// The secrets known now.
    pub fn snapshot(&self) -> SecretSet {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
