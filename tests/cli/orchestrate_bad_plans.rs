//! CLI tests of hostile plans and scripts (issue 11 items 4 and 6): every plan of the
//! `tests/fixtures/bad-plans` corpus (numbers out of range, template work without end, a
//! glob over the whole filesystem, deep nesting, ...) makes `delta orchestrate` exit 126
//! quickly — with and without `--dry-run` — naming the file and the key, with a hint and no
//! panic; oversized and deeply nested plans and scripts generated here are refused the same
//! way. Each command runs under the harness timeout, so a hang fails the test rather than
//! the suite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::orchestrate::{delta_in, write_agent};

/// Generous: every case below is refused in well under a second on a quiet machine.
const LIMIT: Duration = Duration::from_secs(60);

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Refusal {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `delta args...` in `dir` under [`LIMIT`].
fn delta(dir: &Path, args: &[&str]) -> Refusal {
    let child = delta_in(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = crate::harness::wait_output(child, LIMIT);
    Refusal {
        code: out.code,
        stdout: out.stdout,
        stderr: out.stderr,
    }
}

/// The `# key:` and `# expect:` header lines of a corpus plan.
fn header(text: &str, prefix: &str) -> String {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("fixture lacks `{prefix}`"))
        .trim()
        .to_owned()
}

fn assert_refused(what: &str, out: &Refusal, needles: &[&str]) {
    assert_eq!(out.code, 126, "{what}: exit code\n{}", out.stderr);
    assert!(out.stdout.is_empty(), "{what}: stdout {}", out.stdout);
    assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
    assert!(
        out.stderr.contains("hint"),
        "{what}: no hint\n{}",
        out.stderr
    );
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "{what}: expected `{needle}` in\n{}",
            out.stderr
        );
    }
}

/// Issue 24 item 22: a plan error names the file once, as an absolute path (never the path
/// as typed in one error and absolute in the next), the key once, in the form
/// `stages.<id>.<key>` (a stage's position, `stages[N]`, only when its id is what is
/// wrong), and the reference page once — no "defaults.retries: defaults.retries = 1000 ...
/// see docs/plan.md; see docs/plan.md"; serde's "unknown variant" is said in words.
fn says_each_thing_once(what: &str, stderr: &str, absolute_plan: &str, key: &str) {
    let error = stderr
        .lines()
        .find(|line| line.starts_with("error: "))
        .unwrap_or_else(|| panic!("{what}: no error line in {stderr}"));
    for (thing, count) in [
        (absolute_plan, error.matches(absolute_plan).count()),
        (key, error.matches(&format!("{key}:")).count()),
        ("docs/plan.md", error.matches("docs/plan.md").count()),
    ] {
        assert_eq!(count, 1, "{what}: `{thing}` said {count} times in\n{error}");
    }
    assert!(
        error.starts_with(&format!("error: {absolute_plan}: ")),
        "{what}: the error starts with the plan's absolute path:\n{error}"
    );
    if !key.ends_with(".id") {
        assert!(!key.contains('['), "{what}: a stage by its position: {key}");
    }
    assert!(!error.contains("unknown variant"), "{what}: {error}");
}

#[test]
fn every_bad_plan_exits_126_quickly_naming_the_file_and_key() {
    let corpus = repo_root().join("tests/fixtures/bad-plans");
    let mut plans: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    plans.sort();
    let ws = tempfile::tempdir().unwrap();
    for plan in &plans {
        let name = plan.file_name().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(plan).unwrap();
        let (key, expect) = (header(&text, "# key:"), header(&text, "# expect:"));
        for dry_run in [true, false] {
            // Given relative to the current folder: the error names it in its one form.
            let mut args = vec!["orchestrate", name];
            if dry_run {
                args.push("--dry-run");
            } else {
                args.extend(["-w", ws.path().to_str().unwrap()]);
            }
            let out = delta(&corpus, &args);
            let what = format!("{name} (dry run: {dry_run})");
            assert_refused(&what, &out, &[name, &key, &expect, "docs/plan.md"]);
            says_each_thing_once(&what, &out.stderr, &plan.display().to_string(), &key);
        }
    }
    assert!(plans.len() >= 40, "only {} bad plans", plans.len());
    assert_eq!(
        std::fs::read_dir(ws.path()).unwrap().count(),
        0,
        "a refused plan created files in the workspace"
    );
}

