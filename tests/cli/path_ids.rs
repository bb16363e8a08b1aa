//! Ids and names from the command line never become a path outside their folder (issue 11
//! item 1: `orchestrate --resume /tmp/v` once wrote `summary.json` there). For every command
//! that takes one — `orchestrate --resume` (with and without the plan), `run --run-id`,
//! `continue --run-id`, and the session ids of `delta-sessions` and `delta-sessions-pty` —
//! `../../x`, an absolute path and an id with a slash are refused with exit 126 before
//! anything is written: with a folder waiting where each would lead, the test folders are
//! unchanged afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::harness::COMMAND_TIMEOUT;
use crate::orchestrate::write_agent;

/// A folder with an agent, a plan, a script and a workspace that already holds one
/// orchestration, plus a separate folder holding the absolute-path target.
struct Setup {
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let root = tempfile::tempdir().unwrap();
        write_agent(root.path(), "worker", "");
        std::fs::write(
            root.path().join("plan.yaml"),
            "defaults: { agent: ./agents/worker }\nstages:\n  - { id: work, message: hi }\n",
        )
        .unwrap();
        std::fs::write(
            root.path().join("script.yaml"),
            "steps: [{ answer: done }]\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.path().join("ws/.delta/orchestrations/o-1")).unwrap();
        std::fs::create_dir_all(root.path().join("sessions")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        // Decoys where the hostile ids would lead, so an escape would find a folder to write
        // into (as `--resume /tmp/v` did) instead of failing for lack of one.
        for decoy in [
            root.path().join("x"),
            root.path().join("ws/x"),
            root.path().join("ws/.delta/a/b"),
            root.path().join("ws/.delta/orchestrations/a/b"),
            root.path().join("sessions/a/b"),
            outside.path().join("abs"),
        ] {
            std::fs::create_dir_all(decoy).unwrap();
        }
        Setup { root, outside }
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    /// The three hostile ids; the absolute one points into the separate folder.
    fn hostile_ids(&self) -> [String; 3] {
        [
            "../../x".to_owned(),
            self.outside.path().join("abs").display().to_string(),
            "a/b".to_owned(),
        ]
    }

    /// Every path under the root and the outside folder.
    fn snapshot(&self) -> BTreeSet<PathBuf> {
        let mut all = BTreeSet::new();
        for top in [self.root.path(), self.outside.path()] {
            let mut stack = vec![top.to_path_buf()];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        stack.push(path.clone());
                    }
                    all.insert(path);
                }
            }
        }
        all
    }

    /// Runs `program args` (with `{id}` replaced by each hostile id) in the root and checks
    /// the refusal: exit 126, the id named on stderr, nothing created anywhere.
    fn assert_refused(&self, program: &str, args: &[&str]) {
        for id in self.hostile_ids() {
            let before = self.snapshot();
            let args: Vec<String> = args.iter().map(|a| a.replace("{id}", &id)).collect();
            let output = assert_cmd::Command::cargo_bin(program)
                .unwrap()
                .current_dir(self.root())
                .env_remove("DELTA_LOG")
                .env_remove("DELTA_LLM_SCRIPT")
                .env("DELTA_SESSIONS_DIR", self.root().join("sessions"))
                .env("DELTA_SESSIONS_PTY_DIR", self.root().join("sessions"))
                .args(&args)
                .timeout(COMMAND_TIMEOUT)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(126),
                "{program} {args:?}: {stderr}"
            );
            assert!(stderr.contains(&id), "{program} {args:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
            assert_eq!(
                self.snapshot(),
                before,
                "{program} {args:?} created or removed files"
            );
        }
    }
}

#[test]
fn orchestrate_resume_ids_are_checked_before_they_become_a_path() {
    let setup = Setup::new();
    setup.assert_refused(
        "delta",
        &[
            "orchestrate",
            "plan.yaml",
            "--resume",
            "{id}",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ],
    );
    setup.assert_refused("delta", &["orchestrate", "--resume", "{id}", "-w", "ws"]);
    setup.assert_refused(
        "delta",
        &["orchestrate", "plan.yaml", "--resume", "{id}", "--dry-run"],
    );
}

#[test]
fn run_ids_of_delta_run_are_checked_before_they_become_a_path() {
    let setup = Setup::new();
    setup.assert_refused(
        "delta",
        &[
            "run",
            "--agent",
            "agents/worker",
            "-w",
            "ws",
            "-m",
            "hi",
            "--run-id",
            "{id}",
            "--llm-script",
            "script.yaml",
        ],
    );
}

#[test]
fn run_ids_of_delta_continue_are_checked_before_they_become_a_path() {
    let setup = Setup::new();
    setup.assert_refused(
        "delta",
        &[
            "continue",
            "--run-id",
            "{id}",
            "-w",
            "ws",
            "-m",
            "again",
            "--llm-script",
            "script.yaml",
        ],
    );
}

#[test]
fn session_ids_of_delta_sessions_are_checked_before_they_become_a_path() {
    let setup = Setup::new();
    for command in [
        &["exec", "{id}", "echo", "hi"][..],
        &["end", "{id}"],
        &["status", "{id}"],
    ] {
        setup.assert_refused("delta-sessions", command);
    }
}

#[test]
fn session_ids_of_delta_sessions_pty_are_checked_before_they_become_a_path() {
    let setup = Setup::new();
    for command in [
        &["write", "{id}"][..],
        &["write-key", "{id}", "enter"],
        &["read", "{id}"],
        &["end", "{id}"],
        &["status", "{id}"],
    ] {
        setup.assert_refused("delta-sessions-pty", command);
    }
}
