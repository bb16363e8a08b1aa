//! CLI test of issue 24 item 20: every `delta …` command in README.md's shell code blocks
//! runs as written on a fresh copy of the repository (its `delta continue … -m "now do X"`
//! failed for want of `--llm-script`, and the hello-world script had no step for a
//! continuation). README.md is read when the test runs, so commands added to it later are
//! run too; a command that needs what a test machine does not have is skipped only by one of
//! the rules in [`SKIPS`], each with its reason, and said so on stderr.
//!
//! The copy holds README.md and `examples/` without any `workspaces/` folder (git ignores
//! them, so a fresh clone has none), and `target/release/` holding links to the binaries
//! this test run built (what `cargo build --release` leaves there). Commands run in README
//! order, through `sh -c` (so `&&` chains and `# comments` work as in a terminal), with the
//! built `delta` first on PATH and no model setting in the environment. In a chain such as
//! `cargo build --release && target/release/delta orchestrate ...`, the `delta` parts run
//! (the build is this test's own).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Longest a single README command may take here (each takes about a second).
const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// A rule for a README command this test does not run, with why.
struct Skip {
    applies: fn(&str) -> bool,
    reason: &'static str,
}

/// The only commands not run. Every other `delta` command must exit 0.
const SKIPS: &[Skip] = &[
    Skip {
        applies: |command| runs_subcommand(command, "serve"),
        reason: "a server: it runs until stopped (tests/cli/serve drives it)",
    },
    Skip {
        applies: |command| runs_subcommand(command, "relay"),
        reason: "a server: it runs until stopped (tests/cli/relay drives it)",
    },
    Skip {
        applies: |command| runs_subcommand(command, "mock-llm"),
        reason: "a server: it runs until stopped (the CLI tests' harness drives it)",
    },
    Skip {
        applies: |command| command.contains("--executor slurm"),
        reason: "needs a Slurm cluster (tests/cli/slurm runs these against one)",
    },
    Skip {
        applies: |command| {
            ["run", "continue", "orchestrate"]
                .iter()
                .any(|sub| runs_subcommand(command, sub))
                && !command.contains("--llm-script")
                && !command.contains("--dry-run")
        },
        reason: "needs a real model endpoint and key (DELTA_BASE_URL, DELTA_API_KEY)",
    },
];

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The words of a command line, after leading `VAR=value` assignments.
fn command_words(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .skip_while(|word| {
            word.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        })
        .collect()
}

/// Whether a command's program is delta: `delta` on PATH, or a path to it
/// (`target/release/delta`).
fn is_delta(part: &str) -> bool {
    command_words(part)
        .first()
        .is_some_and(|program| *program == "delta" || program.ends_with("/delta"))
}

/// Whether `delta <sub>` is one of the commands of the line (`&&` chains included).
fn runs_subcommand(line: &str, sub: &str) -> bool {
    line.split("&&")
        .any(|part| is_delta(part) && command_words(part).get(1) == Some(&sub))
}

/// The `delta` commands of every line of README's `sh`/`bash`/`shell` code blocks (after
/// `VAR=value` assignments; `\`-continued lines joined; of an `&&` chain, its delta parts).
fn readme_commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_shell_block = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            in_shell_block = !in_shell_block && matches!(fence.trim(), "sh" | "bash" | "shell");
            pending.clear();
            continue;
        }
        if !in_shell_block {
            continue;
        }
        let line = line.trim().trim_start_matches("$ ");
        if let Some(continued) = line.strip_suffix('\\') {
            pending.push_str(continued);
            continue;
        }
        let full = format!("{pending}{line}");
        pending.clear();
        let delta_parts: Vec<&str> = full.split("&&").filter(|part| is_delta(part)).collect();
        if !delta_parts.is_empty() {
            commands.push(
                delta_parts
                    .iter()
                    .map(|part| part.trim())
                    .collect::<Vec<_>>()
                    .join(" && "),
            );
        }
    }
    commands
}

