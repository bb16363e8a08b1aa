//! The bench workload on disk and in memory: a temporary agent whose one tool runs `--tool`,
//! the scripted-model YAML for K calls at `--latency-ms L[±J]`, the per-run work directories
//! and the `RunRequest`s. It must not measure anything or talk to the engine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use delta_actors::agent::{load_agent, ResolvedAgent};
use delta_actors::{LlmTarget, RunRequest, RunStart};

use super::LoadArgs;
use crate::error::CliError;

/// The name of the bench agent's single tool.
pub const TOOL_NAME: &str = "work";
const AGENT_NAME: &str = "bench";
pub(crate) const CONTEXT_YAML: &str = "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n";

/// `--latency-ms`: a fixed latency or a uniform jitter around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySpec {
    pub base_ms: u64,
    pub jitter_ms: u64,
}

impl LatencySpec {
    /// Parses `200`, `200±50` or `200+-50`.
    pub fn parse(text: &str) -> Result<LatencySpec, String> {
        let hint = || {
            format!("invalid --latency-ms '{text}': expected milliseconds like 200 or 200±50 (or 200+-50)")
        };
        let number = |s: &str| s.trim().parse::<u64>().map_err(|_| hint());
        let (base, jitter) = match text.split_once('±').or_else(|| text.split_once("+-")) {
            Some((base, jitter)) => (number(base)?, number(jitter)?),
            None => (number(text)?, 0),
        };
        if jitter > base {
            return Err(format!(
                "invalid --latency-ms '{text}': the jitter ({jitter}) cannot exceed the latency ({base})"
            ));
        }
        Ok(LatencySpec {
            base_ms: base,
            jitter_ms: jitter,
        })
    }

    pub fn mean_ms(&self) -> f64 {
        self.base_ms as f64
    }

    /// The script's `default_latency` value.
    fn script_value(&self) -> String {
        if self.jitter_ms == 0 {
            self.base_ms.to_string()
        } else {
            format!("\"{}±{}\"", self.base_ms, self.jitter_ms)
        }
    }
}

/// The scripted model's YAML: `calls - 1` tool calls, then a final answer.
pub fn script_yaml(calls: u32, latency: LatencySpec) -> String {
    let mut yaml = format!("default_latency: {}\nsteps:\n", latency.script_value());
    for _ in 1..calls {
        yaml.push_str(&format!("  - tool: {TOOL_NAME}\n"));
    }
    yaml.push_str("  - answer: \"bench run done\"\n");
    yaml
}

/// The agent.yaml text for the bench agent.
pub fn agent_yaml(model: &str, tool_command: &str, calls: u32) -> Result<String, CliError> {
    let doc = serde_json::json!({
        "name": AGENT_NAME,
        "llm": { "model": model },
        "max_iterations": calls + 2,
        "tools": [{ "name": TOOL_NAME, "exec": tool_command, "description": "bench work" }],
    });
    serde_yaml::to_string(&doc)
        .map_err(|e| CliError::Runtime(format!("cannot write the bench agent.yaml: {e}")))
}

/// Files and settings shared by every measured point.
pub struct Workload {
    pub root: PathBuf,
    root_is_temporary: bool,
    pub agent_dir: PathBuf,
    pub agent: Arc<ResolvedAgent>,
    pub script_yaml: String,
    /// The tool's argv as the engine compiled it (for the spawn-rate calibration).
    pub tool_argv: Vec<String>,
    pub calls: u32,
    pub env: Arc<BTreeMap<String, String>>,
}

impl Workload {
    pub fn create(args: &LoadArgs) -> Result<Workload, CliError> {
        let (root, root_is_temporary) = match &args.work_dir {
            Some(dir) => (dir.clone(), false),
            None => (
                std::env::temp_dir().join(format!("delta-bench-{}", uuid::Uuid::new_v4().simple())),
                true,
            ),
        };
        let io = |path: &Path, e: std::io::Error| {
            CliError::Config(format!(
                "cannot prepare the bench directory {}: {e} (hint: choose another --work-dir)",
                path.display()
            ))
        };
        let agent_dir = root.join("agent");
        std::fs::create_dir_all(&agent_dir).map_err(|e| io(&agent_dir, e))?;
        let write = |name: &str, text: &str| {
            let path = agent_dir.join(name);
            std::fs::write(&path, text).map_err(|e| io(&path, e))
        };
        write(
            "agent.yaml",
            &agent_yaml(&args.model, &args.tool, args.calls)?,
        )?;
        write(
            "system_prompt.md",
            "You are the delta load-benchmark agent.\n",
        )?;
        write("context.yaml", CONTEXT_YAML)?;
        let agent = load_agent(&agent_dir).map_err(|e| {
            CliError::Config(format!(
                "--tool '{}' does not make a valid tool: {e}",
                args.tool
            ))
        })?;
        let tool_argv = agent
            .tool(TOOL_NAME)
            .map(|t| t.command.clone())
            .unwrap_or_default();
        if tool_argv.iter().any(|a| a.contains("${")) {
            return Err(CliError::Usage(format!(
                "--tool '{}' has parameters; the bench tool is called without arguments, so give a plain command",
                args.tool
            )));
        }
        let mut env = BTreeMap::new();
        // DELTA_SANDBOX: the bench agent has no `sandbox:`, so this sandboxes every tool
        // (docs/sandbox.md).
        for key in ["PATH", "HOME", "DELTA_SANDBOX"] {
            if let Ok(value) = std::env::var(key) {
                env.insert(key.to_string(), value);
            }
        }
        if env.contains_key("DELTA_SANDBOX") {
            // The sandbox keeps a temporary folder per workspace under TMPDIR: inside the
            // bench's folder, they go with it.
            let tmp = root.join("tmp");
            std::fs::create_dir_all(&tmp).map_err(|e| io(&tmp, e))?;
            env.insert("TMPDIR".into(), tmp.display().to_string());
        }
        Ok(Workload {
            root,
            root_is_temporary,
            agent_dir,
            agent: Arc::new(agent),
            script_yaml: script_yaml(args.calls, args.latency_ms),
            tool_argv,
            calls: args.calls,
            env: Arc::new(env),
        })
    }

