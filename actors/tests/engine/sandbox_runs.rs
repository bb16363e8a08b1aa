//! Runs of sandboxed agents through the Supervisor (issue 34): an agent's `sandbox:`, or
//! `DELTA_SANDBOX` in the run's environment, confines its tools; a refused write gets an
//! observation that says which rule refused it and how to allow it, and the audit record
//! names the policy; on a kernel without Landlock (simulated through
//! `SupervisorConfig::sandbox_support`) a required sandbox refuses to run and
//! `required: false` runs with a journal WARNING; an MCP server is confined like a tool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use delta_actors::journal::{Event, JournalEvent};
use delta_actors::sandbox::KernelSupport;
use delta_actors::{
    LlmTarget, RunErrorKind, RunRequest, RunStart, RunStatus, Supervisor, SupervisorConfig,
};
use serde_json::Value;

use crate::harness::{drive, fast_config, journal, run_dir, script, TestAgent};

const PLANTED_KEY: &str = "ssh-ed25519-PRIVATE-planted-for-a-run";

/// A home with an SSH key, a workspace and a folder outside it.
struct Places {
    root: tempfile::TempDir,
}

impl Places {
    fn new() -> Places {
        let places = Places {
            root: tempfile::tempdir().unwrap(),
        };
        for dir in ["home/.ssh", "ws", "outside", "tmp"] {
            std::fs::create_dir_all(places.path(dir)).unwrap();
        }
        std::fs::write(places.path("home/.ssh/id_ed25519"), PLANTED_KEY).unwrap();
        places
    }

    fn path(&self, rest: &str) -> PathBuf {
        std::fs::canonicalize(self.root.path()).unwrap().join(rest)
    }

