//! Files of a run or an orchestration that a tool replaced (issue 24, items 8 and 13): a
//! FIFO, a symbolic link to `/dev/zero` or to a file elsewhere, in place of `metadata.json`,
//! `journal.jsonl`, a `secrets/` file, an orchestration's journal, `io/` or `sessions.json`.
//! Each used to hang the command (FIFO), eat memory (`/dev/zero`) or write elsewhere (link);
//! now each is refused or listed as UNREADABLE at once, naming the file. Every command is
//! bounded by the harness's timeout: a hang fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::harness::*;

mod creation_lock;
mod hard_links;

pub(super) fn fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap();
}

pub(super) fn link(target: &Path, path: &Path) {
    let _ = std::fs::remove_file(path);
    std::os::unix::fs::symlink(target, path).unwrap();
}

/// A case whose scripted model answers every run at once, with one completed run `r1`.
pub(super) fn case_with_a_run(name: &str) -> Case {
    let case = Case::new(
        name,
        "tools: []\n",
        &json!({"steps": [{"answer": "done"}, {"answer": "again"}, {"answer": "more"}]}),
    );
    case.run("r1", "first", &[]).assert_code(0);
    case
}

/// Regression: a FIFO as a run's `metadata.json` hung `list-runs` for good; a link to
/// `/dev/zero` read until memory ran out. Both are listed as UNREADABLE with the reason.
#[test]
fn list_runs_lists_a_fifo_or_dev_zero_metadata_as_unreadable_at_once() {
    let case = case_with_a_run("list");
    for (run, hostile) in [("piped", "fifo"), ("zeroed", "zero")] {
        let dir = case.run_dir(run);
        std::fs::create_dir_all(&dir).unwrap();
        match hostile {
            "fifo" => fifo(&dir.join("metadata.json")),
            _ => link(Path::new("/dev/zero"), &dir.join("metadata.json")),
        }
    }
    let out = case.delta(&["list-runs", "-w", &case.work_dir().display().to_string()]);
    out.assert_code(0);
    let line = |run: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(run))
            .unwrap_or_else(|| panic!("{run} not listed:\n{}", out.stdout))
            .to_string()
    };
    assert!(line("r1").contains("COMPLETED"), "{}", out.stdout);
    let piped = line("piped");
    assert!(
        piped.contains("UNREADABLE") && piped.contains("FIFO"),
        "{piped}"
    );
    let zeroed = line("zeroed");
    assert!(
        zeroed.contains("UNREADABLE") && zeroed.contains("symbolic link"),
        "{zeroed}"
    );
}

/// Regression: `continue` of a run whose journal is a FIFO hung (and was then deaf to
/// SIGTERM); a link to `/dev/zero` ate memory. Both are refused at once, naming the file.
#[test]
fn continue_refuses_a_fifo_or_dev_zero_journal_at_once() {
    let case = case_with_a_run("journal");
    let journal = case.run_dir("r1").join("journal.jsonl");
    for (hostile, phrase) in [("fifo", "FIFO"), ("zero", "symbolic link")] {
        match hostile {
            "fifo" => fifo(&journal),
            _ => link(Path::new("/dev/zero"), &journal),
        }
        let out = case.continue_run("r1", &["-m", "more"]);
        assert_eq!(out.code, 126, "{hostile}: {out:?}");
        assert!(
            out.stderr.contains("journal.jsonl") && out.stderr.contains(phrase),
            "{hostile}: {}",
            out.stderr
        );
    }
}

