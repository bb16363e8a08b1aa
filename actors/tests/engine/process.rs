//! Engine-level tests of `tool::process` + `tool::observation` against real programs:
//! argv fidelity, big stdin/stdout, /dev/null stdin, timeouts and cancellation killing whole
//! process groups, output cuts and caps, the child environment. Every test runs twice: with
//! the program started from this process (`in_process::`) and through the tool spawner
//! (`via_spawner::`), which must behave the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::spawner_host::{living_members, shared_spawner};

use delta_actors::tool::observation::{format_observation, is_success};
use delta_actors::tool::process::{
    build_child_env, run_process, CaptureSpec, ProcessOutcome, ProcessSpec, Termination,
};
use tokio_util::sync::CancellationToken;

fn base_env() -> Vec<(String, String)> {
    vec![("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())]
}

/// Where a test's programs start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    InProcess,
    Spawner,
}

/// Declares each listed `async fn name(via: Via)` as two tests, `in_process::name` and
/// `via_spawner::name`.
macro_rules! on_both_paths {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(#[tokio::test]
            async fn $name() {
                super::$name(super::Via::InProcess).await
            })*
        }
        mod via_spawner {
            $(#[tokio::test]
            async fn $name() {
                super::$name(super::Via::Spawner).await
            })*
        }
    };
}

on_both_paths!(
    hostile_argv_reaches_the_program_unchanged,
    one_mebibyte_stdin_round_trips_through_cat,
    stdin_is_dev_null_without_a_stdin_value,
    timeout_kills_the_grandchild_too,
    sigterm_ignoring_group_gets_sigkill_after_the_grace,
    cancel_kills_the_group,
    dropping_the_run_future_kills_the_group,
    big_output_is_cut_to_head_and_tail_with_exact_counts,
    full_output_file_is_capped_with_a_note,
    api_key_and_named_secrets_do_not_reach_the_child,
    prepended_path_dir_wins_program_lookup,
    cwd_is_the_given_workspace,
    missing_program_fails_to_start_with_a_hint,
    exit_code_and_signal_are_reported,
    a_daemon_started_on_purpose_survives_a_normal_exit,
    kill_all_live_groups_kills_running_tools,
);

pub fn spec_via(via: Via, argv: &[&str], cwd: &Path) -> ProcessSpec {
    let mut spec = ProcessSpec::new(
        argv.iter().map(|s| (*s).to_owned()).collect(),
        cwd.to_path_buf(),
        base_env(),
    );
    if via == Via::Spawner {
        spec.spawner = Some(shared_spawner());
    }
    spec
}

async fn run(spec: ProcessSpec) -> ProcessOutcome {
    run_process(spec, CancellationToken::new()).await
}

