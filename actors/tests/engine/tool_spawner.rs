//! Engine-level tests of the tool spawner beyond the process tests it shares with the
//! in-process path (`process.rs`): failures worded alike, what a tool inherits, big argv, the
//! spawner's own descriptors, its death (fallback, running tools), abandoned requests, its
//! shutdown, and a Supervisor whose runs use it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use delta_actors::tool::observation::format_observation;
use delta_actors::tool::process::{run_process, ProcessOutcome, Termination};
use delta_actors::tool::spawner::{Launch, Spawner, SpawnerCommand};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;

use crate::harness::{drive, fast_config, new_run, script, TestAgent};
use crate::process::{assert_group_gone, spec_via, Via};
use crate::spawner_host::{
    eventually, is_alive, living_processes, private_spawner, shared_spawner, spawner_command,
};

const LIMIT: Duration = Duration::from_secs(20);

async fn run_on(via: Via, argv: &[&str], cwd: &Path) -> ProcessOutcome {
    run_process(spec_via(via, argv, cwd), CancellationToken::new()).await
}

fn signal(pid: u32, signal: Signal) {
    kill(Pid::from_raw(pid as i32), signal).unwrap();
}

#[tokio::test]
async fn via_spawner_tools_are_children_of_the_spawner() {
    let dir = tempfile::tempdir().unwrap();
    let parent = |outcome: ProcessOutcome| outcome.stdout.text_lossy().trim().to_owned();
    let spawned = run_on(Via::Spawner, &["sh", "-c", "echo $PPID"], dir.path()).await;
    assert_eq!(parent(spawned), shared_spawner().pid().to_string());
    let in_process = run_on(Via::InProcess, &["sh", "-c", "echo $PPID"], dir.path()).await;
    assert_eq!(parent(in_process), std::process::id().to_string());
}

/// A burst of starts, spread over the spawner's launch threads, keeps every tool wired to
/// its own pipes: each tool's output is its own argument, and each exit is its own.
#[tokio::test]
async fn a_burst_of_starts_through_the_spawner_keeps_each_tool_on_its_own_pipes() {
    let dir = tempfile::tempdir().unwrap();
    let burst = 48;
    let starts = (0..burst).map(|i| {
        let script = format!("echo tool-{i}; exit {}", i % 7);
        let dir = dir.path().to_path_buf();
        async move { run_on(Via::Spawner, &["sh", "-c", &script], &dir).await }
    });
    let outcomes = futures_util::future::join_all(starts).await;
    for (i, outcome) in outcomes.iter().enumerate() {
        assert_eq!(outcome.stdout.text_lossy().trim(), format!("tool-{i}"));
        assert_eq!(outcome.termination, Termination::Exited(i as i32 % 7));
    }
}

#[tokio::test]
async fn spawn_failures_read_the_same_as_in_process() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plain.sh"), "echo never\n").unwrap();
    let missing_cwd = dir.path().join("gone");
    let cases: [(&[&str], &Path, &str); 3] = [
        (
            &["./plain.sh"],
            dir.path(),
            "=== FAILED TO START: Permission denied (os error 13): ./plain.sh (hint: check that",
        ),
        (
            &["true"],
            &missing_cwd,
            "=== FAILED TO START: No such file or directory (os error 2): true (hint: check that",
        ),
        (
            &["echo", "nul\0byte"],
            dir.path(),
            "=== FAILED TO START: nul byte found in provided data: echo (hint: check that",
        ),
    ];
    for (argv, cwd, expected) in cases {
        let in_process = run_on(Via::InProcess, argv, cwd).await;
        let spawned = run_on(Via::Spawner, argv, cwd).await;
        assert!(
            matches!(spawned.termination, Termination::SpawnFailed(_)),
            "{argv:?}"
        );
        let text = format_observation(&spawned, dir.path());
        assert!(text.starts_with(expected), "{argv:?}: {text}");
        assert_eq!(
            text,
            format_observation(&in_process, dir.path()),
            "{argv:?}"
        );
    }
}

/// `text` with each `Sig...:\t<hex mask>` line cut to the standard signals 1-31: glibc keeps
/// 32 and 33 (SIGCANCEL, SIGSETXID) for itself, and whether a child shows them ignored
/// depends on how it was started (`posix_spawn` or `fork`), not on anything a tool sees.
fn standard_signals_only(text: &str) -> String {
    text.lines()
        .map(|line| match line.split_once(":\t") {
            Some((name, mask)) if name.starts_with("Sig") => {
                let mask = u64::from_str_radix(mask.trim(), 16).unwrap() & 0x7fff_ffff;
                format!("{name}:\t{mask:016x}\n")
            }
            _ => format!("{line}\n"),
        })
        .collect()
}

