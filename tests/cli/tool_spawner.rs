//! CLI tests of the tool spawner: `delta run` starts its tools from its own `delta __spawner`
//! process, which holds a handful of descriptors and, when the engine is SIGKILLed, takes
//! every process of the running tool with it; the hidden subcommand refuses to run by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;

use crate::harness::*;

const LIMIT: Duration = Duration::from_secs(20);

/// A tool that records its pid (its process group's id) and sleeps, with a grandchild.
const SLEEPING_TOOL: &str = r#"tools:
  - name: hang
    description: sleep for a long time
    shell: "echo $$ > tool.pid.tmp; mv tool.pid.tmp tool.pid; sleep 300 & sleep 300"
"#;

/// Field `index` (1-based, as in proc(5)) of /proc/<pid>/stat.
fn stat_field(pid: i32, index: usize) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    after_name.split_whitespace().nth(index - 3)?.parse().ok()
}

/// Living (non-zombie) processes of process group `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| stat_field(*pid, 5) == Some(pgid) && process_alive(*pid))
        .collect()
}

fn descriptors(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Descriptors of `pid` from 3 on that a child of it inherits (no close-on-exec).
fn inheritable(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
        .filter(|entry| {
            let fd: i32 = entry.file_name().to_string_lossy().parse().unwrap_or(0);
            let info = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let flags = info
                .lines()
                .find_map(|line| line.strip_prefix("flags:"))
                .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
                .unwrap_or(0o2000000);
            fd >= 3 && flags & 0o2000000 == 0
        })
        .count()
}

#[test]
fn sigkill_of_the_engine_ends_the_spawner_and_every_process_of_the_running_tool() {
    let case = Case::new(
        "spawned",
        SLEEPING_TOOL,
        &json!({"steps": [{"tool": "hang"}]}),
    );
    let mut engine = case
        .spawn_cmd()
        .args(case.run_args("r1", "sleep"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tool = wait_for_pid_file(&case.work_dir().join("tool.pid"), LIMIT);
    let spawner = stat_field(tool, 4).unwrap();
    let engine_pid = engine.id() as i32;
    assert_eq!(
        stat_field(spawner, 4),
        Some(engine_pid),
        "the tool's parent is the engine's child"
    );
    let cmdline = std::fs::read(format!("/proc/{spawner}/cmdline")).unwrap();
    assert!(String::from_utf8_lossy(&cmdline).contains("__spawner"));
    assert_eq!(
        stat_field(tool, 5),
        Some(tool),
        "the tool leads its own group"
    );
    assert!(
        wait_until(LIMIT, || group_members(tool).len() >= 2),
        "the grandchild started"
    );
    // stdio (the control socket as stdin), the SIGCHLD wake pipe, /dev/null; plus what the
    // engine itself inherited from this test without close-on-exec. The tool can be running
    // before the spawner thread that started it has closed the request's descriptors (on a
    // loaded machine it waits for a CPU in between), so the count must *settle* there; a
    // spawner that kept them would stay above it until the deadline.
    let mut own = usize::MAX;
    let settled = wait_until(LIMIT, || {
        own = descriptors(spawner);
        own <= 6 + inheritable(engine_pid)
    });
    assert!(settled, "the spawner holds {own} descriptors");
    assert!(descriptors(engine_pid) > own);

    send_signal(engine.id(), Signal::SIGKILL);
    wait_child(&mut engine, LIMIT);
    let all_gone = wait_until(LIMIT, || {
        !process_alive(spawner) && group_members(tool).is_empty()
    });
    if !all_gone {
        kill_group(tool);
        kill_pid(spawner);
    }
    assert!(
        all_gone,
        "spawner {spawner} or a process of tool group {tool} outlived the engine"
    );
}

#[test]
fn the_spawner_subcommand_run_by_hand_explains_itself_and_exits_2() {
    let case = Case::new(
        "spawned",
        SLEEPING_TOOL,
        &json!({"steps": [{"answer": "unused"}]}),
    );
    let child = case
        .spawn_cmd()
        .arg("__spawner")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, LIMIT);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr
            .contains("error: delta __spawner: this command is internal to delta"),
        "{}",
        out.stderr
    );
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn bench_spawn_reports_three_phases_as_json() {
    let output = assert_cmd::Command::cargo_bin("delta")
        .unwrap()
        .args(["bench", "spawn", "--spawns", "5", "--descriptors", "50"])
        .args(["--format", "json"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let phases = report["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "in-process, few descriptors",
            "in-process, many descriptors",
            "tool spawner, many descriptors"
        ]
    );
    let open = |i: usize| phases[i]["open_descriptors"].as_u64().unwrap();
    assert!(open(1) >= open(0) + 50 && open(2) == open(1), "{phases:?}");
    for phase in phases {
        assert!(phase["cpu_ms_per_spawn"].as_f64().unwrap() > 0.0, "{phase}");
    }
    assert!(report["spawner_over_fresh"].as_f64().unwrap() > 0.0);
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn bench_spawn_refuses_zero_spawns_with_a_usage_error() {
    let output = assert_cmd::Command::cargo_bin("delta")
        .unwrap()
        .args(["bench", "spawn", "--spawns", "0"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--spawns must be 1..="), "{stderr}");
}

/// The command lines of the tools' parents, as the bench's tool recorded them.
fn tool_parents(root: &std::path::Path) -> Vec<String> {
    files_under(root)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "parent.txt"))
        .filter(|p| !p.starts_with(root.join("calibration")))
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).replace('\0', " "))
        .collect()
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn bench_load_starts_tools_through_the_spawner_unless_told_not_to() {
    for (mode, expected) in [("on", "__spawner"), ("off", "bench load")] {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        // A script file: exec-mode tools refuse shell syntax in their command.
        let probe = dir.path().join("probe.sh");
        std::fs::write(&probe, "cat /proc/$PPID/cmdline > parent.txt\n").unwrap();
        let output = assert_cmd::Command::cargo_bin("delta")
            .unwrap()
            .args([
                "bench",
                "load",
                "--runs",
                "2",
                "--max-parallel",
                "2",
                "--calls",
                "2",
            ])
            .args(["--tool", &format!("sh {}", probe.display())])
            .args(["--tool-spawner", mode, "--keep", "--format", "json"])
            .arg("--work-dir")
            .arg(&work)
            .current_dir(dir.path())
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{mode}: {output:?}");
        // Regression: the spawn-rate calibration ran the tool in the current directory,
        // which left a parent.txt in the repository.
        assert!(!dir.path().join("parent.txt").exists(), "{mode}");
        let parents = tool_parents(&work);
        assert_eq!(parents.len(), 2, "{mode}: {parents:?}");
        assert!(
            parents.iter().all(|p| p.contains(expected)),
            "{mode}: {parents:?}"
        );
    }
}
