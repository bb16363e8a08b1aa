//! `--executor slurm --dry-run` prints the sbatch commands and submits nothing; a bad
//! `executor:` key is refused with its name.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/plans/map-reduce")
}

fn delta() -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("delta"));
    cmd.env_remove("DELTA_LOG").stdin(Stdio::null());
    cmd
}

#[test]
fn slurm_dry_run_prints_one_throttled_array_per_fan_out_and_a_job_per_single_run() {
    let out = delta()
        .current_dir(example())
        .args([
            "orchestrate",
            "plan.yaml",
            "--executor",
            "slurm",
            "--dry-run",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("'--array=0-19%8'"), "{stdout}");
    assert!(stdout.contains("exec-planned"), "{stdout}");
    assert!(stdout.contains("map \"$SLURM_ARRAY_TASK_ID\""), "{stdout}");
    assert!(stdout.contains("# stage reduce"), "{stdout}");
    assert!(
        stdout.contains("reduce 0\n"),
        "a single run is a plain job: {stdout}"
    );
    assert!(
        !stdout.contains("Summarize"),
        "no task text in a job: {stdout}"
    );
    let json = delta()
        .current_dir(example())
        .args([
            "orchestrate",
            "plan.yaml",
            "--executor",
            "slurm",
            "--dry-run",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["sbatch"].as_array().unwrap().len(), 2, "{value:#}");
}

#[test]
fn a_bad_executor_key_exits_126_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let agent = example().join("agents/processor");
    let plan = format!(
        "executor: {{ type: slurm, sbatch_args: ['--export=ALL'] }}\nstages:\n  - {{ id: a, agent: {}, message: hi }}\n",
        agent.display()
    );
    std::fs::write(dir.path().join("plan.yaml"), plan).unwrap();
    let out = delta()
        .current_dir(dir.path())
        .args(["orchestrate", "plan.yaml", "--dry-run"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(
        stderr.contains("executor.sbatch_args[0]") && stderr.contains("plan.yaml"),
        "{stderr}"
    );
    let local = delta()
        .current_dir(dir.path())
        .args([
            "orchestrate",
            "plan.yaml",
            "--dry-run",
            "--executor",
            "local",
        ])
        .output()
        .unwrap();
    assert_eq!(
        local.status.code(),
        Some(0),
        "--executor local ignores the slurm settings"
    );
}

#[test]
fn check_without_slurm_is_a_usage_error() {
    let out = delta()
        .current_dir(example())
        .args(["orchestrate", "plan.yaml", "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--executor slurm"));
}

/// Regression (issue 24 item 21): without a key, a Slurm dry-run's warning (and the run's
/// error) said to put it in the agent folder's `.env`, which the nodes read on the shared
/// filesystem; the relay design keeps it in the orchestrating process's environment.
#[test]
fn slurm_without_a_key_says_to_set_it_in_the_orchestrating_environment_not_a_shared_env_file() {
    let dir = tempfile::tempdir().unwrap();
    let agent = example().join("agents/processor");
    std::fs::write(
        dir.path().join("plan.yaml"),
        format!(
            "stages:\n  - {{ id: a, agent: {}, message: hi }}\n",
            agent.display()
        ),
    )
    .unwrap();
    let orchestrate = |extra: &[&str]| {
        let out = delta()
            .current_dir(dir.path())
            .env_remove("DELTA_API_KEY")
            .env_remove("DELTA_BASE_URL")
            .env_remove("DELTA_LLM_SCRIPT")
            .args(["orchestrate", "plan.yaml", "-w", "ws"])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, warning) = orchestrate(&["--executor", "slurm", "--dry-run"]);
    assert_eq!(code, Some(0), "{warning}");
    let (code, error) = orchestrate(&["--executor", "slurm"]);
    assert_eq!(code, Some(126), "{error}");
    for text in [&warning, &error] {
        assert!(text.contains("export DELTA_API_KEY=sk-..."), "{text}");
        assert!(text.contains("never reaches a node"), "{text}");
        assert!(text.contains("--llm-script"), "{text}");
        assert!(!text.contains(">> "), "no .env to append to: {text}");
    }
    // Without Slurm the runs are local: a .env file is a fine place.
    let (code, local) = orchestrate(&["--dry-run"]);
    assert_eq!(code, Some(0), "{local}");
    assert!(
        local.contains(&format!(
            "echo 'DELTA_API_KEY=sk-...' >> {}/.env",
            agent.display()
        )),
        "{local}"
    );
}
