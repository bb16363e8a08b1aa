//! tool::spawner — starts tools from a small helper process (a zygote) instead of from the
//! engine itself.
//!
//! Why: `fork` copies the caller's descriptor table and `exec` closes it again, so a `true`
//! tool costs ~1.4 ms of CPU from an engine holding 10,000 descriptors against ~0.6 ms from a
//! small process. The spawner is started when the engine starts, before any run opened a
//! file, and keeps a handful of descriptors for its whole life.
//!
//! How: the engine re-executes its own binary (`delta __spawner`) with one end of a
//! `SOCK_SEQPACKET` socket pair as its stdin. Per tool it creates the pipes, sends the
//! resolved program, argv, environment and cwd with the tool's pipe ends attached
//! (`SCM_RIGHTS`), and reads and writes its own ends exactly as for an in-process child. The
//! spawner `posix_spawn`s the tool as the leader of a new process group and reports its pid,
//! or the errno of the failed `chdir` / `execve`, then the leader's wait status when it exits.
//! The engine keeps everything else: timeouts and cancellation (`killpg`, same user), output
//! capture, stdin, `kill_all_live_groups`. When the engine is gone — `kill -9` included —
//! the spawner sees EOF on the socket, SIGKILLs the group of every leader still running, and
//! exits.
//!
//! Layout: `protocol` (bytes), `sys` (socket and pipe system calls); the engine side:
//! [`client`] (the [`Spawner`] handle), `request` (pipes, memfd), `outbox` (requests a full
//! socket cannot take yet), `replies` (the reader thread); the spawner process: `zygote`
//! (its loop) and `exec` (`posix_spawn`).
//!
//! One spawner serves the whole process: the `RunSupervisor` of a [`SupervisorConfig`] with
//! `tool_spawner` set starts it (or joins the one already running) and keeps it alive; tools,
//! hooks and context generators find it through [`shared`] and fall back to starting
//! in-process, with one warning, when it has died.
//!
//! [`SupervisorConfig`]: crate::request::SupervisorConfig

pub mod client;
mod confined;
mod exec;
mod outbox;
pub(crate) mod protocol;
mod replies;
mod request;
mod sys;
mod zygote;

use std::sync::{Arc, Mutex, PoisonError, Weak};

pub use client::{ExitWatch, SpawnError, SpawnedChild, Spawner, SpawnerCommand, StartError};
pub use request::Launch;
pub use zygote::{serve_stdin, ServeError};

/// The process's spawner, while some supervisor keeps it alive.
static SHARED: Mutex<Weak<Spawner>> = Mutex::new(Weak::new());

/// The spawner tools of this process should start through, if one is running (or has died:
/// the caller then falls back to starting in-process).
pub fn shared() -> Option<Arc<Spawner>> {
    SHARED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .upgrade()
}

/// The process's spawner, started from `command` unless a live one is running already. The
/// caller keeps the returned handle for as long as tools should go through it; when the last
/// handle is dropped, the spawner exits.
pub fn share_for_process(command: &SpawnerCommand) -> Result<Arc<Spawner>, StartError> {
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(running) = slot.upgrade().filter(|s| s.is_alive()) {
        return Ok(running);
    }
    let spawner = Arc::new(Spawner::start(command)?);
    *slot = Arc::downgrade(&spawner);
    Ok(spawner)
}
