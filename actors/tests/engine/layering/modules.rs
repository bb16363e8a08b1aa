//! Folding the file-level import graph into a graph of the crate's top-level modules (the
//! children of `src/`): `plan/state/mod.rs` and `plan/model.rs` both stand for `plan`. Edges
//! inside one module disappear; each remaining edge keeps the first file line that makes it,
//! so a reported cycle names the file and the import behind every step.
//!
//! Must not: decide which module edges are allowed (the caller names them).

use std::collections::BTreeMap;

use super::cycles::{shortest_cycle, strongly_connected};
use super::scan::{Evidence, Graph};

/// The top-level module a source file belongs to (`plan/state/mod.rs` → `plan`,
/// `yaml.rs` → `yaml`); `None` for the crate root `lib.rs`.
pub fn module_of(file: &str) -> Option<String> {
    if file == "lib.rs" {
        return None;
    }
    let first = file.split('/').next().unwrap_or(file);
    Some(first.trim_end_matches(".rs").to_owned())
}

/// `files` without the edges `allowed` names (`(file, module)`: every import of `module`
/// made by `file`), and the allowed entries that matched no edge.
pub fn without_edges(files: &Graph, allowed: &[(&str, &str)]) -> (Graph, Vec<(String, String)>) {
    let mut pruned = files.clone();
    let mut stale = Vec::new();
    for &(file, module) in allowed {
        let before = pruned.get(file).map_or(0, BTreeMap::len);
        if let Some(edges) = pruned.get_mut(file) {
            edges.retain(|to, _| module_of(to).as_deref() != Some(module));
        }
        if pruned.get(file).map_or(0, BTreeMap::len) == before {
            stale.push((file.to_owned(), module.to_owned()));
        }
    }
    (pruned, stale)
}

/// Top-level modules and, per module, the modules it imports. An edge's evidence path reads
/// `plan/expand.rs:24 uses `crate::protocol::RunStatus`` (the file and import behind it).
pub fn module_graph(files: &Graph) -> Graph {
    let mut modules: Graph = BTreeMap::new();
    for (from_file, edges) in files {
        let Some(from) = module_of(from_file) else {
            continue;
        };
        let outgoing = modules.entry(from.clone()).or_default();
        for (to_file, evidence) in edges {
            let Some(to) = module_of(to_file) else {
                continue;
            };
            if to == from {
                continue;
            }
            outgoing.entry(to).or_insert_with(|| Evidence {
                line: evidence.line,
                path: format!("{from_file}:{} uses `{}`", evidence.line, evidence.path),
            });
        }
    }
    modules
}

/// Every cycle of a module graph (one per knot), each step with the file line behind it;
/// empty when there is none.
pub fn report(modules: &Graph) -> Vec<String> {
    strongly_connected(modules)
        .iter()
        .map(|component| {
            let names: Vec<&str> = component.iter().map(String::as_str).collect();
            let cycle = shortest_cycle(modules, component);
            let mut text = format!("module import cycle among {}:\n", names.join(", "));
            for (i, from) in cycle.iter().enumerate() {
                let to = &cycle[(i + 1) % cycle.len()];
                if let Some(evidence) = modules.get(from).and_then(|edges| edges.get(to)) {
                    text.push_str(&format!("  {from} → {to}: {}\n", evidence.path));
                }
            }
            text
        })
        .collect()
}
