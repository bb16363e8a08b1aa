//! What a tool can reach of the process that started it (issue 24, items 3, 4 and 14): the
//! serve and relay tokens are not in its environment (nor in a hook's or a generator's); it
//! cannot read the API key from `/proc/<pid>/environ` of the spawner or of the engine; and
//! it does not inherit a descriptor that `delta` itself inherited from its caller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::harness::*;

const SERVE_TOKEN: &str = "serve-token-must-not-leak";
const RELAY_TOKEN: &str = "relay-token-must-not-leak";
/// The API key of the harness's environment.
const API_KEY: &str = "sk-cli-test";
/// The unprivileged user a root test runs `delta` as (the same user as its tools, as in
/// real use: root reads any process's memory whatever it does).
const NOBODY: u32 = 65534;

/// Regression: every tool, hook and context generator inherited `DELTA_SERVE_TOKEN` (a
/// serve worker's engine has it) and `DELTA_RELAY_TOKEN` (a Slurm job's engine has it).
#[test]
fn tools_hooks_and_generators_never_get_the_serve_or_relay_token() {
    let tools =
        "tools:\n  - name: show_env\n    description: print the environment\n    exec: \"env\"\n";
    let script = json!({"steps": [{"tool": "show_env"}, {"answer": "ok"}]});
    let case = Case::new("tokens", tools, &script);
    std::fs::write(
        case.agent_dir().join("hooks.yaml"),
        "on_run_end:\n  command: [\"sh\", \"-c\", \"env > hook_env.txt\"]\n",
    )
    .unwrap();
    std::fs::write(
        case.agent_dir().join("context.yaml"),
        format!(
            "{CONTEXT_YAML}  - type: computed_file\n    id: generated\n    generator:\n      command: [\"sh\", \"-c\", \"env > generator_env.txt; echo notes > notes.md\"]\n    output_path: '${{CWD}}/notes.md'\n"
        ),
    )
    .unwrap();
    let out = case
        .cmd()
        .env("DELTA_SERVE_TOKEN", SERVE_TOKEN)
        .env("DELTA_RELAY_TOKEN", RELAY_TOKEN)
        .args(case.run_args("r1", "task"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let tool_env = observations(&case.journal("r1")).remove(0);
    let hook_env = std::fs::read_to_string(case.work_dir().join("hook_env.txt")).unwrap();
    let generator_env = std::fs::read_to_string(case.work_dir().join("generator_env.txt")).unwrap();
    for (who, env) in [
        ("tool", &tool_env),
        ("hook", &hook_env),
        ("generator", &generator_env),
    ] {
        // Each is the real environment of that child.
        assert!(env.contains("PATH="), "{who}: {env}");
        for secret in [SERVE_TOKEN, RELAY_TOKEN, API_KEY] {
            assert!(!env.contains(secret), "{who} got {secret}:\n{env}");
        }
    }
}

/// Hands `root` (recursively) to [`NOBODY`], so that `delta` can run there as that user.
fn give_to_nobody(root: &Path) {
    std::os::unix::fs::lchown(root, Some(NOBODY), Some(NOBODY)).unwrap();
    for path in files_and_dirs_under(root) {
        std::os::unix::fs::lchown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
}

fn files_and_dirs_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(files_and_dirs_under(&path));
        }
        out.push(path);
    }
    out
}

/// A tool (a script given by absolute path) that reports its parent (the spawner), the
/// spawner's parent (the engine), and what it could read of each one's environment.
const ENVIRON_PROBE: &str = r#"exec 2>&1
spawner=$PPID
engine=$(cut -d' ' -f4 /proc/$spawner/stat)
echo "spawner=$spawner engine=$engine"
echo "== spawner environ"
tr '\0' '\n' < /proc/$spawner/environ 2>&1
echo "== engine environ"
tr '\0' '\n' < /proc/$engine/environ 2>&1
echo "== end"
"#;

fn probe_case(name: &str) -> Case {
    let script = json!({"steps": [{"tool": "probe"}, {"answer": "done"}]});
    let case = Case::new(name, "tools: []\n", &script);
    let probe = case.path().join("probe.sh");
    std::fs::write(&probe, ENVIRON_PROBE).unwrap();
    write_agent(
        &case.agent_dir(),
        name,
        &format!(
            "tools:\n  - name: probe\n    description: read the parents' environments\n    exec: \"sh {}\"\n",
            probe.display()
        ),
    );
    case
}

/// Runs `delta run` of `case` (its probe), as [`NOBODY`] when `as_nobody`; returns the
/// engine's pid and the probe's observation.
fn run_probe(case: &Case, as_nobody: bool) -> (u32, String) {
    let mut cmd = case.spawn_cmd();
    if as_nobody {
        give_to_nobody(case.path());
        cmd.uid(NOBODY).gid(NOBODY);
    }
    let child = case.spawn_json_run(cmd, "r1", "probe");
    let engine = child.id();
    let out = wait_output(child, COMMAND_TIMEOUT);
    out.assert_code(0);
    (engine, observations(&case.journal("r1")).remove(0))
}

