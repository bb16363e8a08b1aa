//! CLI test of issue 24 item 17 for single runs: the `delta continue` command a text
//! RunResult prints ("Answer with:", "Resume with:", "Retry with:") is the exact command —
//! with `--llm-script` when the run had one (it failed for want of an API key) — and works
//! as printed, through a shell, from another folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use crate::orchestrate::delta_in;

#[test]
fn the_printed_answer_command_carries_the_llm_script_and_works_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    crate::harness::write_agent(&root.join("agent"), "asker", "tools: []\n");
    std::fs::write(
        root.join("script.yaml"),
        "steps:\n  - tool: ask_human\n    args: { prompt: \"Which colour?\" }\n  - answer: \"you said {{ last_observation }}\"\n",
    )
    .unwrap();
    let out = delta_in(root)
        .env_remove("DELTA_API_KEY")
        .env_remove("DELTA_BASE_URL")
        .args([
            "run",
            "--agent",
            "agent",
            "-w",
            "ws",
            "-m",
            "ask",
            "--llm-script",
            "script.yaml",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(101), "{stdout}");
    let command = stdout
        .lines()
        .find_map(|line| line.strip_prefix("Answer with:"))
        .unwrap_or_else(|| panic!("no `Answer with:` in\n{stdout}"))
        .trim()
        .replace("<answer>", "blue");
    let script = root.canonicalize().unwrap().join("script.yaml");
    assert!(
        command.contains(&format!("--llm-script {}", script.display())),
        "{command}"
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let answered = Command::new("sh")
        .args(["-c", &command])
        .current_dir(elsewhere.path())
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .env_remove("DELTA_API_KEY")
        .env_remove("DELTA_BASE_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&answered.stdout);
    assert_eq!(
        answered.status.code(),
        Some(0),
        "{command}\n{stdout}\n{}",
        String::from_utf8_lossy(&answered.stderr)
    );
    assert!(stdout.contains("you said"), "{stdout}");
}
