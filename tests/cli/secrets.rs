//! A sensitive answer echoed by the model, through the CLI (issue 11, item 2): the password
//! given with `delta continue -m` is repeated in a THOUGHT, a tool call and its command line,
//! the tool's output and the final answer, and `continue` later reads it back for the model.
//! Neither the run folder (only its 0600 `secrets/` file) nor the stdout of `--format json`
//! and `--format text` nor `list-runs` may show it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};

use crate::harness::*;

const CANARY: &str = "canary-Xq7-\"quoted\"-value";
/// A piece of the canary that survives any escaping, for greps.
const NEEDLE: &str = "canary-Xq7";
const MARKER: &str = "[REDACTED: sensitive answer kept in secrets/call_0_0]";

const TOOLS: &str = r#"tools:
  - name: shout
    description: repeat a text loudly
    shell: "echo heard ${text}; echo err ${text} >&2; printf %s ${text} > tool-saw.txt"
"#;

fn script() -> Value {
    json!({"steps": [
        {"tool": "ask_human", "args": {"prompt": "Password?", "input_type": "password"}},
        {"content": "I will shout {{ last_observation }}",
         "tool": "shout", "args": {"text": "{{ last_observation }}"}},
        {"answer": "The password was: {{ last_observation }}"},
        {"answer": "{% if 'canary-Xq7' in last_observation %}seen{% else %}missing{% endif %}: {{ last_observation }}"}
    ]})
}

fn assert_not_shown(out: &Outcome) {
    assert!(!out.stdout.contains(NEEDLE), "stdout: {}", out.stdout);
    assert!(!out.stderr.contains(NEEDLE), "stderr: {}", out.stderr);
}

fn assert_only_the_secret_file_holds_it(case: &Case) {
    let run_dir = case.run_dir("r1");
    let holders: Vec<_> = files_under(&run_dir)
        .into_iter()
        .filter(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).contains(NEEDLE))
        .collect();
    assert_eq!(holders, vec![run_dir.join("secrets/call_0_0")]);
}

fn outcome(output: std::process::Output) -> Outcome {
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn sensitive_answer_echoed_by_the_model_never_reaches_the_run_folder_or_stdout() {
    let case = Case::new("echoer", TOOLS, &script());
    // `delta run -i`: the password is typed at the prompt, then echoed by the model.
    let run = outcome(
        case.cmd()
            .args(case.run_args("r1", "log in"))
            .args(["-i", "--format", "json"])
            .write_stdin(format!("{CANARY}\n"))
            .output()
            .unwrap(),
    );
    run.assert_code(0);
    assert_not_shown(&run);
    let answer = run.json()["result"].as_str().unwrap().to_string();
    assert!(
        answer.contains(&format!("heard {MARKER}")),
        "the answer is printed, redacted: {answer}"
    );
    assert_eq!(
        std::fs::read_to_string(case.work_dir().join("tool-saw.txt")).unwrap(),
        CANARY,
        "the tool got the real value"
    );
    assert_only_the_secret_file_holds_it(&case);

    // A later start reads the redacted journal back: the model sees the real value.
    let text = outcome(
        case.cmd()
            .args(case.continue_args("r1"))
            .args(["-m", "say it again", "--format", "text"])
            .output()
            .unwrap(),
    );
    text.assert_code(0);
    assert_not_shown(&text);
    assert!(
        text.stdout
            .contains(&format!("seen: === STDOUT ===\nheard {MARKER}")),
        "{}",
        text.stdout
    );
    assert_only_the_secret_file_holds_it(&case);

    for format in ["json", "text"] {
        let listed = case.delta(&[
            "list-runs",
            "-w",
            &case.work_dir().display().to_string(),
            "--format",
            format,
        ]);
        listed.assert_code(0);
        assert_not_shown(&listed);
    }
}