/// Regression: a tool read `DELTA_API_KEY` from `/proc/$PPID/environ` (the spawner was
/// started with the engine's whole environment) and from the engine's own
/// `/proc/<pid>/environ`. The spawner now starts with an empty environment, and the engine
/// and the spawner are non-dumpable: a process of the same user cannot read either.
#[test]
fn a_tool_cannot_read_the_api_key_from_the_spawners_or_the_engines_environ() {
    let case = probe_case("environ");
    // Root reads every process's environ whatever it does: run delta as a plain user, the
    // user its tools then run as too (the case the fix is for).
    let as_nobody = nix::unistd::geteuid().is_root();
    let (engine, seen) = run_probe(&case, as_nobody);
    assert!(
        seen.contains(&format!("engine={engine}\n")),
        "the probe found the engine's pid {engine}:\n{seen}"
    );
    assert!(!seen.contains(API_KEY), "the key reached the tool:\n{seen}");
    let spawner_part = seen
        .split("== spawner environ")
        .nth(1)
        .and_then(|rest| rest.split("== engine environ").next())
        .unwrap();
    let engine_part = seen
        .split("== engine environ")
        .nth(1)
        .and_then(|rest| rest.split("== end").next())
        .unwrap();
    for (who, part) in [("spawner", spawner_part), ("engine", engine_part)] {
        assert!(
            part.contains("Permission denied"),
            "{who}'s environ was readable by its tool:\n{seen}"
        );
    }
}

/// Regression: the spawner inherited the engine's whole environment, the key included, where
/// anyone who may read it (root; the same user before the spawner was non-dumpable) found
/// it. Read by root here, it is empty.
#[test]
fn the_spawner_starts_with_an_empty_environment() {
    let case = probe_case("spawner-env");
    let (_, seen) = run_probe(&case, false);
    let spawner_part = seen
        .split("== spawner environ")
        .nth(1)
        .and_then(|rest| rest.split("== engine environ").next())
        .unwrap();
    assert!(!spawner_part.contains(API_KEY), "{seen}");
    if nix::unistd::geteuid().is_root() {
        assert_eq!(spawner_part.trim(), "", "{seen}");
    } else {
        // A plain user's tool cannot read the (non-dumpable) spawner's environ at all, so
        // whether it is empty cannot be seen from here: never a silent pass.
        assert!(spawner_part.contains("Permission denied"), "{seen}");
        eprintln!(
            "SKIPPED the_spawner_starts_with_an_empty_environment (that the environment is \
             empty): only root can read a non-dumpable process's /proc/<pid>/environ; run the \
             tests as root to check it"
        );
    }
}

/// `cmd` with `file` open as its descriptor 7, inheritable (no close-on-exec), as a shell's
/// `7>file` leaves it.
fn with_descriptor_7(cmd: &mut std::process::Command, file: &Path) {
    let file = std::fs::File::create(file).unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: dup2 is async-signal-safe; the child gets a copy of `file` as descriptor 7
    // (dup2 leaves the copy without close-on-exec). `file` stays open in the closure.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    std::mem::forget(file);
}

const DESCRIPTOR_PROBE: &str = "exec 2>&1; ls /proc/self/fd; echo leaked >&7\n";

/// Regression: a tool inherited descriptor 7 that `delta` was started with (`delta run ...
/// 7>file`) and could write to it. Through the spawner (`delta run`), a tool now has 0, 1
/// and 2 only.
#[test]
fn a_descriptor_delta_inherited_never_reaches_a_tool() {
    let script = json!({"steps": [{"tool": "probe"}, {"answer": "done"}]});
    let case = Case::new("fds", "tools: []\n", &script);
    let probe = case.path().join("probe.sh");
    std::fs::write(&probe, DESCRIPTOR_PROBE).unwrap();
    write_agent(
        &case.agent_dir(),
        "fds",
        &format!(
            "tools:\n  - name: probe\n    description: list descriptors\n    exec: \"sh {}\"\n",
            probe.display()
        ),
    );
    let caller_file = case.path().join("callers-fd7.txt");
    let mut cmd = case.spawn_cmd();
    with_descriptor_7(&mut cmd, &caller_file);
    let out = wait_output(
        case.spawn_json_run(cmd, "r1", "list descriptors"),
        COMMAND_TIMEOUT,
    );
    out.assert_code(0);
    let seen = observations(&case.journal("r1")).remove(0);
    let descriptors: Vec<&str> = seen
        .lines()
        .skip_while(|l| l.starts_with("==="))
        .take_while(|l| l.chars().all(|c| c.is_ascii_digit()))
        .collect();
    // `ls` itself holds the directory it lists (3).
    assert_eq!(descriptors, ["0", "1", "2", "3"], "{seen}");
    assert!(seen.contains("Bad file descriptor"), "{seen}");
    assert_eq!(std::fs::read_to_string(&caller_file).unwrap(), "");
}

/// The same regression from the engine's own starts (no spawner), in `delta-bench load
/// --tool-spawner off`, started directly (through `delta bench`, `delta` would already have
/// closed the descriptor before it execs the bench).
#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn a_descriptor_delta_bench_inherited_never_reaches_a_tool() {
    let script = json!({"steps": [{"tool": "probe"}, {"answer": "done"}]});
    let case = Case::new("fds", "tools: []\n", &script);
    let probe = case.path().join("probe.sh");
    std::fs::write(&probe, DESCRIPTOR_PROBE).unwrap();
    let bench_file = case.path().join("bench-fd7.txt");
    let work = case.path().join("bench-work");
    let mut bench = std::process::Command::new(delta_exe().with_file_name("delta-bench"));
    bench
        .args(["load", "--runs", "1", "--max-parallel", "1"])
        .args(["--calls", "2", "--tool-spawner", "off", "--keep"])
        .args(["--tool", &format!("sh {}", probe.display())])
        .arg("--work-dir")
        .arg(&work)
        .current_dir(case.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    with_descriptor_7(&mut bench, &bench_file);
    let out = wait_output(bench.spawn().unwrap(), Duration::from_secs(120));
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(&bench_file).unwrap(), "");
}
