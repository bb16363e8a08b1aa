//! This test binary as a tool spawner: engine tests cannot run the `delta` binary (it belongs
//! to the other package), so the spawner they use is this same binary re-run with only the
//! ignored [`serve_as_tool_spawner`] test selected, which serves its stdin like
//! `delta __spawner` does.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use delta_actors::tool::spawner::{serve_stdin, ServeError, Spawner, SpawnerCommand};

/// The command that makes this test binary a spawner.
pub fn spawner_command() -> SpawnerCommand {
    SpawnerCommand::new(
        std::env::current_exe().unwrap(),
        [
            "--exact",
            "spawner_host::serve_as_tool_spawner",
            "--ignored",
            "--test-threads=1",
            "-q",
        ],
    )
}

/// One spawner shared by every test of this binary that does not kill or stop its own.
pub fn shared_spawner() -> Arc<Spawner> {
    static SHARED: OnceLock<Arc<Spawner>> = OnceLock::new();
    SHARED
        .get_or_init(|| Arc::new(Spawner::start(&spawner_command()).unwrap()))
        .clone()
}

/// A spawner of its own, for a test that kills, stops or pauses it.
pub fn private_spawner() -> Arc<Spawner> {
    Arc::new(Spawner::start(&spawner_command()).unwrap())
}

/// Runs only inside a spawner started by [`spawner_command`]; anywhere else (stdin is not a
/// control socket) it does nothing.
#[test]
#[ignore = "helper: the tool spawner, run by spawner_command() in a child process"]
fn serve_as_tool_spawner() {
    match serve_stdin() {
        Ok(()) | Err(ServeError::NotAControlSocket) => {}
        Err(error) => panic!("{error}"),
    }
}

/// Processes of process group `pgid` that are not zombies, read from /proc (zombies waiting
/// for a reaper are dead already).
pub fn living_members(pgid: u32) -> Vec<u32> {
    living_processes(|_, group, _| group == pgid)
}

/// Living (non-zombie) processes for which `keep(pid, pgid, cmdline)` holds.
pub fn living_processes(keep: impl Fn(u32, u32, &str) -> bool) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(after_name) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let (state, group) = (fields[0], fields[2].parse::<u32>().unwrap_or(0));
        if state == "Z" || state == "X" {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
            .unwrap_or_default();
        if keep(pid, group, &cmdline) {
            found.push(pid);
        }
    }
    found
}

/// True while `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// Polls `condition` every 10 ms for at most `limit`; whether it came true.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
