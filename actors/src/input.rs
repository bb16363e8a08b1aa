//! Input files a user hands the engine (plan.yaml, llm-script files), read within bounds
//! before any parser sees them: only regular files (a FIFO or a device would block or never
//! end), at most a size limit, and YAML nested at most a depth limit. The YAML parser takes
//! time quadratic in the nesting of flow collections (`{a: {a: ...}}`, `[[[...]]]`): a
//! 500 KB file took over a minute to be refused, so the depth is checked on the raw text.
//!
//! Must not: parse documents or know their keys (callers do, and word errors with the key).

use std::path::Path;

/// Why an input file was refused before parsing.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    #[error("it is not a regular file (a {kind}); give the path of a plain file")]
    NotRegular { kind: &'static str },
    #[error(
        "it is larger than {limit} bytes; split it, or move big data into files a `foreach` reads"
    )]
    TooLarge { limit: u64 },
    #[error(
        "collections are nested more than {limit} levels deep (line {line}); flatten the \
         document (deep nesting is refused before parsing)"
    )]
    TooDeep { limit: usize, line: usize },
}

/// Reads `path` as UTF-8 text, refusing anything but a regular file of at most `limit`
/// bytes (symlinks are followed), through [`crate::bounded_read`].
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, InputError> {
    use crate::bounded_read::{read_to_string, Limit, Links, ReadError};
    read_to_string(path, Limit::bytes(limit), Links::Follow).map_err(|error| match error {
        ReadError::Io(e) => InputError::Io(e),
        ReadError::NotRegular { kind } => InputError::NotRegular { kind },
        ReadError::TooLarge { limit } => InputError::TooLarge { limit },
        other => InputError::Io(other.into()),
    })
}

/// Refuses text larger than `limit` bytes (for documents handed over as strings).
pub fn check_size(text: &str, limit: u64) -> Result<(), InputError> {
    if text.len() as u64 > limit {
        return Err(InputError::TooLarge { limit });
    }
    Ok(())
}

/// Refuses YAML whose flow collections (`[`, `{`) nest deeper than `limit`, counting
/// brackets outside quoted scalars and comments. Block nesting (by indentation) is left to
/// the parser, whose recursion limit refuses it quickly. Conservative: a block scalar
/// holding many unmatched brackets may be refused, a deep document is never accepted.
pub fn check_yaml_depth(text: &str, limit: usize) -> Result<(), InputError> {
    let mut depth: usize = 0;
    let mut quote: Option<char> = None;
    for (number, line) in text.lines().enumerate() {
        let mut previous = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some('\''), '\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                }
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some(open), c) if c == open => quote = None,
                (Some(_), _) => {}
                (None, '#') if previous.is_whitespace() => break,
                (None, '\'' | '"') if previous.is_whitespace() || "[{,:".contains(previous) => {
                    quote = Some(c)
                }
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > limit {
                        return Err(InputError::TooDeep {
                            limit,
                            line: number + 1,
                        });
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                (None, _) => {}
            }
            previous = c;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn deep_flow_nesting_is_refused_at_once() {
        let deep = format!("vars: {}1{}\n", "{a: ".repeat(100_000), "}".repeat(100_000));
        let started = std::time::Instant::now();
        let error = check_yaml_depth(&deep, 64).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(error.to_string().contains("64 levels"), "{error}");
        let list = format!("x: {}{}\n", "[".repeat(65), "]".repeat(65));
        assert!(check_yaml_depth(&list, 64).is_err());
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let text = format!(
            "a: \"{}\"\nb: '{}'' {}'\nc: x # {}\nmessage: \"{{{{ item }}}}\"\nd: [1, [2, {{e: 3}}]]\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100),
            "{".repeat(100)
        );
        check_yaml_depth(&text, 8).unwrap();
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plan.yaml");
        std::fs::write(&file, "stages: []\n").unwrap();
        assert_eq!(read_bounded(&file, 100).unwrap(), "stages: []\n");
        assert!(matches!(
            read_bounded(&file, 5),
            Err(InputError::TooLarge { limit: 5 })
        ));
        assert!(matches!(
            read_bounded(dir.path(), 100),
            Err(InputError::NotRegular { kind: "directory" })
        ));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read_bounded(&fifo, 100),
            Err(InputError::NotRegular {
                kind: "FIFO (named pipe)"
            })
        ));
        assert!(matches!(
            read_bounded(&dir.path().join("missing"), 100),
            Err(InputError::Io(_))
        ));
    }
}
