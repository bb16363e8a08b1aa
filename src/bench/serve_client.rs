//! The client side of `delta bench serve`: a `delta serve` child on 127.0.0.1, its REST calls,
//! and viewer tasks that read a worker's WebSocket, check that every `output` starts where the
//! previous one ended (a `history` after a lag restarts the count), count bytes, and fire a
//! probe when an awaited text arrives (keystroke-to-echo).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

/// A running `delta serve`; stopped (SIGTERM, then SIGKILL) on drop.
pub struct ServeChild {
    child: Child,
    pub base: String,
    pub token: String,
    http: reqwest::Client,
}

impl ServeChild {
    pub fn start(dir: &Path) -> Result<ServeChild, String> {
        Self::start_with(dir, &[])
    }

    /// [`ServeChild::start`] with more arguments (e.g. `-w DIR`).
    pub fn start_with(dir: &Path, extra: &[&std::ffi::OsStr]) -> Result<ServeChild, String> {
        let exe = super::delta_exe().map_err(|e| e.to_string())?;
        // To a file, not a pipe: a pipe nobody reads would stall the server once full.
        let stderr_path = dir.join("serve.stderr");
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
        let mut child = std::process::Command::new(exe)
            .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(dir.join("state"))
            .arg("--config")
            .arg(dir.join("serve.yaml"))
            .args(extra)
            .env("XDG_RUNTIME_DIR", dir.join("rt"))
            .env_remove("DELTA_SERVE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start delta serve: {e}"))?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        let Some((base, token)) = line.trim().split_once("/#token=") else {
            let _ = child.kill();
            let _ = child.wait();
            let said = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            return Err(format!(
                "delta serve did not print its URL (got {line:?}); it said: {}",
                said.trim()
            ));
        };
        Ok(ServeChild {
            base: base.to_string(),
            token: token.to_string(),
            http: reqwest::Client::new(),
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds (user + system) the server process has used so far.
    pub fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as f64;
        // utime and stime are fields 14 and 15 of stat, 12 and 13 after the command name.
        (ticks(11) + ticks(12)) / per_second
    }

    /// `VmHWM` (peak) and `VmRSS` of the server, in bytes.
    pub fn memory(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .map_or(0, |kib| kib * 1024)
        };
        (field("VmHWM:"), field("VmRSS:"))
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(60));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| format!("{path}: {e}"))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| format!("{path}: {e}"))?;
        if !status.is_success() {
            return Err(format!("{path}: {status} {text}"));
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a viewer task saw.
#[derive(Debug, Default)]
pub struct ViewerStats {
    pub bytes: AtomicU64,
    pub gaps: AtomicU64,
    pub snapshots: AtomicU64,
    /// When the awaited marker arrived (nanoseconds since `origin`), 0 before.
    pub marker_at: AtomicU64,
}

/// The fields of a worker message the bench reads (borrowed where JSON has no escapes).
#[derive(serde::Deserialize)]
struct Frame<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(default, borrow)]
    data: std::borrow::Cow<'a, str>,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    end: Option<u64>,
}

type Probe = Arc<Mutex<Option<(String, oneshot::Sender<Instant>)>>>;

/// One viewer: a task reading its socket, and a sender for input on the same socket.
pub struct ViewerHandle {
    pub stats: Arc<ViewerStats>,
    probe: Probe,
    input: tokio::sync::mpsc::UnboundedSender<String>,
}

impl ViewerHandle {
    /// Connects; `read` false makes a slow viewer that reads nothing until `resume` fires.
    pub async fn connect(
        server: &ServeChild,
        path: &str,
        marker: &str,
        origin: Instant,
        resume: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Result<ViewerHandle, String> {
        let mut request = server
            .ws_url(path)
            .into_client_request()
            .map_err(|e| e.to_string())?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", server.token))
            .map_err(|e| e.to_string())?;
        request.headers_mut().insert("authorization", bearer);
        // Like a browser, without Nagle's algorithm (a keystroke is one tiny frame).
        let (socket, _) = tokio_tungstenite::connect_async_with_config(request, None, true)
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        let (mut sink, mut stream) = socket.split();
        let stats = Arc::new(ViewerStats::default());
        let probe: Probe = Arc::new(Mutex::new(None));
        let (input, mut inputs) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(text) = inputs.recv().await {
                let message = serde_json::json!({"type": "input", "data": text}).to_string();
                if sink.send(Message::Text(message)).await.is_err() {
                    break;
                }
            }
        });
        let (task_stats, task_probe, marker) = (stats.clone(), probe.clone(), marker.to_string());
        tokio::spawn(async move {
            if let Some(mut resume) = resume {
                let _ = resume.wait_for(|go| *go).await;
            }
            let mut next: Option<u64> = None;
            let mut window = String::new();
            while let Some(Ok(message)) = stream.next().await {
                let Message::Text(text) = message else {
                    continue;
                };
                let arrived = Instant::now();
                let Ok(frame) = serde_json::from_str::<Frame>(&text) else {
                    continue;
                };
                let data: &str = &frame.data;
                match frame.kind {
                    "history" => {
                        task_stats.snapshots.fetch_add(1, Ordering::Relaxed);
                        next = frame.offset;
                    }
                    "output" => {
                        if next != frame.offset {
                            task_stats.gaps.fetch_add(1, Ordering::Relaxed);
                        }
                        next = frame.end;
                        task_stats
                            .bytes
                            .fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                    _ => continue,
                }
                // The marker may straddle two frames: keep a little of the previous one.
                let keep = window.len().saturating_sub(marker.len());
                let mut cut = keep;
                while !window.is_char_boundary(cut) {
                    cut += 1;
                }
                window.drain(..cut);
                window.push_str(data);
                if task_stats.marker_at.load(Ordering::Relaxed) == 0 && window.contains(&marker) {
                    let nanos = arrived.duration_since(origin).as_nanos().max(1) as u64;
                    task_stats.marker_at.store(nanos, Ordering::Relaxed);
                }
                let fired = {
                    let mut slot = task_probe.lock().unwrap_or_else(|p| p.into_inner());
                    match slot.as_ref() {
                        Some((awaited, _)) if data.contains(awaited.as_str()) => slot.take(),
                        _ => None,
                    }
                };
                if let Some((_, done)) = fired {
                    let _ = done.send(arrived);
                }
            }
        });
        Ok(ViewerHandle {
            stats,
            probe,
            input,
        })
    }

    /// Sends `keys` and waits (up to `limit`) for output containing `echo`.
    pub async fn probe(&self, keys: &str, echo: &str, limit: Duration) -> Result<Duration, String> {
        let (done, arrived) = oneshot::channel();
        *self.probe.lock().unwrap_or_else(|p| p.into_inner()) = Some((echo.to_string(), done));
        let sent = Instant::now();
        self.input
            .send(keys.to_string())
            .map_err(|_| "the viewer's socket closed".to_string())?;
        match tokio::time::timeout(limit, arrived).await {
            Ok(Ok(at)) => Ok(at.saturating_duration_since(sent)),
            _ => Err(format!("no echo of {keys:?} within {limit:?}")),
        }
    }

    pub fn send(&self, text: &str) {
        let _ = self.input.send(text.to_string());
    }
}
