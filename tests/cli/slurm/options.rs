//! `executor.sbatch_args` against the installed sbatch's own option parser (no cluster
//! needed: sbatch is pointed at a configuration whose controller port is closed, so it parses
//! every option, lists them with `-v`, then fails to submit). Each way an attack round
//! smuggled an option delta sets past the old spelling check (`--wra=CMD` replaced the job
//! script on a real cluster; `-Jx`, `-o<file>`, `--arr=`, `--chd=`) is first shown to be read
//! by sbatch as that option, then refused by delta at load (exit 126, naming the item). The
//! allow-list's option table is compared with the installed sbatch's.
//!
//! Needs the `sbatch` client (Debian's slurm-client); without it the tests fail loudly unless
//! DELTA_SKIP_SLURM=1 says to skip them knowingly.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use delta_actors::cluster::slurm::sbatch_options::{ValueKind, SBATCH_OPTIONS};

/// A Slurm configuration whose controller nobody listens for, in a temporary folder.
struct OfflineSlurm {
    dir: tempfile::TempDir,
}

impl OfflineSlurm {
    /// `None` when sbatch is not installed and skipping was asked for; panics otherwise.
    fn new(test: &str) -> Option<OfflineSlurm> {
        let installed = Command::new("sbatch")
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .is_ok();
        if !installed {
            eprintln!(
                "\n!!!!!!!!!! SKIPPED {test}: sbatch is not installed (apt-get install slurm-client) !!!!!!!!!!\n"
            );
            assert_eq!(
                std::env::var("DELTA_SKIP_SLURM").as_deref(),
                Ok("1"),
                "the Slurm tests need sbatch: install slurm-client, or set DELTA_SKIP_SLURM=1 to skip them knowingly"
            );
            return None;
        }
        // A port that was free a moment ago: connecting to it is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("slurm.conf"),
            format!(
                "ClusterName=delta-offline\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\n\
                 MessageTimeout=2\nNodeName=n CPUs=1\nPartitionName=p Nodes=n Default=YES\n"
            ),
        )
        .unwrap();
        Some(OfflineSlurm { dir })
    }

    /// `sbatch ARGS` with a one-line job script on stdin: (exit code, stderr).
    fn sbatch(&self, args: &[&str]) -> (Option<i32>, String) {
        use std::io::Write;
        let mut child = Command::new("sbatch")
            .args(args)
            .env("SLURM_CONF", self.dir.path().join("slurm.conf"))
            .env_remove("SBATCH_EXPORT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // sbatch may exit before reading its script (a usage error): a broken pipe is fine.
        let _ = child.stdin.take().unwrap().write_all(b"#!/bin/sh\ntrue\n");
        let out = child.wait_with_output().unwrap();
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        (out.status.code(), text)
    }

    /// The options sbatch says it read from `arg` (`sbatch -v` lists them by long name).
    fn reads(&self, arg: &str) -> BTreeSet<String> {
        let (_, text) = self.sbatch(&["-v", arg]);
        text.lines()
            .skip_while(|l| !l.contains("defined options"))
            .take_while(|l| !l.contains("end of defined options"))
            .filter_map(|l| l.strip_prefix("sbatch: "))
            .filter_map(|l| l.split_once(" : ").map(|(name, _)| name.trim().to_owned()))
            .filter(|name| name != "verbose" && !name.starts_with('-'))
            .collect()
    }
}

fn delta() -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("delta"));
    cmd.env_remove("DELTA_LOG").stdin(Stdio::null());
    cmd
}

fn agent() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/plans/map-reduce/agents/processor")
}

/// `delta orchestrate --executor slurm --dry-run` of a one-stage plan passing `arg`.
fn dry_run_with(dir: &Path, arg: &str) -> std::process::Output {
    let plan = format!(
        "executor:\n  type: slurm\n  sbatch_args: [{}]\nstages:\n  - {{ id: a, agent: {}, message: hi }}\n",
        serde_json::to_string(arg).unwrap(),
        agent().display()
    );
    std::fs::write(dir.join("plan.yaml"), plan).unwrap();
    delta()
        .current_dir(dir)
        .args([
            "orchestrate",
            "plan.yaml",
            "--executor",
            "slurm",
            "--dry-run",
        ])
        .output()
        .unwrap()
}

