//! `delta exec-planned`, the job-side subcommand, against careless or hostile arguments: a
//! stage that would leave the orchestration folder, a missing folder, a planned-run file
//! that is a named pipe, a huge index, a missing relay environment. Each is a clear error
//! with exit 126 (2 for what clap refuses), at once; no cluster is needed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn exec_planned(dir: &std::path::Path, stage: &str, index: &str) -> (Option<i32>, String) {
    let started = Instant::now();
    let out = Command::new(assert_cmd::cargo::cargo_bin("delta"))
        .args(["exec-planned"])
        .arg(dir)
        .args([stage, index])
        .env_remove("DELTA_LOG")
        .env("DELTA_BASE_URL", "http://127.0.0.1:9/v1")
        .env("DELTA_RELAY_TOKEN", "t")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "exec-planned {stage} {index} took {:?}",
        started.elapsed()
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn exec_planned_refuses_hostile_arguments_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let orchestration = dir.path().join("orch");
    std::fs::create_dir_all(orchestration.join("slurm/runs/map")).unwrap();

    let (code, stderr) = exec_planned(&orchestration, "../../etc", "0");
    assert_eq!(code, Some(126), "{stderr}");
    assert!(stderr.contains("../../etc"), "{stderr}");

    let (code, stderr) = exec_planned(&dir.path().join("missing"), "map", "0");
    assert_eq!(code, Some(126), "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");

    // A named pipe where the planned run should be: refused, not read (which would hang).
    let fifo = orchestration.join("slurm/runs/map/0.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let (code, stderr) = exec_planned(&orchestration, "map", "0");
    assert_eq!(code, Some(126), "{stderr}");
    assert!(stderr.contains("named pipe"), "{stderr}");

    let (code, stderr) = exec_planned(&orchestration, "map", "99999999999999999999999");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("<INDEX>"), "{stderr}");
}