#[tokio::test]
async fn tools_inherit_the_same_descriptors_and_signal_state_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    // Descriptors of ours that no tool may inherit, whichever path starts it.
    let mut held: Vec<std::fs::File> = (0..50)
        .map(|_| std::fs::File::open("/dev/null").unwrap())
        .collect();
    // Regression (issue 24): one without close-on-exec, as an embedder inherits them from
    // its caller, reached every tool started in-process.
    // SAFETY: dup returns a new descriptor, owned by the File from here on.
    held.push(unsafe { std::os::fd::FromRawFd::from_raw_fd(libc::dup(held[0].as_raw_fd())) });
    // The leaders themselves report what they got at exec (a shell would show its own
    // mask while it forks).
    let mut seen = Vec::new();
    for probe in [
        &["ls", "/proc/self/fd"][..],
        &["grep", "-E", "^Sig(Blk|Ign|Cgt)", "/proc/self/status"],
    ] {
        let in_process = run_on(Via::InProcess, probe, dir.path()).await;
        let spawned = run_on(Via::Spawner, probe, dir.path()).await;
        assert_eq!(spawned.termination, Termination::Exited(0));
        let text = standard_signals_only(&spawned.stdout.text_lossy());
        assert_eq!(
            text,
            standard_signals_only(&in_process.stdout.text_lossy()),
            "{probe:?}"
        );
        seen.push(text);
    }
    assert!(seen[1].contains("SigBlk:\t0000000000000000"), "{}", seen[1]);
    let fds: Vec<&str> = seen[0].lines().collect();
    for held in &held {
        let fd = held.as_raw_fd().to_string();
        assert!(
            !fds.contains(&fd.as_str()),
            "fd {fd} leaked into the tool: {fds:?}"
        );
    }
}

#[tokio::test]
async fn an_argv_too_big_for_one_message_travels_in_a_memfd() {
    let dir = tempfile::tempdir().unwrap();
    // 4 x 60 KiB: above the inline limit (48 KiB), below the kernel's per-string limit.
    let chunk = "x".repeat(60 * 1024);
    let mut argv = vec!["sh", "-c", "printf %s \"$@\" | wc -c", "sh"];
    argv.extend([chunk.as_str(); 4]);
    let outcome = run_on(Via::Spawner, &argv, dir.path()).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert_eq!(
        outcome.stdout.text_lossy().trim(),
        (4 * 60 * 1024).to_string()
    );
}

/// Descriptors of this process that a child inherits (no close-on-exec), from fd 3 on.
fn inheritable_fds() -> usize {
    std::fs::read_dir("/proc/self/fdinfo")
        .unwrap()
        .flatten()
        .filter(|entry| {
            let fd: i32 = entry.file_name().to_string_lossy().parse().unwrap_or(0);
            let info = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                .unwrap_or(0o2000000);
            fd >= 3 && flags & 0o2000000 == 0
        })
        .count()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test]
async fn the_spawner_holds_a_handful_of_descriptors_while_the_engine_holds_many() {
    let held: Vec<std::fs::File> = (0..300)
        .map(|_| std::fs::File::open("/dev/null").unwrap())
        .collect();
    // Started even after the engine grew: it keeps only what it needs.
    let spawner = private_spawner();
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_via(Via::Spawner, &["true"], dir.path());
    spec.spawner = Some(spawner.clone());
    let outcome = run_process(spec, CancellationToken::new()).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    let engine = open_fds(std::process::id());
    let own = open_fds(spawner.pid());
    // stdio (the control socket as stdin), the SIGCHLD wake pipe, /dev/null.
    assert!(
        own <= 6 + inheritable_fds(),
        "the spawner holds {own} descriptors"
    );
    assert!(
        engine >= held.len(),
        "the engine holds {engine} descriptors"
    );
}

