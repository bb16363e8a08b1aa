//! Typed access to parsed YAML mappings, shared by everything that reads a user's YAML
//! (agent files, tool definitions): the [`Fields`] accessor, whose every getter names the file
//! and the dotted key path in its [`FieldError`], the unknown-key check (an error, or a
//! warning under `strict: false`) with a "did you mean" suggestion, and the longest timeout
//! a file may set. The parser's own complaints are reworded in `yaml_errors`.
//!
//! Must not: read files (callers read and word their own I/O errors) or know any schema
//! (callers list the keys they accept). It imports nothing from the crate.

use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

/// A mapping of a YAML document is wrong. The text is complete: file, key path, problem, hint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FieldError {
    /// A value has the wrong shape; `message` names the dotted key path (`llm.temperature`,
    /// `tools[2].name`).
    #[error("`{}`: {message}\n  hint: {hint}", file.display())]
    Invalid {
        file: PathBuf,
        message: String,
        hint: String,
    },
    /// A key the format does not have at that place.
    #[error(transparent)]
    UnknownKey(UnknownKeyError),
}

/// A key a file's format does not have at that place: the one shape every error enum of
/// the user's YAML (agent files, tool definitions) carries as it is. Its text names the
/// file, the key, the closest known key, every known key and the opt-out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", unknown_key_text(file, key, closest.as_deref(), known))]
pub struct UnknownKeyError {
    /// The file.
    pub file: PathBuf,
    /// The key's dotted path, e.g. `tool` or `tools[0].descripton`.
    pub key: String,
    /// The known key it is closest to, when one is close.
    pub closest: Option<String>,
    /// Every key accepted at that place.
    pub known: Vec<String>,
}

impl FieldError {
    pub(crate) fn new(file: &Path, message: impl Into<String>, hint: impl Into<String>) -> Self {
        FieldError::Invalid {
            file: file.to_path_buf(),
            message: message.into(),
            hint: hint.into(),
        }
    }
}

/// Where the opt-out of unknown-key errors is, and what it is.
pub(crate) const STRICT_OPT_OUT: &str =
    "`strict: false` in agent.yaml turns unknown keys into warnings (docs/agent.md)";

/// The text of an unknown-key error: file, key, the closest known key, every known key,
/// and the opt-out.
fn unknown_key_text(file: &Path, key: &str, closest: Option<&str>, known: &[String]) -> String {
    let suggestion = closest
        .map(|k| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default();
    format!(
        "`{}`: unknown key `{key}`{suggestion}\n  hint: fix its spelling or remove it; the keys \
         here are: {}; {STRICT_OPT_OUT}",
        file.display(),
        known.join(", ")
    )
}

/// What an unknown key in an agent file is: an error (the default, as in plans), or — with
/// `strict: false` in agent.yaml — a warning. Also decides whether a tool placeholder that
/// no `parameters:` entry declares is an error or a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownKeys {
    /// Refuse the agent (exit 126), naming the file, the key and the closest known key.
    #[default]
    Refuse,
    /// Load it, with one warning per unknown key.
    Warn,
}

/// Longest timeout an agent file may set (tools, hooks, context generators): 7 days.
pub(crate) const MAX_TIMEOUT_MS: u64 = 7 * 24 * 3_600_000;

/// Human name of a YAML value's kind, for "expected X, found Y" messages.
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// The known key closest to `unknown` (edit distance, or containment for short stems such
/// as `hook` → `lifecycle_hooks`), if any is close enough to be a plausible typo.
pub(crate) fn closest<'k>(unknown: &str, known: &[&'k str]) -> Option<&'k str> {
    let lowered = unknown.to_ascii_lowercase();
    let by_distance = known
        .iter()
        .map(|k| (edit_distance(&lowered, k), *k))
        .filter(|(d, k)| *d <= (k.len().max(lowered.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k);
    by_distance.or_else(|| {
        let stem = lowered.trim_end_matches('s');
        (stem.len() >= 3)
            .then(|| known.iter().copied().find(|k| k.contains(stem)))
            .flatten()
    })
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b_chars: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b_chars.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b_chars.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            let value = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
            current.push(value);
        }
        previous = current;
    }
    previous[b_chars.len()]
}

