//! Layering of the engine's source tree: no file imports a file that imports it back
//! (directly or through other files). The supervisor ↔ orchestrator actor pair, once
//! allowed, is gone: an orchestration reaches the supervisor through
//! `runtime::admission::RunDesk`, typed by message.
//!
//! The graph is read from `src/` by `layering::scan` (see there for what counts as an
//! import) and searched by `layering::cycles`; a failure prints each cycle with the line
//! that makes every edge.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cycles;
mod layout;
mod modules;
mod scan;

use std::path::Path;

use scan::Graph;

fn engine_graph() -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    scan::import_graph(&root).unwrap()
}

/// Issue 12: no file of the engine imports a file that imports it back.
#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let cycles = cycles::report(&engine_graph());
    assert!(cycles.is_empty(), "{}", cycles.join("\n"));
}

/// Issue 12 §5: agent loading ↔ the tool compiler, and the scripted model's loader ↔ its
/// model ↔ its player, imported each other.
#[test]
fn agent_tool_and_scripted_model_have_no_import_cycle() {
    let graph = engine_graph();
    let touched: Vec<String> = cycles::report(&graph)
        .into_iter()
        .filter(|cycle| {
            ["agent/", "tool/", "llm/scripted/", "yaml.rs"]
                .iter()
                .any(|area| cycle.contains(area))
        })
        .collect();
    assert!(touched.is_empty(), "{}", touched.join("\n"));
}

/// DESIGN.md §2: the domain knows nothing of the actor runtime. Only `runtime/`, the handles
/// (`api/`) and the crate root name `crate::runtime`, and only `runtime/` and the handles
/// use actix.
#[test]
fn the_domain_imports_neither_the_runtime_nor_actix() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = engine_graph();
    let mut offenders = Vec::new();
    for (from, edges) in &graph {
        let above = from.starts_with("runtime/") || from.starts_with("api/") || from == "lib.rs";
        if above {
            continue;
        }
        for (to, evidence) in edges {
            if to.starts_with("runtime/") {
                let (line, path) = (evidence.line, &evidence.path);
                offenders.push(format!("{from}:{line} imports {to} (`{path}`)"));
            }
        }
        let text = std::fs::read_to_string(root.join(from)).unwrap();
        for (n, l) in text.lines().enumerate() {
            let code = l.trim_start();
            if (code.starts_with("use actix") || code.contains("actix::"))
                && !code.starts_with("//")
            {
                offenders.push(format!("{from}:{} uses actix: {code}", n + 1));
            }
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

/// Module-level edges allowed for now, each by the one file that makes it and the module it
/// reaches. Every entry must still be needed (the test fails on a stale one). None today:
/// the last (`plan/executor.rs` → `cluster` against `cluster/handoff.rs` → `plan`) went when
/// the stage-id limit moved down to `protocol`.
const ALLOWED_MODULE_EDGES: &[(&str, &str)] = &[];

/// Issue 26: the top-level modules (the children of `src/`) form no import cycle. Six mutual
/// pairs (protocol↔plan, protocol↔cluster, plan↔cluster, llm↔plan, metadata↔workspace,
/// workspace↔janitor) held 11 of them in one knot although no file imported itself back.
#[test]
fn top_level_modules_form_no_import_cycle() {
    let (files, stale) = modules::without_edges(&engine_graph(), ALLOWED_MODULE_EDGES);
    assert!(
        stale.is_empty(),
        "allowed module edges that no longer exist (remove them): {stale:?}"
    );
    let cycles = modules::report(&modules::module_graph(&files));
    assert!(cycles.is_empty(), "{}", cycles.join("\n"));
}

/// Issue 26: `protocol/`, the ground floor of plain values, imports no other module of the
/// engine (it imported `agent`, `plan`, `cluster`, `tool` and `llm` through the requests and
/// the orchestration summary types).
#[test]
fn protocol_imports_no_other_module() {
    let graph = engine_graph();
    let offenders: Vec<String> = graph
        .iter()
        .filter(|(from, _)| from.starts_with("protocol/"))
        .flat_map(|(from, edges)| {
            edges
                .iter()
                .filter(|(to, _)| !to.starts_with("protocol/"))
                .map(move |(to, e)| format!("{from}:{} uses `{}` ({to})", e.line, e.path))
        })
        .collect();
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

/// Issue 26, one home for `delta serve`: its actors live under `runtime/serve/`, and only
/// `api/serve.rs` (the entry point) reaches into them from outside; the relay shares only
/// `token.rs` with them. Before, the relay imported serve's web layer for its token check.
#[test]
fn only_the_serve_entry_point_imports_the_serve_actors() {
    let graph = engine_graph();
    let offenders: Vec<String> = graph
        .iter()
        .filter(|(from, _)| !from.starts_with("runtime/serve/") && *from != "api/serve.rs")
        .flat_map(|(from, edges)| {
            edges
                .iter()
                .filter(|(to, _)| to.starts_with("runtime/serve/"))
                .map(move |(to, e)| format!("{from}:{} uses `{}` ({to})", e.line, e.path))
        })
        .collect();
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
    assert!(
        graph
            .keys()
            .all(|file| !file.starts_with("runtime/web/") && !file.starts_with("runtime/worker/")),
        "serve actors outside runtime/serve/"
    );
}

/// Writes a small crate and returns its import graph.
/// A module with a folder keeps its root inside it: `x/mod.rs`, never `x.rs` beside `x/`
/// (seven modules had it the other way, so a reader looked in two places).
#[test]
fn no_module_file_sits_beside_its_folder() {
    let offenders = layout::module_files_beside_their_folder(&layout::trees());
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

/// One name for a file of tests: `tests.rs` or `<topic>_tests.rs`.
#[test]
fn test_files_have_one_naming_pattern() {
    let offenders = layout::misnamed_test_files(&layout::trees());
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

/// The layout checks find what they look for (so an empty report means something).
#[test]
fn layout_checks_find_a_module_beside_its_folder_and_a_misnamed_test_file() {
    let root = tempfile::tempdir().unwrap();
    for file in [
        "a.rs",
        "a/b.rs",
        "c/mod.rs",
        "d/tests_resume.rs",
        "d/model_tests.rs",
        "d/tests.rs",
    ] {
        let path = root.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }
    let roots = [root.path().to_path_buf()];
    let beside = layout::module_files_beside_their_folder(&roots);
    assert_eq!(beside.len(), 1, "{beside:?}");
    assert!(beside[0].contains("a.rs beside"), "{beside:?}");
    let misnamed = layout::misnamed_test_files(&roots);
    assert_eq!(misnamed.len(), 1, "{misnamed:?}");
    assert!(misnamed[0].contains("tests_resume.rs"), "{misnamed:?}");
}

fn graph_of(files: &[(&str, &str)]) -> Graph {
    let root = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    scan::import_graph(root.path()).unwrap()
}

fn edges(graph: &Graph, from: &str) -> Vec<String> {
    graph[from].keys().cloned().collect()
}

#[test]
fn layering_scan_resolves_crate_super_self_and_inline_paths() {
    let graph = graph_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\nmod c;\n"),
        (
            "a/mod.rs",
            "mod inner;\npub use inner::Thing;\nuse crate::a::inner::Other;\n",
        ),
        (
            "a/inner.rs",
            "use super::super::b::{self, B as Bee};\npub struct Thing;\npub struct Other;\n",
        ),
        (
            "b.rs",
            "//! crate::c::Hidden in a comment\npub struct B;\n\
             fn f() -> &'static str { let _ = '\\''; \"crate::c::Hidden\" }\n\
             #[cfg(test)]\nmod tests {\n    use super::*;\n    use self::helper::x;\n    mod helper { pub fn x() {} }\n}\n",
        ),
        (
            "c.rs",
            "#[path = \"c_impl.rs\"]\nmod implementation;\n\
             const QUOTES: [char; 2] = ['\\'','\"'];\nfn g() { crate::a::Thing; }\n",
        ),
        ("c_impl.rs", "fn h() -> u8 { super::super::b::f(); 1 }\n"),
    ]);
    assert_eq!(edges(&graph, "lib.rs"), Vec::<String>::new());
    // A parent using its own child (`inner::`, `crate::a::inner::`) is composition.
    assert_eq!(edges(&graph, "a/mod.rs"), Vec::<String>::new());
    assert_eq!(edges(&graph, "a/inner.rs"), vec!["b.rs".to_string()]);
    // Comments, strings and the inline test module's `super::*` name nothing outside.
    assert_eq!(edges(&graph, "b.rs"), Vec::<String>::new());
    assert_eq!(edges(&graph, "c.rs"), vec!["a/mod.rs".to_string()]);
    // `#[path]` files keep their declared module path: `super::super` is the crate root.
    assert_eq!(edges(&graph, "c_impl.rs"), vec!["b.rs".to_string()]);
}

#[test]
fn layering_cycle_report_names_each_edge_and_its_line() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b.rs", "\nfn f() { crate::c::g(); }\npub struct B;\n"),
        ("c.rs", "use super::{a::A, d};\npub fn g() {}\n"),
        ("d.rs", "use crate::a;\n"),
    ]);
    let report = cycles::report(&graph);
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(
        report[0],
        "import cycle among a.rs, b.rs, c.rs, d.rs:\n  \
         a.rs:1 uses `crate::b::B` (b.rs)\n  \
         b.rs:2 uses `crate::c::g` (c.rs)\n  \
         c.rs:1 uses `super::a::A` (a.rs)\n"
    );
    let acyclic = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::B;\n"),
        ("b.rs", "pub struct B;\n"),
    ]);
    assert!(cycles::report(&acyclic).is_empty());
}