/// Regression: under `nohup` (or `cmd &` in a script) the engine ignores SIGHUP (and SIGINT,
/// SIGQUIT), and tools it starts itself inherit that; the spawner reset them to default, so
/// the same tool behaved differently on the two paths.
#[tokio::test]
async fn signals_the_engine_ignores_stay_ignored_for_tools_started_by_the_spawner() {
    let base = spawner_command();
    // The spawner is exec'd by a shell that ignores SIGHUP first, as nohup does.
    let mut args: Vec<std::ffi::OsString> = vec![
        "-c".into(),
        "trap '' HUP; exec \"$0\" \"$@\"".into(),
        base.program.clone().into(),
    ];
    args.extend(base.args.iter().cloned());
    let spawner = Arc::new(Spawner::start(&SpawnerCommand::new("/bin/sh", args)).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_via(
        Via::Spawner,
        &["grep", "^SigIgn", "/proc/self/status"],
        dir.path(),
    );
    spec.spawner = Some(spawner.clone());
    let outcome = run_process(spec, CancellationToken::new()).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    let line = outcome.stdout.text_lossy();
    let mask = u64::from_str_radix(line.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    let bit = |signal: Signal| 1u64 << (signal as i32 - 1);
    assert_ne!(
        mask & bit(Signal::SIGHUP),
        0,
        "SIGHUP reset for the tool: {line}"
    );
    // What the spawner itself ignores for its own sake is still reset for tools.
    if !ignored_here(Signal::SIGTERM) {
        assert_eq!(
            mask & bit(Signal::SIGTERM),
            0,
            "SIGTERM left ignored: {line}"
        );
    }
}

/// Whether this test process ignores `signal` (then every child inherits it ignored).
fn ignored_here(signal: Signal) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("SigIgn:")).unwrap();
    let mask = u64::from_str_radix(line.trim_start_matches("SigIgn:").trim(), 16).unwrap();
    mask & (1u64 << (signal as i32 - 1)) != 0
}

/// Regression (issue 24): a descriptor the spawner inherited without close-on-exec (from an
/// engine that inherited it from its caller: `delta run 7>file`) reached every tool. The
/// spawner marks what it inherited close-on-exec before it starts anything.
#[tokio::test]
async fn a_descriptor_the_spawner_inherited_never_reaches_a_tool() {
    let dir = tempfile::tempdir().unwrap();
    let host = spawner_command();
    let inherited = dir.path().join("fd7.txt");
    // A shell opens descriptor 7 (inheritable), then becomes the spawner.
    let mut args: Vec<std::ffi::OsString> = vec![
        "-c".into(),
        "exec 7>>\"$1\"; shift; exec \"$@\"".into(),
        "sh".into(),
        inherited.clone().into_os_string(),
        host.program.clone().into_os_string(),
    ];
    args.extend(host.args.iter().cloned());
    let spawner = Arc::new(Spawner::start(&SpawnerCommand::new("/bin/sh", args)).unwrap());
    let started_by = |argv: &'static [&'static str]| {
        let mut spec = spec_via(Via::Spawner, argv, dir.path());
        spec.spawner = Some(spawner.clone());
        run_process(spec, CancellationToken::new())
    };
    let parent = started_by(&["sh", "-c", "echo $PPID"]).await;
    assert_eq!(
        parent.stdout.text_lossy().trim(),
        spawner.pid().to_string(),
        "started by that spawner"
    );
    let outcome = started_by(&["ls", "/proc/self/fd"]).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    let fds: Vec<String> = outcome
        .stdout
        .text_lossy()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(fds, ["0", "1", "2", "3"], "ls holds 3 itself");
}

#[tokio::test]
async fn a_dead_spawner_falls_back_to_starting_tools_in_process() {
    let spawner = private_spawner();
    signal(spawner.pid(), Signal::SIGKILL);
    assert!(eventually(LIMIT, || !spawner.is_alive()).await);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_via(Via::Spawner, &["sh", "-c", "echo $PPID"], dir.path());
    spec.spawner = Some(spawner.clone());
    let outcome = run_process(spec, CancellationToken::new()).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert_eq!(
        outcome.stdout.text_lossy().trim(),
        std::process::id().to_string(),
        "started by this process"
    );
    assert!(
        !spawner.first_fallback(),
        "the fallback was warned about once already"
    );
}

