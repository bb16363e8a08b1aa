//! plan::glob_walk — `foreach: {files: "<glob>"}` expansion within bounds: at most
//! [`GLOB_ENTRIES`] directory entries looked at, [`GLOB_TIME`] spent and a given number of
//! matches. The `glob` crate walks without limits (`/**/*` scanned for minutes), so the walk
//! is done here: from the longest literal prefix of the pattern, each path matched against
//! the whole pattern (`*` never crosses `/`, `**` spans directories), symlinked directories
//! not followed under `**` (they could loop).
//!
//! Must not: know plan keys (callers word the errors with them).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use glob::{MatchOptions, Pattern};

use super::limits::{GLOB_ENTRIES, GLOB_TIME};

/// Why a glob could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    #[error("bad glob: {0}")]
    Pattern(String),
    #[error(
        "it matches more than {limit} files; narrow the pattern, or split the items over stages"
    )]
    TooManyMatches { limit: usize },
    #[error(
        "it makes the scan look at more than {limit} directory entries; start the pattern with \
         a narrower folder"
    )]
    TooManyEntries { limit: usize },
    #[error(
        "scanning for it took more than {} s; start the pattern with a narrower folder",
        limit.as_secs()
    )]
    TooSlow { limit: Duration },
}

/// The paths matching the absolute `pattern`, sorted; at most `max_matches`.
pub fn bounded_glob(pattern: &str, max_matches: usize) -> Result<Vec<String>, GlobError> {
    walk(pattern, max_matches, GLOB_ENTRIES, GLOB_TIME)
}

fn walk(
    pattern: &str,
    max_matches: usize,
    max_entries: usize,
    max_time: Duration,
) -> Result<Vec<String>, GlobError> {
    let compiled = Pattern::new(pattern).map_err(|error| GlobError::Pattern(error.to_string()))?;
    let options = MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    let components: Vec<&str> = pattern.split('/').collect();
    let literal = components
        .iter()
        .position(|part| part.contains(['*', '?', '[']))
        .unwrap_or(components.len());
    if literal == components.len() {
        // No wildcard at all: the path itself, if it exists.
        let exists = std::fs::symlink_metadata(pattern).is_ok();
        return Ok(if exists {
            vec![pattern.to_owned()]
        } else {
            Vec::new()
        });
    }
    let base = components[..literal].join("/");
    let base = if base.is_empty() {
        "/".to_owned()
    } else {
        base
    };
    let levels = components.len() - literal;
    let globstar = components[literal..].contains(&"**");

    let started = Instant::now();
    let mut matches = Vec::new();
    let mut seen = 0usize;
    let mut stack: Vec<(String, usize)> = vec![(base, 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue; // unreadable folders are skipped, as `glob` does
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > max_entries {
                return Err(GlobError::TooManyEntries { limit: max_entries });
            }
            if seen.is_multiple_of(256) && started.elapsed() > max_time {
                return Err(GlobError::TooSlow { limit: max_time });
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if dir.ends_with('/') {
                format!("{dir}{name}")
            } else {
                format!("{dir}/{name}")
            };
            let below = depth + 1;
            if (globstar || below == levels)
                && compiled.matches_path_with(PathBuf::from(&path).as_path(), options)
            {
                matches.push(path.clone());
                if matches.len() > max_matches {
                    return Err(GlobError::TooManyMatches { limit: max_matches });
                }
            }
            let descend = if globstar {
                entry.file_type().is_ok_and(|t| t.is_dir())
            } else {
                below < levels && std::fs::metadata(&path).is_ok_and(|m| m.is_dir())
            };
            if descend {
                stack.push((path, below));
            }
        }
        if started.elapsed() > max_time {
            return Err(GlobError::TooSlow { limit: max_time });
        }
    }
    matches.sort();
    Ok(matches)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for file in [
            "data/a.txt",
            "data/b.txt",
            "data/c.json",
            "data/sub/d.txt",
            "data/sub/deep/e.txt",
        ] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        dir
    }

    fn relative(dir: &tempfile::TempDir, found: Vec<String>) -> Vec<String> {
        let prefix = format!("{}/", dir.path().display());
        found
            .into_iter()
            .map(|p| p.strip_prefix(&prefix).unwrap().to_owned())
            .collect()
    }

    #[test]
    fn matches_what_the_glob_crate_matches() {
        let dir = tree();
        for pattern in [
            "data/*.txt",
            "data/**/*.txt",
            "data/*/*.txt",
            "data/?.json",
            "data/[ab].txt",
            "data/sub",
            "data/none/*.txt",
            "./data/*.txt",
        ] {
            let absolute = format!("{}/{pattern}", dir.path().display());
            let mut expected: Vec<String> = glob::glob(&absolute)
                .unwrap()
                .flatten()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            expected.sort();
            let found = bounded_glob(&absolute, 100).unwrap();
            let normalize = |paths: Vec<String>| -> Vec<PathBuf> {
                paths
                    .iter()
                    .map(|p| PathBuf::from(p).components().collect())
                    .collect()
            };
            assert_eq!(normalize(found), normalize(expected), "{pattern}");
        }
        let found = bounded_glob(&format!("{}/data/**/*.txt", dir.path().display()), 100).unwrap();
        assert_eq!(
            relative(&dir, found),
            [
                "data/a.txt",
                "data/b.txt",
                "data/sub/d.txt",
                "data/sub/deep/e.txt"
            ]
        );
    }

    #[test]
    fn huge_scans_stop_at_their_bounds() {
        let dir = tree();
        let all = format!("{}/**/*", dir.path().display());
        assert_eq!(
            walk(&all, 3, 1000, GLOB_TIME),
            Err(GlobError::TooManyMatches { limit: 3 })
        );
        assert_eq!(
            walk(&all, 100, 4, GLOB_TIME),
            Err(GlobError::TooManyEntries { limit: 4 })
        );
        assert_eq!(
            walk(&all, 100, 1000, Duration::ZERO),
            Err(GlobError::TooSlow {
                limit: Duration::ZERO
            })
        );
        assert!(matches!(
            bounded_glob("/tmp/[", 10),
            Err(GlobError::Pattern(_))
        ));
    }
}
