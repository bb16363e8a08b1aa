//! tool::process::env — builds the complete child environment and resolves a program name
//! against the CHILD's `PATH` (never the parent's).
//!
//! Owns: secret scrubbing (the engine's own secrets, [`ENGINE_SECRET_VARS`], always; plus the
//! agent's `llm.api_key_env`), the
//! `PATH` prepend of the running `delta` directory, program lookup (and its per-run cache,
//! [`ProgramCache`]).
//! Must not: read or mutate the process environment itself — callers pass the base map.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The variable that always holds the engine's API key; never given to a child.
pub const API_KEY_VAR: &str = "DELTA_API_KEY";
/// The token of `delta serve` (its workers' engines see it): with it, a tool could drive
/// every other worker of the server. Never given to a child.
pub const SERVE_TOKEN_VAR: &str = "DELTA_SERVE_TOKEN";
/// The token of `delta relay` (a Slurm job's engine reaches the model through it). Never
/// given to a child.
pub const RELAY_TOKEN_VAR: &str = "DELTA_RELAY_TOKEN";
/// The token `/metrics` of `delta orchestrate --metrics-listen` asks for. Never given to a
/// child.
pub const METRICS_TOKEN_VAR: &str = "DELTA_METRICS_TOKEN";
/// Variables that hold the engine's own secrets: removed from the environment of every tool,
/// hook and context generator, whatever the agent says.
pub const ENGINE_SECRET_VARS: &[&str] = &[
    API_KEY_VAR,
    SERVE_TOKEN_VAR,
    RELAY_TOKEN_VAR,
    METRICS_TOKEN_VAR,
    // A trace collector's headers (the API key of a hosted one: Langfuse, Honeycomb...):
    // the engine's credentials for its own export.
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
];

/// Whether `name` is one of the [`ENGINE_SECRET_VARS`].
pub fn is_engine_secret(name: &str) -> bool {
    ENGINE_SECRET_VARS.contains(&name)
}

/// env = `base` minus `secret_names` (and always the [`ENGINE_SECRET_VARS`]) plus `extra`
/// (which wins over `base`), with `prepend_path_dir` placed first on `PATH`. Sorted by name.
///
/// Built as a sorted `Vec` straight from `base` (already sorted): every run builds one, and
/// a `BTreeMap` in between was a visible share of a run's start at 1,000 runs.
pub fn build_child_env(
    base: &BTreeMap<String, String>,
    secret_names: &[String],
    extra: &[(String, String)],
    prepend_path_dir: Option<&Path>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::with_capacity(base.len() + extra.len() + 1);
    env.extend(
        base.iter()
            .filter(|(name, _)| !is_engine_secret(name) && !secret_names.contains(name))
            .map(|(name, value)| (name.clone(), value.clone())),
    );
    for (name, value) in extra {
        set_sorted(&mut env, name, value.clone());
    }
    if let Some(dir) = prepend_path_dir {
        let dir = dir.to_string_lossy().into_owned();
        match env.binary_search_by(|(name, _)| name.as_str().cmp("PATH")) {
            Ok(at) if !env[at].1.is_empty() => env[at].1 = format!("{dir}:{}", env[at].1),
            Ok(at) => env[at].1 = dir,
            Err(at) => env.insert(at, ("PATH".to_owned(), dir)),
        }
    }
    env
}

/// Sets `name` to `value` in `env` (sorted by name, names unique), keeping it sorted.
fn set_sorted(env: &mut Vec<(String, String)>, name: &str, value: String) {
    match env.binary_search_by(|(key, _)| key.as_str().cmp(name)) {
        Ok(at) => env[at].1 = value,
        Err(at) => env.insert(at, (name.to_owned(), value)),
    }
}

/// The variables the engine gives every tool, hook and generator: `DELTA_RUN_ID`,
/// `DELTA_AGENT_HOME`, `DELTA_CWD` and the legacy `AGENT_HOME`. Pass them as `extra` to
/// [`build_child_env`].
pub fn engine_vars(run_id: &str, agent_home: &Path, cwd: &Path) -> Vec<(String, String)> {
    let agent_home = agent_home.to_string_lossy().into_owned();
    vec![
        ("DELTA_RUN_ID".to_owned(), run_id.to_owned()),
        ("DELTA_AGENT_HOME".to_owned(), agent_home.clone()),
        ("DELTA_CWD".to_owned(), cwd.to_string_lossy().into_owned()),
        ("AGENT_HOME".to_owned(), agent_home),
    ]
}

/// Why a program could not be located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotFound(pub String);

