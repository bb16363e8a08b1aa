//! Agent workspaces: `<agent>/workspaces/W001, W002, …` and the `LAST_USED` marker
//! (reference §13.2). Names that come from a person are validated before they become a
//! folder. This file does not prompt anyone: choosing a workspace is the CLI's job.

use std::io;
use std::path::{Path, PathBuf};

use super::WorkspaceError;

const WORKSPACES_DIR: &str = "workspaces";
const LAST_USED_FILE: &str = "LAST_USED";

fn workspaces_dir(agent_home: &Path) -> PathBuf {
    agent_home.join(WORKSPACES_DIR)
}

/// The number of a `Wnnn` name (`W001` → 1); `None` for any other name.
fn sequence_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix('W')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Workspace folders of an agent: `Wnnn` names in numeric order first, then other names
/// alphabetically. Hidden entries and plain files (like `LAST_USED`) are not workspaces.
/// An agent without a `workspaces/` folder has none.
pub fn list_workspaces(agent_home: &Path) -> Result<Vec<String>, WorkspaceError> {
    let dir = workspaces_dir(agent_home);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WorkspaceError::io("list workspaces in", &dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| WorkspaceError::io("list workspaces in", &dir, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') || !entry.path().is_dir() {
            continue;
        }
        names.push(name);
    }
    names.sort_by(|a, b| match (sequence_number(a), sequence_number(b)) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.cmp(b)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    });
    Ok(names)
}

/// The next sequential name: `W` + (highest existing number + 1), at least 3 digits.
pub fn next_workspace_name(agent_home: &Path) -> Result<String, WorkspaceError> {
    let highest = list_workspaces(agent_home)?
        .iter()
        .filter_map(|name| sequence_number(name))
        .max()
        .unwrap_or(0);
    Ok(format!("W{:03}", highest + 1))
}

fn validate_workspace_name(name: &str) -> Result<(), WorkspaceError> {
    let reason = if name.trim().is_empty() {
        Some("it is empty")
    } else if name.contains('/') || name.contains('\\') {
        Some("it contains a path separator")
    } else if name.contains("..") {
        Some("it contains '..'")
    } else if name.starts_with('.') {
        Some("it starts with '.'")
    } else if name.chars().any(char::is_control) {
        Some("it contains a control character")
    } else if name == LAST_USED_FILE {
        Some("LAST_USED is reserved")
    } else if name.len() > 128 {
        Some("it is longer than 128 bytes")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(WorkspaceError::InvalidWorkspaceName {
            name: name.to_string(),
            reason: reason.to_string(),
        }),
        None => Ok(()),
    }
}

/// Creates (or reuses) `<agent>/workspaces/<name>` and records it in `LAST_USED`
/// (no trailing newline, as the original). Returns the workspace path.
pub fn create_workspace(agent_home: &Path, name: &str) -> Result<PathBuf, WorkspaceError> {
    validate_workspace_name(name)?;
    let dir = workspaces_dir(agent_home);
    let workspace = dir.join(name);
    std::fs::create_dir_all(&workspace)
        .map_err(|e| WorkspaceError::io("create workspace", &workspace, e))?;
    let marker = dir.join(LAST_USED_FILE);
    // Never through a link (symbolic or hard) a tool left in its place.
    crate::private_file::write_private_file(&marker, name.as_bytes())
        .map_err(|e| WorkspaceError::io("write", &marker, e))?;
    Ok(workspace)
}

