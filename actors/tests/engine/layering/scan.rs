//! Reads a crate's source tree into a file-level import graph: which `.rs` file names an item
//! of which other file.
//!
//! The module tree is walked from `lib.rs` through `mod name;` declarations (with `#[path]`
//! and inline `mod name { .. }` blocks), so every file knows its module path. In each file the
//! paths that leave it are collected: `use` trees starting with `crate::`, `super::` or
//! `self::`, and the same paths written inline in code (`crate::input::read_bounded(..)`,
//! `super::load::parse(..)`). A path resolves to the file of the longest module prefix it
//! names: an item imported from a module resolves to that module's file (a re-export counts
//! against the re-exporting file). Comments and literals are skipped by a small tokenizer.
//!
//! A file reaching into its own submodules (a parent using the children it declares) is
//! composition, not an import: those edges are left out. Bare paths (`child::x`, `serde::x`)
//! name a file's own submodules or other crates, so they are not collected, and `crate::`
//! or `self::` paths into a file's own subtree are dropped.
//!
//! Must not: compile or evaluate anything; it only reads text.

use std::collections::BTreeMap;
use std::path::Path;

/// Why an edge exists: the line and the path as written (first occurrence only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub line: usize,
    pub path: String,
}

/// Files (relative to the source root) and, per file, the files it imports.
pub type Graph = BTreeMap<String, BTreeMap<String, Evidence>>;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(&'static str),
    /// Numbers, char literals, lifetimes: nothing a path can contain.
    Other,
}

/// Splits Rust source into tokens with their line numbers, dropping comments.
fn tokenize(source: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let (c, start_line) = (chars[i], line);
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if let Some((text, end)) = string_literal(&chars, i) {
            line += text.matches('\n').count();
            tokens.push((Token::Str(text), start_line));
            i = end;
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            let close = if at(i + 1) == '\\' {
                // The escaped character (`'\''`) never closes the literal.
                (i + 3..chars.len()).find(|&j| chars[j] == '\'')
            } else {
                (at(i + 2) == '\'').then_some(i + 2)
            };
            i = close.map_or(i + 1, |j| j + 1);
            tokens.push((Token::Other, start_line));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            tokens.push((Token::Ident(word), start_line));
        } else if c.is_ascii_digit() {
            while at(i).is_alphanumeric()
                || at(i) == '_'
                || (at(i) == '.' && at(i + 1).is_ascii_digit())
            {
                i += 1;
            }
            tokens.push((Token::Other, start_line));
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push((Token::Punct("::"), start_line));
            i += 2;
        } else {
            const PUNCT: &[&str] = &["{", "}", "(", ")", "[", "]", ";", ",", "*", "#", "=", "$"];
            let one = c.to_string();
            let punct = PUNCT.iter().find(|p| **p == one).copied().unwrap_or("?");
            tokens.push((Token::Punct(punct), start_line));
            i += 1;
        }
    }
    tokens
}

