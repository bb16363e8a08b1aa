//! CLI tests of issue 31's "newcomer's first hour" items on the command line: errors in the
//! order a newcomer meets them (item 16: a `DELTA_BASE_URL` without `http://` reported as a
//! missing key; `--help` silent on the three variables; a run failed on a connection error
//! that `continue` would not retry without an invented `-m`), the run's iteration cap kept
//! by `continue` and shown counting to where the continuation stops (item 15), what a
//! stage's `timeout` counts said by `--dry-run` (item 14), and `delta --help`'s quick start,
//! run as written in a fresh folder (item 19).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::json;

use crate::harness::*;

/// Issue 31 item 16: `DELTA_BASE_URL=127.0.0.1:8080/v1` without a key was reported as "no
/// API key" (only an `http://` URL is known to be on this machine). The URL is checked first,
/// and the error writes it as it should be and says a local server needs no key.
#[test]
fn a_base_url_without_its_scheme_is_reported_before_a_missing_key() {
    let case = Case::new("nokey", "tools: []\n", &json!({"steps": [{"answer": "x"}]}));
    for command in ["run", "orchestrate"] {
        let mut cmd = case.cmd();
        cmd.env_remove("DELTA_API_KEY")
            .env("DELTA_BASE_URL", "127.0.0.1:8080/v1");
        let out = if command == "run" {
            cmd.args(case.run_args("r1", "task")).output().unwrap()
        } else {
            std::fs::write(
                case.path().join("plan.yaml"),
                "defaults: { agent: ./agent }\nstages:\n  - { id: one, message: m }\n",
            )
            .unwrap();
            cmd.args(["orchestrate", "plan.yaml", "--dry-run"])
                .output()
                .unwrap()
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{command}: {stderr}");
        assert!(
            stderr.contains("DELTA_BASE_URL='127.0.0.1:8080/v1' is not an http:// or https:// URL")
                && stderr.contains("DELTA_BASE_URL=http://127.0.0.1:8080/v1")
                && stderr.contains("needs no API key"),
            "{command}: {stderr}"
        );
        assert!(!stderr.contains("no API key:"), "{command}: {stderr}");
    }
    assert!(!case.work_dir().join(".delta/r1").exists());
}

/// Issue 31 item 16: `delta run --help` and `orchestrate --help` named none of the three
/// variables that choose the model.
#[test]
fn run_continue_and_orchestrate_help_name_the_model_variables() {
    let case = Case::new("help", "tools: []\n", &json!({"steps": [{"answer": "x"}]}));
    for command in ["run", "continue", "orchestrate"] {
        let help = case.delta(&[command, "--help"]);
        help.assert_code(0);
        for variable in ["DELTA_BASE_URL", "DELTA_API_KEY", "DELTA_MODEL"] {
            assert!(
                help.stdout.contains(variable),
                "`delta {command} --help` does not name {variable}:\n{}",
                help.stdout
            );
        }
        assert!(help.stdout.contains("needs none"), "{}", help.stdout);
    }
}

/// A port nothing listens on (taken from the kernel, then let go).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Issue 31 item 16: a run that failed on a connection error (the server was not up yet)
/// could be retried only by inventing a `-m`. `delta continue` without one sends the same
/// conversation again, and the text result says so.
#[test]
fn a_run_failed_on_a_connection_error_is_retried_by_continue_without_a_message() {
    let case = Case::new(
        "retry",
        "tools: []\n",
        &json!({"steps": [{"answer": "answered on the retry"}]}),
    );
    let down = format!("http://127.0.0.1:{}/v1", closed_port());
    let failed = case
        .cmd()
        .env("DELTA_BASE_URL", &down)
        .args(case.run_args("r1", "say something"))
        .output()
        .unwrap();
    let failed = Outcome {
        code: failed.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&failed.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&failed.stderr).into_owned(),
    };
    failed.assert_code(1);
    assert_eq!(case.metadata("r1")["status"], "FAILED");
    // The text result offers the plain retry first, then the one with a hint.
    let retry_line = failed
        .stdout
        .lines()
        .find(|line| line.starts_with("Retry with:"))
        .unwrap_or_else(|| panic!("{}", failed.stdout));
    assert!(
        retry_line.contains("continue --run-id r1") && !retry_line.contains(" -m "),
        "{retry_line}"
    );

    let retried = case.continue_run("r1", &[]);
    retried.assert_code(0);
    assert_eq!(retried.json()["result"], "answered on the retry");
    let journal = case.journal("r1");
    assert_eq!(
        events_of(&journal, "USER_MESSAGE").len(),
        1,
        "no message invented: {:?}",
        types(&journal)
    );
}