#[tokio::test]
async fn the_spawner_dying_under_a_running_tool_gets_the_tool_group_killed() {
    let spawner = private_spawner();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pid");
    let script = format!("echo $$ > {}; sleep 100 & sleep 100", marker.display());
    let mut spec = spec_via(Via::Spawner, &["sh", "-c", &script], dir.path());
    spec.spawner = Some(spawner.clone());
    let running = tokio::spawn(run_process(spec, CancellationToken::new()));
    assert!(
        eventually(LIMIT, || std::fs::read_to_string(&marker)
            .is_ok_and(|t| t.ends_with('\n')))
        .await
    );
    signal(spawner.pid(), Signal::SIGKILL);
    let outcome = tokio::time::timeout(LIMIT, running).await.unwrap().unwrap();
    match &outcome.termination {
        Termination::SpawnFailed(reason) => assert!(
            reason.contains("cannot wait for the tool process: the tool spawner exited"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_group_gone(outcome.pid.unwrap()).await;
}

fn launch<'a>(argv: &'a [String], env: &'a [(&'a str, &'a str)], cwd: &'a Path) -> Launch<'a> {
    Launch {
        program: Path::new("/bin/sh"),
        argv,
        env,
        cwd,
        stdin_pipe: false,
        sandbox: None,
    }
}

#[tokio::test]
async fn an_abandoned_spawn_request_kills_its_tool_when_it_starts() {
    let spawner = private_spawner();
    let dir = tempfile::tempdir().unwrap();
    let token = format!("sleep 1000.{}", std::process::id());
    let argv: Vec<String> = vec!["sh".into(), "-c".into(), format!("exec {token}")];
    let env = [("PATH", "/usr/bin:/bin")];
    // Paused, the spawner cannot answer before the request is abandoned.
    signal(spawner.pid(), Signal::SIGSTOP);
    {
        let request = spawner.spawn(launch(&argv, &env, dir.path()));
        tokio::pin!(request);
        tokio::select! {
            biased;
            _ = &mut request => panic!("answered by a stopped spawner"),
            () = std::future::ready(()) => {}
        }
    }
    signal(spawner.pid(), Signal::SIGCONT);
    // Requests are answered in order: once this one is, the abandoned one was handled.
    let quick: Vec<String> = vec!["sh".into(), "-c".into(), "exit 0".into()];
    let mut child = spawner
        .spawn(launch(&quick, &env, dir.path()))
        .await
        .unwrap();
    assert!(child.exit.wait().await.unwrap().success());
    let tool_alive = || !living_processes(|_, _, cmdline| cmdline.trim() == token).is_empty();
    assert!(
        eventually(LIMIT, || !tool_alive()).await,
        "{token} still runs"
    );
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_spawner() {
    let spawner = private_spawner();
    let pid = spawner.pid();
    assert!(is_alive(pid));
    drop(spawner);
    assert!(eventually(LIMIT, || !is_alive(pid)).await);
}

#[tokio::test]
async fn a_program_that_never_answers_as_a_spawner_leaves_tools_to_start_in_process() {
    // Started without waiting for it: the request queues in the socket, unread, until the
    // program exits without ever answering `Ready`.
    let command = SpawnerCommand::new("/bin/sleep", ["1"]);
    let spawner = Arc::new(Spawner::start(&command).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_via(Via::Spawner, &["sh", "-c", "echo $PPID"], dir.path());
    spec.spawner = Some(spawner.clone());
    let outcome = run_process(spec, CancellationToken::new()).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert_eq!(
        outcome.stdout.text_lossy().trim(),
        std::process::id().to_string()
    );
    assert!(!spawner.is_alive());
}

#[test]
fn a_supervisor_with_a_tool_spawner_starts_run_tools_through_it() {
    let agent = TestAgent::new(
        "spawned",
        "",
        "  - name: parent\n    description: the tool's parent\n    exec: \"sh ${AGENT_HOME}/parent.sh\"\n",
    );
    std::fs::write(
        agent.path().join("parent.sh"),
        "tr '\\0' ' ' < /proc/$PPID/cmdline\n",
    )
    .unwrap();
    let config = delta_actors::SupervisorConfig {
        tool_spawner: Some(spawner_command()),
        ..fast_config()
    };
    let supervisor = delta_actors::Supervisor::start(config).unwrap();
    let script = script(
        "rules:\n  - steps:\n      - tool: parent\n      - answer: \"{{ last_observation }}\"\n",
    );
    let work = tempfile::tempdir().unwrap();
    let result = drive(
        &supervisor,
        new_run(agent.load(), work.path(), script, "go"),
    );
    let answer = result.result.clone().unwrap_or_default();
    assert!(answer.contains("serve_as_tool_spawner"), "{answer}");
    let shared: Arc<Spawner> = delta_actors::tool::spawner::shared().unwrap();
    assert!(shared.is_alive());
    supervisor.shutdown();
}
