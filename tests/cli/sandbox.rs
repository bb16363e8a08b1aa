//! The sandbox through the `delta` binary (issue 34): every example agent and every `delta
//! init` template runs sandboxed with the same results as unconfined; as root, a sandboxed
//! tool cannot read the provider key from any process's `/proc/<pid>/environ` (an
//! unconfined one can: the non-dumpable flag does not stop root); a setuid-root helper gives
//! a user's sandboxed tool nothing; a plan's `sandbox:` confines its agents; `delta run` says
//! once when an agent's tools are not sandboxed; a bad `DELTA_SANDBOX` is a configuration
//! error. The hostile-tool suite itself is at the engine level (`sandbox.rs` there).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{copy_dir, delta_exe, read_journal};

const LIMIT: Duration = Duration::from_secs(60);
const PROVIDER_KEY: &str = "sk-provider-key-in-delta-environment";

/// A root with `home/` (HOME), `tmp/` (TMPDIR) and room for agents and workspaces.
struct Root {
    dir: tempfile::TempDir,
}

struct Ran {
    code: i32,
    stderr: String,
    results: Vec<Value>,
}

impl Root {
    fn new() -> Root {
        let root = Root {
            dir: tempfile::tempdir().unwrap(),
        };
        for dir in ["home", "tmp"] {
            std::fs::create_dir_all(root.path(dir)).unwrap();
        }
        root
    }

    fn path(&self, rest: &str) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap().join(rest)
    }

    fn command(&self, env: &[(&str, &str)]) -> std::process::Command {
        let mut cmd = std::process::Command::new(delta_exe());
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("TMPDIR", self.path("tmp"))
            .env("DELTA_API_KEY", PROVIDER_KEY)
            .envs(env.iter().copied())
            .current_dir(self.path(""))
            .stdin(std::process::Stdio::null());
        cmd
    }

    /// `delta run` of `agent` in a fresh workspace `ws` with the steps of `script`.
    fn run(&self, agent: &Path, ws: &str, script: &Value, env: &[(&str, &str)]) -> Ran {
        self.run_with(self.command(env), agent, ws, script)
    }

    fn run_with(
        &self,
        mut cmd: std::process::Command,
        agent: &Path,
        ws: &str,
        script: &Value,
    ) -> Ran {
        let script_file = self.path(&format!("{ws}.script.json"));
        std::fs::write(&script_file, serde_json::to_vec(script).unwrap()).unwrap();
        let work = self.path(ws);
        let child = cmd
            .args(["run", "--agent"])
            .arg(agent)
            .arg("-w")
            .arg(&work)
            .args([
                "--run-id",
                "r",
                "-m",
                "go",
                "-y",
                "--format",
                "json",
                "--llm-script",
            ])
            .arg(&script_file)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let output = wait_with_limit(child);
        let journal_file = work.join(".delta/r/journal.jsonl");
        let journal = if journal_file.exists() {
            read_journal(&journal_file)
        } else {
            Vec::new()
        };
        Ran {
            code: output.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            results: journal
                .into_iter()
                .filter(|e| e["type"] == "ACTION_RESULT")
                .collect(),
        }
    }
}