/// A string literal starting at `i` (`"…"`, `r#"…"#`, `b"…"`, `br"…"`): its text and end.
fn string_literal(chars: &[char], i: usize) -> Option<(String, usize)> {
    let previous_is_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    if previous_is_ident {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let hashes = chars[j..].iter().take_while(|c| **c == '#').count();
    j += hashes;
    if chars.get(j) != Some(&'"') || (!raw && hashes > 0) {
        return None;
    }
    let body_start = j + 1;
    let mut k = body_start;
    while k < chars.len() {
        if !raw && chars[k] == '\\' {
            k += 2;
            continue;
        }
        if chars[k] == '"'
            && chars[k + 1..]
                .iter()
                .take(hashes)
                .filter(|c| **c == '#')
                .count()
                == hashes
        {
            let text = chars[body_start..k].iter().collect();
            return Some((text, k + 1 + hashes));
        }
        k += 1;
    }
    Some((chars[body_start..].iter().collect(), chars.len()))
}

/// One source file: where it is (relative to the root), its module path and its tokens.
struct SourceFile {
    relative: String,
    module: Vec<String>,
    tokens: Vec<(Token, usize)>,
}

fn ident(tokens: &[(Token, usize)], i: usize) -> Option<&str> {
    match tokens.get(i) {
        Some((Token::Ident(word), _)) => Some(word),
        _ => None,
    }
}

fn punct(tokens: &[(Token, usize)], i: usize, p: &str) -> bool {
    matches!(tokens.get(i), Some((Token::Punct(q), _)) if *q == p)
}

/// The name of the inline module `mod name {` whose brace is at `brace`, if it is one.
fn inline_module(tokens: &[(Token, usize)], brace: usize) -> Option<String> {
    if brace >= 2 && ident(tokens, brace - 2) == Some("mod") {
        ident(tokens, brace - 1).map(str::to_owned)
    } else {
        None
    }
}

/// `#[path = "…"]` among the attributes written before the item at `item`.
fn path_attribute(tokens: &[(Token, usize)], item: usize) -> Option<String> {
    let mut i = item;
    // Step back over a visibility: `pub`, `pub(crate)`, `pub(super)`.
    if i >= 1 && punct(tokens, i - 1, ")") {
        while i > 0 && !punct(tokens, i - 1, "(") {
            i -= 1;
        }
        i = i.saturating_sub(1);
    }
    if i >= 1 && ident(tokens, i - 1) == Some("pub") {
        i -= 1;
    }
    while i >= 1 && punct(tokens, i - 1, "]") {
        let close = i - 1;
        let open = (0..close).rev().find(|&j| punct(tokens, j, "["))?;
        if ident(tokens, open + 1) == Some("path") && punct(tokens, open + 2, "=") {
            if let Some((Token::Str(path), _)) = tokens.get(open + 3) {
                return Some(path.clone());
            }
        }
        i = open.checked_sub(1)?;
    }
    None
}

/// Loads every file reachable from `root/lib.rs` through `mod` declarations, sorted by path.
fn load_tree(root: &Path) -> Result<Vec<SourceFile>, String> {
    let mut files = Vec::new();
    // (file, module path, folder of its `mod name;` children: `lib.rs`/`mod.rs` keep them
    // beside themselves, `a.rs` keeps them in `a/`)
    let mut queue = vec![(
        root.join("lib.rs"),
        Vec::<String>::new(),
        root.to_path_buf(),
    )];
    while let Some((path, module, children_dir)) = queue.pop() {
        let source =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let tokens = tokenize(&source);
        let mut inline: Vec<Option<String>> = Vec::new();
        for i in 0..tokens.len() {
            if punct(&tokens, i, "{") {
                inline.push(inline_module(&tokens, i));
            } else if punct(&tokens, i, "}") {
                inline.pop();
            } else if ident(&tokens, i) == Some("mod") && punct(&tokens, i + 2, ";") {
                let Some(name) = ident(&tokens, i + 1) else {
                    continue;
                };
                let inline_names: Vec<String> = inline.iter().flatten().cloned().collect();
                let mut child_module = module.clone();
                child_module.extend(inline_names.iter().cloned());
                child_module.push(name.to_owned());
                let dir = inline_names
                    .iter()
                    .fold(children_dir.clone(), |d, n| d.join(n));
                let (file, is_mod_rs) = match path_attribute(&tokens, i) {
                    Some(attr) => {
                        let base = path.parent().unwrap_or(root).join(attr);
                        let is_mod_rs = base.file_name().is_some_and(|n| n == "mod.rs");
                        (base, is_mod_rs)
                    }
                    None if dir.join(format!("{name}.rs")).is_file() => {
                        (dir.join(format!("{name}.rs")), false)
                    }
                    None => (dir.join(name).join("mod.rs"), true),
                };
                let grandchildren = if is_mod_rs {
                    file.parent().unwrap_or(root).to_path_buf()
                } else {
                    file.with_extension("")
                };
                queue.push((file, child_module, grandchildren));
            }
        }
        let relative = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        files.push(SourceFile {
            relative,
            module,
            tokens,
        });
    }
    files.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(files)
}

/// Pushes the paths (as segments) named by the `use` tree starting at `i` onto `out`;
/// returns the index just after the tree.
fn use_tree(
    tokens: &[(Token, usize)],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<Vec<String>>,
) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(i) {
            Some((Token::Ident(word), _)) if word != "as" => {
                path.push(word.clone());
                i += 1;
            }
            Some((Token::Punct("::"), _)) => i += 1,
            Some((Token::Punct("*"), _)) => i += 1,
            Some((Token::Punct("{"), _)) => {
                i += 1;
                while i < tokens.len() && !punct(tokens, i, "}") {
                    i = use_tree(tokens, i, &path, out);
                    if punct(tokens, i, ",") {
                        i += 1;
                    }
                }
                return i + 1;
            }
            Some((Token::Ident(_), _)) => {
                // `as alias`: the alias names nothing new.
                out.push(path);
                return i + 2;
            }
            _ => {
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                }
                out.push(path);
                return i;
            }
        }
    }
}

