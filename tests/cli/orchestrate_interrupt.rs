//! CLI tests of an interrupted orchestration (issue 11 items 11 and 13): five items at two
//! at a time, SIGINT while two runs sleep in a tool and one item never started. Every view
//! of the counts agrees (2 completed, 2 interrupted, 1 not started of 5: JSON, summary.json,
//! the text header and stage line); the printed "Resume with:" command works as printed from
//! another folder; and the resume's progress starts at the 2 runs already done.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::orchestrate::{delta_in, write_agent};

const PLAN: &str = "name: halt\nmax_parallel: 2\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, slow-c, slow-d, slow-e] }\n    message: \"item {{ item }}\"\n";

/// The slow items sleep in a tool (first attempt only: a continued run answers at once).
const SCRIPT: &str = "rules:\n  - task_contains: slow\n    steps:\n      - tool: nap\n        args: { name: \"{{ task | replace('item ', '') }}\" }\n      - answer: \"done {{ task }}\"\n  - steps: [{ answer: \"done {{ task }}\" }]\n";

/// A plan folder with the worker whose `nap` tool sleeps `sleep` seconds (each test its own
/// duration: sleepers are counted by command line) until the workspace holds `no-more-naps`
/// (so the item that never started does not sleep when the orchestration is resumed).
fn fixture(sleep: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_agent(
        dir.path(),
        "worker",
        &format!(
            "  - name: nap\n    shell: \"touch started-${{name}}; test -e no-more-naps || sleep {sleep}\"\n"
        ),
    );
    std::fs::write(dir.path().join("plan.yaml"), PLAN).unwrap();
    std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
    dir
}

