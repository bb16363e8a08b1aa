//! Sensitive ask_human answers echoed by the model (issue 11, item 2): after a password
//! answer, the scripted model repeats it in a THOUGHT, in tool arguments (so in the resolved
//! command line), a tool prints it to stdout and stderr, a hook prints its payload, and the
//! final answer, a later question and a later error carry it. Only the 0600 file under `secrets/` may hold it;
//! the model and the tool still get the real value, also after `continue` reads the
//! redacted journal back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use delta_actors::redact::marker;
use delta_actors::RunStatus;
use delta_actors::{RunEvent, RunResult, Supervisor, SupervisorConfig};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::harness::*;

const CANARY: &str = "canary-Xq7-\"quoted\"-value";
/// The ask_human call of the script's first step.
const SECRET_ID: &str = "call_0_0";

const SHOUT_TOOL: &str = "  - name: shout\n    shell: \"echo heard ${text}; echo err ${text} >&2; printf %s ${text} > tool-saw.txt\"\n";

const HOOKS: &str = "pre_llm_request:\n  command: [sh, -c, 'cat > \"request-$ITERATION_COUNT.json\"']\npost_tool_execution:\n  command: [sh, -c, 'p=$(cat); printf \"%s\" \"$p\" > hook-saw.json; echo \"$p\"; echo \"$p\" >&2']\n";

const SCRIPT: &str = r#"
steps:
  - tool: ask_human
    args: { prompt: "Password?", input_type: password }
  - content: "I will shout {{ last_observation }}"
    tool: shout
    args: { text: "{{ last_observation }}" }
  - answer: "The password was: {{ last_observation }}"
  - tool: ask_human
    args: { prompt: "Is this right? {{ last_observation }}" }
  - fail: 400
    message: "rejected {{ last_observation }}"
"#;

fn agent() -> TestAgent {
    let agent = TestAgent::new("secret-echo", "", SHOUT_TOOL);
    std::fs::write(agent.path().join("hooks.yaml"), HOOKS).unwrap();
    agent
}

fn supervisor() -> Supervisor {
    Supervisor::start(SupervisorConfig {
        event_capacity: 4096,
        ..fast_config()
    })
    .unwrap()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            out.push(path);
        }
    }
    out
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A piece of the canary free of characters any writer would escape: a file holding the
/// canary in any spelling (raw, JSON-escaped once or twice, shell-quoted) holds this.
const NEEDLE: &str = "canary-Xq7";