/// A YAML mapping seen through its file and key path, so every error can name both.
///
/// Once [`Fields::check_keys`] has been given the keys a mapping accepts, reading any other
/// key is a bug of the parser (its key list has drifted from what it reads) and fails every
/// debug build and test at once: the list beside each parser cannot fall behind it.
pub(crate) struct Fields<'a> {
    file: &'a Path,
    prefix: String,
    map: &'a Mapping,
    declared: std::cell::Cell<Option<&'a [&'a str]>>,
}

impl<'a> Fields<'a> {
    /// `prefix` is the dotted path of this mapping (empty for a document root).
    pub(crate) fn new(file: &'a Path, prefix: &str, value: &'a Value) -> Result<Self, FieldError> {
        match value {
            Value::Mapping(map) => Ok(Fields {
                file,
                prefix: prefix.to_string(),
                map,
                declared: std::cell::Cell::new(None),
            }),
            other => {
                let what = if prefix.is_empty() {
                    "the document".to_string()
                } else {
                    format!("`{prefix}`")
                };
                Err(FieldError::new(
                    file,
                    format!(
                        "{what} must be a mapping of `key: value` lines, found {}",
                        kind_of(other)
                    ),
                    "see `delta init` for a complete example",
                ))
            }
        }
    }

    pub(crate) fn file(&self) -> &'a Path {
        self.file
    }

    /// Dotted path of `key` inside this mapping, e.g. `llm.temperature`.
    pub(crate) fn key_path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    /// The value of `key`; an explicit `null` counts as absent.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        if let Some(declared) = self.declared.get() {
            debug_assert!(
                declared.contains(&key),
                "the parser reads `{}` but its key list does not declare it: add it to the \
                 list it gives check_keys ({declared:?})",
                self.key_path(key)
            );
        }
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn type_error(&self, key: &str, expected: &str, found: &Value, hint: &str) -> FieldError {
        FieldError::new(
            self.file,
            format!(
                "`{}` must be {expected}, found {}",
                self.key_path(key),
                kind_of(found)
            ),
            hint,
        )
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, FieldError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            // Numbers and booleans are accepted where text is expected (e.g. `version: 1.0`).
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(other) => Err(self.type_error(key, "text", other, "quote the value")),
        }
    }

    pub(crate) fn required_string(&self, key: &str, hint: &str) -> Result<String, FieldError> {
        match self.string(key)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(FieldError::new(
                self.file,
                format!("`{}` is required", self.key_path(key)),
                hint,
            )),
        }
    }

    /// A number within `min..=max`.
    pub(crate) fn number_in(
        &self,
        key: &str,
        min: f64,
        max: f64,
    ) -> Result<Option<f64>, FieldError> {
        let hint = format!("use a number between {min} and {max}");
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(x) if (min..=max).contains(&x) => Ok(Some(x)),
                _ => Err(FieldError::new(
                    self.file,
                    format!("`{}` is {n}, outside {min}..{max}", self.key_path(key)),
                    hint,
                )),
            },
            Some(other) => Err(self.type_error(key, "a number", other, &hint)),
        }
    }

    /// A whole number greater than zero.
    pub(crate) fn positive_integer(&self, key: &str) -> Result<Option<u64>, FieldError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(x) if x > 0 => Ok(Some(x)),
                _ => Err(FieldError::new(
                    self.file,
                    format!(
                        "`{}` is {n}, but must be a whole number greater than 0",
                        self.key_path(key)
                    ),
                    "use a positive integer such as 30",
                )),
            },
            Some(other) => Err(self.type_error(
                key,
                "a whole number",
                other,
                "use a positive integer such as 30",
            )),
        }
    }

    /// A timeout in milliseconds: a whole number from 1 to [`MAX_TIMEOUT_MS`] (a week). A
    /// larger value is refused at load, never carried into a timer or a deadline.
    pub(crate) fn timeout_ms(&self, key: &str) -> Result<Option<u64>, FieldError> {
        match self.positive_integer(key)? {
            Some(ms) if ms > MAX_TIMEOUT_MS => Err(FieldError::new(
                self.file,
                format!(
                    "`{}` is {ms}, more than {MAX_TIMEOUT_MS} ms (7 days)",
                    self.key_path(key)
                ),
                "use a number of milliseconds up to 604800000, e.g. 30000 for 30 s, or leave it out for the default",
            )),
            other => Ok(other),
        }
    }

    /// Like [`Fields::positive_integer`], narrowed to `u32`.
    pub(crate) fn positive_u32(&self, key: &str) -> Result<Option<u32>, FieldError> {
        match self.positive_integer(key)? {
            None => Ok(None),
            Some(x) => u32::try_from(x).map(Some).map_err(|_| {
                FieldError::new(
                    self.file,
                    format!("`{}` is {x}, which is too large", self.key_path(key)),
                    "use a value below 4294967296",
                )
            }),
        }
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>, FieldError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.type_error(
                key,
                "true or false",
                other,
                "write true or false without quotes",
            )),
        }
    }

    pub(crate) fn sequence(&self, key: &str) -> Result<Option<&'a [Value]>, FieldError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Sequence(items)) => Ok(Some(items.as_slice())),
            Some(other) => Err(self.type_error(
                key,
                "a list (lines starting with `- `)",
                other,
                "write one `- item` per line",
            )),
        }
    }

    /// A list of strings (e.g. an argv); `what` describes an element for the hint.
    pub(crate) fn string_list(&self, key: &str) -> Result<Option<Vec<String>>, FieldError> {
        let Some(items) = self.sequence(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                other => Err(FieldError::new(
                    self.file,
                    format!(
                        "`{}[{i}]` must be text, found {}",
                        self.key_path(key),
                        kind_of(other)
                    ),
                    "quote the element",
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Checks that this mapping has only the keys in `known` (which the parser then reads,
    /// see [`Fields`]). The first other key is an error under [`UnknownKeys::Refuse`]; under
    /// [`UnknownKeys::Warn`] each gets a warning, with the closest known key when plausible.
    pub(crate) fn check_keys(
        &self,
        known: &'a [&'a str],
        policy: UnknownKeys,
        warnings: &mut Vec<String>,
    ) -> Result<(), FieldError> {
        self.declared.set(Some(known));
        for key in self.map.keys() {
            let name = match key {
                Value::String(s) => s.clone(),
                other => serde_yaml::to_string(other)
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            };
            if known.contains(&name.as_str()) {
                continue;
            }
            let nearest = closest(&name, known);
            if policy == UnknownKeys::Refuse {
                return Err(FieldError::UnknownKey(UnknownKeyError {
                    file: self.file.to_path_buf(),
                    key: self.key_path(&name),
                    closest: nearest.map(str::to_owned),
                    known: known.iter().map(|k| (*k).to_owned()).collect(),
                }));
            }
            let suggestion = match nearest {
                Some(k) => format!(" (did you mean `{k}`?)"),
                None => format!(" (known keys: {})", known.join(", ")),
            };
            warnings.push(format!(
                "{}: unknown key `{}`{suggestion}",
                self.file.display(),
                self.key_path(&name)
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn closest_finds_typos_and_stems() {
        let known = ["model", "temperature", "max_tokens"];
        assert_eq!(closest("temprature", &known), Some("temperature"));
        assert_eq!(closest("max_token", &known), Some("max_tokens"));
        assert_eq!(closest("zzz", &known), None);
        assert_eq!(
            closest("hook", &["tools", "lifecycle_hooks"]),
            Some("lifecycle_hooks")
        );
        assert_eq!(
            closest("hooks", &["tools", "lifecycle_hooks"]),
            Some("lifecycle_hooks")
        );
    }

    #[test]
    fn unknown_keys_warn_with_path_and_suggestion() {
        let doc: Value = serde_yaml::from_str("model: x\ntemprature: 1\n").unwrap();
        let fields = Fields::new(Path::new("/a/agent.yaml"), "llm", &doc).unwrap();
        let mut warnings = Vec::new();
        fields
            .check_keys(&["model", "temperature"], UnknownKeys::Warn, &mut warnings)
            .unwrap();
        assert_eq!(
            warnings,
            vec![
                "/a/agent.yaml: unknown key `llm.temprature` (did you mean `temperature`?)"
                    .to_string()
            ]
        );
    }

    #[test]
    fn unknown_keys_are_refused_naming_file_key_and_closest_key() {
        let doc: Value = serde_yaml::from_str("model: x\ntemprature: 1\n").unwrap();
        let fields = Fields::new(Path::new("/a/agent.yaml"), "llm", &doc).unwrap();
        let mut warnings = Vec::new();
        let error = fields
            .check_keys(
                &["model", "temperature"],
                UnknownKeys::Refuse,
                &mut warnings,
            )
            .unwrap_err();
        assert!(
            matches!(error, FieldError::UnknownKey(UnknownKeyError { ref key, .. }) if key == "llm.temprature")
        );
        let text = error.to_string();
        assert!(
            text.starts_with(
                "`/a/agent.yaml`: unknown key `llm.temprature` (did you mean `temperature`?)"
            ),
            "{text}"
        );
        assert!(
            text.contains("the keys here are: model, temperature"),
            "{text}"
        );
        assert!(text.contains("strict: false"), "{text}");
        assert!(warnings.is_empty());
    }

    /// The key list beside a parser cannot drift from what it reads: a read of a key the
    /// list lacks fails every debug build (and so every test that loads such a file).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "does not declare it")]
    fn reading_a_key_the_list_does_not_declare_fails_debug_builds() {
        let doc: Value = serde_yaml::from_str("model: x\n").unwrap();
        let fields = Fields::new(Path::new("/a/agent.yaml"), "llm", &doc).unwrap();
        fields
            .check_keys(&["model"], UnknownKeys::Refuse, &mut Vec::new())
            .unwrap();
        let _ = fields.get("stream");
    }

    #[test]
    fn getters_name_the_key_path() {
        let doc: Value =
            serde_yaml::from_str("temperature: 3\nmax: -1\nflag: yes please\n").unwrap();
        let fields = Fields::new(Path::new("f.yaml"), "llm", &doc).unwrap();
        let err = fields
            .number_in("temperature", 0.0, 2.0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`llm.temperature` is 3, outside 0..2"),
            "{err}"
        );
        let err = fields.positive_integer("max").unwrap_err().to_string();
        assert!(err.contains("`llm.max`"), "{err}");
        let doc: Value = serde_yaml::from_str(
            "t: 18446744073709551615
ok: 604800000
",
        )
        .unwrap();
        let timeouts = Fields::new(Path::new("f.yaml"), "hook", &doc).unwrap();
        let err = timeouts.timeout_ms("t").unwrap_err().to_string();
        assert!(
            err.contains("`hook.t` is 18446744073709551615, more than"),
            "{err}"
        );
        assert_eq!(timeouts.timeout_ms("ok").unwrap(), Some(MAX_TIMEOUT_MS));
        let err = fields.boolean("flag").unwrap_err().to_string();
        assert!(err.contains("must be true or false"), "{err}");
        assert_eq!(fields.string("absent").unwrap(), None);
    }

    #[test]
    fn non_mapping_document_is_an_error() {
        let doc: Value = serde_yaml::from_str("- a\n- b\n").unwrap();
        let err = Fields::new(Path::new("x.yaml"), "", &doc)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("the document must be a mapping"), "{err}");
    }
}
