//! CLI tests of `delta init` and `delta tool expand`: the bad-agent corpus, the tool-syntax
//! snapshot, templates, and the no-terminal rule of init.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn delta() -> Command {
    let mut cmd = Command::cargo_bin("delta").unwrap();
    cmd.timeout(Duration::from_secs(60))
        .env_remove("DELTA_LOG")
        .write_stdin("");
    cmd
}

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_in(dir: &Path, args: &[&str]) -> Outcome {
    let output = delta().current_dir(dir).args(args).output().unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn every_bad_agent_exits_126_naming_the_file() {
    let corpus = repo_root().join("tests/fixtures/bad-agents");
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for fixture in entries {
        let Ok(expected) = std::fs::read_to_string(fixture.join("expected.txt")) else {
            continue;
        };
        let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
        let out = run_in(&repo_root(), &["tool", "expand", fixture.to_str().unwrap()]);
        assert_eq!(out.code, 126, "{name}: exit code\n{}", out.stderr);
        assert!(
            out.stdout.is_empty(),
            "{name}: stdout must stay empty: {}",
            out.stdout
        );
        assert!(out.stderr.starts_with("error: "), "{name}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{name}: {}", out.stderr);
        assert!(
            out.stderr.contains("hint:"),
            "{name}: no hint\n{}",
            out.stderr
        );
        assert!(
            out.stderr.contains(&name),
            "{name}: the message must name the file\n{}",
            out.stderr
        );
        for phrase in expected.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                out.stderr.contains(phrase),
                "{name}: expected `{phrase}` in\n{}",
                out.stderr
            );
        }
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} bad agents in the corpus");
}

#[test]
fn tool_syntax_expansion_snapshot() {
    let out = run_in(
        &repo_root(),
        &["tool", "expand", "examples/agents/tool-syntax"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    assert!(out.stderr.contains("expanded 12 tool(s)"), "{}", out.stderr);
    insta::assert_snapshot!("tool_syntax_expand_yaml", out.stdout);
}

#[test]
fn colon_spelling_and_json_format_agree() {
    let yaml = run_in(
        &repo_root(),
        &["tool:expand", "examples/agents/tool-syntax/agent.yaml"],
    );
    assert_eq!(yaml.code, 0, "{}", yaml.stderr);
    let json = run_in(
        &repo_root(),
        &[
            "tool",
            "expand",
            "examples/agents/tool-syntax",
            "--format",
            "json",
        ],
    );
    assert_eq!(json.code, 0, "{}", json.stderr);
    let from_yaml: serde_json::Value = serde_yaml::from_str(&yaml.stdout).unwrap();
    let from_json: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(from_yaml, from_json);
    let names: Vec<&str> = from_json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "today",
            "read_file",
            "write_file",
            "search",
            "show_date",
            "run_helper",
            "count_matches",
            "list_matching",
            "word_count",
            "count_matching_lines",
            "http_post",
            "greet",
            "ask_human"
        ]
    );
}

