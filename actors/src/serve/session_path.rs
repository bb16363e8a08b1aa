//! Where a new session's folder is: `locationPath` as a person types it into the page. An
//! absolute path is taken as it is; `~` and `~/...` are the home folder of the user running
//! `delta serve`; any other relative path is taken from the folder `delta serve` was started
//! in. Both folders are resolved once, when the server starts ([`PathContext`]).
//!
//! Must not: touch the disk (the caller checks the folder exists), or read the environment.

use std::path::{Component, Path, PathBuf};

use super::error::ServeError;

/// The folders relative `locationPath`s are taken from.
#[derive(Debug, Clone, Default)]
pub struct PathContext {
    /// The folder `delta serve` was started in.
    pub base_dir: PathBuf,
    /// The home folder of the user running it, when known.
    pub home: Option<PathBuf>,
}

impl PathContext {
    /// `given` as an absolute path, `..` and `.` resolved lexically.
    pub fn resolve(&self, given: &Path) -> Result<PathBuf, ServeError> {
        let text = given.to_string_lossy();
        let bad = |reason: String| ServeError::BadLocation {
            given: text.chars().take(200).collect(),
            reason,
        };
        if text.trim().is_empty() {
            return Err(bad("it is empty: give the folder's absolute path (e.g. /home/me/project), ~/project, or a path relative to the folder delta serve was started in".into()));
        }
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else if let Some(rest) = text.strip_prefix('~') {
            if !(rest.is_empty() || rest.starts_with('/')) {
                return Err(bad(
                    "`~user` is not supported: give an absolute path instead".into(),
                ));
            }
            let Some(home) = &self.home else {
                return Err(bad(
                    "the server has no home folder (HOME is not set): give an absolute path instead"
                        .into(),
                ));
            };
            home.join(rest.trim_start_matches('/'))
        } else {
            self.base_dir.join(given)
        };
        let mut clean = PathBuf::new();
        for component in joined.components() {
            match component {
                Component::ParentDir => {
                    clean.pop();
                }
                Component::CurDir => {}
                other => clean.push(other),
            }
        }
        Ok(clean)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Regression (issue 27): a relative path was "does not exist" whatever it named.
    #[test]
    fn relative_home_and_absolute_locations() {
        let context = PathContext {
            base_dir: PathBuf::from("/srv/work"),
            home: Some(PathBuf::from("/home/me")),
        };
        for (given, expected) in [
            ("/abs/x", "/abs/x"),
            ("proj", "/srv/work/proj"),
            ("./proj/../other", "/srv/work/other"),
            ("~", "/home/me"),
            ("~/code/x", "/home/me/code/x"),
        ] {
            assert_eq!(
                context.resolve(Path::new(given)).unwrap(),
                PathBuf::from(expected),
                "{given}"
            );
        }
        for (given, says) in [
            ("", "empty"),
            ("  ", "empty"),
            ("~bob/x", "`~user` is not supported"),
        ] {
            let error = context.resolve(Path::new(given)).unwrap_err().to_string();
            assert!(error.contains(says), "{given}: {error}");
        }
        let homeless = PathContext {
            home: None,
            ..context
        };
        let error = homeless.resolve(Path::new("~/x")).unwrap_err().to_string();
        assert!(error.contains("absolute path"), "{error}");
    }
}