/// Issue 31 item 15: `delta continue` dropped the run's `--max-iterations` (back to the
/// agent's cap), printed `[iteration 7/6]`-style counts (the whole-life iteration over the
/// continuation's own cap), and the printed command left the flag out.
#[test]
fn continue_keeps_the_runs_iteration_cap_and_counts_to_where_it_stops() {
    let steps: Vec<serde_json::Value> = (0..6)
        .map(|i| json!({"tool": "say", "args": {"text": format!("step {i}")}}))
        .chain(std::iter::once(json!({"answer": "done"})))
        .collect();
    let case = Case::new(
        "capped",
        "max_iterations: 30\ntools:\n  - name: say\n    exec: \"echo ${text}\"\n",
        &json!({ "steps": steps }),
    );
    let first = case
        .cmd()
        .args(case.run_args("r1", "go"))
        .args(["--max-iterations", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&first.stdout);
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert_eq!(first.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("[iteration 2/2]"), "{stderr}");
    assert!(
        stdout.contains("--max-iterations 2"),
        "the printed command keeps the cap: {stdout}"
    );
    assert_eq!(case.metadata("r1")["max_iterations_requested"], 2);

    // No flag, no message: the run keeps its cap of 2, counted from iteration 3.
    let again = case.cmd().args(case.continue_args("r1")).output().unwrap();
    let stdout = String::from_utf8_lossy(&again.stdout);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("[iteration 3/4]") && stderr.contains("[iteration 4/4]"),
        "{stderr}"
    );
    assert!(!stderr.contains("[iteration 5"), "{stderr}");
    assert!(stdout.contains("--max-iterations 2"), "{stdout}");
    let meta = case.metadata("r1");
    assert_eq!(
        (meta["iterations"].as_u64(), meta["max_iterations"].as_u64()),
        (Some(4), Some(2)),
        "{meta}"
    );

    // Given again, the new cap applies and is kept.
    let last = case.continue_run("r1", &["--max-iterations", "5"]);
    last.assert_code(0);
    assert_eq!(last.json()["result"], "done");
    assert_eq!(case.metadata("r1")["max_iterations_requested"], 5);
}

/// Issue 31 item 14: `--dry-run` says what a stage's `timeout` counts (each run's own time,
/// not its wait behind `max_in_flight`).
#[test]
fn the_dry_run_says_a_stage_timeout_counts_each_runs_own_time() {
    let case = Case::new(
        "worker",
        "tools: []\n",
        &json!({"steps": [{"answer": "x"}]}),
    );
    std::fs::write(
        case.path().join("plan.yaml"),
        "llm: { max_in_flight: 1 }\ndefaults: { agent: ./agent, timeout: 5m }\nstages:\n  - id: work\n    foreach: { items: [a, b, c] }\n    message: \"{{ item }}\"\n",
    )
    .unwrap();
    let dry = case.delta(&["orchestrate", "plan.yaml", "--dry-run"]);
    dry.assert_code(0);
    assert!(
        dry.stdout.contains("timeout 300 s of each run's own time"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout
            .contains("Time a run waits for the endpoint (behind `llm.max_in_flight`"),
        "{}",
        dry.stdout
    );
}

/// The commands of the `Quick start:` block of `delta --help`, one per line (the text after
/// two spaces of explanation dropped).
fn quick_start_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Quick start:"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .map(|line| {
            let command = line.trim();
            // The explanation is set off by three spaces or more.
            command
                .split("   ")
                .next()
                .unwrap_or(command)
                .trim()
                .to_owned()
        })
        .collect()
}

/// Issue 31 item 19: `delta --help`'s quick start ran a script `delta init` does not write.
/// Its commands run as written in an empty folder (the one that needs a model server is
/// only checked to name the variable), with nothing but the built `delta`.
#[test]
fn the_quick_start_of_delta_help_runs_as_written_in_an_empty_folder() {
    let folder = tempfile::tempdir().unwrap();
    let help = assert_cmd::Command::cargo_bin("delta")
        .unwrap()
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let commands = quick_start_commands(&help);
    assert!(commands.len() >= 3, "{help}");
    let bin_dir = delta_exe().parent().unwrap().to_path_buf();
    let mut ran = 0;
    for command in &commands {
        if command.starts_with("DELTA_BASE_URL=") {
            continue;
        }
        assert!(command.starts_with("delta "), "{command}");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(folder.path())
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
            .env("HOME", folder.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "`{command}` failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert_eq!(ran, 3, "{commands:?}");
    assert!(Path::new(&folder.path().join("demo/llm-script.yaml")).is_file());
    assert!(commands
        .iter()
        .any(|c| c.starts_with("DELTA_BASE_URL=http://127.0.0.1")));
}
