//! The spellings under which a secret can appear in text the engine writes, and the markers
//! that stand for each of them.
//!
//! A value reaches a record raw (a THOUGHT's text), JSON-escaped once (inside a tool call's
//! `arguments`, which is JSON text held in a JSON string, or in a tool's JSON output),
//! JSON-escaped twice (JSON text inside JSON text inside a string), or shell-quoted (the
//! `resolved_command` line of an ACTION_REQUEST). Each spelling gets its own marker, so
//! restoring a marker puts back exactly the spelling that was there (a JSON-escaped secret
//! comes back JSON-escaped, keeping the surrounding JSON valid).
//!
//! Must not: search text (that is `mod.rs`) or hold secrets.

/// Every marker starts with this text; the secret's id and its spelling follow.
pub const MARKER_PREFIX: &str = "[REDACTED: sensitive answer kept in secrets/";
/// Longest id accepted inside a marker (call ids are at most 128 characters).
const MAX_MARKER_ID: usize = 200;

/// How a secret was spelled where a marker replaced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Raw,
    JsonEscaped,
    JsonEscapedTwice,
    ShellQuoted,
}

impl Form {
    const ALL: [Form; 4] = [
        Form::Raw,
        Form::JsonEscaped,
        Form::JsonEscapedTwice,
        Form::ShellQuoted,
    ];

    fn suffix(self) -> &'static str {
        match self {
            Form::Raw => "]",
            Form::JsonEscaped => " (JSON-escaped)]",
            Form::JsonEscapedTwice => " (JSON-escaped twice)]",
            Form::ShellQuoted => " (shell-quoted)]",
        }
    }

    /// The spelling a restored marker of this form puts back.
    pub fn encode(self, value: &str) -> String {
        match self {
            Form::Raw => value.to_string(),
            Form::JsonEscaped => json_escape(value),
            Form::JsonEscapedTwice => json_escape(&json_escape(value)),
            Form::ShellQuoted => shell_quoted(value),
        }
    }
}

/// The marker standing for the secret `id` spelled as `form`.
pub fn marker(id: &str, form: Form) -> String {
    format!("{MARKER_PREFIX}{id}{}", form.suffix())
}

/// Parses a marker at the start of `text`: its id, form and length in bytes.
pub fn parse_marker(text: &[u8]) -> Option<(&str, Form, usize)> {
    let rest = text.strip_prefix(MARKER_PREFIX.as_bytes())?;
    let id_len = rest
        .iter()
        .take(MAX_MARKER_ID + 1)
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_' || **b == b'-')
        .count();
    if id_len == 0 || id_len > MAX_MARKER_ID {
        return None;
    }
    let (id, after) = rest.split_at(id_len);
    let id = std::str::from_utf8(id).ok()?;
    Form::ALL.into_iter().find_map(|form| {
        after
            .starts_with(form.suffix().as_bytes())
            .then(|| (id, form, MARKER_PREFIX.len() + id_len + form.suffix().len()))
    })
}

/// Every spelling of `value` worth searching for, most literal first, without duplicates.
/// JSON encoders differ: serde and JavaScript keep non-ASCII characters, Python escapes them
/// (`\u00e9`), some write upper-case hex, PHP escapes `/`, Go escapes `<`, `>` and `&`; all
/// of them are searched, and restore to the canonical (serde) spelling, which is the same
/// JSON string.
pub fn spellings(value: &str) -> Vec<(Form, String)> {
    let mut out: Vec<(Form, String)> = Vec::new();
    let mut push = |form: Form, text: String| {
        if !text.is_empty() && !out.iter().any(|(_, t)| *t == text) {
            out.push((form, text));
        }
    };
    push(Form::Raw, value.to_string());
    let once = [
        json_escape(value),
        json_escape_ascii(value, false),
        json_escape_ascii(value, true),
        json_escape(value).replace('/', "\\/"),
        json_escape_html(value),
    ];
    for text in &once {
        push(Form::JsonEscaped, text.clone());
    }
    for text in &once {
        push(Form::JsonEscapedTwice, json_escape(text));
    }
    push(Form::ShellQuoted, shell_quoted(value));
    out
}

/// The body of a JSON string literal holding `value`, as serde_json writes it.
pub fn json_escape(value: &str) -> String {
    let quoted = serde_json::Value::String(value.to_string()).to_string();
    quoted
        .strip_prefix('"')
        .and_then(|body| body.strip_suffix('"'))
        .unwrap_or(&quoted)
        .to_string()
}

/// Like [`json_escape`], with every non-ASCII character as `\uXXXX` (UTF-16 units).
fn json_escape_ascii(value: &str, upper: bool) -> String {
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        if c.is_ascii() {
            out.push_str(&json_escape(c.encode_utf8(&mut [0u8; 4])));
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                if upper {
                    out.push_str(&format!("\\u{unit:04X}"));
                } else {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out
}

/// Like [`json_escape`], with `<`, `>`, `&` escaped as Go's encoder does.
fn json_escape_html(value: &str) -> String {
    json_escape(value)
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// How `value` appears inside a single-quoted word of a resolved command line (see
/// `CompiledTool::render_command`): `'` closes and reopens the quotes, line breaks are
/// written `\n` and `\r`.
pub fn shell_quoted(value: &str) -> String {
    value
        .replace('\'', "'\\''")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}