/// Regression: `continue` appended to whatever file a link in the journal's place pointed
/// at, and wrote its records into whatever folder a link in `io/`'s place pointed at. Both
/// are refused; the files elsewhere are left as they were.
#[test]
fn continue_never_writes_through_a_link_in_the_run_folder() {
    let case = case_with_a_run("links");
    let run_dir = case.run_dir("r1");
    let outside = case.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();

    // The journal copied away and a link to the copy left in its place (its text still
    // parses as the run's journal; the run's `lock` keeps the journal's own file).
    let moved = outside.join("journal.jsonl");
    std::fs::copy(run_dir.join("journal.jsonl"), &moved).unwrap();
    link(&moved, &run_dir.join("journal.jsonl"));
    let before = std::fs::read(&moved).unwrap();
    let out = case.continue_run("r1", &["-m", "more"]);
    assert_eq!(out.code, 126, "{out:?}");
    assert!(
        out.stderr.contains("journal.jsonl") && out.stderr.contains("symbolic link"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read(&moved).unwrap(), before);
    // The journal's own file back under its name (`lock` is its other name).
    std::fs::remove_file(run_dir.join("journal.jsonl")).unwrap();
    std::fs::hard_link(run_dir.join("lock"), run_dir.join("journal.jsonl")).unwrap();

    // `io/` replaced by a link to a folder elsewhere.
    let records = outside.join("io");
    std::fs::rename(run_dir.join("io"), &records).unwrap();
    link(&records, &run_dir.join("io"));
    let listing = files_under(&records);
    let out = case.continue_run("r1", &["-m", "more"]);
    assert_eq!(out.code, 126, "{out:?}");
    assert!(
        out.stderr.contains("/io") && out.stderr.contains("symbolic link"),
        "{}",
        out.stderr
    );
    assert_eq!(
        files_under(&records),
        listing,
        "a record was written elsewhere"
    );

    // Put back, the run continues.
    std::fs::remove_file(run_dir.join("io")).unwrap();
    std::fs::rename(&records, run_dir.join("io")).unwrap();
    case.continue_run("r1", &["-m", "more"]).assert_code(0);
}

/// Regression: a FIFO among a run's `secrets/` (the stored sensitive answers) hung
/// `continue` while it loaded them. It is skipped; the run continues.
#[test]
fn a_fifo_among_the_runs_secrets_does_not_hang_continue() {
    let case = case_with_a_run("secrets");
    let secrets = case.run_dir("r1").join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    fifo(&secrets.join("call_9_0"));
    let out = case.continue_run("r1", &["-m", "more"]);
    out.assert_code(0);
    assert_eq!(out.json()["status"], "COMPLETED");
}

/// A plan of one run, its agent and its script, in `root`.
fn write_plan(root: &Path) {
    write_agent(&root.join("agent"), "worker", "tools: []\n");
    std::fs::write(
        root.join("plan.yaml"),
        "name: one\ndefaults: { agent: ./agent }\nstages:\n  - { id: work, message: hello }\n",
    )
    .unwrap();
    std::fs::write(root.join("script.yaml"), "steps: [{ answer: done }]\n").unwrap();
}

fn delta_in(root: &Path, args: &[&str]) -> Outcome {
    let output = assert_cmd::Command::cargo_bin("delta")
        .unwrap()
        .current_dir(root)
        .env_remove("DELTA_LOG")
        .args(args)
        .timeout(COMMAND_TIMEOUT)
        .output()
        .unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Regression: a FIFO as an orchestration's scheduling journal hung `list-orchestrations`
/// and `orchestrate --resume`. The listing says UNREADABLE with the reason; the resume
/// ends at once, naming the file.
#[test]
fn a_fifo_orchestration_journal_is_unreadable_not_waited_on() {
    let root = tempfile::tempdir().unwrap();
    write_plan(root.path());
    let plan = [
        "orchestrate",
        "plan.yaml",
        "-w",
        "ws",
        "--llm-script",
        "script.yaml",
    ];
    delta_in(root.path(), &plan).assert_code(0);
    let orchestrations = root.path().join("ws/.delta/orchestrations");
    let id = std::fs::read_dir(&orchestrations)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    fifo(&orchestrations.join(&id).join("journal.jsonl"));

    let out = delta_in(root.path(), &["list-orchestrations", "-w", "ws"]);
    out.assert_code(0);
    let line = out.stdout.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(
        line.contains("UNREADABLE") && line.contains("FIFO"),
        "{line}"
    );

    let mut resume = plan.to_vec();
    resume.extend(["--resume", &id]);
    let out = delta_in(root.path(), &resume);
    assert_ne!(out.code, 0, "{out:?}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("journal.jsonl") && said.contains("FIFO"),
        "{said}"
    );
}

/// Regression: a FIFO as `delta serve`'s `sessions.json` hung the server's start. It
/// refuses to start at once, naming the file.
#[test]
fn serve_refuses_a_fifo_sessions_file_at_once() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    // Private, as serve wants its state folder.
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&state)
        .unwrap();
    std::fs::create_dir_all(root.path().join("rt")).unwrap();
    fifo(&state.join("sessions.json"));
    let child = std::process::Command::new(delta_exe())
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(&state)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", root.path())
        .env("XDG_RUNTIME_DIR", root.path().join("rt"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(20));
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("sessions.json") && out.stderr.contains("FIFO"),
        "{}",
        out.stderr
    );
}

