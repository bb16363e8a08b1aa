//! CLI tests of issue 24 item 19 (and item 22's scripted-model wording): an unknown template
//! filter or test (`| lenght`) in a stage that reads earlier stages' results passed
//! `--dry-run` and failed only after every upstream run had been paid for. It is refused at
//! load (exit 126, naming the plan, the key and the closest filter), before any run starts.
//! The scripted model's template errors name the unknown variable or filter; its YAML
//! errors say "tab" for a tab and list a key's choices in words (item 22).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use crate::orchestrate::{delta_in, write_agent};

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn delta(dir: &Path, args: &[&str]) -> Outcome {
    let output = delta_in(dir).args(args).output().unwrap();
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn an_unknown_filter_after_a_paid_stage_is_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_agent(root, "worker", "");
    std::fs::write(
        root.join("plan.yaml"),
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: map\n    foreach: { items: [a, b, c] }\n    message: \"summarize {{ item }}\"\n  - id: reduce\n    needs: [map]\n    message: \"{% if stages.map.results %}Combine {{ stages.map.results | lenght }}{% endif %}\"\n",
    )
    .unwrap();
    std::fs::write(root.join("script.yaml"), "steps: [{ answer: done }]\n").unwrap();
    for dry_run in [true, false] {
        let mut args = vec![
            "orchestrate",
            "plan.yaml",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ];
        if dry_run {
            args.push("--dry-run");
        }
        let out = delta(root, &args);
        assert_eq!(out.code, Some(126), "dry run {dry_run}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        for needle in [
            "plan.yaml",
            "stages.reduce.message",
            "`{{ stages.map.results | lenght }}`",
            "unknown filter `lenght` (did you mean `length`?)",
        ] {
            assert!(
                out.stderr.contains(needle),
                "`{needle}` missing:\n{}",
                out.stderr
            );
        }
        assert!(
            !root.join("ws/.delta").exists(),
            "a run was started before the plan was refused"
        );
    }
}

#[test]
fn scripted_model_template_errors_name_the_variable_and_the_filter() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    crate::harness::write_agent(&root.join("agent"), "a", "tools: []\n");
    for (script, needles) in [
        (
            "steps: [{ answer: \"{{ tsk }}\" }]\n",
            &[
                "`rules[0].steps[0].answer`",
                "`tsk`",
                "did you mean `task`?",
            ][..],
        ),
        (
            "steps: [{ answer: \"{% if false %}{{ task | lenght }}{% endif %}\" }]\n",
            &[
                "`{{ task | lenght }}`",
                "unknown filter `lenght` (did you mean `length`?)",
            ][..],
        ),
        // Item 22: a tab says "tab", and serde's field complaint is said in words.
        (
            "steps:\n\t- answer: hi\n",
            &[
                "line 2 column 1: a tab character",
                "replace the tab with spaces",
            ][..],
        ),
        (
            "steps: [{ anwser: hi }]\n",
            &["unknown key `anwser`; the keys here are: "][..],
        ),
    ] {
        std::fs::write(root.join("script.yaml"), script).unwrap();
        let out = delta(
            root,
            &[
                "run",
                "--agent",
                "agent",
                "-w",
                "ws",
                "-m",
                "x",
                "--llm-script",
                "script.yaml",
            ],
        );
        assert_eq!(out.code, Some(126), "{script}: {}", out.stderr);
        for needle in needles {
            assert!(
                out.stderr.contains(needle),
                "{script}: `{needle}` in\n{}",
                out.stderr
            );
        }
    }
}
