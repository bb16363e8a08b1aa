//! Agent definitions: what an `agent` worker runs (`command`, with `{delta}` and `{location}`
//! placeholders), what it adds to continue a conversation (`continue_args`), and the patterns
//! that mean it is asking the user something (matched against the rendered bottom rows of its
//! screen). Built-ins: `shell` (a plain bash) and `delta` (`delta run -i` on the session's
//! folder when it holds an agent, else on an agent folder it asks for, with the session folder
//! as workspace; then asks for the task); more come from `serve.yaml`. Parsing and validation
//! only.

use std::path::{Path, PathBuf};

use regex_lite::Regex;
use serde::{Deserialize, Serialize};

use super::error::ServeError;
use super::model::is_valid_id;

const MAX_AGENTS: usize = 100;
const MAX_PATTERNS: usize = 50;
const MAX_PATTERN_LEN: usize = 500;
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The shell every terminal worker runs (no rc files: a login shell costs ~175 ms).
pub fn terminal_command() -> Vec<String> {
    ["bash", "--noprofile", "--norc", "-i"]
        .map(String::from)
        .to_vec()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentDefinition {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub command: Vec<String>,
    #[serde(default, alias = "continue_args")]
    pub continue_args: Vec<String>,
    #[serde(default, alias = "asking_patterns")]
    pub asking_patterns: Vec<String>,
}

/// The agents a server knows, with their patterns compiled.
#[derive(Debug, Clone)]
pub struct AgentCatalog {
    agents: Vec<(AgentDefinition, Vec<Regex>)>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    agents: Vec<AgentDefinition>,
}

/// The built-in `delta` agent: runs the session folder when it holds an agent (its runs go
/// to the agent's `workspaces/W001`...); otherwise asks which agent folder to run (agents
/// found below are listed) and runs it with the session folder as workspace (`-w`). Either
/// way the runs are in a folder the runs view scans. Then asks for the task.
const DELTA_AGENT_SCRIPT: &str = r#"delta="$0"; folder="$1"
if [ -f "$folder/agent.yaml" ]; then
  agent="$folder"; set --
else
  echo "This folder holds no agent (no agent.yaml). Agents below it:"
  find "$folder" -mindepth 2 -maxdepth 3 -name agent.yaml -printf '  %h\n' 2>/dev/null | sort | head -20
  read -r -e -p "Agent folder to run: " agent || exit 1
  set -- -w "$folder"
fi
read -r -p "Task: " task && exec "$delta" run -i -y --agent "$agent" "$@" -m "$task""#;

fn builtins() -> Vec<AgentDefinition> {
    vec![
        AgentDefinition {
            id: "shell".into(),
            name: "Shell".into(),
            command: terminal_command(),
            continue_args: vec![],
            asking_patterns: vec![r"\[y/n\]\s*$".into(), r"\?\s*$".into()],
        },
        AgentDefinition {
            id: "delta".into(),
            name: "delta run -i".into(),
            // The session folder's agent, or asks which; then asks for the task. The paths
            // are positional arguments, never spliced into the script.
            command: vec![
                "bash".into(),
                "-c".into(),
                DELTA_AGENT_SCRIPT.into(),
                "{delta}".into(),
                "{location}".into(),
            ],
            continue_args: vec![],
            asking_patterns: vec![
                r"Task: *$".into(),
                r"Agent folder to run: *$".into(),
                r"\?\s*$".into(),
            ],
        },
    ]
}

impl AgentCatalog {
    /// The built-ins plus `config` (a `serve.yaml`); a definition with a built-in's id
    /// replaces it. A missing file is fine only when it was not named explicitly.
    pub fn load(config: Option<&Path>, explicit: bool) -> Result<AgentCatalog, ServeError> {
        let mut definitions = builtins();
        if let Some(path) = config {
            match std::fs::metadata(path) {
                Ok(meta) if meta.len() > MAX_CONFIG_BYTES => {
                    return Err(config_error(path, "larger than 1 MiB".into()))
                }
                Ok(_) => {
                    let text = crate::bounded_read::read_to_string(
                        path,
                        crate::bounded_read::Limit::bytes(MAX_CONFIG_BYTES),
                        crate::bounded_read::Links::Follow,
                    )
                    .map_err(|e| ServeError::io("cannot read", path, e.into()))?;
                    let file: ConfigFile = serde_yaml::from_str(&text)
                        .map_err(|e| config_error(path, format!("{e}; expected `agents: [{{id, command: [..], continue_args: [..], asking_patterns: [..]}}]`")))?;
                    for agent in file.agents {
                        definitions.retain(|d| d.id != agent.id);
                        definitions.push(agent);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {}
                Err(e) => return Err(ServeError::io("cannot read", path, e)),
            }
        }
        Self::from_definitions(definitions, config.unwrap_or(Path::new("serve.yaml")))
    }

    fn from_definitions(
        definitions: Vec<AgentDefinition>,
        origin: &Path,
    ) -> Result<AgentCatalog, ServeError> {
        if definitions.len() > MAX_AGENTS {
            return Err(config_error(
                origin,
                format!("more than {MAX_AGENTS} agents"),
            ));
        }
        let mut agents = Vec::new();
        for definition in definitions {
            let id = &definition.id;
            if !is_valid_id(id) {
                return Err(config_error(
                    origin,
                    format!("agent id `{id}`: use 1-64 letters, digits, `-` or `_`"),
                ));
            }
            if definition.command.is_empty() {
                return Err(config_error(
                    origin,
                    format!("agent `{id}`: `command` is empty; e.g. command: [claude]"),
                ));
            }
            if definition.asking_patterns.len() > MAX_PATTERNS {
                return Err(config_error(
                    origin,
                    format!("agent `{id}`: more than {MAX_PATTERNS} asking_patterns"),
                ));
            }
            let mut patterns = Vec::new();
            for pattern in &definition.asking_patterns {
                if pattern.len() > MAX_PATTERN_LEN {
                    return Err(config_error(origin, format!("agent `{id}`: an asking pattern is longer than {MAX_PATTERN_LEN} characters")));
                }
                let regex = Regex::new(&format!("(?m){pattern}")).map_err(|e| {
                    config_error(
                        origin,
                        format!("agent `{id}`: asking pattern `{pattern}`: {e}"),
                    )
                })?;
                patterns.push(regex);
            }
            agents.push((definition, patterns));
        }
        Ok(AgentCatalog { agents })
    }

    pub fn get(&self, id: &str) -> Option<&AgentDefinition> {
        self.agents.iter().map(|(d, _)| d).find(|d| d.id == id)
    }

    pub fn patterns(&self, id: &str) -> &[Regex] {
        self.agents
            .iter()
            .find(|(d, _)| d.id == id)
            .map(|(_, p)| p.as_slice())
            .unwrap_or(&[])
    }

    pub fn definitions(&self) -> impl Iterator<Item = &AgentDefinition> {
        self.agents.iter().map(|(d, _)| d)
    }
}

impl AgentDefinition {
    /// The argv to run in `location`, with the continue args when asked.
    pub fn argv(&self, delta_exe: &Path, location: &Path, continuing: bool) -> Vec<String> {
        let fill = |arg: &String| {
            arg.replace("{delta}", &delta_exe.to_string_lossy())
                .replace("{location}", &location.to_string_lossy())
        };
        let mut argv: Vec<String> = self.command.iter().map(fill).collect();
        if continuing {
            argv.extend(self.continue_args.iter().map(fill));
        }
        argv
    }
}

fn config_error(path: &Path, reason: String) -> ServeError {
    ServeError::Config {
        path: PathBuf::from(path),
        reason,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn builtins_exist_and_config_agents_are_added_or_replace_them() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("serve.yaml");
        std::fs::write(
            &path,
            "agents:\n  - id: fake\n    command: [python3, fake.py]\n    continue_args: [-c]\n    asking_patterns: ['Proceed\\?']\n",
        )
        .unwrap();
        let catalog = AgentCatalog::load(Some(&path), true).unwrap();
        assert!(catalog.get("shell").is_some());
        assert!(catalog.get("delta").is_some());
        let fake = catalog.get("fake").unwrap();
        assert_eq!(
            fake.argv(Path::new("/bin/delta"), Path::new("/w"), true),
            ["python3", "fake.py", "-c"]
        );
        assert!(catalog.patterns("fake")[0].is_match("x\nProceed? "));
        let delta = catalog.get("delta").unwrap();
        let argv = delta.argv(Path::new("/bin/delta"), Path::new("/w '\"x"), false);
        assert_eq!(argv[..2], ["bash", "-c"]);
        assert_eq!(argv[3..], ["/bin/delta", "/w '\"x"], "paths stay arguments");
    }

    #[test]
    fn bad_configs_name_the_file_and_the_agent() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("serve.yaml");
        for (content, expected) in [
            (
                "agents:\n  - id: a\n    command: []\n",
                "`command` is empty",
            ),
            ("agents:\n  - id: ../a\n    command: [x]\n", "agent id"),
            (
                "agents:\n  - id: a\n    command: [x]\n    asking_patterns: ['(']\n",
                "asking pattern",
            ),
            ("agents: 3\n", "expected `agents"),
        ] {
            std::fs::write(&path, content).unwrap();
            let err = AgentCatalog::load(Some(&path), true)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(expected) && err.contains("serve.yaml"),
                "{err}"
            );
        }
        let missing = tmp.path().join("missing.yaml");
        assert!(AgentCatalog::load(Some(&missing), false).is_ok());
        assert!(AgentCatalog::load(Some(&missing), true).is_err());
    }
}
