//! The `.env` cascade: real environment > workspace `.env` > agent `.env` > project-root
//! `.env`, merged once into one map. The spec (§2.6.7) puts the process environment last;
//! the original engine and every dotenv convention let the real environment win, so a
//! variable set on the command line is never silently replaced by a file
//! (docs/spec-differences.md).
//!
//! Owns `.env` parsing (`KEY=VALUE`, `export`, quotes, comments) and the precedence rule.
//! It never reads or writes the process environment itself: callers pass it in and use the
//! resulting map (house rule: nothing deep reads env vars).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::AgentError;

/// The merged environment and the `.env` files that contributed, highest priority first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvCascade {
    /// The complete environment: the process's, plus every variable the files add.
    pub vars: BTreeMap<String, String>,
    /// The `.env` files found and read, the most local first.
    pub files_loaded: Vec<PathBuf>,
}

/// Nearest ancestor of `start` (itself included) that contains `.git`.
fn project_root(start: &Path) -> Option<PathBuf> {
    // A relative start such as "." has no ancestors worth searching until made absolute.
    let start = std::fs::canonicalize(start).unwrap_or_else(|_| start.to_path_buf());
    start
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .map(Path::to_path_buf)
}

/// Loads `<work_dir>/.env`, `<agent_home>/.env` and `<project root>/.env` (the nearest
/// ancestor of `start_dir` holding `.git`) under `process_env`: a variable of the real
/// environment is never replaced, and among the files the more local one wins. Missing
/// files are skipped; a malformed line is an error naming file and line.
pub fn load_env_cascade(
    work_dir: Option<&Path>,
    agent_home: &Path,
    start_dir: &Path,
    process_env: &BTreeMap<String, String>,
) -> Result<EnvCascade, AgentError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = work_dir {
        candidates.push(dir.join(".env"));
    }
    candidates.push(agent_home.join(".env"));
    if let Some(root) = project_root(start_dir) {
        candidates.push(root.join(".env"));
    }
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut files_loaded = Vec::new();
    let mut layers: Vec<Vec<(String, String)>> = Vec::new();
    for file in candidates {
        let identity = std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
        if !file.is_file() || seen.contains(&identity) {
            continue;
        }
        seen.push(identity);
        // A tool can write `<workspace>/.env`: a FIFO there must not hang the next command.
        let text = crate::bounded_read::read_to_string(
            &file,
            crate::bounded_read::CONFIG,
            crate::bounded_read::Links::Follow,
        )
        .map_err(|e| {
            AgentError::io(
                &file,
                e.into(),
                "make the .env file readable UTF-8 text, or remove it",
            )
        })?;
        layers.push(parse_dotenv(&file, &text)?);
        files_loaded.push(file);
    }
    let mut vars = BTreeMap::new();
    // Apply lowest priority first: project root, agent, workspace, then the real environment.
    for layer in layers.into_iter().rev() {
        vars.extend(layer);
    }
    vars.extend(process_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(EnvCascade { vars, files_loaded })
}

fn env_error(
    file: &Path,
    line: usize,
    message: impl Into<String>,
    hint: impl Into<String>,
) -> AgentError {
    AgentError::EnvFile {
        file: file.to_path_buf(),
        line,
        message: message.into(),
        hint: hint.into(),
    }
}

fn valid_key(key: &str) -> bool {
    let mut chars = key.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses `.env` text; `file` is only used in error messages.
pub fn parse_dotenv(file: &Path, text: &str) -> Result<Vec<(String, String)>, AgentError> {
    let mut pairs = Vec::new();
    for (index, raw_line) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw_line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .unwrap_or(line);
        let Some((key, rest)) = line.split_once('=') else {
            return Err(env_error(
                file,
                line_no,
                format!("`{line}` is not KEY=VALUE"),
                "write one KEY=VALUE per line; comments start with #",
            ));
        };
        let key = key.trim();
        if !valid_key(key) {
            return Err(env_error(
                file,
                line_no,
                format!("`{key}` is not a valid variable name"),
                "names use letters, digits and _ and do not start with a digit",
            ));
        }
        let value = parse_value(rest.trim_start()).map_err(|message| {
            env_error(
                file,
                line_no,
                message,
                "close the quote on the same line; escape \" inside double quotes as \\\"",
            )
        })?;
        pairs.push((key.to_string(), value));
    }
    Ok(pairs)
}