/// Only `secrets/<id>` (mode 0600) holds the canary, in any spelling, in the whole run folder.
fn assert_only_the_secret_file_holds_it(run_dir: &Path) {
    let mut holders = Vec::new();
    for path in files_under(run_dir) {
        let bytes = std::fs::read(&path).unwrap();
        if holds(&bytes, NEEDLE) {
            holders.push(path);
        }
    }
    assert_eq!(
        holders,
        vec![run_dir.join("secrets").join(SECRET_ID)],
        "files holding the canary"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&holders[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

fn assert_clean_result(result: &RunResult) {
    let text = serde_json::to_string(result).unwrap();
    assert!(!text.contains(NEEDLE), "{text}");
}

/// The events broadcast so far, none of which may hold the canary.
fn assert_clean_events(events: &mut broadcast::Receiver<RunEvent>) -> usize {
    let mut seen = 0;
    loop {
        match events.try_recv() {
            Ok(event) => {
                seen += 1;
                let text = serde_json::to_string(&event).unwrap();
                assert!(!text.contains(NEEDLE), "{text}");
            }
            Err(broadcast::error::TryRecvError::Empty) => return seen,
            Err(e) => panic!("events lost: {e}"),
        }
    }
}

/// The request the model received at `iteration`, as the pre_llm_request hook saw it.
fn request_at(work: &Path, iteration: u32) -> Value {
    let path = work.join(format!("request-{iteration}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The model's own earlier reply, in a later request: its text and its call's arguments.
fn shout_turn(request: &Value) -> (String, Value, String) {
    let messages = request["messages"].as_array().unwrap();
    let i = messages
        .iter()
        .position(|m| m["tool_calls"][0]["function"]["name"] == "shout")
        .unwrap();
    let assistant = &messages[i];
    let arguments: Value = serde_json::from_str(
        assistant["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let observation = messages[i + 1]["content"].as_str().unwrap().to_string();
    (
        assistant["content"].as_str().unwrap().to_string(),
        arguments,
        observation,
    )
}

#[test]
fn sensitive_answer_echoed_by_the_model_and_tools_is_redacted_everywhere() {
    let agent = agent();
    let ws = tempfile::tempdir().unwrap();
    let sup = supervisor();
    let mut events = sup.subscribe();
    let request = new_run(agent.load(), ws.path(), script(SCRIPT), "log in");
    let paused = drive(&sup, request.clone());
    assert_eq!(paused.status, RunStatus::WaitingForInput, "{paused:?}");

    let done = drive(&sup, continue_run(&request, &paused.run_id, Some(CANARY)));
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let dir = run_dir(&done);
    let secret_marker = marker(SECRET_ID);

    // The tool and the hook got the real value (they wrote it outside the run folder).
    assert_eq!(
        std::fs::read_to_string(ws.path().join("tool-saw.txt")).unwrap(),
        CANARY
    );
    let hook_saw: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("hook-saw.json")).unwrap())
            .unwrap();
    assert_eq!(hook_saw["tool_args"]["text"], CANARY);
    // The model's third request shows it its own reply as it was, and the tool's output.
    let (thought, arguments, observation) = shout_turn(&request_at(ws.path(), 3));
    assert_eq!(thought, format!("I will shout {CANARY}"));
    assert_eq!(arguments["text"], CANARY);
    assert!(
        observation.contains(&format!("heard {CANARY}")),
        "{observation}"
    );
    assert!(
        observation.contains(&format!("err {CANARY}")),
        "{observation}"
    );

    // What was written holds markers instead.
    let answer = done.result.clone().unwrap();
    assert!(answer.starts_with("The password was: "), "{answer}");
    assert!(answer.contains(&secret_marker), "{answer}");
    let journal_text = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
    assert!(journal_text.contains(&format!("I will shout {secret_marker}")));
    let outputs: Vec<PathBuf> = files_under(&dir.join("io/tool_executions"))
        .into_iter()
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "stdout" || e == "stderr")
        })
        .collect();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    for output in outputs {
        let text = std::fs::read_to_string(&output).unwrap();
        assert!(
            text.contains(&secret_marker),
            "{}: {text}",
            output.display()
        );
    }
    assert!(files_under(&dir.join("io/hooks"))
        .iter()
        .any(|p| std::fs::read_to_string(p).unwrap().contains(&secret_marker)));
    assert_only_the_secret_file_holds_it(&dir);
    assert_clean_result(&done);
    assert!(assert_clean_events(&mut events) > 5);
}

/// `continue` reads the redacted journal back: the model still sees the real value in its
/// own earlier turns, and the answers of the earlier start are redacted from the first write
/// of the new one (here a question, then a failure, whose texts repeat the value).
#[test]
fn continue_restores_secrets_of_an_earlier_start_for_the_model_and_redacts_them() {
    let agent = agent();
    let ws = tempfile::tempdir().unwrap();
    let sup = supervisor();
    let request = new_run(agent.load(), ws.path(), script(SCRIPT), "log in");
    let paused = drive(&sup, request.clone());
    let done = drive(&sup, continue_run(&request, &paused.run_id, Some(CANARY)));
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");

    let mut events = sup.subscribe();
    let asked = drive(
        &sup,
        continue_run(&request, &paused.run_id, Some("say it again")),
    );
    assert_eq!(asked.status, RunStatus::WaitingForInput, "{asked:?}");
    let (thought, arguments, observation) = shout_turn(&request_at(ws.path(), 4));
    assert_eq!(thought, format!("I will shout {CANARY}"));
    assert_eq!(arguments["text"], CANARY);
    assert!(observation.contains(&format!("heard {CANARY}")));
    let prompt = &asked.interaction.as_ref().unwrap().prompt;
    assert!(
        prompt.contains(&format!("heard {}", marker(SECRET_ID))),
        "{prompt}"
    );
    let dir = run_dir(&asked);
    let request_file = std::fs::read_to_string(dir.join("interaction/request.json")).unwrap();
    assert!(request_file.contains(&marker(SECRET_ID)), "{request_file}");
    assert_only_the_secret_file_holds_it(&dir);
    assert_clean_result(&asked);

    // An ordinary answer that repeats the secret is redacted too; the model repeats it in
    // its error.
    let again = drive(&sup, continue_run(&request, &paused.run_id, Some(CANARY)));
    assert_eq!(again.status, RunStatus::Failed, "{again:?}");
    let error = again.error.clone().unwrap().message;
    assert!(
        error.ends_with(&format!("rejected {}", marker(SECRET_ID))),
        "{error}"
    );
    assert_only_the_secret_file_holds_it(&run_dir(&again));
    assert_clean_result(&again);
    assert!(assert_clean_events(&mut events) > 2);
}

struct Answers(&'static str);

impl delta_actors::HumanPrompter for Answers {
    fn ask(&self, _: &str, _: &str, _: bool) -> Result<String, String> {
        Ok(self.0.to_string())
    }
}

/// A call planned in the same reply as the question, run after the answer: the answer is
/// redacted from its output files too (the tool here reads it back from `secrets/`).
#[test]
fn a_tool_run_after_an_answer_of_the_same_reply_has_its_output_redacted() {
    let agent = TestAgent::new(
        "same-reply",
        "",
        "  - name: peek\n    shell: \"cat \\\"$DELTA_RUN_DIR\\\"/secrets/*\"\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let sup = supervisor();
    let s = script(
        "steps:\n  - tools:\n      - { tool: ask_human, args: { prompt: \"PIN?\", sensitive: true } }\n      - { tool: peek, args: {} }\n  - answer: \"{{ last_observation }}\"\n",
    );
    let mut request = new_run(agent.load(), ws.path(), s, "t");
    request.prompter = Some(std::sync::Arc::new(Answers(CANARY)));
    let done = drive(&sup, request);
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let dir = run_dir(&done);
    let stdout = files_under(&dir.join("io/tool_executions"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "stdout"))
        .unwrap();
    assert_eq!(std::fs::read_to_string(stdout).unwrap(), marker(SECRET_ID));
    assert_only_the_secret_file_holds_it(&dir);
    assert_clean_result(&done);
}
