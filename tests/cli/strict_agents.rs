//! CLI tests of issue 24 item 18: a typo in an agent file (`tool:` for `tools:`) was a
//! warning, so the agent had no tools, `--dry-run` passed and the batch "completed" with
//! "unknown tool" answers. Unknown keys in agent files are errors (exit 126, naming the
//! file, the key and the closest known key) for `orchestrate --dry-run`, `orchestrate` and
//! `run`, before anything starts; `strict: false` in agent.yaml turns them into warnings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use crate::orchestrate::delta_in;

const PLAN: &str = "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"greet {{ item }}\"\n";
const SCRIPT: &str = "steps:\n  - tool: greet\n    args: { who: \"{{ task }}\" }\n  - answer: \"{{ last_observation }}\"\n";

/// A plan folder whose worker agent's agent.yaml is `agent_yaml`.
fn plan_with_agent(agent_yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agents/worker");
    crate::harness::write_agent(&agent, "worker", "");
    std::fs::write(agent.join("agent.yaml"), agent_yaml).unwrap();
    std::fs::write(dir.path().join("plan.yaml"), PLAN).unwrap();
    std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
    dir
}

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn delta(dir: &Path, args: &[&str]) -> Outcome {
    let output = delta_in(dir).args(args).output().unwrap();
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

const TYPO: &str =
    "name: worker\nllm:\n  model: scripted\ntool:\n  - name: greet\n    exec: echo hello ${who}\n";

#[test]
fn a_typo_in_agent_yaml_is_refused_by_dry_run_orchestrate_and_run() {
    let dir = plan_with_agent(TYPO);
    let root = dir.path();
    let orchestrate = [
        "orchestrate",
        "plan.yaml",
        "-w",
        "ws",
        "--llm-script",
        "script.yaml",
    ];
    for args in [
        [&orchestrate[..], &["--dry-run"]].concat(),
        orchestrate.to_vec(),
        vec![
            "run",
            "--agent",
            "agents/worker",
            "-w",
            "ws",
            "-m",
            "hi",
            "--llm-script",
            "script.yaml",
        ],
    ] {
        let out = delta(root, &args);
        assert_eq!(out.code, Some(126), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        for needle in [
            "agents/worker/agent.yaml",
            "unknown key `tool` (did you mean `tools`?)",
            "strict: false",
        ] {
            assert!(
                out.stderr.contains(needle),
                "{args:?}: `{needle}` in\n{}",
                out.stderr
            );
        }
        assert!(!root.join("ws/.delta").exists(), "{args:?}: something ran");
    }
}

#[test]
fn strict_false_loads_the_agent_with_a_warning() {
    let dir = plan_with_agent(&format!(
        "strict: false\n{TYPO}tools:\n  - name: greet\n    exec: echo hello ${{who}}\n"
    ));
    let out = delta(
        dir.path(),
        &[
            "orchestrate",
            "plan.yaml",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
            "--format",
            "json",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("warning: ")
            && out
                .stderr
                .contains("unknown key `tool` (did you mean `tools`?)"),
        "{}",
        out.stderr
    );
    let summary: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let result = summary["stages"][0]["runs"][0]["result"].as_str().unwrap();
    assert!(result.contains("hello greet a"), "the tool ran: {result}");
}