fn parse_value(rest: &str) -> Result<String, String> {
    let after_quote = |tail: &str| -> Result<(), String> {
        let tail = tail.trim();
        if tail.is_empty() || tail.starts_with('#') {
            Ok(())
        } else {
            Err(format!("unexpected text `{tail}` after the closing quote"))
        }
    };
    if let Some(body) = rest.strip_prefix('\'') {
        let Some(end) = body.find('\'') else {
            return Err("unterminated single quote".to_string());
        };
        after_quote(&body[end + 1..])?;
        return Ok(body[..end].to_string());
    }
    if let Some(body) = rest.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    after_quote(&body[i + 1..])?;
                    return Ok(value);
                }
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('r') => value.push('\r'),
                    Some(other) => value.push(other),
                    None => value.push('\\'),
                },
                other => value.push(other),
            }
        }
        return Err("unterminated double quote".to_string());
    }
    // Unquoted: an inline comment starts at whitespace followed by #.
    let value = match rest.find(" #").or_else(|| rest.find("\t#")) {
        Some(i) => &rest[..i],
        None => rest,
    };
    Ok(value.trim().to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_supported_form() {
        let text = "# comment\n\nA=1\nexport B = two words # trailing\nC='lit $X \\n'\nD=\"line\\nnext \\\"q\\\"\"\nE=\nF=a#b\n";
        let pairs = parse_dotenv(Path::new(".env"), text).unwrap();
        let map: BTreeMap<_, _> = pairs.into_iter().collect();
        assert_eq!(map["A"], "1");
        assert_eq!(map["B"], "two words");
        assert_eq!(map["C"], "lit $X \\n");
        assert_eq!(map["D"], "line\nnext \"q\"");
        assert_eq!(map["E"], "");
        assert_eq!(map["F"], "a#b");
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        for (text, line, phrase) in [
            ("A=1\nnot a pair\n", 2, "is not KEY=VALUE"),
            ("1A=x\n", 1, "not a valid variable name"),
            ("A='open\n", 1, "unterminated single quote"),
            ("\n\nA=\"open\n", 3, "unterminated double quote"),
            ("A=\"x\" y\n", 1, "after the closing quote"),
        ] {
            let err = parse_dotenv(Path::new("/w/.env"), text)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("`/w/.env` line {line}")), "{err}");
            assert!(err.contains(phrase), "{err}");
        }
    }

    /// Regression (issue 11 item 16): a workspace `.env` used to override the real
    /// environment; the real environment wins, then the more local file.
    #[test]
    fn real_environment_wins_then_local_files_override_global_ones() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(".git")).unwrap();
        let agent = root.path().join("agent");
        let work = agent.join("workspaces/W001");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(
            root.path().join(".env"),
            "KEY=root\nROOT_ONLY=r\nSHARED=root\nROOT_SHARED=root\n",
        )
        .unwrap();
        std::fs::write(agent.join(".env"), "KEY=agent\nSHARED=agent\n").unwrap();
        std::fs::write(work.join(".env"), "KEY=work\nWORK_ONLY=work\n").unwrap();
        let process: BTreeMap<String, String> = [
            ("KEY", "process"),
            ("PATH", "/bin"),
            ("ROOT_ONLY", "process"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let cascade = load_env_cascade(Some(&work), &agent, &work, &process).unwrap();
        assert_eq!(cascade.vars["KEY"], "process");
        assert_eq!(cascade.vars["ROOT_ONLY"], "process");
        assert_eq!(cascade.vars["WORK_ONLY"], "work");
        assert_eq!(cascade.vars["SHARED"], "agent");
        assert_eq!(cascade.vars["ROOT_SHARED"], "root");
        assert_eq!(cascade.vars["PATH"], "/bin");
        assert_eq!(
            cascade.files_loaded,
            vec![
                work.join(".env"),
                agent.join(".env"),
                root.path().join(".env")
            ]
        );
    }

    #[test]
    fn missing_files_are_skipped_and_shared_files_loaded_once() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(".git")).unwrap();
        std::fs::write(root.path().join(".env"), "A=1\n").unwrap();
        let cascade = load_env_cascade(None, root.path(), root.path(), &BTreeMap::new()).unwrap();
        assert_eq!(cascade.files_loaded, vec![root.path().join(".env")]);
        assert_eq!(cascade.vars["A"], "1");
    }
}