/// Copies `from` into `to`, leaving out `workspaces/` folders (a fresh clone has none).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            if entry.file_name() != "workspaces" {
                copy_tree(&entry.path(), &target);
            }
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn every_delta_command_of_the_readme_runs_as_written_on_a_fresh_copy() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let commands = readme_commands(&readme);
    let clone = tempfile::tempdir().unwrap();
    let root = clone.path().join("delta");
    copy_tree(&repo_root().join("examples"), &root.join("examples"));
    std::fs::write(root.join("README.md"), &readme).unwrap();
    let home = clone.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let bin_dir = crate::harness::delta_exe().parent().unwrap().to_path_buf();
    let release = root.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    for program in ["delta", "delta-sessions", "delta-sessions-pty"] {
        std::os::unix::fs::symlink(bin_dir.join(program), release.join(program)).unwrap();
    }
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display());
    let logs = clone.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();

    let mut ran = 0;
    for (number, command) in commands.iter().enumerate() {
        if let Some(skip) = SKIPS.iter().find(|skip| (skip.applies)(command)) {
            eprintln!("SKIPPED README command `{command}`: {}", skip.reason);
            continue;
        }
        let stdout_path = logs.join(format!("{number}.stdout"));
        let stderr_path = logs.join(format!("{number}.stderr"));
        let child = Command::new("sh")
            .args(["-c", command])
            .current_dir(&root)
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &home)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        let mut child = child;
        let status = crate::harness::wait_child(&mut child, COMMAND_LIMIT);
        let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        assert!(
            status.success(),
            "README command failed ({status}):\n  {command}\nstderr:\n{stderr}\nstdout:\n{stdout}"
        );
        ran += 1;
    }
    assert!(
        ran >= 9,
        "only {ran} README commands ran (of {}): {commands:#?}",
        commands.len()
    );
}

#[test]
fn the_extraction_finds_shell_commands_only_and_the_skip_rules_say_why() {
    let readme = "text `delta run` inline\n```sh\n# comment\ncargo build\ndelta run -m \"x\" \\\n  --llm-script s.yaml\nDELTA_SERVE_TOKEN=t delta serve --listen 127.0.0.1:0\ndelta init demo && delta tool expand demo   # two\ncargo build --release && target/release/delta orchestrate p.yaml --dry-run\n```\n```\ndelta (CLI, src/) --uses--> delta-actors\n```\n";
    let commands = readme_commands(readme);
    assert_eq!(
        commands,
        [
            "delta run -m \"x\" --llm-script s.yaml",
            "DELTA_SERVE_TOKEN=t delta serve --listen 127.0.0.1:0",
            "delta init demo && delta tool expand demo   # two",
            "target/release/delta orchestrate p.yaml --dry-run",
        ]
    );
    let skipped = |command: &str| SKIPS.iter().any(|skip| (skip.applies)(command));
    assert!(!skipped(&commands[0]));
    assert!(skipped(&commands[1]));
    assert!(!skipped(&commands[2]));
    assert!(skipped("delta run -m hi"));
    assert!(!skipped("delta orchestrate p.yaml --dry-run"));
}

/// The hello-world script had no step for a continuation: README's `delta continue … -m
/// "now do X"` got "script exhausted". It plays a tool call and an answer.
#[test]
fn the_hello_world_script_plays_a_continuation() {
    let dir = tempfile::tempdir().unwrap();
    let agent = repo_root().join("examples/agents/hello-world");
    let script = agent.join("llm-script.yaml");
    let delta = |args: &[&str]| {
        let output = crate::orchestrate::delta_in(dir.path())
            .args(args)
            .args(["--format", "json", "--llm-script"])
            .arg(&script)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    delta(&[
        "run",
        "--agent",
        agent.to_str().unwrap(),
        "-w",
        "ws",
        "--run-id",
        "hello-1",
        "-m",
        "Say hello",
    ]);
    let continued = delta(&[
        "continue", "--run-id", "hello-1", "-w", "ws", "-m", "now do X",
    ]);
    assert_eq!(
        continued["result"],
        "Done too: I wrote your new request to next.txt."
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws/next.txt")).unwrap(),
        "Next: now do X\n"
    );
}
