//! `imports:` resolution and tool merging (spec §2.7.4, with the original engine's defects fixed).
//!
//! Owns: paths relative to the importing file; the real path (symlinks followed) must stay
//! inside the agent folder; a cycle is only a file importing itself through the current
//! chain (a diamond loads the shared file once); merge order = a file's imports depth-first
//! in list order, then its own tools; last definition wins by name and moves to the end.
//! Imported files contribute `tools` only. It does not parse tool definitions (see
//! `tool::compile`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::error::AgentError;
use super::read_yaml;
use crate::tool::compile::{compile_tools, CompiledTool};
use crate::yaml::{Fields, UnknownKeys};

/// Keys an imported file may carry; only `tools` and `imports` have an effect.
pub(crate) const LIBRARY_KEYS: [&str; 5] = ["tools", "imports", "name", "description", "version"];

struct Walk<'a> {
    home: &'a Path,
    chain: Vec<PathBuf>,
    loaded: HashSet<PathBuf>,
    tools: Vec<CompiledTool>,
    policy: UnknownKeys,
    warnings: &'a mut Vec<String>,
}

/// Resolves `root_doc`'s imports (recursively) and merges every tool. `home` must be
/// canonical; `root_file` is the file `root_doc` was read from.
pub(crate) fn collect_tools(
    home: &Path,
    root_file: &Path,
    root_doc: &Value,
    policy: UnknownKeys,
    warnings: &mut Vec<String>,
) -> Result<Vec<CompiledTool>, AgentError> {
    let root = std::fs::canonicalize(root_file).unwrap_or_else(|_| root_file.to_path_buf());
    let mut walk = Walk {
        home,
        chain: vec![root.clone()],
        loaded: HashSet::from([root.clone()]),
        tools: Vec::new(),
        policy,
        warnings,
    };
    walk.visit(&root, root_doc)?;
    Ok(walk.tools)
}

fn display_relative(path: &Path, home: &Path) -> String {
    path.strip_prefix(home)
        .unwrap_or(path)
        .display()
        .to_string()
}

impl Walk<'_> {
    fn visit(&mut self, file: &Path, doc: &Value) -> Result<(), AgentError> {
        if doc.is_null() {
            return Ok(());
        }
        let fields = Fields::new(file, "", doc)?;
        for (index, import) in fields
            .sequence("imports")?
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let Value::String(import) = import else {
                return Err(AgentError::invalid(
                    file,
                    format!("`imports[{index}]` must be a relative path"),
                    "write each import as a path, e.g. - ./tools/file-ops.yaml",
                ));
            };
            let target = self.resolve(file, import)?;
            if self.chain.contains(&target) {
                let mut cycle: Vec<String> = self
                    .chain
                    .iter()
                    .map(|p| display_relative(p, self.home))
                    .collect();
                cycle.push(display_relative(&target, self.home));
                return Err(AgentError::invalid(
                    file,
                    format!("import `{import}` creates a cycle: {}", cycle.join(" -> ")),
                    "remove one of these imports; importing the same file from two places is fine, importing yourself is not",
                ));
            }
            if !self.loaded.insert(target.clone()) {
                continue;
            }
            let imported = read_yaml(&target)?;
            if !imported.is_null() {
                // An imported file holds tools (and imports); an agent's keys there were
                // ignored in silence, a typo (`tool:`) left the agent without its tools.
                Fields::new(&target, "", &imported)?.check_keys(
                    &LIBRARY_KEYS,
                    self.policy,
                    self.warnings,
                )?;
            }
            self.chain.push(target.clone());
            self.visit(&target, &imported)?;
            self.chain.pop();
        }
        let local = compile_tools(
            fields.sequence("tools")?.unwrap_or_default(),
            file,
            self.policy,
            self.warnings,
        )?;
        let mut names_in_file: HashSet<String> = HashSet::new();
        for tool in local {
            if !names_in_file.insert(tool.name.clone()) {
                self.warnings.push(format!(
                    "{}: tool `{}` is defined twice in this file; the later definition wins",
                    file.display(),
                    tool.name
                ));
            }
            self.tools.retain(|t| t.name != tool.name);
            self.tools.push(tool);
        }
        Ok(())
    }

    /// The canonical path of `import` (relative to `file`), checked to stay inside home.
    fn resolve(&self, file: &Path, import: &str) -> Result<PathBuf, AgentError> {
        let hint_inside = "imports are relative to the file that imports them and must stay inside the agent folder";
        if import.trim().is_empty() {
            return Err(AgentError::invalid(
                file,
                "an import path is empty",
                hint_inside,
            ));
        }
        if Path::new(import).is_absolute() {
            return Err(AgentError::invalid(
                file,
                format!("import `{import}` is an absolute path"),
                format!(
                    "{hint_inside}; write it relative to `{}`",
                    file.parent().unwrap_or(file).display()
                ),
            ));
        }
        let joined = file.parent().unwrap_or(self.home).join(import);
        let resolved = std::fs::canonicalize(&joined).map_err(|_| {
            AgentError::invalid(
                file,
                format!(
                    "import `{import}` not found (resolved to `{}`)",
                    joined.display()
                ),
                "check the path; it is relative to the file that imports it",
            )
        })?;
        if !resolved.starts_with(self.home) {
            return Err(AgentError::invalid(
                file,
                format!(
                    "import `{import}` resolves to `{}`, outside the agent folder `{}`",
                    resolved.display(),
                    self.home.display()
                ),
                format!(
                    "{hint_inside} (symlinks are followed); copy the file into the agent folder"
                ),
            ));
        }
        if !resolved.is_file() {
            return Err(AgentError::invalid(
                file,
                format!(
                    "import `{import}` is not a file (resolved to `{}`)",
                    resolved.display()
                ),
                "import a YAML file that holds a `tools:` list",
            ));
        }
        Ok(resolved)
    }
}
