//! Acceptance tests of `delta continue` (issue 4): every row of the spec §2.6.2 state table,
//! through the real HTTP client against `delta mock-llm`, plus two processes racing to
//! continue one run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::harness::*;

const HANG_TOOLS: &str = r#"tools:
  - name: hang
    description: sleep for a long time
    shell: "echo $$ > tool.pid.tmp; mv tool.pid.tmp tool.pid; sleep 60"
  - name: nap
    description: sleep a little
    exec: "sleep ${seconds}"
"#;

/// Step 0 hangs in a tool (so the run can be interrupted or killed there); step 1 answers
/// with the last user message, which shows whether `-m` arrived.
fn hang_then_answer() -> Value {
    json!({"steps": [
        {"tool": "hang"},
        {"answer": "resumed: {{ last_user }}"}
    ]})
}

/// Starts `delta run` and returns the child once its tool is running, with the tool's pid.
fn start_until_tool_runs(case: &Case, run_id: &str) -> (std::process::Child, i32) {
    let _ = std::fs::remove_file(case.work_dir().join("tool.pid"));
    let child = case
        .spawn_cmd()
        .args(case.run_args(run_id, "the task"))
        .args(["--format", "json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tool_pid = wait_for_pid_file(&case.work_dir().join("tool.pid"), Duration::from_secs(20));
    (child, tool_pid)
}

/// An INTERRUPTED run: Ctrl-C while its tool hangs.
fn interrupted_run(case: &Case, run_id: &str) {
    let (mut child, tool_pid) = start_until_tool_runs(case, run_id);
    send_signal(child.id(), Signal::SIGINT);
    assert_eq!(
        wait_child(&mut child, Duration::from_secs(15)).code(),
        Some(130)
    );
    kill_group(tool_pid);
    assert_eq!(case.metadata(run_id)["status"], "INTERRUPTED");
}

fn count(journal: &[Value], kind: &str) -> usize {
    events_of(journal, kind).len()
}

#[test]
fn interrupted_without_message_resumes() {
    let case = Case::new("cont", HANG_TOOLS, &hang_then_answer());
    interrupted_run(&case, "r1");
    let out = case.continue_run("r1", &[]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "resumed: the task");
    let journal = case.journal("r1");
    assert_seq_strictly_increasing(&journal);
    assert_eq!(count(&journal, "USER_MESSAGE"), 1);
    assert_eq!(count(&journal, "ACTION_RESULT"), 1, "{:?}", types(&journal));
    assert_eq!(case.metadata("r1")["status"], "COMPLETED");
}

#[test]
fn interrupted_with_message_appends_it() {
    let case = Case::new("cont", HANG_TOOLS, &hang_then_answer());
    interrupted_run(&case, "r1");
    let out = case.continue_run("r1", &["-m", "also mention cats"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "resumed: also mention cats");
    let journal = case.journal("r1");
    let users = events_of(&journal, "USER_MESSAGE");
    assert_eq!(users.len(), 2);
    assert_eq!(users[1]["content"], "also mention cats");
    // The appended message comes after the interrupted call's result.
    let kinds = types(&journal);
    let result_at = kinds.iter().position(|t| t == "ACTION_RESULT").unwrap();
    let user_at = kinds.iter().rposition(|t| t == "USER_MESSAGE").unwrap();
    assert!(result_at < user_at, "{kinds:?}");
}

fn ask_then_answer() -> Value {
    json!({"steps": [
        {"tool": "ask_human", "args": {"prompt": "Which colour?"}},
        {"answer": "colour: {{ last_observation }}"}
    ]})
}

#[test]
fn waiting_for_input_takes_the_answer_from_the_message() {
    let case = Case::new("asker", "tools: []\n", &ask_then_answer());
    case.run("r1", "pick a colour", &[]).assert_code(101);
    let without = case.continue_run("r1", &[]);
    without.assert_code(126);
    assert!(
        without.stderr.contains("response.txt"),
        "{}",
        without.stderr
    );

    let out = case.continue_run("r1", &["-m", "blue"]);
    out.assert_code(0);
    let result = out.json()["result"].as_str().unwrap().to_string();
    assert!(
        result.starts_with("colour: ") && result.contains("blue"),
        "{result}"
    );
    let journal = case.journal("r1");
    assert_eq!(count(&journal, "HUMAN_INPUT_RECEIVED"), 1);
    assert_eq!(
        count(&journal, "USER_MESSAGE"),
        1,
        "the answer is not a user message"
    );
    assert!(!case.run_dir("r1").join("interaction/request.json").exists());
}

#[test]
fn waiting_for_input_accepts_a_hand_written_response_file() {
    let case = Case::new("asker", "tools: []\n", &ask_then_answer());
    case.run("r1", "pick a colour", &[]).assert_code(101);
    let interaction = case.run_dir("r1").join("interaction");
    assert!(interaction.join("request.json").is_file());
    std::fs::write(interaction.join("response.txt"), "green\n").unwrap();
    let out = case.continue_run("r1", &[]);
    out.assert_code(0);
    assert!(out.json()["result"].as_str().unwrap().contains("green"));
    assert!(!interaction.join("response.txt").exists());
    assert!(!interaction.join("request.json").exists());
}

#[test]
fn completed_needs_a_message_and_then_continues() {
    let script = json!({"steps": [
        {"answer": "first answer"},
        {"answer": "second answer to {{ last_user }}"}
    ]});
    let case = Case::new("chat", "tools: []\n", &script);
    case.run("r1", "hello", &[]).assert_code(0);
    let refused = case.continue_run("r1", &[]);
    refused.assert_code(126);
    assert!(
        refused.stderr.contains("COMPLETED") && refused.stderr.contains("-m"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty());
    let out = case.continue_run("r1", &["-m", "a follow-up"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "second answer to a follow-up");
    let journal = case.journal("r1");
    assert_eq!(count(&journal, "USER_MESSAGE"), 2);
    assert_seq_strictly_increasing(&journal);
}

/// A FAILED run is retried with a message saying what to do differently, or (issue 31
/// item 16) without one: the same conversation again, keeping the run's iteration cap.
#[test]
fn failed_is_retried_with_a_message_or_as_it_stood() {
    let script = json!({"steps": [
        {"tool": "nap", "args": {"seconds": "0"}},
        {"answer": "retried with: {{ last_user }}"}
    ]});
    let case = Case::new("retry", HANG_TOOLS, &script);
    for run_id in ["r1", "r2"] {
        case.run(run_id, "work", &["--max-iterations", "1"])
            .assert_code(1);
        assert_eq!(case.metadata(run_id)["status"], "FAILED");
    }
    let out = case.continue_run("r1", &["-m", "be quicker"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "retried with: be quicker");
    assert_eq!(case.metadata("r1")["status"], "COMPLETED");

    let out = case.continue_run("r2", &[]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "retried with: work");
    assert_eq!(case.metadata("r2")["status"], "COMPLETED");
    assert_eq!(count(&case.journal("r2"), "USER_MESSAGE"), 1);
}

#[test]
fn running_alive_is_refused_and_running_orphaned_is_resumed() {
    let case = Case::new("cont", HANG_TOOLS, &hang_then_answer());
    let (mut child, tool_pid) = start_until_tool_runs(&case, "r1");
    let meta = case.metadata("r1");
    assert_eq!(meta["status"], "RUNNING");
    let refused = case.continue_run("r1", &[]);
    let pid = meta["pid"].as_u64().unwrap().to_string();
    let host = meta["hostname"].as_str().unwrap().to_string();
    send_signal(child.id(), Signal::SIGKILL);
    wait_child(&mut child, Duration::from_secs(10));
    refused.assert_code(126);
    assert!(refused.stderr.contains("is held"), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&pid) && refused.stderr.contains(&host),
        "names pid {pid} and host {host}: {}",
        refused.stderr
    );

    // The process is gone but metadata still says RUNNING: the janitor takes over.
    assert_eq!(case.metadata("r1")["status"], "RUNNING");
    let out = case.continue_run("r1", &[]);
    kill_group(tool_pid);
    out.assert_code(0);
    assert!(out.stderr.contains("janitor"), "{}", out.stderr);
    assert_eq!(out.json()["result"], "resumed: the task");
    let journal = case.journal("r1");
    let results = events_of(&journal, "ACTION_RESULT");
    assert_eq!(results.len(), 1);
    assert!(
        results[0]["observation_content"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{}",
        results[0]
    );
}

#[test]
fn two_processes_racing_to_continue_one_run_exactly_one_wins() {
    let script = json!({"steps": [
        {"tool": "hang"},
        {"tool": "nap", "args": {"seconds": "1"}},
        {"answer": "done"}
    ]});
    let case = Case::new("racer", HANG_TOOLS, &script);
    interrupted_run(&case, "r1");
    let spawn = || {
        case.spawn_cmd()
            .args(case.continue_args("r1"))
            .args(["--format", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = spawn();
    let second = spawn();
    let outputs = [
        wait_output(first, COMMAND_TIMEOUT),
        wait_output(second, COMMAND_TIMEOUT),
    ];
    let codes: Vec<i32> = outputs.iter().map(|o| o.code).collect();
    let winners = codes.iter().filter(|c| **c == 0).count();
    let losers: Vec<_> = outputs.iter().filter(|o| o.code == 126).collect();
    assert_eq!(
        (winners, losers.len()),
        (1, 1),
        "exit codes {codes:?}: {:?}",
        outputs
            .iter()
            .map(|o| o.stderr.as_str())
            .collect::<Vec<_>>()
    );
    let message = &losers[0].stderr;
    assert!(
        message.contains("lock"),
        "the loser names the lock: {message}"
    );
    assert!(losers[0].stdout.is_empty());
    let journal = case.journal("r1");
    assert_seq_strictly_increasing(&journal);
    assert_eq!(count(&journal, "ENGINE_END"), 2, "{:?}", types(&journal));
    assert_eq!(case.metadata("r1")["status"], "COMPLETED");
}

#[test]
fn killed_after_the_final_answer_was_journaled_completes_without_asking_again() {
    let script = json!({"steps": [
        {"tool": "nap", "args": {"seconds": "0"}},
        {"answer": "the one true answer"}
    ]});
    let case = Case::new("late", HANG_TOOLS, &script);
    case.run("r1", "work", &[]).assert_code(0);
    // What a SIGKILL between the final THOUGHT and ENGINE_END leaves: no ENGINE_END, RUNNING.
    let journal_path = case.run_dir("r1").join("journal.jsonl");
    let text = std::fs::read_to_string(&journal_path).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"ENGINE_END\""))
        .collect();
    std::fs::write(&journal_path, format!("{}\n", kept.join("\n"))).unwrap();
    let meta_path = case.run_dir("r1").join("metadata.json");
    let mut meta = case.metadata("r1");
    meta["status"] = json!("RUNNING");
    meta["result"] = Value::Null;
    std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
    let calls_before = case.mock.stats()["requests_total"].clone();

    let out = case.continue_run("r1", &[]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "the one true answer");
    assert_eq!(
        case.mock.stats()["requests_total"],
        calls_before,
        "model asked again"
    );
    let journal = case.journal("r1");
    assert_eq!(
        events_of(&journal, "THOUGHT").len(),
        2,
        "{:?}",
        types(&journal)
    );
    assert_eq!(journal.last().unwrap()["result"], "the one true answer");
    assert_eq!(case.metadata("r1")["result"], "the one true answer");
}

#[test]
fn killed_after_engine_end_but_before_the_metadata_write_reports_the_finished_run() {
    let script = json!({"steps": [{"answer": "already done"}]});
    let case = Case::new("settled", HANG_TOOLS, &script);
    case.run("r1", "work", &[]).assert_code(0);
    // What a SIGKILL between ENGINE_END and the metadata write leaves: RUNNING metadata, a
    // journal that already says COMPLETED.
    let meta_path = case.run_dir("r1").join("metadata.json");
    let mut meta = case.metadata("r1");
    meta["status"] = json!("RUNNING");
    meta["result"] = Value::Null;
    std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
    let calls_before = case.mock.stats()["requests_total"].clone();

    let out = case.continue_run("r1", &[]);
    out.assert_code(0);
    assert_eq!(out.json()["status"], "COMPLETED");
    assert_eq!(out.json()["result"], "already done");
    assert_eq!(
        case.mock.stats()["requests_total"],
        calls_before,
        "model asked again"
    );
    assert_eq!(case.metadata("r1")["status"], "COMPLETED");
    assert_eq!(count(&case.journal("r1"), "ENGINE_END"), 1);
}

#[test]
fn two_runs_racing_for_one_run_id_exactly_one_wins() {
    let script = json!({"steps": [{"tool": "nap", "args": {"seconds": "0.3"}}, {"answer": "ok"}]});
    let case = Case::new("idrace", HANG_TOOLS, &script);
    let spawn = || {
        case.spawn_cmd()
            .args(case.run_args("same-id", "race"))
            .args(["--format", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (spawn(), spawn());
    let outputs = [
        wait_output(first, COMMAND_TIMEOUT),
        wait_output(second, COMMAND_TIMEOUT),
    ];
    let mut codes: Vec<i32> = outputs.iter().map(|o| o.code).collect();
    codes.sort_unstable();
    assert_eq!(codes, [0, 126], "{outputs:?}");
    let loser = outputs.iter().find(|o| o.code == 126).unwrap();
    assert!(loser.stderr.contains("same-id"), "{}", loser.stderr);
    assert!(loser.stdout.is_empty());
    let journal = case.journal("same-id");
    assert_eq!(events_of(&journal, "ENGINE_START").len(), 1);
    assert_eq!(case.metadata("same-id")["status"], "COMPLETED");
}

#[test]
fn corrupted_journals_are_refused_with_fatal_and_left_untouched() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journals");
    let script = json!({"steps": [{"answer": "one"}, {"answer": "two"}]});
    let case = Case::new("corrupt", "tools: []\n", &script);
    for (run_id, kind, file) in [
        ("pretty", "pretty-printed", "journal.jsonl"),
        ("array", "json-array", "journal.jsonl"),
        ("renamed", "wrong-name", "journal.json"),
    ] {
        case.run(run_id, "hi", &[]).assert_code(0);
        let run_dir = case.run_dir(run_id);
        std::fs::remove_file(run_dir.join("journal.jsonl")).unwrap();
        let bad = run_dir.join(file);
        std::fs::copy(fixtures.join(kind).join(file), &bad).unwrap();
        let before = std::fs::read(&bad).unwrap();
        let out = case.continue_run(run_id, &["-m", "more"]);
        out.assert_code(126);
        assert!(
            out.stderr.contains("FATAL") && out.stderr.contains(&bad.display().to_string()),
            "{kind}: {}",
            out.stderr
        );
        assert_eq!(
            std::fs::read(&bad).unwrap(),
            before,
            "{kind} journal modified"
        );
        assert!(!run_dir.join("journal.jsonl").exists() || file == "journal.jsonl");
    }
}

#[test]
fn the_iteration_cap_applies_to_each_continuation() {
    let nap = json!({"tool": "nap", "args": {"seconds": "0"}});
    let script = json!({"steps": [nap, nap, nap, {"answer": "done"}]});
    let case = Case::new("capped", HANG_TOOLS, &script);
    for run_id in ["enough", "short"] {
        case.run(run_id, "work", &["--max-iterations", "2"])
            .assert_code(1);
        assert_eq!(case.metadata(run_id)["iterations"], 2);
    }
    // Two more iterations are enough to finish (turns 3 and 4)...
    let out = case.continue_run("enough", &["-m", "go on", "--max-iterations", "2"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "done");
    assert_eq!(case.metadata("enough")["iterations"], 4);
    // ...one more is not.
    let out = case.continue_run("short", &["-m", "go on", "--max-iterations", "1"]);
    out.assert_code(1);
    assert!(out.json()["error"].to_string().contains("max_iterations"));
    assert_eq!(case.metadata("short")["iterations"], 3);
}

/// Regression (issue 11 item 17): `continue -w missing` printed a raw OS error.
#[test]
fn continue_with_a_missing_work_dir_says_what_w_must_be() {
    let case = Case::new(
        "nowhere",
        "tools: []\n",
        &json!({"steps": [{"answer": "x"}]}),
    );
    let missing = case.path().join("no-such-ws").display().to_string();
    let out = case.delta(&["continue", "--run-id", "r1", "-w", &missing]);
    out.assert_code(126);
    assert!(out.stderr.contains(&missing), "{}", out.stderr);
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    assert!(
        out.stderr.contains("hint:") && out.stderr.contains(".delta"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("os error"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}

/// Regression (issue 24 item 6): an answer could only be given as an argument, which every
/// local user can read in `/proc/<pid>/cmdline` (`delta serve` passed the page's answers,
/// passwords too, that way), and an answer beginning with `-` was parsed as an option.
/// `--message-file -` reads it from standard input, `--message-file FILE` from a file, as is.
#[test]
fn waiting_for_input_takes_the_answer_from_stdin_or_a_file_even_with_a_leading_dash() {
    let case = Case::new("asker", "tools: []\n", &ask_then_answer());
    case.run("r1", "pick a colour", &[]).assert_code(101);
    let output = case
        .cmd()
        .args(case.continue_args("r1"))
        .args(["--format", "json", "--message-file", "-"])
        .write_stdin("-dark blue\n")
        .output()
        .unwrap();
    let out = Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    out.assert_code(0);
    assert_eq!(out.json()["result"], "colour: -dark blue");

    case.run("r2", "pick a colour", &[]).assert_code(101);
    let file = case.path().join("answer.txt");
    std::fs::write(&file, "--green\r\n").unwrap();
    let out = case.continue_run("r2", &["--message-file", file.to_str().unwrap()]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "colour: --green");
}

/// `--message-file` never waits on a FIFO (nor reads a device or an endless file): a clear
/// error naming the file, exit 126, and the run still waits for its answer.
#[test]
fn a_message_file_that_is_not_a_regular_file_is_refused() {
    let case = Case::new("asker", "tools: []\n", &ask_then_answer());
    case.run("r1", "pick a colour", &[]).assert_code(101);
    let fifo = case.path().join("answer.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for (file, says) in [
        (fifo.to_str().unwrap(), "not a regular file"),
        ("/dev/zero", "not a regular file"),
        ("/no/such/answer.txt", "No such file"),
    ] {
        let out = case.continue_run("r1", &["--message-file", file]);
        out.assert_code(126);
        assert!(
            out.stderr.contains(file) && out.stderr.contains(says),
            "{}",
            out.stderr
        );
    }
    let out = case.continue_run("r1", &["-m", "x", "--message-file", "-"]);
    out.assert_code(2);
    assert_eq!(case.metadata("r1")["status"], "WAITING_FOR_INPUT");
}