#[test]
fn layering_module_check_folds_files_into_top_level_modules() {
    // No file cycle (a/x.rs → b.rs → a/y.rs), but `a` and `b` import each other.
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a/mod.rs", "mod x;\nmod y;\n"),
        ("a/x.rs", "use crate::b::B;\n"),
        ("a/y.rs", "pub struct Y;\n"),
        ("b.rs", "use crate::a::y::Y;\npub struct B;\n"),
        ("c.rs", "use crate::b::B;\n"),
    ]);
    assert!(cycles::report(&graph).is_empty());
    let folded = modules::module_graph(&graph);
    assert_eq!(edges(&folded, "a"), vec!["b".to_string()]);
    assert_eq!(edges(&folded, "c"), vec!["b".to_string()]);
    let report = modules::report(&folded);
    assert_eq!(
        report,
        vec!["module import cycle among a, b:\n  \
             a → b: a/x.rs:1 uses `crate::b::B`\n  \
             b → a: b.rs:1 uses `crate::a::y::Y`\n"
            .to_string()]
    );
    // An allowed edge is left out by the file that makes it; one that matches nothing is
    // reported as stale.
    let (pruned, stale) = modules::without_edges(&graph, &[("a/x.rs", "b"), ("c.rs", "a")]);
    assert!(modules::report(&modules::module_graph(&pruned)).is_empty());
    assert_eq!(stale, vec![("c.rs".to_string(), "a".to_string())]);
}
