//! Regression tests of the `.env` precedence (issue 11 item 16) for `run`, `continue` and
//! `orchestrate`: the real environment wins over every `.env` file, then the workspace file
//! over the agent's. A tool prints the variables and the scripted model answers with what
//! the tool printed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use crate::harness::*;

const TOOLS: &str = r#"tools:
  - name: show
    description: print two variables
    shell: "printf '%s|%s' \"$GREETING\" \"$WORKSPACE_ONLY\""
"#;

/// `show`, then an answer quoting its output.
fn show_then_answer() -> serde_json::Value {
    json!({"steps": [{"tool": "show"}, {"answer": "{{ last_observation }}"}]})
}

fn write_dotenvs(case: &Case) {
    std::fs::write(
        case.work_dir().join(".env"),
        "GREETING=from-workspace-file\nWORKSPACE_ONLY=ws\n",
    )
    .unwrap();
    std::fs::write(
        case.agent_dir().join(".env"),
        "GREETING=from-agent-file\nWORKSPACE_ONLY=agent\n",
    )
    .unwrap();
}

#[test]
fn run_real_environment_wins_over_every_dot_env() {
    let case = Case::new("envy", TOOLS, &show_then_answer());
    write_dotenvs(&case);
    let out = case
        .cmd()
        .env("GREETING", "from-real-env")
        .args(case.run_args("r1", "show me"))
        .args(["--format", "raw"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("from-real-env|ws"), "{stdout}");

    // Without the real variable, the workspace file beats the agent's.
    let out = case.run("r2", "show me", &[]);
    out.assert_code(0);
    let answer = out.json()["result"].as_str().unwrap().to_string();
    assert!(answer.contains("from-workspace-file|ws"), "{answer}");
}

#[test]
fn continue_real_environment_wins_over_every_dot_env() {
    let script = json!({"steps": [
        {"answer": "first"},
        {"tool": "show"},
        {"answer": "{{ last_observation }}"}
    ]});
    let case = Case::new("envy", TOOLS, &script);
    write_dotenvs(&case);
    case.run("r1", "start", &[]).assert_code(0);
    let out = case
        .cmd()
        .env("GREETING", "from-real-env")
        .args(case.continue_args("r1"))
        .args(["-m", "now show", "--format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let answer = result["result"].as_str().unwrap();
    assert!(answer.contains("from-real-env|ws"), "{answer}");
}

#[test]
fn orchestrate_real_environment_wins_over_the_workspace_dot_env() {
    let case = Case::new("envy", TOOLS, &show_then_answer());
    write_dotenvs(&case);
    let agent = case.agent_dir().display().to_string();
    std::fs::write(
        case.path().join("plan.yaml"),
        format!("stages:\n  - id: show\n    agent: {agent}\n    message: show me\n"),
    )
    .unwrap();
    let ws = case.work_dir().display().to_string();
    let out = case
        .cmd()
        .env("GREETING", "from-real-env")
        .args(["orchestrate", "plan.yaml", "-w", &ws, "--format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let result = summary["stages"][0]["runs"][0]["result"].as_str().unwrap();
    assert!(result.contains("from-real-env|ws"), "{result}");
}