/// The name in `LAST_USED`, if it is a valid name whose folder still exists.
pub fn last_used_workspace(agent_home: &Path) -> Option<String> {
    let dir = workspaces_dir(agent_home);
    let name = crate::bounded_read::read_to_string(
        &dir.join(LAST_USED_FILE),
        crate::bounded_read::MARKER,
        crate::bounded_read::Links::Refuse,
    )
    .ok()?;
    let name = name.trim();
    if validate_workspace_name(name).is_err() || !dir.join(name).is_dir() {
        return None;
    }
    Some(name.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn no_workspaces_folder_means_none_and_w001_next() {
        let agent = tempfile::tempdir().unwrap();
        assert!(list_workspaces(agent.path()).unwrap().is_empty());
        assert_eq!(next_workspace_name(agent.path()).unwrap(), "W001");
        assert_eq!(last_used_workspace(agent.path()), None);
    }

    #[test]
    fn listing_sorts_numbered_first_then_others() {
        let agent = tempfile::tempdir().unwrap();
        for name in ["W010", "scratch", "W002", "W1000", "alpha", "W9", "Wx"] {
            std::fs::create_dir_all(agent.path().join("workspaces").join(name)).unwrap();
        }
        std::fs::create_dir_all(agent.path().join("workspaces/.hidden")).unwrap();
        std::fs::write(agent.path().join("workspaces/LAST_USED"), "W002").unwrap();
        assert_eq!(
            list_workspaces(agent.path()).unwrap(),
            ["W002", "W9", "W010", "W1000", "Wx", "alpha", "scratch"]
        );
        assert_eq!(next_workspace_name(agent.path()).unwrap(), "W1001");
    }

    #[test]
    fn next_name_follows_the_highest_number() {
        let agent = tempfile::tempdir().unwrap();
        create_workspace(agent.path(), "W001").unwrap();
        create_workspace(agent.path(), "W007").unwrap();
        assert_eq!(next_workspace_name(agent.path()).unwrap(), "W008");
    }

    #[test]
    fn create_writes_last_used_and_reuses_existing() {
        let agent = tempfile::tempdir().unwrap();
        let path = create_workspace(agent.path(), "W001").unwrap();
        assert!(path.is_dir());
        assert_eq!(path, agent.path().join("workspaces/W001"));
        assert_eq!(
            std::fs::read_to_string(agent.path().join("workspaces/LAST_USED")).unwrap(),
            "W001"
        );
        std::fs::write(path.join("artifact.txt"), "kept").unwrap();
        create_workspace(agent.path(), "mine").unwrap();
        assert_eq!(last_used_workspace(agent.path()).as_deref(), Some("mine"));
        create_workspace(agent.path(), "W001").unwrap();
        assert_eq!(last_used_workspace(agent.path()).as_deref(), Some("W001"));
        assert!(path.join("artifact.txt").exists());
    }

    #[test]
    fn last_used_pointing_at_a_missing_or_bad_folder_is_ignored() {
        let agent = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(agent.path().join("workspaces")).unwrap();
        std::fs::write(agent.path().join("workspaces/LAST_USED"), "W003\n").unwrap();
        assert_eq!(last_used_workspace(agent.path()), None);
        std::fs::write(agent.path().join("workspaces/LAST_USED"), "../..").unwrap();
        assert_eq!(last_used_workspace(agent.path()), None);
        std::fs::create_dir_all(agent.path().join("workspaces/W003")).unwrap();
        std::fs::write(agent.path().join("workspaces/LAST_USED"), "W003\n").unwrap();
        assert_eq!(last_used_workspace(agent.path()).as_deref(), Some("W003"));
    }

    #[test]
    fn unsafe_names_are_refused() {
        let agent = tempfile::tempdir().unwrap();
        for name in [
            "",
            "  ",
            "a/b",
            "..",
            "../x",
            "x..y",
            ".hidden",
            "LAST_USED",
            "a\nb",
        ] {
            let err = create_workspace(agent.path(), name).unwrap_err();
            assert!(
                matches!(err, WorkspaceError::InvalidWorkspaceName { .. }),
                "{name:?}: {err:?}"
            );
        }
        assert!(!agent.path().join("x").exists());
        assert!(create_workspace(agent.path(), "../x")
            .unwrap_err()
            .to_string()
            .contains("'../x'"));
    }
}
