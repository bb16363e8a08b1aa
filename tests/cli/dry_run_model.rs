//! CLI tests of issue 24 item 16: `delta orchestrate --dry-run` refuses (exit 126) every
//! model setting the real run refuses — a missing or broken `--llm-script` or
//! `DELTA_LLM_SCRIPT`, a `.env` that does not parse, a bad `DELTA_RETRY_BASE_MS` — printing
//! the error once (not once per agent), while a missing API key stays a warning so a plan can
//! be checked on a machine without the key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use crate::orchestrate::{delta_in, write_agent};

/// Two stages on two agents, so anything reported per agent would show twice.
const PLAN: &str = "stages:\n  - { id: first, agent: ./agents/one, message: a }\n  - { id: second, agent: ./agents/two, message: b, needs: [first] }\n";

fn plan_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_agent(dir.path(), "one", "");
    write_agent(dir.path(), "two", "");
    std::fs::write(dir.path().join("plan.yaml"), PLAN).unwrap();
    std::fs::create_dir_all(dir.path().join("ws")).unwrap();
    dir
}

/// `delta` in `dir` without any model setting of the caller's environment.
fn hermetic(dir: &Path) -> Command {
    let mut cmd = delta_in(dir);
    for var in [
        "DELTA_API_KEY",
        "DELTA_BASE_URL",
        "DELTA_MODEL",
        "DELTA_RETRY_BASE_MS",
        "DELTA_LLM_HTTP2",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

fn orchestrate(dir: &Path, dry_run: bool, extra: &[&str], env: &[(&str, &str)]) -> Outcome {
    let mut cmd = hermetic(dir);
    cmd.args(["orchestrate", "plan.yaml", "-w", "ws"])
        .args(extra)
        .envs(env.iter().copied());
    if dry_run {
        cmd.arg("--dry-run");
    }
    let output = cmd.output().unwrap();
    Outcome {
        code: output.status.code(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// What a case changes (a description, extra arguments, environment) and a word its error
/// names.
type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn dry_run_refuses_every_model_setting_the_real_run_refuses_and_says_it_once() {
    let dir = plan_dir();
    let root = dir.path();
    std::fs::write(root.join("broken.yaml"), "steps: [ {answer: \n").unwrap();
    std::fs::write(
        root.join("bad-template.yaml"),
        "steps: [{ answer: \"{{ task | lenght }}\" }]\n",
    )
    .unwrap();
    let cases: [Case; 5] = [
        (
            "missing --llm-script",
            &["--llm-script", "missing.yaml"],
            &[],
            "missing.yaml",
        ),
        (
            "broken --llm-script",
            &["--llm-script", "broken.yaml"],
            &[],
            "broken.yaml",
        ),
        (
            "a script whose template fails",
            &["--llm-script", "bad-template.yaml"],
            &[],
            "bad-template.yaml",
        ),
        (
            "missing DELTA_LLM_SCRIPT",
            &[],
            &[("DELTA_LLM_SCRIPT", "gone.yaml")],
            "gone.yaml",
        ),
        (
            "a bad DELTA_RETRY_BASE_MS",
            &[],
            &[
                ("DELTA_RETRY_BASE_MS", "fast"),
                ("DELTA_API_KEY", "sk-x"),
                ("DELTA_BASE_URL", "http://127.0.0.1:9/v1"),
            ],
            "DELTA_RETRY_BASE_MS",
        ),
    ];
    for (what, extra, env, needle) in cases {
        let real = orchestrate(root, false, extra, env);
        assert_eq!(
            real.code,
            Some(126),
            "{what}: the real run\n{}",
            real.stderr
        );
        let dry = orchestrate(root, true, extra, env);
        assert_eq!(dry.code, Some(126), "{what}: --dry-run\n{}", dry.stderr);
        assert_eq!(
            dry.stderr
                .lines()
                .filter(|line| line.contains(needle))
                .count(),
            1,
            "{what}: the error once:\n{}",
            dry.stderr
        );
        let error_line = |stderr: &str| {
            stderr
                .lines()
                .find(|line| line.starts_with("error: "))
                .map(str::to_owned)
        };
        assert_eq!(
            error_line(&dry.stderr),
            error_line(&real.stderr),
            "{what}: --dry-run says what the run says"
        );
    }
}

#[test]
fn dry_run_refuses_a_workspace_env_file_that_does_not_parse() {
    let dir = plan_dir();
    std::fs::write(dir.path().join("ws/.env"), "this line has no equals sign\n").unwrap();
    let dry = orchestrate(dir.path(), true, &["--llm-script", "x.yaml"], &[]);
    assert_eq!(dry.code, Some(126), "{}", dry.stderr);
    assert!(dry.stderr.contains("ws/.env"), "{}", dry.stderr);
}

#[test]
fn dry_run_refuses_an_unknown_resume_id() {
    let dir = plan_dir();
    let dry = orchestrate(dir.path(), true, &["--resume", "nope-1"], &[]);
    assert_eq!(dry.code, Some(126), "{}", dry.stderr);
    assert!(
        dry.stderr.contains("orchestration 'nope-1' not found"),
        "{}",
        dry.stderr
    );
}

#[test]
fn dry_run_without_an_api_key_warns_per_agent_and_passes() {
    let dir = plan_dir();
    let dry = orchestrate(dir.path(), true, &[], &[]);
    assert_eq!(dry.code, Some(0), "{}", dry.stderr);
    for agent in ["one", "two"] {
        assert!(
            dry.stderr.contains(&format!(
                "warning: agent {agent} has no model configured: no API key"
            )),
            "{}",
            dry.stderr
        );
    }
    let script = dir.path().join("good.yaml");
    std::fs::write(&script, "steps: [{ answer: ok }]\n").unwrap();
    let dry = orchestrate(dir.path(), true, &["--llm-script", "good.yaml"], &[]);
    assert_eq!(dry.code, Some(0), "{}", dry.stderr);
    assert!(!dry.stderr.contains("warning"), "{}", dry.stderr);
}

#[test]
fn dry_run_refuses_a_workspace_that_cannot_be_created() {
    let dir = plan_dir();
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    for workspace in ["a-file", "a-file/below"] {
        let run = |dry_run: bool| {
            let mut cmd = hermetic(dir.path());
            cmd.args([
                "orchestrate",
                "plan.yaml",
                "-w",
                workspace,
                "--llm-script",
                "x.yaml",
            ]);
            if dry_run {
                cmd.arg("--dry-run");
            }
            let output = cmd.output().unwrap();
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        };
        let (real_code, real) = run(false);
        let (dry_code, dry) = run(true);
        assert_eq!(
            (real_code, dry_code),
            (Some(126), Some(126)),
            "{real}\n{dry}"
        );
        assert!(
            dry.contains(&format!("cannot create workspace {workspace}")),
            "{dry}"
        );
        assert_eq!(dry.trim(), real.trim(), "--dry-run says what the run says");
    }
}

/// Regression (issue 24, noticed): a plan refused after its workspace was chosen (here a
/// missing `--llm-script`) left the new, empty workspace folder behind — `-w` or the
/// plan's next `workspaces/W00N` — so the next run took W002. Nothing is left now, and a
/// workspace that existed before is kept.
#[test]
fn a_refused_orchestration_leaves_no_new_workspace_behind() {
    let dir = plan_dir();
    let root = dir.path();
    std::fs::remove_dir(root.join("ws")).unwrap();
    let refused = orchestrate(root, false, &["--llm-script", "missing.yaml"], &[]);
    assert_eq!(refused.code, Some(126), "{}", refused.stderr);
    assert!(!root.join("ws").exists(), "-w ws was left behind");

    let output = hermetic(root)
        .args(["orchestrate", "plan.yaml", "--llm-script", "missing.yaml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(126));
    assert!(
        !root.join("workspaces/W001").exists(),
        "the plan's new W001 was left behind"
    );

    std::fs::create_dir_all(root.join("ws")).unwrap();
    let refused = orchestrate(root, false, &["--llm-script", "missing.yaml"], &[]);
    assert_eq!(refused.code, Some(126), "{}", refused.stderr);
    assert!(
        root.join("ws").is_dir(),
        "a workspace made before was removed"
    );
}