fn wait_with_limit(mut child: std::process::Child) -> std::process::Output {
    let deadline = Instant::now() + LIMIT;
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "delta did not end within {LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A script calling each `(tool, args)` in turn, then answering.
fn script(calls: &[(&str, Value)]) -> Value {
    let mut steps: Vec<Value> = calls
        .iter()
        .map(|(tool, args)| json!({ "tool": tool, "args": args }))
        .collect();
    steps.push(json!({ "answer": "done" }));
    json!({ "steps": steps })
}

/// The agent folder without its `sandbox:` (the same agent, unconfined).
fn unconfined_copy(agent: &Path, to: &Path) {
    copy_dir(agent, to);
    let file = to.join("agent.yaml");
    let mut doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(
        doc.as_mapping_mut().unwrap().remove("sandbox").is_some(),
        "{} ships without `sandbox:`",
        agent.display()
    );
    std::fs::write(&file, serde_yaml::to_string(&doc).unwrap()).unwrap();
}

/// An observation with what legitimately differs removed: the hidden `.delta` folder's own
/// line in a listing (and the listing's block total), the parent folder's line (the test
/// makes folders beside the workspace), clock times, durations and session ids.
fn comparable(observation: &str) -> String {
    observation
        .lines()
        .filter(|line| {
            !line.contains(".delta")
                && !line.starts_with("total ")
                && !line.ends_with(" ..")
                && !line.contains("execution_time_ms")
        })
        .map(|line| {
            line.split_whitespace()
                .map(|word| {
                    if word.contains("sess_") {
                        "SESSION"
                    } else if word.contains(':') && word.chars().any(|c| c.is_ascii_digit()) {
                        "TIME"
                    } else {
                        word
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A local HTTP server answering every request `{"ok": true}`, for api-tester's curl tools.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64).flatten() {
            let mut stream = stream;
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let body = "{\"ok\": true}\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// Each agent shipped with delta and a script that calls every tool it has.
fn shipped_agents(root: &Root) -> Vec<(String, PathBuf, Value)> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let port = http_server();
    let url = format!("http://127.0.0.1:{port}/items");
    let session = "sess_{{ (last_observation | split('sess_') | list | last)[:12] }}";
    let hello = vec![
        ("print_message", json!({ "message": "hi" })),
        ("create_file", json!({ "filename": "a.txt" })),
        (
            "write_to_file",
            json!({ "filename": "b.txt", "content": "text\n" }),
        ),
        ("list_files", json!({ "directory": "." })),
        ("show_date", json!({})),
    ];
    let mut agents = Vec::new();
    let templates: [(&str, Vec<(&str, Value)>); 5] = [
        (
            "minimal",
            vec![
                ("echo", json!({ "message": "hi" })),
                (
                    "write_to_file",
                    json!({ "filename": "n.txt", "content": "x\n" }),
                ),
            ],
        ),
        ("hello-world", hello.clone()),
        (
            "file-ops",
            vec![
                ("create_directory", json!({ "dirname": "d/e" })),
                (
                    "write_to_file",
                    json!({ "filename": "d/a.txt", "content": "hello\n" }),
                ),
                (
                    "copy_file",
                    json!({ "source": "d/a.txt", "destination": "b.txt" }),
                ),
                (
                    "move_file",
                    json!({ "source": "b.txt", "destination": "c.txt" }),
                ),
                ("find_files", json!({ "pattern": "*.txt" })),
                ("check_file_size", json!({ "path": "c.txt" })),
                ("list_files", json!({ "directory": "d" })),
            ],
        ),
        (
            "api-tester",
            vec![
                ("curl_get", json!({ "url": url })),
                ("curl_post", json!({ "url": url, "data": "{\"a\": 1}" })),
                ("curl_put", json!({ "url": url, "data": "{\"a\": 2}" })),
                ("curl_delete", json!({ "url": url })),
                ("check_status", json!({ "url": url })),
                ("format_json", json!({ "json_data": "{\"a\": 1}" })),
                (
                    "save_response",
                    json!({ "filename": "r.json", "content": "{}\n" }),
                ),
            ],
        ),
        // Each exec echoes the session id, so the next call finds it in the last observation.
        (
            "bash-session",
            vec![
                ("session_start", json!({})),
                (
                    "session_exec",
                    json!({ "session_id": session, "command": format!("mkdir -p s && cd s && export N=4; echo $N; echo {session}") }),
                ),
                (
                    "session_exec",
                    json!({ "session_id": session, "command": format!("echo $N; pwd | sed 's/.*\\///'; echo {session}") }),
                ),
                ("session_end", json!({ "session_id": session })),
            ],
        ),
    ];
    for (template, calls) in templates {
        let dir = root.path(&format!("t-{template}"));
        let out = root
            .command(&[])
            .args(["init"])
            .arg(&dir)
            .args(["-t", template])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        agents.push((format!("template {template}"), dir, script(&calls)));
    }
    agents.push((
        "example hello-world".into(),
        repo.join("examples/agents/hello-world"),
        script(&hello),
    ));
    agents.push((
        "example tool-syntax".into(),
        repo.join("examples/agents/tool-syntax"),
        script(&[
            (
                "write_file",
                json!({ "path": "notes.txt", "content": "alpha beta\nbeta\n" }),
            ),
            ("read_file", json!({ "path": "notes.txt" })),
            ("search", json!({ "pattern": "beta" })),
            ("show_date", json!({ "format": "%Y" })),
            ("run_helper", json!({ "file": "notes.txt" })),
            (
                "count_matches",
                json!({ "pattern": "beta", "file": "notes.txt" }),
            ),
            ("list_matching", json!({ "glob": "*.txt", "limit": 5 })),
            ("word_count", json!({ "text": "one two three" })),
            (
                "count_matching_lines",
                json!({ "text": "a\nb a\nc", "word": "a" }),
            ),
            ("greet", json!({ "who": "Ada" })),
            ("today", json!({})),
        ]),
    ));
    agents
}

#[test]
fn every_example_agent_and_template_runs_sandboxed_with_the_same_results() {
    let root = Root::new();
    for (n, (name, agent, script)) in shipped_agents(&root).into_iter().enumerate() {
        let free_agent = root.path(&format!("free-{n}"));
        unconfined_copy(&agent, &free_agent);
        let free = root.run(&free_agent, &format!("ws-free-{n}"), &script, &[]);
        let confined = root.run(&agent, &format!("ws-confined-{n}"), &script, &[]);
        assert_eq!(free.code, 0, "{name} unconfined: {}", free.stderr);
        assert_eq!(confined.code, 0, "{name} sandboxed: {}", confined.stderr);
        assert!(
            free.stderr.contains("are not sandboxed"),
            "{name}: {}",
            free.stderr
        );
        assert!(
            !confined.stderr.contains("are not sandboxed"),
            "{name}: {}",
            confined.stderr
        );
        assert_eq!(free.results.len(), confined.results.len(), "{name}");
        for (a, b) in free.results.iter().zip(&confined.results) {
            let tool = a["tool_name"].as_str().unwrap();
            assert_eq!(a["status"], "SUCCESS", "{name} {tool} unconfined: {a}");
            assert_eq!(
                (&a["status"], &a["exit_code"]),
                (&b["status"], &b["exit_code"]),
                "{name} {tool}: {a}\n{b}"
            );
            let (a, b) = (
                a["observation_content"].as_str().unwrap(),
                b["observation_content"].as_str().unwrap(),
            );
            let free_text = comparable(&a.replace(&format!("ws-free-{n}"), "WS"));
            let confined_text = comparable(&b.replace(&format!("ws-confined-{n}"), "WS"));
            assert_eq!(free_text, confined_text, "{name} {tool}");
        }
    }
}

/// The acceptance's first point: as root, the non-dumpable flag does not keep a tool from
/// the provider key in `delta`'s own environment block; the sandbox does.
#[test]
fn as_root_a_sandboxed_tool_cannot_read_the_provider_key_from_any_environ() {
    if !is_root() {
        eprintln!("SKIPPED: only root reads a non-dumpable process's environ unconfined");
        return;
    }
    let root = Root::new();
    let tool = "tools:\n  - name: loot\n    shell: \"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\\\0' '\\\\n' | grep -c sk-provider-key || true\"\n";
    let steps = script(&[("loot", json!({}))]);
    let found = |sandbox: &str, ws: &str| -> u32 {
        let agent = root.path(&format!("agent-{ws}"));
        write_agent(&agent, &format!("{sandbox}{tool}"));
        let ran = root.run(&agent, ws, &steps, &[]);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        let observation = ran.results[0]["observation_content"]
            .as_str()
            .unwrap()
            .to_owned();
        observation
            .lines()
            .find_map(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("{observation}"))
    };
    assert!(
        found("", "free") >= 1,
        "unconfined, root reads delta's own environ"
    );
    assert_eq!(found("sandbox: {}\n", "confined"), 0);
}

fn write_agent(dir: &Path, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        format!("name: probe\nllm:\n  model: scripted\n{body}"),
    )
    .unwrap();
    std::fs::write(dir.join("system_prompt.md"), "You probe.\n").unwrap();
    std::fs::write(
        dir.join("context.yaml"),
        "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n",
    )
    .unwrap();
}

/// A user's tool runs a setuid-root helper: unconfined it becomes root; sandboxed
/// (`no_new_privs`, a user namespace) it stays the user.
#[test]
fn a_setuid_root_helper_gives_a_sandboxed_user_tool_nothing() {
    if !is_root() {
        eprintln!(
            "SKIPPED: making a setuid-root helper and running delta as another user needs root"
        );
        return;
    }
    let root = Root::new();
    let nobody = 65534;
    let helper = root.path("id-setuid-root");
    std::fs::copy("/usr/bin/id", &helper).unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let tool = format!(
        "tools:\n  - name: become\n    exec: \"{} -u\"\n",
        helper.display()
    );
    let steps = script(&[("become", json!({}))]);
    // Everything the user's delta touches is theirs.
    std::fs::set_permissions(root.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    let euid = |sandbox: &str, ws: &str| -> String {
        let agent = root.path(&format!("agent-{ws}"));
        write_agent(&agent, &format!("{sandbox}{tool}"));
        for path in [agent.clone(), root.path("home"), root.path("tmp")] {
            chown_tree(&path, nobody);
        }
        std::fs::create_dir_all(root.path(ws)).unwrap();
        chown_tree(&root.path(ws), nobody);
        let script_file = root.path(&format!("{ws}.script.json"));
        std::fs::write(&script_file, "").unwrap();
        chown_tree(&script_file, nobody);
        let mut cmd = root.command(&[]);
        cmd.uid(nobody).gid(nobody);
        let ran = root.run_with(cmd, &agent, ws, &steps);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        ran.results[0]["observation_content"]
            .as_str()
            .unwrap()
            .lines()
            .nth(1)
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    assert_eq!(
        euid("", "free"),
        "0",
        "unconfined, the helper makes the user's tool root"
    );
    assert_eq!(euid("sandbox: {}\n", "confined"), nobody.to_string());
}

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn bench_spawn_measures_sandboxed_starts() {
    let root = Root::new();
    let output = root
        .command(&[])
        .args([
            "bench",
            "spawn",
            "--spawns",
            "5",
            "--descriptors",
            "50",
            "--sandbox",
        ])
        .args(["--format", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = wait_with_limit(output);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names[3..],
        [
            "tool spawner, sandboxed, many descriptors",
            "in-process, sandboxed, few descriptors"
        ]
    );
    assert!(
        report["sandbox_extra_cpu_ms_per_spawn"].is_f64(),
        "{report}"
    );
}

#[test]
fn delta_run_says_once_when_tools_are_not_sandboxed() {
    let root = Root::new();
    let agent = root.path("plain");
    write_agent(&agent, "tools:\n  - name: hi\n    exec: \"echo hi\"\n");
    let steps = script(&[("hi", json!({}))]);
    let plain = root.run(&agent, "ws-plain", &steps, &[]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert_eq!(
        plain
            .stderr
            .matches("note: the tools of agent `probe` are not sandboxed")
            .count(),
        1,
        "{}",
        plain.stderr
    );
    assert!(plain.stderr.contains("docs/sandbox.md"), "{}", plain.stderr);
    let by_env = root.run(
        &agent,
        "ws-env",
        &steps,
        &[("DELTA_SANDBOX", "workspace-write")],
    );
    assert_eq!(by_env.code, 0, "{}", by_env.stderr);
    assert!(
        !by_env.stderr.contains("not sandboxed"),
        "{}",
        by_env.stderr
    );
}

#[test]
fn a_bad_delta_sandbox_is_a_configuration_error() {
    let root = Root::new();
    let agent = root.path("plain");
    write_agent(&agent, "tools:\n  - name: hi\n    exec: \"echo hi\"\n");
    let ran = root.run(
        &agent,
        "ws",
        &script(&[]),
        &[("DELTA_SANDBOX", "workspace-write,network=sometimes")],
    );
    assert_eq!(ran.code, 126, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("DELTA_SANDBOX=\"workspace-write,network=sometimes\""),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("hint:"), "{}", ran.stderr);
    assert!(
        !root.path("ws").exists(),
        "nothing is created before the refusal"
    );
}

#[test]
fn a_plan_sandbox_confines_its_agents() {
    let root = Root::new();
    std::fs::create_dir_all(root.path("home/.ssh")).unwrap();
    std::fs::write(root.path("home/.ssh/id_ed25519"), "PLANTED-PLAN-KEY").unwrap();
    write_agent(
        &root.path("plans/agents/peek"),
        "tools:\n  - name: peek\n    shell: \"cat $HOME/.ssh/id_ed25519\"\n",
    );
    let steps =
        "default_latency: 0\nsteps:\n  - tool: peek\n  - answer: \"{{ last_observation }}\"\n";
    std::fs::write(root.path("plans/script.yaml"), steps).unwrap();
    let plan = |sandbox: &str, name: &str| -> String {
        let file = root.path(&format!("plans/{name}.yaml"));
        std::fs::write(
            &file,
            format!("{sandbox}stages:\n  - {{ id: look, agent: ./agents/peek, message: go }}\n"),
        )
        .unwrap();
        let child = root
            .command(&[])
            .arg("orchestrate")
            .arg(&file)
            .arg("-w")
            .arg(root.path(&format!("ws-{name}")))
            .arg("--llm-script")
            .arg(root.path("plans/script.yaml"))
            .args(["--format", "json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let output = wait_with_limit(child);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert!(plan("", "free").contains("PLANTED-PLAN-KEY"));
    let confined = plan("sandbox: { filesystem: read-only }\n", "confined");
    assert!(!confined.contains("PLANTED-PLAN-KEY"), "{confined}");
    assert!(
        confined.contains("hidden from this agent's tools"),
        "{confined}"
    );
}
