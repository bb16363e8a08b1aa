//! Shared fixtures for the CLI tests: a temporary root holding an agent folder and a
//! workspace, a hermetic `delta` command (cleared environment, only PATH/HOME and the model
//! endpoint), a `delta mock-llm` child serving a script over HTTP, and readers for the
//! files a run leaves behind. It must not assert behaviour itself: the test files do.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// Every `delta` command a test runs is killed after this long (no hangs).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

pub const CONTEXT_YAML: &str = "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n";

pub fn delta_exe() -> PathBuf {
    assert_cmd::cargo::cargo_bin("delta")
}

/// A running `delta mock-llm --script FILE --port 0`; killed on drop.
pub struct MockLlm {
    child: Child,
    /// `http://127.0.0.1:PORT/v1`, read from the server's first stdout line.
    pub base_url: String,
}

impl MockLlm {
    pub fn start(script: &Path) -> MockLlm {
        let mut child = std::process::Command::new(delta_exe())
            .args(["mock-llm", "--port", "0", "--script"])
            .arg(script)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn delta mock-llm");
        let stdout = child.stdout.take().expect("mock-llm stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20));
        let base_url = match line {
            Ok(line) if line.starts_with("http://127.0.0.1:") => line.trim().to_string(),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("delta mock-llm did not print its base URL: {other:?}");
            }
        };
        MockLlm { child, base_url }
    }

    fn authority(&self) -> String {
        self.base_url
            .trim_start_matches("http://")
            .trim_end_matches("/v1")
            .to_string()
    }

    /// `GET /v1/stats` as JSON (plain HTTP/1.1 over a socket: no client library needed).
    pub fn stats(&self) -> Value {
        let authority = self.authority();
        let mut stream = TcpStream::connect(&authority).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET /v1/stats HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        serde_json::from_str(body).unwrap_or_else(|e| panic!("stats body {body:?}: {e}"))
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The result of one finished `delta` command.
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    fn from(output: std::process::Output) -> Outcome {
        Outcome {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// stdout parsed as the JSON RunResult (`--format json`).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    pub fn assert_code(&self, code: i32) -> &Outcome {
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// A temporary root with `agent/` (an agent named `name`), `ws/` (the workspace),
/// `home/` and `script.json`, plus a mock-llm serving that script.
pub struct Case {
    pub root: TempDir,
    pub mock: MockLlm,
}

impl Case {
    /// `agent_body` is the YAML after `name:`/`llm:` (typically `tools:` and options);
    /// `script` is the scripted model's script (JSON is valid YAML).
    pub fn new(name: &str, agent_body: &str, script: &Value) -> Case {
        let root = tempfile::tempdir().unwrap();
        write_agent(&root.path().join("agent"), name, agent_body);
        std::fs::create_dir_all(root.path().join("ws")).unwrap();
        std::fs::create_dir_all(root.path().join("home")).unwrap();
        let script_path = root.path().join("script.json");
        std::fs::write(&script_path, serde_json::to_vec_pretty(script).unwrap()).unwrap();
        let mock = MockLlm::start(&script_path);
        Case { root, mock }
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    pub fn agent_dir(&self) -> PathBuf {
        self.path().join("agent")
    }

    pub fn work_dir(&self) -> PathBuf {
        self.path().join("ws")
    }

    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.work_dir().join(".delta").join(run_id)
    }

    /// The hermetic environment every `delta` child gets.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            (
                "HOME".into(),
                self.path().join("home").display().to_string(),
            ),
            ("DELTA_BASE_URL".into(), self.mock.base_url.clone()),
            ("DELTA_API_KEY".into(), "sk-cli-test".into()),
            ("DELTA_RETRY_BASE_MS".into(), "5".into()),
        ]
    }

    /// `delta` with the hermetic environment, cwd = the root, a timeout.
    pub fn cmd(&self) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::cargo_bin("delta").unwrap();
        cmd.env_clear()
            .envs(self.env())
            .current_dir(self.path())
            .timeout(COMMAND_TIMEOUT);
        cmd
    }

    /// Same as [`Case::cmd`] for children the test signals or kills itself.
    pub fn spawn_cmd(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(delta_exe());
        cmd.env_clear()
            .envs(self.env())
            .current_dir(self.path())
            .stdin(Stdio::null());
        cmd
    }

