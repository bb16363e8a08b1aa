//! `${name}` placeholders, the primitives every part of the compiler shares: finding them in
//! text (`${name}`, `${name:raw}`), substituting values, the engine variables that are never
//! parameters, and [`TemplateError`], the plain error the scanners return.
//!
//! Must not: know the exec/shell forms (`template`, `shell_scan`) or YAML (`compile`).

/// Variables the engine fills in; a template never turns them into model parameters.
pub(crate) const ENGINE_VARS: [&str; 3] = ["AGENT_HOME", "CWD", "RUN_ID"];

pub(crate) fn is_engine_var(name: &str) -> bool {
    ENGINE_VARS.contains(&name)
}

/// A template problem: what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TemplateError {
    pub message: String,
    pub hint: String,
}

pub(crate) fn template_error(message: impl Into<String>, hint: impl Into<String>) -> TemplateError {
    TemplateError {
        message: message.into(),
        hint: hint.into(),
    }
}

/// One `${name}` or `${name:raw}` occurrence, as byte offsets into its text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Placeholder {
    pub name: String,
    pub raw: bool,
    pub start: usize,
    pub end: usize,
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The text of the `${...}` starting at `start`, and whether it is a well-formed placeholder.
pub(crate) fn placeholder_at(text: &str, start: usize) -> Option<Result<Placeholder, String>> {
    if !text[start..].starts_with("${") {
        return None;
    }
    let Some(close) = text[start..].find('}') else {
        return Some(Err(text[start..].to_string()));
    };
    let end = start + close + 1;
    let inner = &text[start + 2..end - 1];
    let (name, raw) = match inner.split_once(':') {
        Some((name, "raw")) => (name, true),
        Some(_) => return Some(Err(text[start..end].to_string())),
        None => (inner, false),
    };
    if !is_identifier(name) {
        return Some(Err(text[start..end].to_string()));
    }
    Some(Ok(Placeholder {
        name: name.to_string(),
        raw,
        start,
        end,
    }))
}

/// Every well-formed placeholder in `text`, in order. Malformed `${...}` are skipped.
pub(crate) fn placeholders(text: &str) -> Vec<Placeholder> {
    let mut found = Vec::new();
    let mut index = 0;
    while let Some(offset) = text[index..].find("${") {
        let start = index + offset;
        match placeholder_at(text, start) {
            Some(Ok(p)) => {
                index = p.end;
                found.push(p);
            }
            _ => index = start + 2,
        }
    }
    found
}

/// Replaces each placeholder for which `value_of` answers; others stay as written. Values
/// are inserted verbatim and never re-scanned.
pub(crate) fn substitute(text: &str, mut value_of: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for p in placeholders(text) {
        if let Some(value) = value_of(&p.name) {
            out.push_str(&text[last..p.start]);
            out.push_str(&value);
            last = p.end;
        }
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn substitute_never_rescans_values() {
        let out = substitute("a=${a} b=${b}", |n| {
            Some(if n == "a" { "${b}".into() } else { "B".into() })
        });
        assert_eq!(out, "a=${b} b=B");
    }
}