    fn env(&self, sandbox_var: Option<&str>) -> Arc<BTreeMap<String, String>> {
        let mut env: BTreeMap<String, String> = [
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", self.path("home").display().to_string()),
            ("TMPDIR", self.path("tmp").display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if let Some(value) = sandbox_var {
            env.insert("DELTA_SANDBOX".into(), value.into());
        }
        Arc::new(env)
    }

    fn request(&self, agent: &TestAgent, steps: &str, sandbox_var: Option<&str>) -> RunRequest {
        let start = RunStart::New { task: "t".into() };
        RunRequest::new(
            agent.load(),
            self.path("ws"),
            start,
            LlmTarget::Scripted(script(steps)),
        )
        .with_env(self.env(sandbox_var))
    }
}

fn observations(events: &[JournalEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ActionResult {
                observation_content,
                ..
            } => Some(observation_content.clone()),
            _ => None,
        })
        .collect()
}

fn warnings(events: &[JournalEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

fn tool_records(result: &delta_actors::RunResult) -> Vec<Value> {
    let dir = run_dir(result).join("io/tool_executions");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

const WRITE_TOOL: &str = "  - name: put\n    exec: \"touch ${path}\"\n";

fn write_steps(path: &Path) -> String {
    format!(
        "steps:\n  - tool: put\n    args: {{ path: \"{}\" }}\n  - answer: done\n",
        path.display()
    )
}

#[test]
fn a_refused_write_is_explained_and_the_record_names_the_policy() {
    let places = Places::new();
    let agent = TestAgent::new("confined", "sandbox: {}\n", WRITE_TOOL);
    let target = places.path("outside/x");
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(&sup, places.request(&agent, &write_steps(&target), None));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert!(!target.exists(), "the sandbox let the write through");
    let observation = observations(&journal(&result)).remove(0);
    assert!(observation.contains("Permission denied"), "{observation}");
    assert!(
        observation.contains(&format!(
            "[sandbox] `{}` is outside where",
            target.display()
        )),
        "{observation}"
    );
    assert!(
        observation.contains(&format!(
            "`sandbox.allow_write` in {}",
            agent
                .path()
                .canonicalize()
                .unwrap()
                .join("agent.yaml")
                .display()
        )),
        "{observation}"
    );
    let record = tool_records(&result).remove(0);
    let sandbox = &record["sandbox"];
    assert_eq!(sandbox["filesystem"], "workspace-write", "{record}");
    assert_eq!(sandbox["network"], "off");
    assert_eq!(
        sandbox["writable"][0],
        places.path("ws").display().to_string()
    );
    assert!(sandbox["hidden"]
        .as_array()
        .unwrap()
        .contains(&Value::from(places.path("home/.ssh").display().to_string())));
    // Unconfined, the same run writes, and its record says so.
    let free = TestAgent::new("free", "", WRITE_TOOL);
    let result = drive(&sup, places.request(&free, &write_steps(&target), None));
    assert!(target.exists(), "{result:?}");
    assert_eq!(tool_records(&result).remove(0)["sandbox"], Value::Null);
    sup.shutdown();
}

fn no_landlock() -> SupervisorConfig {
    SupervisorConfig {
        sandbox_support: Some(KernelSupport {
            landlock_abi: 0,
            ..KernelSupport::probed()
        }),
        ..fast_config()
    }
}

#[test]
fn a_required_sandbox_refuses_to_run_on_a_kernel_without_landlock() {
    let places = Places::new();
    let agent = TestAgent::new("strict", "sandbox: {}\n", WRITE_TOOL);
    let marker = places.path("ws/ran");
    let sup = Supervisor::start(no_landlock()).unwrap();
    let result = drive(&sup, places.request(&agent, &write_steps(&marker), None));
    assert_eq!(result.status, RunStatus::Failed, "{result:?}");
    let error = result.error.clone().unwrap();
    assert_eq!(error.kind, RunErrorKind::SetupError);
    assert!(
        error
            .message
            .contains("this kernel cannot enforce: Landlock"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("`sandbox.required: false` in"),
        "{}",
        error.message
    );
    assert!(!marker.exists(), "no tool may run unsandboxed");
    assert!(observations(&journal(&result)).is_empty());
    sup.shutdown();
}

#[test]
fn required_false_runs_with_a_journal_warning_on_a_kernel_without_landlock() {
    let places = Places::new();
    let agent = TestAgent::new("lenient", "sandbox: {required: false}\n", WRITE_TOOL);
    let marker = places.path("ws/ran");
    let sup = Supervisor::start(no_landlock()).unwrap();
    let result = drive(&sup, places.request(&agent, &write_steps(&marker), None));
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert!(marker.exists());
    let warnings = warnings(&journal(&result));
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("NOT fully sandboxed") && w.contains("Landlock")),
        "{warnings:?}"
    );
    let record = tool_records(&result).remove(0);
    assert_eq!(record["sandbox"]["enforced"]["landlock_abi"], 0, "{record}");
    sup.shutdown();
}

const READ_KEY_TOOL: &str = "  - name: peek\n    shell: \"cat $HOME/.ssh/id_ed25519\"\n";
const READ_KEY_STEPS: &str = "steps:\n  - tool: peek\n  - answer: done\n";

#[test]
fn delta_sandbox_in_the_run_environment_confines_an_agent_without_the_key() {
    let places = Places::new();
    let agent = TestAgent::new("by-env", "", READ_KEY_TOOL);
    let sup = Supervisor::start(fast_config()).unwrap();
    let free = drive(&sup, places.request(&agent, READ_KEY_STEPS, None));
    assert!(
        observations(&journal(&free))[0].contains(PLANTED_KEY),
        "{free:?}"
    );
    let confined = drive(
        &sup,
        places.request(&agent, READ_KEY_STEPS, Some("workspace-write")),
    );
    let observation = observations(&journal(&confined)).remove(0);
    assert!(!observation.contains(PLANTED_KEY), "{observation}");
    assert!(
        observation.contains("hidden from this agent's tools by the `default` entry"),
        "{observation}"
    );
    assert!(observation.contains("from DELTA_SANDBOX"), "{observation}");
    sup.shutdown();
}

#[test]
fn a_bad_delta_sandbox_fails_the_run_naming_the_variable() {
    let places = Places::new();
    let agent = TestAgent::new("bad-env", "", READ_KEY_TOOL);
    let sup = Supervisor::start(fast_config()).unwrap();
    let result = drive(
        &sup,
        places.request(&agent, READ_KEY_STEPS, Some("everything")),
    );
    assert_eq!(result.status, RunStatus::Failed);
    let message = result.error.unwrap().message;
    assert!(
        message.contains("DELTA_SANDBOX=\"everything\""),
        "{message}"
    );
    assert!(message.contains("hint:"), "{message}");
    sup.shutdown();
}

/// The python interpreter itself (not a version manager's shim, which may need more of
/// the home folder than a test gives it).
#[cfg(feature = "mcp")]
fn python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[cfg(feature = "mcp")]
#[test]
fn an_mcp_server_is_confined_like_a_tool() {
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::Duration;

    let places = Places::new();
    let server = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/mcp/hostile-server.py")
        .canonicalize()
        .unwrap();
    let mcp = format!(
        "mcp:\n  hostile:\n    command: {}\n    args: [\"{}\"]\n",
        python(),
        server.display()
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let target = places.path("outside/from-mcp");
    let steps = format!(
        "steps:\n  - tool: hostile__probe\n    args: {{ write: \"{}\", read: \"{}\", port: {port} }}\n  - answer: done\n",
        target.display(),
        places.path("home/.ssh/id_ed25519").display()
    );
    let connected = || {
        let mut got = String::new();
        if let Ok((mut stream, _)) = listener.accept() {
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let _ = stream.read_to_string(&mut got);
        }
        got.contains("exfiltrated")
    };
    let sup = Supervisor::start(fast_config()).unwrap();
    let report = |agent: &TestAgent| -> Value {
        let result = drive(&sup, places.request(agent, &steps, None));
        assert_eq!(result.status, RunStatus::Completed, "{result:?}");
        let observation = observations(&journal(&result)).remove(0);
        let json = observation.trim_start_matches(|c| c != '{');
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {observation}"))
    };
    let free = report(&TestAgent::new("mcp-free", &mcp, ""));
    assert_eq!(free["write"], "ok", "{free}");
    assert_eq!(free["read"], PLANTED_KEY, "{free}");
    assert_eq!(free["connect"], "ok", "{free}");
    assert!(target.exists() && connected());
    std::fs::remove_file(&target).unwrap();
    let confined = report(&TestAgent::new(
        "mcp-confined",
        &format!("sandbox: {{}}\n{mcp}"),
        "",
    ));
    for attack in ["write", "read", "connect"] {
        assert!(
            confined[attack].as_str().unwrap().starts_with("error:"),
            "{attack}: {confined}"
        );
    }
    assert!(!target.exists() && !connected());
    sup.shutdown();
}