/// Regression (issue 24, item 9): a context source had no size limit, and
/// `${CWD}/DELTA.md` is writable by tools (a 3 GiB file took 5.9 GiB of memory in 15 s).
/// Over its `max_bytes` (default 1 MiB) the run fails with `context_error`, naming the source
/// and the setting, before any model call; raised in context.yaml, the same file is read.
#[test]
fn a_workspace_guide_over_its_max_bytes_fails_the_run_naming_the_setting() {
    let case = Case::new(
        "big-guide",
        "tools: []\n",
        &json!({"steps": [{"answer": "ok"}]}),
    );
    let guide = "  - type: file\n    id: workspace_guide\n    path: '${CWD}/DELTA.md'\n    on_missing: skip\n";
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!("{CONTEXT_YAML}{guide}"),
    )
    .unwrap();
    std::fs::write(
        case.work_dir().join("DELTA.md"),
        "x".repeat(2 * 1024 * 1024),
    )
    .unwrap();
    let out = case.run("r1", "task", &[]);
    out.assert_code(1);
    let result = out.json();
    assert_eq!(result["error"]["type"], "context_error", "{result}");
    let message = result["error"]["message"].as_str().unwrap();
    for phrase in ["'workspace_guide'", "DELTA.md", "1048576", "`max_bytes`"] {
        assert!(message.contains(phrase), "{phrase}: {message}");
    }
    assert_eq!(case.mock.stats()["requests_total"], 0);

    // Raised for that source and for the context as a whole, it is read.
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!("max_bytes: 8388608\n{CONTEXT_YAML}{guide}    max_bytes: 4194304\n"),
    )
    .unwrap();
    case.run("r2", "task", &[]).assert_code(0);

    // A setting that is not a size is refused at load, naming the key.
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!("{CONTEXT_YAML}{guide}    max_bytes: 0\n"),
    )
    .unwrap();
    let out = case.run("r3", "task", &[]);
    out.assert_code(126);
    assert!(
        out.stderr.contains("sources[2].max_bytes"),
        "{}",
        out.stderr
    );
}

/// Writes a planned-run file for `exec-planned`: stage `work`, item 0 of orchestration
/// folder `dir`, with `orchestration_id` and `work_dir` as given.
fn write_handoff(dir: &Path, orchestration_id: &str, work_dir: &Path) {
    let file = dir.join("slurm/runs/work/0.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let planned = json!({
        "orchestration_id": orchestration_id, "run_id": "r-0", "stage": "work", "index": 0,
        "agent": "/nonexistent/agent", "work_dir": work_dir, "plan_dir": "/nonexistent",
        "launch": {"kind": "new", "task": "t"}, "max_iterations": null, "timeout_ms": null,
        "llm_route": "0", "llm_request_timeout_ms": null, "llm_idle_timeout_ms": null
    });
    std::fs::write(&file, planned.to_string()).unwrap();
}

/// Regression (issue 24, item 13): `exec-planned` ran whatever run a planned-run file named,
/// in whatever folder and under whatever orchestration id (anyone who can write the shared
/// folder can write that file). Both are checked against the folder the file is in.
#[test]
fn exec_planned_refuses_a_handoff_naming_another_workspace_or_orchestration() {
    let root = tempfile::tempdir().unwrap();
    let workspace = root.path().join("ws");
    let dir = workspace.join(".delta/orchestrations/o-1");
    let elsewhere = root.path().join("home-of-someone");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    for (id, work_dir, phrase) in [
        ("o-1", &elsewhere, "work folder"),
        ("o-2", &workspace, "names orchestration"),
    ] {
        write_handoff(&dir, id, work_dir);
        let output = assert_cmd::Command::cargo_bin("delta")
            .unwrap()
            .args(["exec-planned"])
            .arg(&dir)
            .args(["work", "0"])
            .env_remove("DELTA_LOG")
            .env("DELTA_BASE_URL", "http://127.0.0.1:9/v1")
            .env("DELTA_RELAY_TOKEN", "t")
            .timeout(COMMAND_TIMEOUT)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(126), "{stderr}");
        assert!(stderr.contains(phrase), "{phrase}: {stderr}");
    }
    // The genuine file gets past the check (and fails later, on its missing agent).
    write_handoff(&dir, "o-1", &workspace);
    let output = assert_cmd::Command::cargo_bin("delta")
        .unwrap()
        .args(["exec-planned"])
        .arg(&dir)
        .args(["work", "0"])
        .env("DELTA_BASE_URL", "http://127.0.0.1:9/v1")
        .env("DELTA_RELAY_TOKEN", "t")
        .timeout(COMMAND_TIMEOUT)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/agent"), "{stderr}");
}
