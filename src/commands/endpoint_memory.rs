//! Where `delta run`, `continue` and `orchestrate` keep what model endpoints taught across
//! processes (the engine's endpoint memory, see `delta_actors::llm::memory`): by default
//! `$XDG_CACHE_HOME/delta/endpoints.json`, else `~/.cache/delta/endpoints.json`;
//! `DELTA_ENDPOINT_MEMORY` names another file, or `off` keeps lessons for the process only.
//!
//! Must not: read or write the file (the engine does), or read the process environment
//! itself (it is handed the environment after the `.env` cascade).

use std::collections::BTreeMap;
use std::path::PathBuf;

use delta_actors::SupervisorConfig;

use crate::error::CliError;

/// The variable that moves or turns off the endpoint memory.
pub const ENDPOINT_MEMORY_VAR: &str = "DELTA_ENDPOINT_MEMORY";

/// The endpoint memory's file for `env`: `None` when it is turned off, or when neither
/// `XDG_CACHE_HOME` nor `HOME` says where the user's cache is.
pub fn endpoint_memory_path(env: &BTreeMap<String, String>) -> Result<Option<PathBuf>, CliError> {
    match env.get(ENDPOINT_MEMORY_VAR).map(|v| v.trim()) {
        Some("off" | "0" | "false" | "no") => return Ok(None),
        Some(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            if !path.is_absolute() {
                return Err(CliError::Config(format!(
                    "{ENDPOINT_MEMORY_VAR}='{}' is not an absolute path (hint: give the file's full path, e.g. {ENDPOINT_MEMORY_VAR}=$HOME/.cache/delta/endpoints.json, or {ENDPOINT_MEMORY_VAR}=off)",
                    path.display()
                )));
            }
            return Ok(Some(path));
        }
        _ => {}
    }
    // XDG: a relative XDG_CACHE_HOME is invalid and ignored.
    let cache = env
        .get("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            env.get("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".cache"))
        });
    Ok(cache.map(|dir| dir.join("delta").join("endpoints.json")))
}

/// `config` keeping what endpoints teach in the file `env` names (see
/// [`endpoint_memory_path`]).
pub fn with_endpoint_memory(
    config: SupervisorConfig,
    env: &BTreeMap<String, String>,
) -> Result<SupervisorConfig, CliError> {
    Ok(SupervisorConfig {
        endpoint_memory: endpoint_memory_path(env)?,
        ..config
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_memory_is_in_the_users_cache_unless_moved_or_turned_off() {
        let path = |pairs: &[(&str, &str)]| endpoint_memory_path(&env(pairs)).ok().flatten();
        assert_eq!(
            path(&[("HOME", "/home/u")]),
            Some(PathBuf::from("/home/u/.cache/delta/endpoints.json"))
        );
        assert_eq!(
            path(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/var/cache/u")]),
            Some(PathBuf::from("/var/cache/u/delta/endpoints.json"))
        );
        assert_eq!(
            path(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "relative")]),
            Some(PathBuf::from("/home/u/.cache/delta/endpoints.json")),
            "a relative XDG_CACHE_HOME is ignored"
        );
        assert_eq!(
            path(&[("HOME", "/home/u"), (ENDPOINT_MEMORY_VAR, "off")]),
            None
        );
        assert_eq!(
            path(&[(ENDPOINT_MEMORY_VAR, "/tmp/lessons.json")]),
            Some(PathBuf::from("/tmp/lessons.json"))
        );
        assert_eq!(path(&[]), None, "no HOME: no memory");
        let err = endpoint_memory_path(&env(&[(ENDPOINT_MEMORY_VAR, "lessons.json")]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(ENDPOINT_MEMORY_VAR) && err.contains("absolute"),
            "{err}"
        );
    }
}
