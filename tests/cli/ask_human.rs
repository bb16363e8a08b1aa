//! Acceptance tests of ask_human (issue 4) through the CLI: the async mode (exit 101, then
//! `delta continue`), `-i` with piped stdin (text, EOF, confirmation re-ask), and sensitive
//! answers never written in clear outside their 0600 file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::harness::*;

const TOOLS: &str = r#"tools:
  - name: mark
    description: create a marker file
    exec: "touch ${name}"
"#;

fn ask(args: Value) -> Value {
    json!({"steps": [
        {"tool": "ask_human", "args": args},
        {"answer": "answer was: {{ last_observation }}"}
    ]})
}

/// `delta run -i --format json` with `stdin` piped in.
fn run_interactive(case: &Case, run_id: &str, stdin: &str) -> Outcome {
    let output = case
        .cmd()
        .args(case.run_args(run_id, "ask me"))
        .args(["-i", "--format", "json"])
        .write_stdin(stdin)
        .output()
        .unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn async_mode_runs_the_other_calls_first_waits_with_exit_101_then_continues() {
    let script = json!({"steps": [
        {"tools": [
            {"tool": "ask_human", "args": {"prompt": "Deploy to production?"}},
            {"tool": "mark", "args": {"name": "sibling-ran"}}
        ]},
        {"answer": "answer was: {{ last_observation }}"}
    ]});
    let case = Case::new("asker", TOOLS, &script);
    let out = case.run("r1", "deploy", &[]);
    out.assert_code(101);
    let result = out.json();
    assert_eq!(result["status"], "WAITING_FOR_INPUT");
    assert!(
        result["interaction"]
            .to_string()
            .contains("Deploy to production?"),
        "{result}"
    );
    assert!(case.work_dir().join("sibling-ran").exists());
    let request = read_json(&case.run_dir("r1").join("interaction/request.json"));
    assert!(
        request.to_string().contains("Deploy to production?"),
        "{request}"
    );
    let journal = case.journal("r1");
    let kinds = types(&journal);
    let sibling_result = kinds.iter().position(|t| t == "ACTION_RESULT").unwrap();
    let asked = kinds
        .iter()
        .position(|t| t == "HUMAN_INPUT_REQUEST")
        .unwrap();
    assert!(sibling_result < asked, "{kinds:?}");
    assert_eq!(case.metadata("r1")["status"], "WAITING_FOR_INPUT");

    let resumed = case.continue_run("r1", &["-m", "yes, go"]);
    resumed.assert_code(0);
    assert_eq!(resumed.json()["status"], "COMPLETED");
    let journal = case.journal("r1");
    // Results are given to the model in reply order: ask_human's (first call) then mark's.
    let results = events_of(&journal, "ACTION_RESULT");
    let answer = results
        .iter()
        .find(|r| r["tool_name"] == "ask_human")
        .unwrap();
    assert!(
        answer["observation_content"]
            .as_str()
            .unwrap()
            .contains("yes, go"),
        "{answer}"
    );
    // ask_human is answered exactly once, the sibling call exactly once.
    assert_eq!(
        events_of(&journal, "ACTION_RESULT").len(),
        2,
        "{:?}",
        types(&journal)
    );
    assert_eq!(events_of(&journal, "HUMAN_INPUT_RECEIVED").len(), 1);
}

#[test]
fn interactive_mode_reads_the_answer_from_piped_stdin() {
    let case = Case::new("asker", TOOLS, &ask(json!({"prompt": "Favourite colour?"})));
    let out = run_interactive(&case, "r1", "green\n");
    out.assert_code(0);
    assert_eq!(out.json()["result"].as_str().unwrap(), "answer was: green");
    assert!(out.stderr.contains("Favourite colour?"), "{}", out.stderr);
    assert!(
        !out.stdout.contains("Favourite colour?"),
        "prompt on stdout"
    );
    assert!(!case.run_dir("r1").join("interaction/request.json").exists());
}

#[test]
fn interactive_mode_treats_eof_as_an_error_not_an_answer() {
    let case = Case::new("asker", TOOLS, &ask(json!({"prompt": "Anyone there?"})));
    let out = run_interactive(&case, "r1", "");
    assert_ne!(out.code, 0, "EOF must not complete the run: {}", out.stdout);
    let everything = format!(
        "{}{}{}",
        out.stdout,
        out.stderr,
        observations(&case.journal("r1")).join("\n")
    );
    assert!(everything.contains("EOF"), "{everything}");
}

#[test]
fn confirmation_re_asks_until_yes_or_no() {
    let case = Case::new(
        "asker",
        TOOLS,
        &ask(json!({"prompt": "Delete the logs?", "input_type": "confirmation"})),
    );
    let out = run_interactive(&case, "r1", "maybe\ny\n");
    out.assert_code(0);
    assert_eq!(out.json()["result"].as_str().unwrap(), "answer was: yes");
    let asks = out.stderr.matches("yes or no").count();
    assert_eq!(asks, 2, "asked once, re-asked once: {}", out.stderr);
}

const SECRET: &str = "hunter2-S3CRET-value";

fn secret_script(args: Value) -> Value {
    json!({"steps": [
        {"tool": "ask_human", "args": args},
        {"answer": "{% if 'hunter2-S3CRET' in last_observation %}the model saw it{% else %}missing{% endif %}"}
    ]})
}

/// Every file of the run folder holding `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| {
            std::fs::read(p)
                .map(|bytes| String::from_utf8_lossy(&bytes).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

fn assert_only_the_secret_file_holds_it(case: &Case, run_id: &str) {
    let run_dir = case.run_dir(run_id);
    let holders = files_containing(&run_dir, SECRET);
    assert_eq!(holders.len(), 1, "secret found in {holders:?}");
    let mode = std::fs::metadata(&holders[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{:?} mode {mode:o}", holders[0]);
    let run_mode = std::fs::metadata(&run_dir).unwrap().permissions().mode();
    assert_eq!(run_mode & 0o077, 0, "run folder mode {run_mode:o}");
    let outside: Vec<_> = files_containing(case.path(), SECRET)
        .into_iter()
        .filter(|p| !p.starts_with(&run_dir))
        .collect();
    assert!(
        outside.is_empty(),
        "secret outside the run folder: {outside:?}"
    );
    let journal = std::fs::read_to_string(run_dir.join("journal.jsonl")).unwrap();
    assert!(
        journal.contains("HUMAN_INPUT_RECEIVED"),
        "the answer is journaled (redacted): {journal}"
    );
}

#[test]
fn sensitive_answer_given_with_continue_stays_in_its_private_file() {
    let case = Case::new(
        "asker",
        TOOLS,
        &secret_script(json!({"prompt": "API token?", "sensitive": true})),
    );
    case.run("r1", "needs a token", &[]).assert_code(101);
    let out = case.continue_run("r1", &["-m", SECRET]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "the model saw it");
    assert!(!out.stdout.contains(SECRET) && !out.stderr.contains(SECRET));
    assert_only_the_secret_file_holds_it(&case, "r1");
}

#[test]
fn password_answer_given_interactively_stays_in_its_private_file() {
    let case = Case::new(
        "asker",
        TOOLS,
        &secret_script(json!({"prompt": "Password?", "input_type": "password"})),
    );
    let out = run_interactive(&case, "r1", &format!("{SECRET}\n"));
    out.assert_code(0);
    assert_eq!(out.json()["result"], "the model saw it");
    assert!(!out.stdout.contains(SECRET) && !out.stderr.contains(SECRET));
    assert_only_the_secret_file_holds_it(&case, "r1");
}

/// Regression (issue 11 item 14): `{"question": ...}` used to pause the run with an empty
/// question. It is now refused like bad arguments of any tool: the model reads an error
/// naming the key, and the run goes on without pausing.
#[test]
fn ask_human_with_a_wrong_key_answers_an_error_and_does_not_pause() {
    let case = Case::new("asker", TOOLS, &ask(json!({"question": "Proceed?"})));
    let out = case.run("r1", "ask me", &[]);
    out.assert_code(0);
    let answer = out.json()["result"].as_str().unwrap().to_string();
    assert!(answer.contains("unknown argument `question`"), "{answer}");
    assert!(answer.contains("prompt"), "{answer}");
    let journal = case.journal("r1");
    assert!(events_of(&journal, "HUMAN_INPUT_REQUEST").is_empty());
    assert!(!case.run_dir("r1").join("interaction/request.json").exists());
    let results = events_of(&journal, "ACTION_RESULT");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["status"], "ERROR");
}

#[test]
fn ask_human_with_an_empty_prompt_or_unknown_input_type_does_not_pause() {
    for args in [
        json!({"prompt": ""}),
        json!({"prompt": "Go?", "input_type": "secret"}),
    ] {
        let case = Case::new("asker", TOOLS, &ask(args.clone()));
        let out = case.run("r1", "ask me", &[]);
        out.assert_code(0);
        let answer = out.json()["result"].as_str().unwrap().to_string();
        assert!(
            answer.contains("invalid arguments for tool 'ask_human'"),
            "{args}: {answer}"
        );
    }
}
