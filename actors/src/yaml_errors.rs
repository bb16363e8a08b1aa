//! serde_yaml's and serde's complaints reworded for people, shared by everything that parses
//! a user's YAML (plans, agent files, LLM scripts): the position said once, a tab in the
//! indentation called a tab ([`syntax_error`]), an enum's or a struct's choices listed in
//! words ([`serde_message_in_words`]).
//!
//! Must not: read files or know any schema. It imports nothing from the crate.

/// Why YAML text does not parse, in words: where (once), and what — a tab in the
/// indentation is named as such (serde_yaml says "found character that cannot start any
/// token" or "a tab character that violates indentation").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    /// `line 3 column 1`, when the parser knows the position.
    pub(crate) position: Option<String>,
    /// What is wrong, without the position.
    pub(crate) message: String,
    /// The problem is a tab character.
    pub(crate) tab: bool,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.position {
            Some(position) => write!(f, "{position}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// The hint for a [`SyntaxError`] that is a tab.
pub(crate) const TAB_HINT: &str =
    "YAML indents with spaces only: replace the tab with spaces (an editor's \"convert \
     indentation to spaces\" does it for the whole file)";

/// Rewords `error`, raised while parsing `text`.
pub(crate) fn syntax_error(text: &str, error: &serde_yaml::Error) -> SyntaxError {
    let raw = error.to_string();
    let location = error.location();
    let position = location
        .as_ref()
        .map(|at| format!("line {} column {}", at.line(), at.column()));
    let line_text = location
        .as_ref()
        .and_then(|at| text.lines().nth(at.line().saturating_sub(1)));
    let tab_at_position = match (location.as_ref(), line_text) {
        (Some(at), Some(line)) => line.chars().take(at.column().max(1)).any(|c| c == '\t'),
        _ => false,
    };
    let tab = raw.contains("tab character") || tab_at_position;
    let message = match (&position, tab) {
        (_, true) => "a tab character, which YAML does not allow for indentation".to_owned(),
        (Some(position), false) => raw.replace(&format!(" at {position}"), ""),
        (None, false) => raw,
    };
    SyntaxError {
        position,
        message,
        tab,
    }
}

/// serde's enum and field complaints in words: "unknown variant `yaml`, expected `json` or
/// `text`" becomes "`yaml` is not one of: json, text"; "unknown field `x`, expected one of
/// `a`, `b`" becomes "unknown key `x`; the keys here are: a, b". Other messages are kept.
pub(crate) fn serde_message_in_words(message: &str) -> String {
    for (prefix, lead) in [
        ("unknown variant `", "is not one of:"),
        ("unknown field `", ""),
    ] {
        let Some(start) = message.find(prefix) else {
            continue;
        };
        let rest = &message[start + prefix.len()..];
        let Some((value, after)) = rest.split_once('`') else {
            continue;
        };
        let Some(expected) = after.strip_prefix(", expected ") else {
            continue;
        };
        // The choices run to the end, or to serde_yaml's " at line ..." position.
        let (choices, tail) = match expected.find(" at line ") {
            Some(at) => expected.split_at(at),
            None => (expected, ""),
        };
        let names: Vec<&str> = choices
            .trim_start_matches("one of ")
            .split(['`', ','])
            .map(str::trim)
            .filter(|part| !part.is_empty() && *part != "or")
            .collect();
        let words = if lead.is_empty() {
            format!(
                "unknown key `{value}`; the keys here are: {}",
                names.join(", ")
            )
        } else {
            format!("`{value}` {lead} {}", names.join(", "))
        };
        return format!("{}{words}{tail}", &message[..start]);
    }
    message.to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_yaml::Value;

    #[test]
    fn serde_enum_and_field_errors_read_as_words() {
        assert_eq!(
            serde_message_in_words(
                "unknown variant `yaml`, expected `json` or `text` at line 5 column 39"
            ),
            "`yaml` is not one of: json, text at line 5 column 39"
        );
        assert_eq!(
            serde_message_in_words("unknown variant `x`, expected one of `a`, `b`, `c`"),
            "`x` is not one of: a, b, c"
        );
        assert_eq!(
            serde_message_in_words(
                "steps[0]: unknown field `anwser`, expected one of `answer`, `tool`"
            ),
            "steps[0]: unknown key `anwser`; the keys here are: answer, tool"
        );
        assert_eq!(
            serde_message_in_words("invalid type: map"),
            "invalid type: map"
        );
    }

    #[test]
    fn a_tab_is_called_a_tab_and_the_position_is_said_once() {
        for text in [
            "stages:\n  - id: a\n\tmessage: x\n",
            "defaults:\n\tagent: x\n",
            "a:\n   \tb: 1\n",
        ] {
            let error = serde_yaml::from_str::<Value>(text).unwrap_err();
            let syntax = syntax_error(text, &error);
            assert!(syntax.tab, "{text:?}: {syntax}");
            assert!(syntax.to_string().contains("tab character"), "{syntax}");
            assert_eq!(syntax.to_string().matches("line ").count(), 1, "{syntax}");
        }
        let text = "a: [1, 2\n";
        let error = serde_yaml::from_str::<Value>(text).unwrap_err();
        let syntax = syntax_error(text, &error);
        assert!(!syntax.tab, "{syntax}");
        // The position once; where the unclosed list began stays.
        assert_eq!(
            syntax.to_string(),
            "line 2 column 1: did not find expected ',' or ']', while parsing a flow sequence \
             at line 1 column 4"
        );
    }
}