/// Every `crate::`/`super::`/`self::` path in a file, with its line and the inline modules
/// it is written in.
fn paths_in(file: &SourceFile) -> Vec<(Vec<String>, Vec<String>, usize)> {
    let tokens = &file.tokens;
    let mut found = Vec::new();
    let mut inline: Vec<Option<String>> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let inline_names = || inline.iter().flatten().cloned().collect::<Vec<String>>();
        let line = tokens[i].1;
        if punct(tokens, i, "{") {
            inline.push(inline_module(tokens, i));
        } else if punct(tokens, i, "}") {
            inline.pop();
        } else if ident(tokens, i) == Some("use") {
            let mut paths = Vec::new();
            i = use_tree(tokens, i + 1, &[], &mut paths);
            for path in paths {
                found.push((path, inline_names(), line));
            }
            continue;
        } else if matches!(ident(tokens, i), Some("crate" | "super" | "self"))
            && punct(tokens, i + 1, "::")
            && !(i >= 1
                && (punct(tokens, i - 1, "::")
                    || punct(tokens, i - 1, "$")
                    || ident(tokens, i - 1) == Some("in")))
        {
            let mut path = Vec::new();
            while let Some(word) = ident(tokens, i) {
                path.push(word.to_owned());
                if !punct(tokens, i + 1, "::") {
                    break;
                }
                i += 2;
            }
            found.push((path, inline_names(), line));
        }
        i += 1;
    }
    found.retain(|(path, _, _)| {
        matches!(
            path.first().map(String::as_str),
            Some("crate" | "super" | "self")
        )
    });
    found
}

/// The module a path names: `crate`, `super` and `self` made absolute.
fn absolute(path: &[String], current: &[String]) -> Option<Vec<String>> {
    let mut segments = path.iter().peekable();
    let mut module = match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        _ => current.to_vec(),
    };
    while let Some(segment) = segments.peek() {
        match segment.as_str() {
            "super" => {
                module.pop()?;
            }
            "self" => {}
            _ => break,
        }
        segments.next();
    }
    module.extend(segments.cloned());
    Some(module)
}

/// Builds the import graph of the crate whose `lib.rs` is in `root`.
pub fn import_graph(root: &Path) -> Result<Graph, String> {
    let files = load_tree(root)?;
    let by_module: BTreeMap<Vec<String>, &SourceFile> =
        files.iter().map(|f| (f.module.clone(), f)).collect();
    let mut graph = Graph::new();
    for file in &files {
        let edges = graph.entry(file.relative.clone()).or_default();
        for (path, inline, line) in paths_in(file) {
            let mut current = file.module.clone();
            current.extend(inline);
            let Some(target) = absolute(&path, &current) else {
                continue;
            };
            let Some(owner) = (0..=target.len())
                .rev()
                .find_map(|n| by_module.get(&target[..n]))
            else {
                continue;
            };
            if owner.module.starts_with(&file.module) {
                continue; // the file itself, or one of its own submodules
            }
            edges
                .entry(owner.relative.clone())
                .or_insert_with(|| Evidence {
                    line,
                    path: path.join("::"),
                });
        }
    }
    Ok(graph)
}