/// The shapes found under attack: a plan of about 500 KB of nested mappings (once 68 s to
/// refuse), a plan over the size limit, and the same for an llm-script.
#[test]
fn oversized_and_deeply_nested_inputs_are_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_agent(root, "worker", "");
    let plain = "defaults: { agent: ./agents/worker }\nstages:\n  - { id: work, message: hi }\n";
    let nested = |n: usize| format!("vars: {{ deep: {}1{} }}\n", "{a: ".repeat(n), "}".repeat(n));
    std::fs::write(
        root.join("nested.yaml"),
        format!("{plain}{}", nested(100_000)),
    )
    .unwrap();
    let filler = format!("# {}\n", "x".repeat(1000)).repeat(1100);
    std::fs::write(root.join("large.yaml"), format!("{plain}{filler}")).unwrap();
    std::fs::write(root.join("plan.yaml"), plain).unwrap();
    std::fs::write(
        root.join("nested-script.yaml"),
        format!(
            "steps: [{{answer: hi}}]\n{}",
            nested(100_000).replace("vars", "model")
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("large-script.yaml"),
        format!("steps: [{{answer: hi}}]\n{}", filler.repeat(4)),
    )
    .unwrap();

    for (plan, needles) in [
        ("nested.yaml", ["nested.yaml", "nested more than 64 levels"]),
        ("large.yaml", ["large.yaml", "larger than 1048576 bytes"]),
    ] {
        let out = delta(root, &["orchestrate", plan, "--dry-run"]);
        assert_refused(plan, &out, &needles);
    }
    for (script, needles) in [
        (
            "nested-script.yaml",
            ["nested-script.yaml", "nested more than 64 levels"],
        ),
        (
            "large-script.yaml",
            ["large-script.yaml", "larger than 4194304 bytes"],
        ),
    ] {
        let out = delta(
            root,
            &[
                "orchestrate",
                "plan.yaml",
                "-w",
                "ws",
                "--llm-script",
                script,
            ],
        );
        assert_refused(script, &out, &needles);
    }
}

/// An llm-script whose answer template nests `range(100000)` loops never returned.
#[test]
fn an_llm_script_template_without_end_is_refused_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_agent(root, "worker", "");
    std::fs::write(
        root.join("plan.yaml"),
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: work, message: hi }\n",
    )
    .unwrap();
    std::fs::write(
        root.join("script.yaml"),
        "steps:\n  - answer: \"{% for a in range(100000) %}{% for b in range(100000) %}.{% endfor %}{% endfor %}\"\n",
    )
    .unwrap();
    let out = delta(
        root,
        &[
            "orchestrate",
            "plan.yaml",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ],
    );
    assert_refused(
        "script.yaml",
        &out,
        &["script.yaml", "steps[0].answer", "too much work"],
    );
}

/// `--max-parallel` beyond the range is refused by the argument parser (exit 2), naming the
/// flag, the value and the range — `--dry-run` included — instead of panicking later.
#[test]
fn a_huge_max_parallel_flag_is_a_usage_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    write_agent(dir.path(), "worker", "");
    std::fs::write(
        dir.path().join("plan.yaml"),
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: work, message: hi }\n",
    )
    .unwrap();
    for value in ["2305843009213693952", "0", "10001"] {
        let out = delta(
            dir.path(),
            &[
                "orchestrate",
                "plan.yaml",
                "--dry-run",
                "--max-parallel",
                value,
            ],
        );
        assert_eq!(out.code, 2, "{value}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        for needle in ["--max-parallel", value, "1..=10000"] {
            assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
        }
    }
}
