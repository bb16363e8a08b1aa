//! Lifecycle hooks through `delta run`: a hooks.yaml with a skipping `pre_tool_execution`, a
//! failing `post_llm_response` and an `on_run_end` that dumps its env and payload; and the
//! legacy `lifecycle_hooks` key of agent.yaml.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

const CONTEXT: &str = "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n";

fn write_agent(dir: &Path, extra_yaml: &str) {
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            "name: hooked\nllm:\n  model: scripted\n{extra_yaml}tools:\n  - name: touch\n    exec: \"touch ${{file}}\"\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("system_prompt.md"), "You are a test agent.\n").unwrap();
    std::fs::write(dir.join("context.yaml"), CONTEXT).unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "steps:\n  - tool: touch\n    args: { file: forbidden }\n  - answer: all done\n",
    )
    .unwrap();
}

fn delta_run(agent: &Path, ws: &Path) -> assert_cmd::assert::Assert {
    Command::cargo_bin("delta")
        .unwrap()
        .env_remove("DELTA_API_KEY")
        .env("HOME", ws)
        .arg("run")
        .arg("-a")
        .arg(agent)
        .arg("-m")
        .arg("do it")
        .arg("-w")
        .arg(ws)
        .arg("--format")
        .arg("json")
        .arg("--llm-script")
        .arg(agent.join("script.yaml"))
        .timeout(std::time::Duration::from_secs(60))
        .assert()
}

fn journal_lines(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn hooks_yaml_skip_failure_and_run_end_through_delta_run() {
    let agent = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    write_agent(agent.path(), "");
    std::fs::write(
        agent.path().join("hooks.yaml"),
        "pre_tool_execution:\n  command: [sh, -c, \"echo '{\\\"action\\\":\\\"skip\\\",\\\"observation\\\":\\\"blocked by policy\\\"}'\"]\npost_llm_response:\n  command: [sh, -c, \"echo 'cannot reach webhook' >&2; exit 3\"]\non_run_end:\n  command: [sh, -c, \"env > end.env; cat > end.json\"]\n",
    )
    .unwrap();

    let output = delta_run(agent.path(), ws.path())
        .success()
        .get_output()
        .clone();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["status"], "COMPLETED", "{result}");
    assert_eq!(result["result"], "all done");
    assert!(
        !ws.path().join("forbidden").exists(),
        "the skipped tool ran"
    );

    let end: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("end.json")).unwrap())
            .unwrap();
    assert_eq!(end["status"], "COMPLETED");
    assert_eq!(end["result"], "all done");
    let env = std::fs::read_to_string(ws.path().join("end.env")).unwrap();
    let run_id = result["run_id"].as_str().unwrap();
    assert!(env.contains(&format!("DELTA_RUN_ID={run_id}")), "{env}");
    assert!(env.contains("DELTA_HOOK=on_run_end"));

    let run_dir = Path::new(result["metadata"]["run_dir"].as_str().unwrap()).to_path_buf();
    let lines = journal_lines(&run_dir);
    let skipped = lines.iter().find(|l| l["type"] == "ACTION_RESULT").unwrap();
    assert_eq!(skipped["status"], "SUCCESS");
    assert_eq!(skipped["observation_content"], "blocked by policy");
    let failed: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "HOOK_EXECUTED" && l["hook_name"] == "post_llm_response")
        .collect();
    assert_eq!(failed.len(), 2);
    assert_eq!(failed[0]["status"], "FAILED");
    assert_eq!(
        failed[0]["reason"],
        "exited with code 3: cannot reach webhook"
    );
    let record = run_dir.join(failed[0]["io_path_ref"].as_str().unwrap());
    let record: Value = serde_json::from_str(&std::fs::read_to_string(record).unwrap()).unwrap();
    assert_eq!(record["exit_code"], 3);
    assert_eq!(record["stderr"], "cannot reach webhook\n");
    assert_eq!(lines.last().unwrap()["hook_name"], "on_run_end");
}

#[test]
fn legacy_lifecycle_hooks_in_agent_yaml_still_run() {
    let agent = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    write_agent(
        agent.path(),
        "lifecycle_hooks:\n  pre_tool_exec:\n    command: [sh, -c, \"echo $TOOL_NAME > pre-tool.txt\"]\n",
    );
    let output = delta_run(agent.path(), ws.path())
        .success()
        .get_output()
        .clone();
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["status"], "COMPLETED", "{result}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("pre-tool.txt")).unwrap(),
        "touch\n"
    );
    assert!(
        ws.path().join("forbidden").exists(),
        "nothing skipped the tool"
    );
}
