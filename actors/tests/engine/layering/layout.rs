//! The file layout's two rules, checked over both packages' sources and test trees: a module
//! with a folder keeps its root inside it (`x/mod.rs`, never `x.rs` beside `x/`), and a file
//! of tests is `tests.rs` or `<topic>_tests.rs` (never `tests_<topic>.rs` or `test_x.rs`).
//!
//! Must not: read file contents (names only), or follow symlinks out of the trees.

use std::path::{Path, PathBuf};

/// The source and test trees of the workspace, from the `delta-actors` package folder.
pub fn trees() -> Vec<PathBuf> {
    let actors = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = actors.parent().unwrap_or(actors);
    [
        actors.join("src"),
        actors.join("tests"),
        workspace.join("src"),
        workspace.join("tests"),
    ]
    .into_iter()
    .filter(|tree| tree.is_dir())
    .collect()
}

/// Every `.rs` file and every folder under `root`, folders first.
fn walk(root: &Path, folders: &mut Vec<PathBuf>, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            folders.push(path.clone());
            walk(&path, folders, files);
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `x.rs` files that sit beside an `x/` folder, under `roots`.
pub fn module_files_beside_their_folder(roots: &[PathBuf]) -> Vec<String> {
    let mut offenders = Vec::new();
    for root in roots {
        let (mut folders, mut files) = (Vec::new(), Vec::new());
        walk(root, &mut folders, &mut files);
        for folder in folders {
            let beside = folder.with_extension("rs");
            if beside.is_file() {
                offenders.push(format!(
                    "{} beside {}/: move it to {}",
                    beside.display(),
                    folder.display(),
                    folder.join("mod.rs").display()
                ));
            }
        }
    }
    offenders.sort();
    offenders
}

/// Files whose name says they hold tests but is not `tests.rs` or `<topic>_tests.rs`.
pub fn misnamed_test_files(roots: &[PathBuf]) -> Vec<String> {
    let mut offenders = Vec::new();
    for root in roots {
        let (mut folders, mut files) = (Vec::new(), Vec::new());
        walk(root, &mut folders, &mut files);
        for file in files {
            let Some(stem) = file.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            let says_tests = stem
                .split('_')
                .any(|word| word == "test" || word == "tests");
            let well_named = stem == "tests" || stem.ends_with("_tests");
            if says_tests && !well_named {
                offenders.push(format!(
                    "{}: name it tests.rs or <topic>_tests.rs",
                    file.display()
                ));
            }
        }
    }
    offenders.sort();
    offenders
}