/// Resolves `program` the way `execvp` would, but against `env`'s `PATH`; relative `PATH`
/// entries (and the empty entry, meaning "current directory") are taken relative to `cwd`.
/// A name with a `/` is used as given (relative to `cwd`).
pub(crate) fn resolve_program(
    program: &str,
    env: &[(String, String)],
    cwd: &Path,
) -> Result<PathBuf, NotFound> {
    if program.is_empty() {
        return Err(NotFound(
            "empty program name (hint: the tool's command resolved to an empty first word)"
                .to_owned(),
        ));
    }
    if program.contains('/') {
        let path = cwd.join(program);
        return if path.exists() {
            Ok(path)
        } else {
            Err(NotFound(format!(
                "No such file or directory: {program} (hint: the path is taken relative to the workspace {})",
                cwd.display()
            )))
        };
    }
    let search_path = search_path(env);
    for dir in search_path.split(':') {
        let candidate = cwd.join(dir).join(program);
        if is_executable_file(&candidate) {
            return Ok(candidate);
        }
    }
    Err(NotFound(format!(
        "No such file or directory: {program} (hint: `{program}` is not on the tool's PATH \
         {search_path:?}; install it, use an absolute path, or fix PATH in the agent's .env)"
    )))
}

/// Where a run's programs were found on its `PATH`, so a tool called every iteration costs one
/// `stat` instead of one per `PATH` directory. One cache serves one environment and one
/// working directory (a run's tools). A hit is used only while it is still an executable
/// file, else the name is looked up again; a program installed during the run in a `PATH`
/// directory earlier than the one it was found in is picked up by the next run. Only bare
/// names found through an absolute `PATH` directory are kept (a relative entry depends on
/// what the tools themselves create in the workspace).
#[derive(Debug, Clone, Default)]
pub struct ProgramCache(Arc<Mutex<HashMap<String, PathBuf>>>);

impl ProgramCache {
    /// An empty cache, for one run.
    pub fn new() -> Self {
        Self::default()
    }

