//! The bench's scripted model on a thread of its own (a single-threaded tokio runtime), so
//! its CPU time can be told apart from the engine's: [`ServerThread::cpu_seconds`] reads the
//! thread's user + system time from `/proc/self/task/<tid>/stat`.
//!
//! Must not: drive runs or measure anything but its own thread.

use std::sync::Arc;
use std::thread::JoinHandle;

use delta_actors::llm::scripted::serve;
use delta_actors::llm::Script;
use tokio::sync::oneshot;

use crate::error::CliError;

/// A scripted model served on 127.0.0.1 from its own thread; stops when dropped.
pub struct ServerThread {
    base_url: String,
    tid: i32,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerThread {
    /// Starts serving `script` on a free loopback port and waits until it listens.
    pub fn start(script: Arc<Script>) -> Result<ServerThread, CliError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(String, i32), String>>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("scripted-model".into())
            .spawn(move || {
                let tid = this_thread_id();
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("cannot start its runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
                    match serve(script, addr).await {
                        Ok(server) => {
                            let _ = ready_tx.send(Ok((server.base_url(), tid)));
                            let _ = stop_rx.await;
                            server.shutdown().await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                        }
                    }
                });
            })
            .map_err(|e| {
                CliError::Runtime(format!("cannot start the scripted model's thread: {e}"))
            })?;
        let started = ready_rx
            .recv()
            .map_err(|_| "its thread ended before it listened".to_string())
            .and_then(|ready| ready);
        match started {
            Ok((base_url, tid)) => Ok(ServerThread {
                base_url,
                tid,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Err(e) => {
                let _ = thread.join();
                Err(CliError::Runtime(format!(
                    "cannot serve the scripted model: {e}"
                )))
            }
        }
    }

    /// The base URL clients use, e.g. `http://127.0.0.1:4321/v1`.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// CPU the server's thread used so far.
    pub fn cpu(&self) -> ThreadCpu {
        thread_cpu(self.tid)
    }

    /// Stops accepting, lets open connections finish, and joins the thread.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// The calling thread's kernel id (its `/proc/self/task/<tid>` entry).
pub fn this_thread_id() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// CPU seconds one thread used, split as the kernel counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadCpu {
    /// In the thread's own code.
    pub user_s: f64,
    /// In the kernel on its behalf (system calls, page faults).
    pub sys_s: f64,
}

impl ThreadCpu {
    /// User + system.
    pub fn total_s(self) -> f64 {
        self.user_s + self.sys_s
    }
}

/// User and system CPU seconds of thread `tid` of this process, from
/// `/proc/self/task/<tid>/stat`; zero when it cannot be read (the thread ended).
pub fn thread_cpu(tid: i32) -> ThreadCpu {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return ThreadCpu::default();
    };
    let Some((_, fields)) = stat.rsplit_once(')') else {
        return ThreadCpu::default();
    };
    // utime and stime are fields 14 and 15 of proc(5); `fields` starts at field 3.
    let mut ticks = fields
        .split_whitespace()
        .skip(11)
        .map(|t| t.parse::<u64>().unwrap_or(0));
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut seconds = || ticks.next().unwrap_or(0) as f64 / per_second;
    ThreadCpu {
        user_s: seconds(),
        sys_s: seconds(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_shows_its_own_cpu_and_no_other() {
        let (tx, rx) = std::sync::mpsc::channel();
        let spinner = std::thread::spawn(move || {
            // Spin until the thread has had 60 ms of CPU, however busy the machine (a wall
            // time of spinning gave less than that while other tests ran), checking its
            // figure only every 5 ms so that reading it adds next to no system time.
            let me = this_thread_id();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while thread_cpu(me).total_s() < 0.06 && std::time::Instant::now() < deadline {
                let slice = std::time::Instant::now() + std::time::Duration::from_millis(5);
                while std::time::Instant::now() < slice {
                    std::hint::black_box(0u64);
                }
            }
            tx.send(me).unwrap();
            // Stay alive until the reading is taken.
            std::thread::park();
        });
        let tid = rx.recv().unwrap();
        let busy = thread_cpu(tid);
        let busy_cpu = busy.total_s();
        let idle_cpu = thread_cpu(this_thread_id()).total_s();
        spinner.thread().unpark();
        spinner.join().unwrap();
        assert!(busy_cpu >= 0.05, "{busy_cpu}");
        assert!(idle_cpu < busy_cpu, "{idle_cpu} vs {busy_cpu}");
        // A spinning loop runs in user space.
        assert!(busy.user_s > busy.sys_s, "{busy:?}");
        assert_eq!(thread_cpu(-1), ThreadCpu::default());
    }

    #[test]
    fn the_server_answers_from_its_thread_and_stops() {
        let script = Arc::new(Script::from_yaml_str("steps:\n  - answer: hi\n", "s.yaml").unwrap());
        let server = ServerThread::start(script).unwrap();
        assert!(server.base_url().starts_with("http://127.0.0.1:"));
        assert!(server.cpu().total_s() >= 0.0);
        server.stop();
    }
}
