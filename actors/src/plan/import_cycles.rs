//! A test that keeps `plan/` free of import cycles: no file of `plan/` may import (through
//! `use crate::...`, `use super::...` or an inline `crate::`/`super::` path) a file that
//! imports it back, directly or through others.
//!
//! A folder's `mod.rs` declaring and re-exporting its own children (`pub use child::X`) is
//! the module tree itself, not a dependency, so those relative lines are not edges; a child
//! that imports from its `mod.rs` (`use super::PlanError`) is one.
//!
//! Must not: read anything outside `src/plan`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `plan/state/mod.rs` -> `["plan", "state"]`; `plan/graph.rs` -> `["plan", "graph"]`.
fn module_of(file: &str) -> Vec<String> {
    let mut segments: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if segments.last().is_some_and(|last| last == "mod") {
        segments.pop();
    }
    segments
}

/// The file's code without its inline unit tests (a `#[cfg(test)] mod tests { ... }` block
/// ends the file) and comments.
fn code_of(text: &str) -> String {
    let mut code = text;
    let mut from = 0;
    while let Some(found) = text[from..].find("#[cfg(test)]") {
        let at = from + found;
        let item = text[at..]
            .lines()
            .skip(1)
            .find(|line| !line.trim_start().starts_with("#["))
            .unwrap_or("");
        if item.starts_with("mod ") && item.contains('{') {
            code = &text[..at];
            break;
        }
        from = at + "#[cfg(test)]".len();
    }
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands one `use` tree (`super::{a::X, b::{Y, Z}}`) into its paths.
fn flatten_use(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        out.push(format!("{prefix}{path}"));
        return;
    };
    let head = format!("{prefix}{}", &tree[..open]);
    let inner = tree[open + 1..].trim_end();
    let inner = inner.strip_suffix('}').unwrap_or(inner);
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                flatten_use(&inner[start..i], &head, out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !inner[start..].trim().is_empty() {
        flatten_use(&inner[start..], &head, out);
    }
}

/// Every `crate::`/`super::` path the code names: `use` trees flattened, inline paths as
/// written.
fn paths_named(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = String::new();
    let mut remaining = code;
    while let Some(at) = remaining.find("use ") {
        let is_statement = remaining[..at]
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace());
        let Some(end) = remaining[at..].find(';') else {
            break;
        };
        rest.push_str(&remaining[..at]);
        let statement = &remaining[at + 4..at + end];
        if is_statement {
            flatten_use(statement, "", &mut paths);
        } else {
            rest.push_str(&remaining[at..at + end]);
        }
        remaining = &remaining[at + end..];
    }
    rest.push_str(remaining);
    for root in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(found) = rest[from..].find(root) {
            let begin = from + found;
            let end = rest[begin..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(rest.len(), |n| begin + n);
            paths.push(rest[begin..end].trim_end_matches(':').to_owned());
            from = end.max(begin + root.len());
        }
    }
    paths
}

/// The file a path names, among `modules` (module path -> file): the longest module prefix.
fn target_of(
    path: &str,
    importer: &[String],
    modules: &BTreeMap<Vec<String>, String>,
) -> Option<String> {
    let mut segments: Vec<String> = Vec::new();
    let mut parts = path.split("::").filter(|part| !part.is_empty()).peekable();
    match parts.peek().copied() {
        Some("crate") => {
            parts.next();
        }
        Some("super") => {
            segments = importer.to_vec();
            while parts.peek() == Some(&"super") {
                parts.next();
                segments.pop();
            }
        }
        _ => return None,
    }
    segments.extend(parts.filter(|part| *part != "self").map(str::to_owned));
    (1..=segments.len())
        .rev()
        .find_map(|len| modules.get(&segments[..len]))
        .cloned()
}

/// The first import cycle among `files` (path relative to `src/`, text), as
/// `a.rs -> b.rs -> a.rs`.
fn import_cycle(files: &[(String, String)]) -> Option<Vec<String>> {
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|(file, _)| (module_of(file), file.clone()))
        .collect();
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, text) in files {
        let importer = module_of(file);
        let mut targets: Vec<String> = paths_named(&code_of(text))
            .iter()
            .filter_map(|path| target_of(path, &importer, &modules))
            .filter(|target| target != file)
            .collect();
        targets.sort();
        targets.dedup();
        edges.insert(file.clone(), targets);
    }
    let mut done: Vec<String> = Vec::new();
    for start in edges.keys() {
        // Depth-first over (file, next edge index); the stack is the current path.
        let mut stack: Vec<(String, usize)> = vec![(start.clone(), 0)];
        while let Some((node, next)) = stack.last().cloned() {
            let Some(target) = edges.get(&node).and_then(|t| t.get(next)).cloned() else {
                done.push(node);
                stack.pop();
                continue;
            };
            if let Some(top) = stack.last_mut() {
                top.1 += 1;
            }
            if let Some(from) = stack.iter().position(|(file, _)| *file == target) {
                let mut cycle: Vec<String> = stack[from..].iter().map(|(f, _)| f.clone()).collect();
                cycle.push(target);
                return Some(cycle);
            }
            if !done.contains(&target) {
                stack.push((target, 0));
            }
        }
    }
    None
}

fn rust_files(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            rust_files(&path, root, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            out.push((relative.to_string_lossy().into_owned(), text));
        }
    }
}

#[test]
fn no_file_in_plan_imports_a_file_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src.join("plan"), &src, &mut files);
    assert!(
        files.len() > 10,
        "plan/ was not found under {}",
        src.display()
    );
    if let Some(cycle) = import_cycle(&files) {
        panic!("import cycle in plan/: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_check_finds_a_cycle_through_a_grouped_use_and_an_inline_path() {
    let file = |name: &str, text: &str| (name.to_owned(), text.to_owned());
    let files = [
        file(
            "plan/mod.rs",
            "pub mod a;\npub use a::X;\npub enum PlanError {}\n",
        ),
        file("plan/a.rs", "use super::{b::{Y, Z}, PlanError};\n"),
        file("plan/b.rs", "fn f() -> crate::plan::c::W { todo!() }\n"),
        file(
            "plan/c.rs",
            "#[cfg(test)]\nmod helpers;\nuse crate::plan::a::X as Other;\n#[cfg(test)]\nmod tests {\n    use crate::plan::b::Y;\n}\n",
        ),
    ];
    assert_eq!(
        import_cycle(&files).map(|cycle| cycle.join(" -> ")),
        Some("plan/a.rs -> plan/b.rs -> plan/c.rs -> plan/a.rs".to_owned())
    );
    let without_c = &files[..3];
    assert_eq!(
        import_cycle(without_c),
        None,
        "mod.rs re-exports are not edges"
    );
}
