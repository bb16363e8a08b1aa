//! The MCP servers of one engine, shared by its runs: one server per distinct launch
//! (program, arguments, environment, working directory), started when the first run needs
//! it, restarted at the next use after it died, and killed when the engine stops.
//!
//! Why shared and not one per run: a Node.js server costs ~50 MB and ~0.5 s to start, so an
//! orchestration of 100 runs would hold 5 GB and spend its first minute starting servers;
//! MCP servers serve many calls in one session, and a server that depends on the run (its
//! workspace) gets a distinct launch through `${CWD}`, so runs of one workspace share one.
//!
//! The sessions live on one thread of their own (a small tokio runtime), so a server shared
//! by runs on every arbiter depends on none of them, and the pool works the same from a
//! supervisor, `delta tool expand` or a test.
//!
//! Must not: name tools for the model or format answers (`kind.rs`, `connection.rs`).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::connection::{Connection, ServerLaunch, SpawnContext};

/// How long a server that failed to start is not tried again: a broken server listed by an
/// agent of a 1,000-run batch is tried once, not 1,000 times.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// How long shutting the pool down waits for killed servers to be reaped.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// The name of the pool's thread.
const THREAD_NAME: &str = "delta-mcp";

/// The servers of one engine (a supervisor, or one `delta tool expand`).
#[derive(Clone, Default)]
pub struct McpPool {
    inner: Arc<PoolInner>,
}

#[derive(Default)]
struct PoolInner {
    runtime: OnceLock<Result<PoolThread, String>>,
    servers: Mutex<HashMap<ServerLaunch, Arc<SharedServer>>>,
    /// What was already said on the engine's log once (see [`McpPool::first_time`]).
    said: Mutex<HashSet<String>>,
}

/// The thread the sessions run on, and the switch that ends it.
struct PoolThread {
    handle: tokio::runtime::Handle,
    stop: CancellationToken,
}

struct SharedServer {
    launch: ServerLaunch,
    slot: tokio::sync::Mutex<Slot>,
}

enum Slot {
    Empty,
    Up(Arc<Connection>),
    Down { reason: String, until: Instant },
}

impl McpPool {
    /// A pool with no server started (and no thread, until the first server starts).
    pub fn new() -> McpPool {
        McpPool::default()
    }

    /// The running server for `launch`: the one already running, or a new one (the first
    /// caller starts it; the others wait for that start). The error says why it is not
    /// running.
    pub async fn connect(&self, launch: ServerLaunch) -> Result<Arc<Connection>, String> {
        let server = self.server(launch);
        self.on_pool_thread(async move { server.running().await })
            .await
            .unwrap_or_else(Err)
    }

    /// [`connect`](Self::connect) from a task already on the pool's thread.
    pub(super) async fn connect_here(
        &self,
        launch: ServerLaunch,
    ) -> Result<Arc<Connection>, String> {
        self.server(launch).running().await
    }

    /// Runs `work` on the pool's thread and waits for it, from any runtime.
    pub(super) async fn on_pool_thread<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, String> {
        let handle = match self.inner.thread() {
            Ok(thread) => thread.handle.clone(),
            Err(reason) => return Err(reason.clone()),
        };
        handle
            .spawn(work)
            .await
            .map_err(|e| format!("the MCP thread stopped: {e}"))
    }

    fn server(&self, launch: ServerLaunch) -> Arc<SharedServer> {
        let mut servers = self
            .inner
            .servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(servers.entry(launch.clone()).or_insert_with(|| {
            Arc::new(SharedServer {
                launch,
                slot: tokio::sync::Mutex::new(Slot::Empty),
            })
        }))
    }

    /// True the first time `what` is asked about in this engine: a warning every run of a
    /// batch would give is logged once.
    pub(super) fn first_time(&self, what: &str) -> bool {
        self.inner
            .said
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(what.to_string())
    }

    /// Kills every server and ends the pool's thread; later connects start afresh.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl PoolInner {
    fn thread(&self) -> &Result<PoolThread, String> {
        self.runtime.get_or_init(start_thread)
    }

    fn shutdown(&self) {
        let servers: Vec<Arc<SharedServer>> = self
            .servers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, s)| s)
            .collect();
        let mut killed = Vec::new();
        for server in servers {
            // A server being started holds its lock: its start is abandoned with the thread
            // below, and its process group is killed when its half-made connection drops.
            if let Ok(mut slot) = server.slot.try_lock() {
                if let Slot::Up(conn) = std::mem::replace(&mut *slot, Slot::Empty) {
                    conn.kill();
                    killed.push(conn);
                }
            }
        }
        if let Some(Ok(thread)) = self.runtime.get() {
            // The engine's end is the servers' end: wait (briefly) until they are reaped, so
            // that no server is still dying when `delta run` returns. Not from the pool's
            // own thread, which does the waiting.
            let on_pool_thread = std::thread::current().name() == Some(THREAD_NAME);
            if !killed.is_empty() && !on_pool_thread {
                let (done_tx, done) = std::sync::mpsc::channel();
                thread.handle.spawn(async move {
                    for conn in &killed {
                        conn.exited_within(KILL_WAIT).await;
                    }
                    let _ = done_tx.send(());
                });
                let _ = done.recv_timeout(KILL_WAIT + Duration::from_secs(1));
            }
            thread.stop.cancel();
        }
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn start_thread() -> Result<PoolThread, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the MCP thread: {e}"))?;
    let handle = runtime.handle().clone();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .spawn(move || {
            runtime.block_on(stopped.cancelled());
            // Tasks still in flight (a start being abandoned) are dropped with the runtime;
            // dropping their connections kills their process groups.
            runtime.shutdown_background();
        })
        .map_err(|e| format!("cannot start the MCP thread: {e}"))?;
    Ok(PoolThread { handle, stop })
}

impl SharedServer {
    /// The live connection, starting the server when it is not running (and was not found
    /// broken in the last [`RETRY_AFTER`]).
    async fn running(&self) -> Result<Arc<Connection>, String> {
        let mut slot = self.slot.lock().await;
        match &*slot {
            Slot::Up(conn) if conn.is_alive() => return Ok(Arc::clone(conn)),
            Slot::Up(dead) => {
                tracing::warn!(server = %self.launch.name, "the MCP server exited; starting it again");
                dead.kill();
            }
            Slot::Down { reason, until } if Instant::now() < *until => return Err(reason.clone()),
            _ => {}
        }
        let spawn = SpawnContext {
            spawner: crate::tool::spawner::shared(),
        };
        match Connection::open(&self.launch, &spawn).await {
            Ok(conn) => {
                let conn = Arc::new(conn);
                let tools = match &conn.listing {
                    super::listing::Listed::All(tools) => tools.len().to_string(),
                    super::listing::Listed::OverCap => "too many".to_string(),
                };
                tracing::info!(server = %self.launch.name, pid = conn.pid(), %tools, "MCP server started");
                *slot = Slot::Up(Arc::clone(&conn));
                Ok(conn)
            }
            Err(reason) => {
                tracing::warn!(server = %self.launch.name, %reason, "MCP server not available");
                *slot = Slot::Down {
                    reason: reason.clone(),
                    until: Instant::now() + RETRY_AFTER,
                };
                Err(reason)
            }
        }
    }
}