    /// `calibration/`: where the spawn-rate calibration runs the tool.
    pub fn calibration_dir(&self) -> Result<PathBuf, CliError> {
        let dir = self.root.join("calibration");
        std::fs::create_dir_all(&dir).map_err(|e| {
            CliError::Runtime(format!(
                "cannot create {}: {e} (hint: is the disk full?)",
                dir.display()
            ))
        })?;
        Ok(dir)
    }

    /// One work directory per run, under `p<point>/`.
    pub fn run_dirs(&self, label: &str, runs: usize) -> Result<Vec<PathBuf>, CliError> {
        (0..runs)
            .map(|i| {
                let dir = self.root.join(label).join(format!("r{i:05}"));
                std::fs::create_dir_all(&dir).map_err(|e| {
                    CliError::Runtime(format!(
                        "cannot create run directory {}: {e} (hint: is the disk full?)",
                        dir.display()
                    ))
                })?;
                Ok(dir)
            })
            .collect()
    }

    /// The requests of one measured point, each in its own work directory.
    pub fn requests(
        &self,
        point: usize,
        runs: usize,
        target: &LlmTarget,
    ) -> Result<Vec<RunRequest>, CliError> {
        let dirs = self.run_dirs(&format!("p{point}"), runs)?;
        Ok(dirs
            .into_iter()
            .enumerate()
            .map(|(i, work_dir)| {
                let start = RunStart::New {
                    task: format!("bench task {i}"),
                };
                RunRequest::new(Arc::clone(&self.agent), work_dir, start, target.clone())
                    .with_run_id(format!("bench-{i:05}"))
                    .with_env(Arc::clone(&self.env))
            })
            .collect())
    }

    /// Removes a temporary root unless `keep`; reports where kept files are.
    pub fn finish(&self, keep: bool) -> Result<(), CliError> {
        if keep || !self.root_is_temporary {
            crate::notice!("bench files kept in {}", self.root.display());
            return Ok(());
        }
        std::fs::remove_dir_all(&self.root).map_err(|e| {
            CliError::Runtime(format!(
                "cannot remove the bench directory {}: {e}",
                self.root.display()
            ))
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use delta_actors::llm::Script;

    #[test]
    fn latency_forms_parse() {
        assert_eq!(
            LatencySpec::parse("200").unwrap(),
            LatencySpec {
                base_ms: 200,
                jitter_ms: 0
            }
        );
        for text in ["200±50", "200+-50", " 200 ± 50 "] {
            assert_eq!(
                LatencySpec::parse(text).unwrap(),
                LatencySpec {
                    base_ms: 200,
                    jitter_ms: 50
                },
                "{text}"
            );
        }
        let err = LatencySpec::parse("fast").unwrap_err();
        assert!(err.contains("--latency-ms 'fast'") && err.contains("200±50"));
        assert!(LatencySpec::parse("10±20").unwrap_err().contains("jitter"));
    }

    #[test]
    fn generated_script_makes_k_calls_and_loads() {
        let yaml = script_yaml(6, LatencySpec::parse("20±5").unwrap());
        assert_eq!(yaml.matches("tool: work").count(), 5);
        assert!(yaml.contains("answer:"));
        Script::from_yaml_str(&yaml, "gen.yaml").unwrap();
        let single = script_yaml(1, LatencySpec::parse("0").unwrap());
        assert_eq!(single.matches("tool:").count(), 0);
        Script::from_yaml_str(&single, "gen.yaml").unwrap();
    }

    #[test]
    fn agent_yaml_quotes_the_tool_command() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = agent_yaml("m", "sh -c 'exit 0'", 3).unwrap();
        std::fs::write(dir.path().join("agent.yaml"), yaml).unwrap();
        std::fs::write(dir.path().join("system_prompt.md"), "x").unwrap();
        std::fs::write(dir.path().join("context.yaml"), CONTEXT_YAML).unwrap();
        let agent = load_agent(dir.path()).unwrap();
        let tool = agent.tool(TOOL_NAME).unwrap();
        assert_eq!(tool.command[0], "sh");
        assert_eq!(agent.max_iterations, Some(5));
    }
}