    /// `delta run --run-id ID -m TASK --format json` started from `cmd` (a [`Case::spawn_cmd`],
    /// maybe adjusted) in the background: stdout piped for the RunResult, stderr discarded.
    pub fn spawn_json_run(
        &self,
        mut cmd: std::process::Command,
        run_id: &str,
        task: &str,
    ) -> Child {
        cmd.args(self.run_args(run_id, task))
            .args(["--format", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub fn run_args(&self, run_id: &str, task: &str) -> Vec<String> {
        vec![
            "run".into(),
            "--agent".into(),
            self.agent_dir().display().to_string(),
            "-w".into(),
            self.work_dir().display().to_string(),
            "--run-id".into(),
            run_id.into(),
            "-m".into(),
            task.into(),
        ]
    }

    /// `delta run --run-id ID -m TASK --format json` plus `extra` flags.
    pub fn run(&self, run_id: &str, task: &str, extra: &[&str]) -> Outcome {
        let output = self
            .cmd()
            .args(self.run_args(run_id, task))
            .args(["--format", "json"])
            .args(extra)
            .output()
            .unwrap();
        Outcome::from(output)
    }

    pub fn continue_args(&self, run_id: &str) -> Vec<String> {
        vec![
            "continue".into(),
            "--run-id".into(),
            run_id.into(),
            "-w".into(),
            self.work_dir().display().to_string(),
        ]
    }

    /// `delta continue --run-id ID -w WS --format json` plus `extra` flags.
    pub fn continue_run(&self, run_id: &str, extra: &[&str]) -> Outcome {
        let output = self
            .cmd()
            .args(self.continue_args(run_id))
            .args(["--format", "json"])
            .args(extra)
            .output()
            .unwrap();
        Outcome::from(output)
    }

    /// Any other `delta` invocation.
    pub fn delta(&self, args: &[&str]) -> Outcome {
        Outcome::from(self.cmd().args(args).output().unwrap())
    }

    pub fn journal(&self, run_id: &str) -> Vec<Value> {
        read_journal(&self.run_dir(run_id).join("journal.jsonl"))
    }

    pub fn metadata(&self, run_id: &str) -> Value {
        read_json(&self.run_dir(run_id).join("metadata.json"))
    }
}

/// Writes an agent folder: agent.yaml (`name`, a model, then `body`), a system prompt and a
/// context.yaml with the system prompt and the journal.
pub fn write_agent(dir: &Path, name: &str, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        format!("name: {name}\nllm:\n  model: scripted\n{body}"),
    )
    .unwrap();
    std::fs::write(dir.join("system_prompt.md"), "You are a CLI test agent.\n").unwrap();
    std::fs::write(dir.join("context.yaml"), CONTEXT_YAML).unwrap();
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

/// Every line of a journal as JSON; panics naming the line when one does not parse.
pub fn read_journal(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{} line {}: {e}: {line}", path.display(), i + 1))
        })
        .collect()
}

pub fn events_of<'a>(journal: &'a [Value], kind: &str) -> Vec<&'a Value> {
    journal.iter().filter(|e| e["type"] == kind).collect()
}

pub fn types(journal: &[Value]) -> Vec<String> {
    journal
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Observations of the ACTION_RESULT events, in journal order.
pub fn observations(journal: &[Value]) -> Vec<String> {
    events_of(journal, "ACTION_RESULT")
        .iter()
        .map(|e| e["observation_content"].as_str().unwrap_or("").to_string())
        .collect()
}

pub fn assert_seq_strictly_increasing(journal: &[Value]) {
    let seqs: Vec<u64> = journal.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    for pair in seqs.windows(2) {
        assert!(pair[1] > pair[0], "seq not strictly increasing: {seqs:?}");
    }
}

/// True while `pid` exists and is not a zombie (state `Z` in /proc/<pid>/stat).
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // The state follows the parenthesised command name, which may contain spaces.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
    }
}

/// Polls `condition` every 10 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads a pid a tool wrote to `path`, waiting (bounded) for the file to be complete.
pub fn wait_for_pid_file(path: &Path, limit: Duration) -> i32 {
    let mut pid = None;
    let found = wait_until(limit, || {
        pid = std::fs::read_to_string(path)
            .ok()
            .filter(|t| t.ends_with('\n'))
            .and_then(|t| t.trim().parse::<i32>().ok());
        pid.is_some()
    });
    assert!(found, "no pid in {} after {limit:?}", path.display());
    pid.unwrap_or_default()
}

/// Waits (bounded) for a child to exit; kills it and panics when it does not.
pub fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let mut status = None;
    let exited = wait_until(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("child {} did not exit within {limit:?}", child.id());
    }
    status.unwrap()
}

/// Waits (bounded) for a child whose stdout/stderr are piped, then collects them. The
/// outputs must fit in the pipe buffers (a RunResult and progress lines do).
pub fn wait_output(mut child: Child, limit: Duration) -> Outcome {
    let status = wait_child(&mut child, limit);
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout).unwrap();
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr).unwrap();
    }
    Outcome {
        code: status.code().unwrap_or(-1),
        stdout,
        stderr,
    }
}

/// Kills one process (cleanup of a test's own leftovers).
pub fn kill_pid(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Kills a whole process group: cleanup of a tool a test may have left running (an engine
/// SIGKILLed by a test takes its tools with it, through its tool spawner).
pub fn kill_group(pgid: i32) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

pub fn send_signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Copies a directory tree (fixtures are copied before a command may change them).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