/// Regression (issue 11 item 14): `tool expand` did not list the built-in ask_human, so its
/// parameters were nowhere to be seen.
#[test]
fn tool_expand_lists_the_built_in_ask_human_with_its_parameters() {
    let out = run_in(
        &repo_root(),
        &[
            "tool",
            "expand",
            "examples/agents/hello-world",
            "--format",
            "json",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let tools = doc["tools"].as_array().unwrap();
    let ask = tools.last().unwrap();
    assert_eq!(ask["name"], "ask_human");
    assert_eq!(ask["syntax"], "built-in");
    let params: Vec<&str> = ask["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, ["prompt", "input_type", "sensitive"]);
    assert_eq!(ask["parameters"][0]["required"], true);
    assert_eq!(
        ask["parameters"][1]["enum"],
        serde_json::json!(["text", "password", "confirmation"])
    );
}

/// Issue 25 item 8: `ask_human: false` turns the built-in tool off, and `tool expand`
/// shows it is off (not listed, `ask_human: false` in the document, said on stderr).
#[test]
fn tool_expand_shows_ask_human_off() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        "name: quiet\nask_human: false\nllm: { model: m }\ntools:\n  - name: greet\n    exec: \"echo hi\"\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("system_prompt.md"), "Be brief.\n").unwrap();
    std::fs::write(
        dir.path().join("context.yaml"),
        "sources:\n  - type: file\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["tool", "expand", ".", "--format", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["ask_human"], false, "{doc:#}");
    let names: Vec<&str> = doc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["greet"]);
    assert!(out.stderr.contains("ask_human is off"), "{}", out.stderr);
}

#[test]
fn a_lone_tools_file_is_expanded_standalone() {
    let out = run_in(
        &repo_root(),
        &[
            "tool",
            "expand",
            "examples/agents/tool-syntax/tools/files.yaml",
            "--format",
            "json",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(doc.get("agent").is_none());
    let names: Vec<&str> = doc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["greet", "today", "read_file", "write_file"]);
}

#[test]
fn init_hello_world_then_expand_as_a_new_user_would() {
    let dir = tempfile::tempdir().unwrap();
    let init = run_in(dir.path(), &["init", "demo", "-t", "hello-world"]);
    assert_eq!(init.code, 0, "{}", init.stderr);
    assert!(
        init.stdout
            .contains("Created agent `demo` from template hello-world"),
        "{}",
        init.stdout
    );
    for file in [
        "agent.yaml",
        "system_prompt.md",
        "context.yaml",
        "README.md",
    ] {
        assert!(dir.path().join("demo").join(file).is_file(), "{file}");
    }
    let agent_yaml = std::fs::read_to_string(dir.path().join("demo/agent.yaml")).unwrap();
    assert!(agent_yaml.starts_with("name: demo\n"), "{agent_yaml}");
    let context = std::fs::read_to_string(dir.path().join("demo/context.yaml")).unwrap();
    assert_eq!(context, delta_actors::agent::default_context_yaml());
    let expand = run_in(dir.path(), &["tool", "expand", "demo"]);
    assert_eq!(expand.code, 0, "{}", expand.stderr);
    assert!(!expand.stderr.contains("warning"), "{}", expand.stderr);
    for tool in [
        "print_message",
        "create_file",
        "write_to_file",
        "list_files",
        "show_date",
    ] {
        assert!(
            expand.stdout.contains(&format!("- name: {tool}\n")),
            "{tool} missing:\n{}",
            expand.stdout
        );
    }
}

#[test]
fn every_template_produces_a_valid_agent() {
    for template in [
        "minimal",
        "hello-world",
        "file-ops",
        "file-organizer",
        "api-tester",
        "bash-session",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let init = run_in(dir.path(), &["init", "agent", "-t", template]);
        assert_eq!(init.code, 0, "{template}: {}", init.stderr);
        let agent = delta_actors::agent::load_agent(&dir.path().join("agent")).unwrap();
        assert!(
            agent.warnings.is_empty(),
            "{template}: {:?}",
            agent.warnings
        );
        assert!(!agent.tools.is_empty(), "{template}");
        assert_eq!(agent.context.sources.len(), 3, "{template}");
    }
}

#[test]
fn init_in_the_current_empty_folder_uses_its_name_and_ignores_dot_entries() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("my-helper");
    std::fs::create_dir_all(folder.join(".git")).unwrap();
    let out = run_in(&folder, &["init", "-y"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let agent = delta_actors::agent::load_agent(&folder).unwrap();
    assert_eq!(agent.name, "my-helper");
    assert_eq!(
        agent
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["echo", "write_to_file"]
    );
}

#[test]
fn init_refuses_a_non_empty_folder_and_leaves_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("busy")).unwrap();
    std::fs::write(dir.path().join("busy/notes.txt"), "mine").unwrap();
    let out = run_in(dir.path(), &["init", "busy", "-t", "minimal"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("is not empty (it holds `notes.txt`)"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("hint:"), "{}", out.stderr);
    assert!(!dir.path().join("busy/agent.yaml").exists());
}

#[test]
fn init_without_a_terminal_never_waits_for_input() {
    let dir = tempfile::tempdir().unwrap();
    // stdin is an empty pipe (not a terminal) and neither -t nor -y is given.
    let out = run_in(dir.path(), &["init", "quiet"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("no terminal to ask on; using the minimal template"),
        "{}",
        out.stderr
    );
    assert!(dir.path().join("quiet/agent.yaml").is_file());
}

#[test]
fn init_rejects_an_unknown_template_as_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &["init", "x", "-t", "nope"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("hello-world"),
        "the error lists the templates: {}",
        out.stderr
    );
    assert!(!dir.path().join("x").exists());
}

/// Under `strict: false` (issue 24 item 18), typos are warnings on stderr, not errors.
#[test]
fn expand_prints_warnings_for_typos_and_deprecations_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("a");
    std::fs::create_dir(&agent).unwrap();
    std::fs::write(
        agent.join("config.yaml"),
        "strict: false\nname: a\nllm:\n  model: m\n  temprature: 0.5\nhook:\n  on_error: x\n",
    )
    .unwrap();
    std::fs::write(agent.join("system_prompt.md"), "Be brief.\n").unwrap();
    std::fs::write(
        agent.join("context.yaml"),
        delta_actors::agent::default_context_yaml(),
    )
    .unwrap();
    let out = run_in(dir.path(), &["tool", "expand", "a"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("warning: "), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("config.yaml is deprecated; rename it to agent.yaml"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("unknown key `llm.temprature` (did you mean `temperature`?)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("unknown key `hook` (did you mean `lifecycle_hooks`?)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout
            .starts_with("agent: a\nsource: config.yaml\ntools:\n- name: ask_human\n"),
        "only the built-in tool: {}",
        out.stdout
    );
}

#[test]
fn expand_of_a_missing_path_is_a_configuration_error() {
    let out = run_in(&repo_root(), &["tool", "expand", "does/not/exist"]);
    assert_eq!(out.code, 126);
    assert!(
        out.stderr
            .contains("agent path `does/not/exist` does not exist"),
        "{}",
        out.stderr
    );
}

#[test]
fn help_teaches_with_examples() {
    let out = run_in(&repo_root(), &["init", "--help"]);
    assert_eq!(out.code, 0);
    assert!(
        out.stdout.contains("delta init demo -t hello-world"),
        "{}",
        out.stdout
    );
    let out = run_in(&repo_root(), &["tool", "expand", "--help"]);
    assert!(out.stdout.contains("Examples:"), "{}", out.stdout);
}

/// Runs `delta init <name>` with stdin on a pseudo-terminal, typing `typed` into it.
fn init_on_a_terminal(dir: &Path, name: &str, typed: &str) -> Outcome {
    use std::io::Write;
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("delta"))
        .current_dir(dir)
        .args(["init", name])
        .stdin(std::process::Stdio::from(pty.slave))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    master.write_all(typed.as_bytes()).unwrap();
    // Bounded wait: the line discipline already holds the typed answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("delta init kept waiting on the terminal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    drop(master);
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn init_on_a_terminal_offers_the_menu() {
    let dir = tempfile::tempdir().unwrap();
    let out = init_on_a_terminal(dir.path(), "picked", "2\n");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("Choose a template:"), "{}", out.stderr);
    assert!(out.stderr.contains("5. bash-session"), "{}", out.stderr);
    assert!(
        out.stdout.contains("from template hello-world"),
        "{}",
        out.stdout
    );
}

#[test]
fn the_menu_asks_again_after_a_wrong_answer() {
    let dir = tempfile::tempdir().unwrap();
    let out = init_on_a_terminal(dir.path(), "picked", "9\napi-tester\n");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("`9` is not one of the templates"),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.contains("from template api-tester"),
        "{}",
        out.stdout
    );
}