    /// [`resolve_program`], through the cache.
    pub(crate) fn resolve(
        &self,
        program: &str,
        env: &[(String, String)],
        cwd: &Path,
    ) -> Result<PathBuf, NotFound> {
        if program.is_empty() || program.contains('/') {
            return resolve_program(program, env, cwd);
        }
        let cached = self.entries().get(program).cloned();
        if let Some(found) = cached {
            if is_executable_file(&found) {
                return Ok(found);
            }
        }
        let found = resolve_program(program, env, cwd)?;
        // Every directory searched before the hit must be absolute too.
        let cacheable = search_path(env)
            .split(':')
            .find_map(|dir| {
                let dir = Path::new(dir);
                if !dir.is_absolute() {
                    Some(false)
                } else if dir.join(program) == found {
                    Some(true)
                } else {
                    None
                }
            })
            .unwrap_or(false);
        if cacheable {
            self.entries().insert(program.to_owned(), found.clone());
        } else {
            self.entries().remove(program);
        }
        Ok(found)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, PathBuf>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn search_path(env: &[(String, String)]) -> &str {
    env.iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_str())
        .unwrap_or("")
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn base() -> BTreeMap<String, String> {
        [
            ("DELTA_API_KEY", "sk-secret"),
            ("DELTA_SERVE_TOKEN", "serve-secret"),
            ("DELTA_RELAY_TOKEN", "relay-secret"),
            ("OPENAI_KEY", "sk-other"),
            ("HOME", "/home/x"),
            ("PATH", "/usr/bin:/bin"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter()
            .find(|(key, _)| key == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn scrubs_the_api_key_and_named_secrets() {
        let env = build_child_env(&base(), &["OPENAI_KEY".to_owned()], &[], None);
        assert_eq!(get(&env, "DELTA_API_KEY"), None);
        assert_eq!(get(&env, "OPENAI_KEY"), None);
        // Regression (issue 24): tools inherited the serve and relay tokens.
        assert_eq!(get(&env, "DELTA_SERVE_TOKEN"), None);
        assert_eq!(get(&env, "DELTA_RELAY_TOKEN"), None);
        assert_eq!(get(&env, "HOME"), Some("/home/x"));
    }

    #[test]
    fn extra_wins_and_path_gets_the_delta_dir_first() {
        let extra = vec![
            ("DELTA_RUN_ID".to_owned(), "r1".to_owned()),
            ("HOME".to_owned(), "/other".to_owned()),
        ];
        let env = build_child_env(&base(), &[], &extra, Some(Path::new("/opt/delta/bin")));
        assert_eq!(get(&env, "DELTA_RUN_ID"), Some("r1"));
        assert_eq!(get(&env, "HOME"), Some("/other"));
        assert_eq!(get(&env, "PATH"), Some("/opt/delta/bin:/usr/bin:/bin"));
    }

    #[test]
    fn engine_vars_name_run_home_and_cwd() {
        let vars = engine_vars("r-1", Path::new("/agents/a"), Path::new("/ws/W001"));
        assert_eq!(get(&vars, "DELTA_RUN_ID"), Some("r-1"));
        assert_eq!(get(&vars, "DELTA_AGENT_HOME"), Some("/agents/a"));
        assert_eq!(get(&vars, "AGENT_HOME"), Some("/agents/a"));
        assert_eq!(get(&vars, "DELTA_CWD"), Some("/ws/W001"));
    }

    #[test]
    fn the_environment_is_sorted_by_name_and_a_later_extra_wins() {
        let extra = vec![
            ("ZED".to_owned(), "1".to_owned()),
            ("ALPHA".to_owned(), "a".to_owned()),
            ("HOME".to_owned(), "/first".to_owned()),
            ("ZED".to_owned(), "2".to_owned()),
        ];
        let env = build_child_env(&base(), &[], &extra, Some(Path::new("/d")));
        let names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["ALPHA", "HOME", "OPENAI_KEY", "PATH", "ZED"]);
        assert_eq!(get(&env, "ZED"), Some("2"));
        assert_eq!(get(&env, "HOME"), Some("/first"));
    }

    #[test]
    fn path_is_created_when_missing() {
        let env = build_child_env(&BTreeMap::new(), &[], &[], Some(Path::new("/d")));
        assert_eq!(get(&env, "PATH"), Some("/d"));
    }

    #[test]
    fn resolves_against_the_given_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("mytool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = vec![("PATH".to_owned(), dir.path().to_string_lossy().into_owned())];
        assert_eq!(resolve_program("mytool", &env, Path::new("/")), Ok(tool));
        let empty: Vec<(String, String)> = vec![];
        let error = resolve_program("mytool", &empty, Path::new("/")).unwrap_err();
        assert!(error.0.contains("No such file or directory: mytool"));
        assert!(error.0.contains("not on the tool's PATH"));
    }

    fn executable(path: &Path) {
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn program_cache_looks_a_name_up_once_and_again_when_its_file_is_gone() {
        let first = tempfile::tempdir().unwrap();
        let second = tempfile::tempdir().unwrap();
        let path = format!("{}:{}", first.path().display(), second.path().display());
        let env = vec![("PATH".to_owned(), path)];
        executable(&first.path().join("tool"));
        executable(&second.path().join("tool"));
        let cache = ProgramCache::new();
        let found = cache.resolve("tool", &env, Path::new("/")).unwrap();
        assert_eq!(found, first.path().join("tool"));
        assert_eq!(cache.entries().get("tool"), Some(&found));
        std::fs::remove_file(&found).unwrap();
        assert_eq!(
            cache.resolve("tool", &env, Path::new("/")),
            Ok(second.path().join("tool"))
        );
        std::fs::remove_file(second.path().join("tool")).unwrap();
        assert!(cache.resolve("tool", &env, Path::new("/")).is_err());
    }

    #[test]
    fn program_cache_keeps_nothing_found_after_a_relative_path_entry() {
        let cwd = tempfile::tempdir().unwrap();
        let absolute = tempfile::tempdir().unwrap();
        std::fs::create_dir(cwd.path().join("bin")).unwrap();
        executable(&absolute.path().join("tool"));
        let env = vec![(
            "PATH".to_owned(),
            format!("bin:{}", absolute.path().display()),
        )];
        let cache = ProgramCache::new();
        assert_eq!(
            cache.resolve("tool", &env, cwd.path()),
            Ok(absolute.path().join("tool"))
        );
        assert!(cache.entries().is_empty());
        // A tool that creates `bin/tool` in the workspace is found by the next call.
        executable(&cwd.path().join("bin/tool"));
        assert_eq!(
            cache.resolve("tool", &env, cwd.path()),
            Ok(cwd.path().join("bin/tool"))
        );
    }

    #[test]
    fn non_executable_files_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain"), "x").unwrap();
        let env = vec![("PATH".to_owned(), dir.path().to_string_lossy().into_owned())];
        assert!(resolve_program("plain", &env, Path::new("/")).is_err());
    }
}