#[test]
fn sbatch_args_smuggled_options_delta_sets_through_prefixes_and_attached_short_options() {
    let Some(slurm) = OfflineSlurm::new(
        "sbatch_args_smuggled_options_delta_sets_through_prefixes_and_attached_short_options",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("owned");
    let wrap = format!("--wra=touch {}", marker.display());
    for (arg, read_as) in [
        (wrap.as_str(), "wrap"),
        ("-Jx", "job-name"),
        ("-o/tmp/delta-smuggled.out", "output"),
        ("--arr=1-2", "array"),
        ("--chd=/tmp", "chdir"),
        ("-vJx", "job-name"),
        ("--outp=/tmp/delta-smuggled.out", "output"),
        ("--comm=x", "comment"),
        ("-e/tmp/delta-smuggled.err", "error"),
        ("-D/tmp", "chdir"),
        ("--no-req", "no-requeue"),
        ("--pars", "parsable"),
        ("-W", "wait"),
        ("-Mother", "clusters"),
        ("--get-u", "get-user-env"),
        ("--te", "test-only"),
    ] {
        assert!(
            slurm.reads(arg).contains(read_as),
            "the installed sbatch does not read {arg:?} as --{read_as}: {:?}",
            slurm.reads(arg)
        );
        let out = dry_run_with(dir.path(), arg);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{arg}: {stderr}");
        assert!(
            stderr.contains("executor.sbatch_args[0]") && stderr.contains(&format!("--{read_as}")),
            "{arg}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{arg}: nothing printed as a plan");
    }
    assert!(!marker.exists());
    // What a plan does need still passes, and reaches the printed sbatch command.
    for arg in ["--mem=2G", "-c4", "--hold", "--gres=gpu:1"] {
        let out = dry_run_with(dir.path(), arg);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{arg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(arg), "{arg}: {stdout}");
    }
}

#[test]
fn delta_knows_every_option_of_the_installed_sbatch_with_its_value_kind() {
    let Some(slurm) =
        OfflineSlurm::new("delta_knows_every_option_of_the_installed_sbatch_with_its_value_kind")
    else {
        return;
    };
    let table: BTreeSet<&str> = SBATCH_OPTIONS.iter().map(|o| o.long).collect();
    // getopt lists every long option starting with a letter when that prefix is ambiguous.
    let mut installed = BTreeSet::new();
    for letter in 'a'..='z' {
        let (_, text) = slurm.sbatch(&[&format!("--{letter}"), "--usage"]);
        if let Some((_, list)) = text.split_once("possibilities:") {
            let list = list.lines().next().unwrap_or_default();
            for name in list.split_whitespace() {
                installed.insert(name.trim_matches('\'').trim_start_matches("--").to_owned());
            }
        } else if !text.contains("unrecognized option") {
            // One option starts with this letter: it must be one delta knows.
            assert!(
                table.iter().any(|name| name.starts_with(letter)),
                "--{letter}: {text}"
            );
        }
    }
    assert!(installed.len() > 80, "{installed:?}");
    let unknown: Vec<&String> = installed
        .iter()
        .filter(|name| !table.contains(name.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "sbatch options missing from delta's table: {unknown:?}"
    );
    for option in SBATCH_OPTIONS {
        let long = format!("--{}", option.long);
        let (_, alone) = slurm.sbatch(&[&long]);
        if alone.contains("unrecognized option") {
            continue; // an option of another Slurm version
        }
        let (_, with_value) = slurm.sbatch(&[&format!("{long}=1"), "--usage"]);
        let required = alone.contains("requires an argument");
        let flag = with_value.contains("allow an argument");
        let kind = match (required, flag) {
            (true, _) => ValueKind::Required,
            (false, true) => ValueKind::None,
            (false, false) => ValueKind::Optional,
        };
        // A flag in one Slurm version and optional in another is optional in the table:
        // both spellings are one item either way.
        assert!(
            kind == option.value
                || (kind == ValueKind::None && option.value == ValueKind::Optional),
            "{long} is {kind:?} here, {:?} in the table: {alone}\n{with_value}",
            option.value
        );
    }
    for letter in ('a'..='z').chain('A'..='Z') {
        let (_, text) = slurm.sbatch(&[&format!("-{letter}")]);
        let known = !text.contains("invalid option");
        let option = SBATCH_OPTIONS.iter().find(|o| o.short == Some(letter));
        assert_eq!(known, option.is_some(), "-{letter}: {text}");
        if let Some(option) = option {
            assert_eq!(
                text.contains("requires an argument"),
                option.value == ValueKind::Required,
                "-{letter}: {text}"
            );
        }
    }
}
