//! Shared harness for engine tests: temporary agents, a Supervisor with fast retries, and
//! helpers to drive a run with the in-process scripted model and read its files back.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use delta_actors::agent::{load_agent, ResolvedAgent};
use delta_actors::journal::{read_journal, Event, JournalEvent};
use delta_actors::llm::{RetryPolicy, Script};
use delta_actors::metadata::{read_metadata, RunMetadata};
use delta_actors::{
    LlmTarget, RunEvent, RunHandle, RunRequest, RunResult, RunStart, Supervisor, SupervisorConfig,
};
use tempfile::TempDir;

pub const DEFAULT_CONTEXT: &str = "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n";

/// A temporary agent folder with the given `tools:` YAML (indented list items) and extra
/// top-level keys.
pub struct TestAgent {
    pub dir: TempDir,
}

/// Writes an agent folder at `dir` (created if missing): `agent_yaml`, a one-line system
/// prompt and `context_yaml`, for tests whose agent must live at a given path (a plan's).
pub fn write_agent_at(dir: &Path, agent_yaml: &str, context_yaml: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("agent.yaml"), agent_yaml).unwrap();
    std::fs::write(dir.join("system_prompt.md"), "You are a test agent.\n").unwrap();
    std::fs::write(dir.join("context.yaml"), context_yaml).unwrap();
}

impl TestAgent {
    pub fn new(name: &str, extra_yaml: &str, tools_yaml: &str) -> TestAgent {
        let dir = tempfile::tempdir().unwrap();
        write_agent_at(
            dir.path(),
            &format!("name: {name}\nllm:\n  model: scripted\n{extra_yaml}tools:\n{tools_yaml}"),
            DEFAULT_CONTEXT,
        );
        TestAgent { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn load(&self) -> Arc<ResolvedAgent> {
        Arc::new(load_agent(self.dir.path()).unwrap())
    }
}

pub fn fast_config() -> SupervisorConfig {
    SupervisorConfig {
        arbiters: 2,
        journal_fsync: false,
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
        },
        ..SupervisorConfig::default()
    }
}

pub fn script(yaml: &str) -> Arc<Script> {
    Arc::new(Script::from_yaml_str(yaml, "test-script.yaml").unwrap())
}

pub fn test_env() -> Arc<BTreeMap<String, String>> {
    let mut env = BTreeMap::new();
    env.insert(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    );
    env.insert(
        "HOME".to_string(),
        std::env::var("HOME").unwrap_or_default(),
    );
    env.insert(
        "DELTA_API_KEY".to_string(),
        "sk-test-secret-never-in-children".to_string(),
    );
    Arc::new(env)
}

pub fn new_run(
    agent: Arc<ResolvedAgent>,
    work_dir: &Path,
    script: Arc<Script>,
    task: &str,
) -> RunRequest {
    let start = RunStart::New {
        task: task.to_string(),
    };
    RunRequest::new(agent, work_dir, start, LlmTarget::Scripted(script)).with_env(test_env())
}

pub fn continue_run(request: &RunRequest, run_id: &str, message: Option<&str>) -> RunRequest {
    let mut r = request.clone();
    r.run_id = Some(run_id.to_string());
    r.start = RunStart::Continue {
        message: message.map(str::to_string),
        force: false,
    };
    r
}

pub fn drive(supervisor: &Supervisor, request: RunRequest) -> RunResult {
    supervisor
        .submit_blocking(request)
        .unwrap()
        .wait_blocking()
        .unwrap()
}

/// Submits `request` and blocks until one of the supervisor's runs has started a tool: the
/// run is then mid-act, with a live process to interrupt or a lock to contend for.
pub fn submit_until_tool_started(supervisor: &Supervisor, request: RunRequest) -> RunHandle {
    let mut events = supervisor.subscribe();
    let handle = supervisor.submit_blocking(request).unwrap();
    loop {
        match events.blocking_recv() {
            Ok(RunEvent::ToolStarted { .. }) => return handle,
            Ok(_) => continue,
            Err(e) => panic!("event stream ended: {e}"),
        }
    }
}

pub fn run_dir(result: &RunResult) -> PathBuf {
    PathBuf::from(&result.metadata.run_dir)
}

pub fn journal(result: &RunResult) -> Vec<JournalEvent> {
    read_journal(&run_dir(result).join("journal.jsonl")).unwrap()
}

pub fn metadata(result: &RunResult) -> RunMetadata {
    read_metadata(&run_dir(result)).unwrap()
}

pub fn event_types(events: &[JournalEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            serde_json::to_value(&e.event).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

pub fn observations(events: &[JournalEvent]) -> Vec<String> {
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

/// Asserts the journal's seq numbers are strictly increasing from 1.
pub fn assert_seq_increasing(events: &[JournalEvent]) {
    for (i, w) in events.windows(2).enumerate() {
        assert!(
            w[1].seq > w[0].seq,
            "seq not increasing at {i}: {} then {}",
            w[0].seq,
            w[1].seq
        );
    }
}
