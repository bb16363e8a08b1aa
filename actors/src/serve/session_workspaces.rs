//! Which folders the runs view scans for a folder it shows: the folder itself, and, when it
//! is an agent (or holds agents' workspaces), its `workspaces/W001`… folders that hold runs,
//! where `delta run` puts a run of that agent unless `-w` says otherwise. So the run an
//! agent worker makes in a session's folder is listed without `delta serve -w`.
//!
//! Must not: read anything but folder listings; return more than [`MAX_PER_FOLDER`] extra
//! folders per folder (the newest by name: `W012` after `W011`).

use std::path::PathBuf;

use crate::workspace::control_dir;

/// Most `workspaces/*` folders added for one folder.
pub const MAX_PER_FOLDER: usize = 16;

/// `folders`, each followed by its `workspaces/*` folders that hold runs (newest first),
/// without duplicates, in order.
pub fn with_agent_workspaces(folders: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = Vec::new();
    for folder in folders {
        let mut found: Vec<PathBuf> = std::fs::read_dir(folder.join("workspaces"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .map(|entry| entry.path())
            .filter(|path| control_dir(path).is_dir())
            .collect();
        found.sort();
        found.reverse();
        found.truncate(MAX_PER_FOLDER);
        for path in std::iter::once(folder).chain(found) {
            if !all.contains(&path) {
                all.push(path);
            }
        }
    }
    all
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_folder_brings_its_workspaces_that_hold_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let agent = tmp.path().join("agent");
        for (name, runs) in [("W001", true), ("W002", true), ("W003", false)] {
            let workspace = agent.join("workspaces").join(name);
            std::fs::create_dir_all(&workspace).unwrap();
            if runs {
                std::fs::create_dir_all(workspace.join(".delta")).unwrap();
            }
        }
        std::os::unix::fs::symlink("/", agent.join("workspaces/W009")).unwrap();
        let plain = tmp.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        let listed = with_agent_workspaces(vec![agent.clone(), plain.clone(), agent.clone()]);
        assert_eq!(
            listed,
            [
                agent.clone(),
                agent.join("workspaces/W002"),
                agent.join("workspaces/W001"),
                plain
            ]
        );
    }
}