/// Polls (bounded) until no living process of the group remains.
pub async fn assert_group_gone(pgid: u32) {
    for _ in 0..200 {
        if living_members(pgid).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("process group {pgid} still has {:?}", living_members(pgid));
}

async fn hostile_argv_reaches_the_program_unchanged(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let hostile = "a b; rm -rf / $(id) `x` 'q' \"d\" \\ * ${HOME} \n newline";
    let outcome = run(spec_via(via, &["printf", "%s", hostile], dir.path())).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert_eq!(outcome.stdout.text_lossy(), hostile);
}

async fn one_mebibyte_stdin_round_trips_through_cat(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let input: Vec<u8> = (0..1024 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
    let mut spec = spec_via(via, &["cat"], dir.path());
    spec.stdin = Some(input.clone());
    spec.timeout = Duration::from_secs(30);
    spec.capture.full_output = Some((dir.path().join("out.log"), dir.path().join("err.log")));
    let outcome = run(spec).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert_eq!(outcome.stdout.total_bytes, input.len() as u64);
    assert_eq!(std::fs::read(dir.path().join("out.log")).unwrap(), input);
    assert!(
        !dir.path().join("err.log").exists(),
        "empty stderr creates no file"
    );
}

async fn stdin_is_dev_null_without_a_stdin_value(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_via(via, &["cat"], dir.path());
    spec.timeout = Duration::from_secs(10);
    let outcome = run(spec).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert_eq!(outcome.stdout.total_bytes, 0);
}

async fn timeout_kills_the_grandchild_too(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_via(
        via,
        &["sh", "-c", "echo before; sleep 100 & sleep 100"],
        dir.path(),
    );
    spec.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let outcome = run(spec).await;
    assert_eq!(outcome.termination, Termination::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_group_gone(outcome.pid.unwrap()).await;
    let text = format_observation(&outcome, dir.path());
    assert_eq!(
        text,
        "=== STDOUT ===\nbefore\n=== TIMED OUT after 300 ms (process group killed) ==="
    );
    assert!(!is_success(&outcome));
}

async fn sigterm_ignoring_group_gets_sigkill_after_the_grace(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_via(
        via,
        &["sh", "-c", "trap '' TERM; sleep 100 & echo ready; wait"],
        dir.path(),
    );
    spec.timeout = Duration::from_millis(300);
    spec.kill_grace = Duration::from_millis(200);
    let outcome = run(spec).await;
    assert_eq!(outcome.termination, Termination::TimedOut);
    assert_group_gone(outcome.pid.unwrap()).await;
}

/// Polls (bounded) until the script wrote its pid (`echo $$ > marker`) and returns it.
async fn wait_for_pid_file(marker: &Path) -> u32 {
    for _ in 0..2000 {
        if let Ok(text) = std::fs::read_to_string(marker) {
            if text.ends_with('\n') {
                return text.trim().parse().unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{} was never written", marker.display());
}

async fn cancel_kills_the_group(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pid");
    let script = format!("echo $$ > {}; sleep 100 & sleep 100", marker.display());
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(run_process(
        spec_via(via, &["sh", "-c", &script], dir.path()),
        cancel.clone(),
    ));
    let pgid = wait_for_pid_file(&marker).await;
    cancel.cancel();
    let outcome = handle.await.unwrap();
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert_eq!(outcome.pid, Some(pgid));
    assert_group_gone(pgid).await;
    assert!(format_observation(&outcome, dir.path())
        .ends_with("=== CANCELLED (process group killed) ==="));
}

async fn dropping_the_run_future_kills_the_group(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pid");
    let script = format!("echo $$ > {}; sleep 100", marker.display());
    let spec = spec_via(via, &["sh", "-c", &script], dir.path());
    let running = tokio::time::timeout(Duration::from_secs(30), async {
        let run = run_process(spec, CancellationToken::new());
        tokio::pin!(run);
        for _ in 0..1000 {
            tokio::select! {
                _ = &mut run => panic!("sleep 100 ended early"),
                () = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            if std::fs::read_to_string(&marker).is_ok_and(|s| s.ends_with('\n')) {
                break;
            }
        }
    });
    running.await.unwrap();
    let pgid: u32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_group_gone(pgid).await;
}

async fn big_output_is_cut_to_head_and_tail_with_exact_counts(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let mut spec = spec_via(
        via,
        &["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x"],
        dir.path(),
    );
    spec.capture = CaptureSpec {
        head_bytes: 1000,
        tail_bytes: 500,
        full_output: Some((
            run_dir.join("io/tool_executions/c1/stdout.log"),
            run_dir.join("io/tool_executions/c1/stderr.log"),
        )),
        file_cap_bytes: 64 * 1024 * 1024,
        ..CaptureSpec::default()
    };
    let outcome = run(spec).await;
    assert_eq!(outcome.stdout.total_bytes, 100_000);
    assert_eq!(outcome.stdout.head.len(), 1000);
    assert_eq!(outcome.stdout.tail.len(), 500);
    let text = format_observation(&outcome, &run_dir);
    let expected = format!(
        "=== STDOUT ===\n{}\n[... 98500 bytes cut; full output: io/tool_executions/c1/stdout.log ...]\n{}\n=== EXIT CODE: 0 ===",
        "x".repeat(1000),
        "x".repeat(500)
    );
    assert_eq!(text, expected);
    let full = std::fs::read(run_dir.join("io/tool_executions/c1/stdout.log")).unwrap();
    assert_eq!(full.len(), 100_000);
}

async fn full_output_file_is_capped_with_a_note(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_via(
        via,
        &["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' y >&2"],
        dir.path(),
    );
    spec.capture.full_output = Some((dir.path().join("o.log"), dir.path().join("e.log")));
    spec.capture.file_cap_bytes = 1000;
    spec.capture.head_bytes = 10;
    spec.capture.tail_bytes = 10;
    let outcome = run(spec).await;
    assert!(outcome.stderr.file_truncated);
    let file = std::fs::read_to_string(dir.path().join("e.log")).unwrap();
    assert!(file.starts_with(&"y".repeat(1000)));
    assert!(
        file.ends_with("[delta: output capped at 1000 bytes; the stream produced 5000 bytes]\n")
    );
    assert!(format_observation(&outcome, dir.path())
        .contains("full output (capped, see its last line): e.log"));
}

async fn api_key_and_named_secrets_do_not_reach_the_child(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let base: BTreeMap<String, String> = [
        ("DELTA_API_KEY", "sk-delta"),
        ("MY_PROVIDER_KEY", "sk-provider"),
        ("PATH", "/usr/bin:/bin"),
        ("KEEP_ME", "kept"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let env = build_child_env(
        &base,
        &["MY_PROVIDER_KEY".to_owned()],
        &[("DELTA_RUN_ID".to_owned(), "run-1".to_owned())],
        None,
    );
    let mut spec = spec_via(via, &["env"], dir.path());
    spec.env = env.into();
    let stdout = run(spec).await.stdout.text_lossy();
    assert!(!stdout.contains("sk-delta"), "{stdout}");
    assert!(!stdout.contains("sk-provider"), "{stdout}");
    assert!(stdout.contains("KEEP_ME=kept"));
    assert!(stdout.contains("DELTA_RUN_ID=run-1"));
}

async fn prepended_path_dir_wins_program_lookup(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = bin.join("echo");
    std::fs::write(&fake, "#!/bin/sh\nprintf 'fake echo'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let base: BTreeMap<String, String> = [("PATH".to_owned(), "/usr/bin:/bin".to_owned())]
        .into_iter()
        .collect();
    let mut spec = spec_via(via, &["echo", "real"], dir.path());
    spec.env = build_child_env(&base, &[], &[], Some(&bin)).into();
    let outcome = run(spec).await;
    assert_eq!(outcome.stdout.text_lossy(), "fake echo");
}

async fn cwd_is_the_given_workspace(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let outcome = run(spec_via(via, &["pwd"], dir.path())).await;
    let shown = PathBuf::from(outcome.stdout.text_lossy().trim());
    assert_eq!(
        shown.canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
}

async fn missing_program_fails_to_start_with_a_hint(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let outcome = run(spec_via(
        via,
        &["definitely-not-a-program-xyz", "a"],
        dir.path(),
    ))
    .await;
    let text = format_observation(&outcome, dir.path());
    assert!(
        text.starts_with(
            "=== FAILED TO START: No such file or directory: definitely-not-a-program-xyz"
        ),
        "{text}"
    );
    assert!(text.contains("not on the tool's PATH"), "{text}");
    assert!(!is_success(&outcome));
}

async fn exit_code_and_signal_are_reported(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let failed = run(spec_via(
        via,
        &["sh", "-c", "echo err >&2; exit 3"],
        dir.path(),
    ))
    .await;
    assert_eq!(
        format_observation(&failed, dir.path()),
        "=== STDERR ===\nerr\n=== EXIT CODE: 3 ==="
    );
    let killed = run(spec_via(via, &["sh", "-c", "kill -KILL $$"], dir.path())).await;
    assert_eq!(
        format_observation(&killed, dir.path()),
        "(no output)\n=== KILLED BY SIGNAL 9 ==="
    );
    let ok = run(spec_via(via, &["true"], dir.path())).await;
    assert!(is_success(&ok));
}

async fn a_daemon_started_on_purpose_survives_a_normal_exit(via: Via) {
    let dir = tempfile::tempdir().unwrap();
    let outcome = run(spec_via(
        via,
        &["sh", "-c", "sleep 100 >/dev/null 2>&1 </dev/null & echo $!"],
        dir.path(),
    ))
    .await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    let daemon: i32 = outcome.stdout.text_lossy().trim().parse().unwrap();
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon), None).is_ok());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// Runs in a child copy of this test binary (see the test below): `kill_all_live_groups`
/// signals every group of the process, so it must not run beside the other tests.
#[tokio::test]
#[ignore = "helper: run only by kill_all_live_groups_kills_running_tools in a child process"]
async fn helper_kill_all_live_groups() {
    let via = match std::env::var("DELTA_TEST_KILL_ALL_HELPER").as_deref() {
        Ok("in_process") => Via::InProcess,
        Ok("spawner") => Via::Spawner,
        _ => return,
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_via(via, &["sh", "-c", "sleep 100 & sleep 100"], dir.path());
    let handle = tokio::spawn(run_process(spec, CancellationToken::new()));
    for _ in 0..1000 {
        if delta_actors::tool::process::live_group_count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(delta_actors::tool::process::kill_all_live_groups(), 1);
    let outcome = handle.await.unwrap();
    assert_eq!(outcome.termination, Termination::Signaled(9));
    assert_eq!(delta_actors::tool::process::live_group_count(), 0);
    println!("\nKILLED_GROUP={}", outcome.pid.unwrap());
}

async fn kill_all_live_groups_kills_running_tools(via: Via) {
    let output = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "process::helper_kill_all_live_groups",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "DELTA_TEST_KILL_ALL_HELPER",
            match via {
                Via::InProcess => "in_process",
                Via::Spawner => "spawner",
            },
        )
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pgid: u32 = stdout
        .lines()
        .find_map(|line| {
            line.split_once("KILLED_GROUP=")
                .map(|(_, pgid)| pgid.trim())
        })
        .unwrap_or_else(|| panic!("helper did not run: {stdout}"))
        .parse()
        .unwrap();
    assert_group_gone(pgid).await;
}