/// Live processes running `sleep <duration>` (by their command line).
fn sleepers(duration: &str) -> usize {
    let wanted = format!("sleep\0{duration}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|cmdline| cmdline == wanted.as_bytes())
        .count()
}

struct Interrupted {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Starts the plan with `extra` flags, waits until both slow runs sleep (the two fast ones
/// have completed, as only two run at once), sends SIGINT and collects the outputs.
fn interrupt_midway(root: &Path, sleep: &str, extra: &[&str]) -> Interrupted {
    interrupt_midway_with(root, sleep, extra, false)
}

/// [`interrupt_midway`]; with `twice`, a second SIGINT follows as soon as the first is
/// acknowledged on stderr (what GNU `timeout` and a group-wide Ctrl-C deliver).
fn interrupt_midway_with(root: &Path, sleep: &str, extra: &[&str], twice: bool) -> Interrupted {
    let mut child = delta_in(root)
        .args([
            "orchestrate",
            "plan.yaml",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (line_tx, line_rx) = std::sync::mpsc::channel::<String>();
    let stderr_lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .inspect(|line| {
                let _ = line_tx.send(line.clone());
            })
            .collect::<Vec<String>>()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(root.join("ws/started-slow-c").exists()
        && root.join("ws/started-slow-d").exists()
        && sleepers(sleep) == 2)
    {
        assert!(Instant::now() < deadline, "the slow runs never slept");
        assert!(child.try_wait().unwrap().is_none(), "delta exited early");
        std::thread::sleep(Duration::from_millis(10));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    if twice {
        let acknowledged = line_rx
            .iter()
            .any(|line| line.starts_with("interrupted by SIGINT"));
        assert!(acknowledged, "the first SIGINT was not acknowledged");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    }
    let status = crate::harness::wait_child(&mut child, Duration::from_secs(30));
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let stderr = stderr_lines.join().unwrap().join("\n");
    assert_eq!(sleepers(sleep), 0, "tools left running");
    std::fs::write(root.join("ws/no-more-naps"), "").unwrap();
    Interrupted {
        code: status.code(),
        stdout,
        stderr,
    }
}

fn counts(value: &Value) -> (u64, u64, u64, u64, u64) {
    let n = |key: &str| {
        value[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {value:#}"))
    };
    (
        n("total"),
        n("completed"),
        n("failed"),
        n("interrupted"),
        n("not_started"),
    )
}

#[test]
fn interrupted_counts_agree_everywhere_and_resume_progress_starts_at_done_runs() {
    let dir = fixture("29.541");
    let root = dir.path();
    let out = interrupt_midway(root, "29.541", &["--format", "json"]);
    assert_eq!(out.code, Some(130), "{}", out.stderr);
    let summary: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(summary["status"], "INTERRUPTED");
    let work = &summary["stages"][0];
    assert_eq!(counts(work), (5, 2, 0, 2, 1), "{work:#}");
    assert_eq!(counts(&summary["totals"]), (5, 2, 0, 2, 1));
    assert_eq!(
        work["runs"].as_array().unwrap().len(),
        4,
        "rows of runs that ran"
    );
    let id = summary["orchestration_id"].as_str().unwrap();
    let saved = root
        .join("ws/.delta/orchestrations")
        .join(id)
        .join("summary.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
    assert_eq!(saved, summary, "summary.json is what was printed");
    assert!(
        out.stderr.contains("Resume with: "),
        "the hint goes to stderr with --format json: {}",
        out.stderr
    );

    let resumed = delta_in(root)
        .args([
            "orchestrate",
            "plan.yaml",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ])
        .args(["--resume", id, "--format", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("stage work: 5 run(s), 2 already done (2 completed, 0 failed of 2)"),
        "progress must start at the runs already done:\n{stderr}"
    );
    let summary: Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(counts(&summary["totals"]), (5, 5, 0, 0, 0));
}

#[test]
fn the_printed_resume_command_works_as_printed() {
    let dir = fixture("29.542");
    let root = dir.path();
    let out = interrupt_midway(root, "29.542", &[]);
    assert_eq!(out.code, Some(130), "{}", out.stderr);
    for line in [
        "Runs:      2 completed, 0 failed, 2 interrupted, 1 not started of 5",
        "stage work  Interrupted  (2 completed, 0 failed, 2 interrupted, 1 not started of 5)",
        "  (1 more not started)",
    ] {
        assert!(out.stdout.contains(line), "{line}:\n{}", out.stdout);
    }
    let hint = out
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("Resume with: "))
        .unwrap_or_else(|| panic!("no resume hint in\n{}", out.stdout));
    assert!(hint.contains("--llm-script"), "{hint}");
    assert!(hint.contains(" -w "), "{hint}");

    // Exactly as printed, through a shell, from somewhere else.
    let elsewhere = tempfile::tempdir().unwrap();
    let resumed = Command::new("sh")
        .args(["-c", hint])
        .current_dir(elsewhere.path())
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{hint}\n{stdout}\n{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(stdout.contains("COMPLETED"), "{stdout}");
    assert!(
        stdout.contains("Runs:      5 completed, 0 failed of 5"),
        "{stdout}"
    );
}

/// Issue 24 item 17: `timeout -s INT 4 delta orchestrate ...` signals delta and then its
/// process group, so one Ctrl-C arrives twice within microseconds; the second used to force
/// an exit without the summary or the resume command. A second SIGINT within a second is the
/// same Ctrl-C: the runs stop at their safe point, the summary and "Resume with:" print.
#[test]
fn two_sigints_within_a_second_are_one_ctrl_c_and_the_summary_still_prints() {
    let dir = fixture("29.543");
    let root = dir.path();
    let out = interrupt_midway_with(root, "29.543", &["--format", "json"], true);
    assert_eq!(out.code, Some(130), "{}", out.stderr);
    assert!(
        !out.stderr.contains("exiting now"),
        "the second SIGINT forced the exit:\n{}",
        out.stderr
    );
    let summary: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("no summary on stdout ({e}):\n{}", out.stderr));
    assert_eq!(summary["status"], "INTERRUPTED");
    assert_eq!(counts(&summary["totals"]), (5, 2, 0, 2, 1));
    let hint = out
        .stderr
        .lines()
        .find_map(|line| line.strip_prefix("Resume with: "))
        .unwrap_or_else(|| panic!("no resume hint in\n{}", out.stderr));
    // The workspace's listing prints the same command.
    let listed = delta_in(root)
        .args(["list-orchestrations", "-w", "ws"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        table.contains(&format!("resume it with `{hint}`")),
        "{hint}\n{table}"
    );
}
