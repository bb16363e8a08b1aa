//! What `--executor slurm` leaves on disk, on a real cluster: `--check` leaves no new
//! workspace (nor probe folder) behind, and an orchestration's `slurm/` folders are 0700
//! whatever the umask (they were 0755 under the usual 022).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cluster::{cancel_orchestration_jobs, cluster_or_skip, delta_in, Orchestration};

/// The map-reduce example with only its first two data files, copied into `dir`.
fn small_map_reduce(dir: &Path) -> PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plans/map-reduce");
    let copy = dir.join("map-reduce");
    crate::harness::copy_dir(&example.join("agents"), &copy.join("agents"));
    std::fs::create_dir_all(copy.join("data")).unwrap();
    for file in [
        "plan.yaml",
        "llm-script.yaml",
        "data/item-01.txt",
        "data/item-02.txt",
    ] {
        std::fs::copy(example.join(file), copy.join(file)).unwrap();
    }
    copy
}

fn check(plan_dir: &Path, extra: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = delta_in(plan_dir)
        .args(["orchestrate", "plan.yaml", "--executor", "slurm", "--check"])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn slurm_check_leaves_no_new_workspace_behind() {
    if !cluster_or_skip("slurm_check_leaves_no_new_workspace_behind") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let plan_dir = small_map_reduce(root.path());
    // No -w and no `workspace:` in the plan: the next workspaces/W00N is probed.
    let (code, stderr) = check(&plan_dir, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("wrote into the workspace"), "{stderr}");
    assert!(
        !plan_dir.join("workspaces").exists(),
        "the check left {:?}",
        std::fs::read_dir(plan_dir.join("workspaces")).map(|d| d.count())
    );
    // A -w that does not exist yet: made for the probe, removed after it.
    let fresh = root.path().join("fresh").join("ws");
    let (code, stderr) = check(&plan_dir, &["-w".as_ref(), fresh.as_os_str()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !root.path().join("fresh").exists(),
        "the check left {fresh:?}"
    );
    // An existing workspace keeps what it had, and gets nothing of the probe's.
    let existing = root.path().join("existing");
    std::fs::create_dir_all(&existing).unwrap();
    std::fs::write(existing.join("notes.txt"), "mine").unwrap();
    let (code, stderr) = check(&plan_dir, &["-w".as_ref(), existing.as_os_str()]);
    assert_eq!(code, Some(0), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&existing)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["notes.txt"], "{left:?}");
}

#[test]
fn slurm_orchestration_folders_are_private_whatever_the_umask() {
    if !cluster_or_skip("slurm_orchestration_folders_are_private_whatever_the_umask") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let plan_dir = small_map_reduce(root.path());
    let ws = root.path().join("ws");
    // The usual umask, set explicitly: under it, folders made without a mode are 0755.
    let mut command = std::process::Command::new("sh");
    command
        .current_dir(&plan_dir)
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .env_remove("DELTA_API_KEY")
        .env_remove("DELTA_BASE_URL")
        .args(["-c", "umask 022 && exec \"$0\" \"$@\""])
        .arg(assert_cmd::cargo::cargo_bin("delta"))
        .args([
            "orchestrate",
            "plan.yaml",
            "--executor",
            "slurm",
            "--relay-listen",
            "127.0.0.1:0",
            "--llm-script",
            "llm-script.yaml",
            "--format",
            "json",
            "-w",
        ])
        .arg(&ws);
    let mut orchestration = Orchestration::spawn(command);
    let id = orchestration.id();
    let (code, _, stderr) = orchestration.finish(Duration::from_secs(180));
    cancel_orchestration_jobs(&id);
    assert_eq!(code, Some(0), "{stderr}");
    let dir = ws.join(".delta/orchestrations").join(&id);
    let mut folders = vec![dir.join("slurm")];
    let mut checked = Vec::new();
    while let Some(folder) = folders.pop() {
        let mode = std::fs::metadata(&folder).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{folder:?} is {mode:o}");
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                folders.push(entry.path());
            }
        }
        checked.push(folder);
    }
    for expected in ["slurm", "slurm/runs", "slurm/runs/map", "slurm/logs"] {
        assert!(
            checked.contains(&dir.join(expected)),
            "{expected} not found: {checked:?}"
        );
    }
}
