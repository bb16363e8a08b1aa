//! `delta serve` against a real server on 127.0.0.1:0 with real PTYs: a harness that starts
//! the binary with its own state, runtime and home folders, a small async HTTP and WebSocket
//! client, and a guard that kills every process the server's workers left (so a failing test
//! leaks nothing). The tests are in the files beside this one.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

mod agent_workers;
mod api;
mod batch;
mod batch_browser;
mod browser;
mod browser_security;
mod lifecycle;
mod new_session;
mod runs;
mod security;
mod streams;
mod token_file;
mod webdriver;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use crate::harness::{delta_exe, process_alive, wait_until};

/// Every wait in these tests is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(20);

/// A scripted agent: prints its args, works (output bursts), goes quiet, then asks.
pub const FAKE_AGENT: &str = r#"#!/usr/bin/env bash
echo "args:$*"
for i in $(seq 1 30); do echo "working $i"; sleep 0.05; done
sleep 3
printf 'Proceed? [y/n] '
read -r answer
echo "answered: $answer"
exec cat
"#;

/// Folders of one test: state, runtime (sockets), home, a workspace.
pub struct Root {
    pub tmp: TempDir,
}

impl Root {
    pub fn new() -> Root {
        let root = Root {
            tmp: tempfile::Builder::new().prefix("ds").tempdir().unwrap(),
        };
        for dir in ["state", "rt", "home", "ws"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        // The state folder must be private: delta serve refuses an open one.
        std::fs::set_permissions(
            root.state(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        std::fs::write(root.path().join("fake-agent.sh"), FAKE_AGENT).unwrap();
        let config = format!(
            "agents:\n  - id: fake\n    name: Fake agent\n    command: [bash, {}]\n    continue_args: [--continued]\n    asking_patterns: ['Proceed\\? \\[y/n\\]\\s*$']\n  - id: printer\n    command: [bash, -c, 'i=0; while [ $i -lt 200000 ]; do echo line-$i; i=$((i+1)); done; exec cat']\n",
            root.path().join("fake-agent.sh").display()
        );
        std::fs::write(root.path().join("serve.yaml"), config).unwrap();
        root
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    pub fn workspace(&self) -> PathBuf {
        self.path().join("ws")
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        kill_leftovers(&self.state());
    }
}

/// Kills every process whose environment names a session of `state`'s `sessions.json`
/// (holders and programs carry the markers).
pub fn kill_leftovers(state: &Path) {
    let sessions = std::fs::read_to_string(state.join("sessions.json")).unwrap_or_default();
    let sessions: Vec<Value> = serde_json::from_str(&sessions).unwrap_or_default();
    for session in sessions {
        let id = session["id"].as_str().unwrap_or("").to_string();
        for pid in marked(&format!("DELTA_SESSION_ID={id}")) {
            crate::harness::kill_pid(pid);
        }
    }
}

/// Pids whose environment contains `marker`.
pub fn marked(marker: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ
            .split(|b| *b == 0)
            .any(|var| var == marker.as_bytes())
            && process_alive(pid)
        {
            pids.push(pid);
        }
    }
    pids
}

/// A running `delta serve`; killed on drop (its workers are not: see [`Root`]).
pub struct Server {
    pub child: Child,
    pub base: String,
    pub token: String,
}

impl Server {
    pub fn start(root: &Root) -> Server {
        Self::start_with(root, &[])
    }

    pub fn start_with(root: &Root, extra: &[&str]) -> Server {
        Self::start_env(root, extra, &[])
    }

    /// Also passes `env` (e.g. the scripted model's endpoint for `delta continue` children).
    pub fn start_env(root: &Root, extra: &[&str], env: &[(String, String)]) -> Server {
        Self::start_in(root, extra, env, Path::new(env!("CARGO_MANIFEST_DIR")))
    }

    /// [`Server::start_env`] started in the folder `cwd`.
    pub fn start_in(root: &Root, extra: &[&str], env: &[(String, String)], cwd: &Path) -> Server {
        let watched = [
            std::ffi::OsString::from("-w"),
            root.workspace().into_os_string(),
        ];
        Self::spawn(root, &watched, extra, env, cwd)
    }

    /// A server shown no workspace (no `-w`).
    pub fn start_without_workspace(root: &Root) -> Server {
        Self::spawn(root, &[], &[], &[], Path::new(env!("CARGO_MANIFEST_DIR")))
    }

    fn spawn(
        root: &Root,
        watched: &[std::ffi::OsString],
        extra: &[&str],
        env: &[(String, String)],
        cwd: &Path,
    ) -> Server {
        let mut child = std::process::Command::new(delta_exe())
            .current_dir(cwd)
            .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(root.state())
            .arg("--config")
            .arg(root.path().join("serve.yaml"))
            .args(watched)
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", root.path().join("home"))
            .env("XDG_RUNTIME_DIR", root.path().join("rt"))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn delta serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(LIMIT).unwrap_or_default();
        let Some((base, token)) = line.trim().split_once("/#token=") else {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "delta serve did not print its URL: {line:?}; stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        Server {
            base: base.to_string(),
            token: token.to_string(),
            child,
        }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let client = reqwest::Client::new();
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = client
            .request(method, self.url(path))
            .bearer_auth(&self.token)
            .timeout(LIMIT);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(&body.to_string())).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call("DELETE", path, None).await
    }

    /// A quick session on the test's workspace.
    pub async fn session(&self, root: &Root) -> String {
        let (status, body) = self
            .post(
                "/api/sessions",
                json!({"type": "quick", "locationPath": root.workspace()}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["session"]["id"].as_str().unwrap().to_string()
    }

    pub async fn worker(&self, session: &str, request: Value) -> Value {
        let (status, body) = self
            .post(&format!("/api/sessions/{session}/workers"), request)
            .await;
        assert_eq!(status, 201, "{body}");
        body["worker"].clone()
    }

    pub async fn input(&self, session: &str, worker: &str, text: &str) {
        let (status, body) = self
            .post(
                &format!("/api/sessions/{session}/workers/{worker}/input"),
                json!({"data": text}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }

    pub async fn viewer(&self, session: &str, worker: &str) -> Viewer {
        Viewer::connect(
            self,
            &format!("/ws/session/{session}/worker/{worker}"),
            None,
        )
        .await
        .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket client.
pub struct Viewer {
    socket: Socket,
}

/// What a viewer read next.
#[derive(Debug)]
pub enum Frame {
    Json(Value),
    Closed(Option<u16>),
}

impl Viewer {
    /// Connects with the bearer token (and `origin`, when given).
    pub async fn connect(server: &Server, path: &str, origin: Option<&str>) -> Result<Viewer, u16> {
        Self::connect_to(&server.ws_url(path), &server.token, origin).await
    }

    pub async fn connect_to(url: &str, token: &str, origin: Option<&str>) -> Result<Viewer, u16> {
        let path = url;
        let mut request = url.into_client_request().unwrap();
        let headers = request.headers_mut();
        headers.insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        if let Some(origin) = origin {
            headers.insert("origin", HeaderValue::from_str(origin).unwrap());
        }
        match tokio::time::timeout(LIMIT, tokio_tungstenite::connect_async(request)).await {
            Ok(Ok((socket, _))) => Ok(Viewer { socket }),
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
                Err(response.status().as_u16())
            }
            other => panic!("cannot connect to {path}: {other:?}"),
        }
    }

    /// Connects as the page does: no header, the token offered as the subprotocol
    /// `delta.token.<hex>` beside `delta.v1`. Also returns the subprotocol the server chose.
    pub async fn connect_as_page(url: &str, token: &str) -> Result<(Viewer, Option<String>), u16> {
        let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert(
            "sec-websocket-protocol",
            HeaderValue::from_str(&format!("delta.v1, delta.token.{hex}")).unwrap(),
        );
        match tokio::time::timeout(LIMIT, tokio_tungstenite::connect_async(request)).await {
            Ok(Ok((socket, response))) => {
                let chosen = response
                    .headers()
                    .get("sec-websocket-protocol")
                    .map(|v| v.to_str().unwrap().to_string());
                Ok((Viewer { socket }, chosen))
            }
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
                Err(response.status().as_u16())
            }
            other => panic!("cannot connect to {url}: {other:?}"),
        }
    }

    pub async fn next(&mut self) -> Frame {
        loop {
            let message = tokio::time::timeout(LIMIT, self.socket.next())
                .await
                .expect("no WebSocket frame within the limit");
            match message {
                Some(Ok(Message::Text(text))) => {
                    return Frame::Json(serde_json::from_str(&text).unwrap())
                }
                Some(Ok(Message::Close(frame))) => {
                    return Frame::Closed(frame.map(|f| u16::from(f.code)))
                }
                Some(Ok(_)) => continue,
                None | Some(Err(_)) => return Frame::Closed(None),
            }
        }
    }

    /// The next JSON message (panics on a close).
    pub async fn json(&mut self) -> Value {
        match self.next().await {
            Frame::Json(value) => value,
            Frame::Closed(code) => panic!("socket closed ({code:?}) while a message was expected"),
        }
    }

    pub async fn send(&mut self, message: Value) {
        self.socket
            .send(Message::Text(message.to_string()))
            .await
            .unwrap();
    }

    /// Starts a closing handshake with `code`.
    pub async fn send_close(&mut self, code: u16) {
        use tokio_tungstenite::tungstenite::protocol::CloseFrame;
        let frame = CloseFrame {
            code: code.into(),
            reason: "".into(),
        };
        self.socket.send(Message::Close(Some(frame))).await.unwrap();
    }

    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

/// Follows a worker's stream: the snapshot, then outputs that must continue it exactly.
pub struct Transcript {
    pub text: String,
    pub epoch: u64,
    pub next: u64,
}

impl Transcript {
    /// Reads the first frame, which must be the snapshot.
    pub async fn start(viewer: &mut Viewer) -> Transcript {
        let first = viewer.json().await;
        assert_eq!(
            first["type"], "history",
            "the first frame is the snapshot: {first}"
        );
        Transcript {
            text: first["data"].as_str().unwrap().to_string(),
            epoch: first["epoch"].as_u64().unwrap(),
            next: first["offset"].as_u64().unwrap(),
        }
    }

    /// Reads until `needle` is in the text after the last `seam` (an epoch's marker): the
    /// snapshot after a restart may still show the earlier epoch's output, needle included.
    pub async fn until_after(&mut self, viewer: &mut Viewer, seam: &str, needle: &str) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let after = self.text.rsplit_once(seam).map(|(_, after)| after);
            if after.is_some_and(|after| after.contains(needle)) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {needle:?} after {seam:?} in {:?}",
                self.tail()
            );
            let frame = viewer.json().await;
            assert_ne!(
                frame["type"], "history",
                "an unexpected snapshot: the viewer lagged"
            );
            self.take(&frame);
        }
    }

    /// Reads until `needle` is in the text; every output must start where the last ended.
    pub async fn until(&mut self, viewer: &mut Viewer, needle: &str) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        let mut searched = 0;
        loop {
            // Only the new text (and a needle's length before it) can hold a new match.
            let mut from = searched.min(self.text.len()).saturating_sub(needle.len());
            while !self.text.is_char_boundary(from) {
                from -= 1;
            }
            if self.text[from..].contains(needle) {
                return;
            }
            searched = self.text.len();
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {needle:?} in {:?}",
                self.tail()
            );
            let frame = viewer.json().await;
            assert_ne!(
                frame["type"], "history",
                "an unexpected snapshot: the viewer lagged"
            );
            self.take(&frame);
        }
    }

    pub fn take(&mut self, frame: &Value) {
        if frame["type"] != "output" {
            return;
        }
        let (epoch, offset) = (
            frame["epoch"].as_u64().unwrap(),
            frame["offset"].as_u64().unwrap(),
        );
        assert_eq!(epoch, self.epoch, "epoch changed");
        assert_eq!(
            offset, self.next,
            "gap or duplicate at {offset}, expected {}",
            self.next
        );
        self.next = frame["end"].as_u64().unwrap();
        self.text.push_str(frame["data"].as_str().unwrap());
    }

    pub fn tail(&self) -> &str {
        let mut start = self.text.len().saturating_sub(400);
        while !self.text.is_char_boundary(start) {
            start += 1;
        }
        &self.text[start..]
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Polls an async condition every 20 ms until it holds or [`LIMIT`] passes.
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not happen within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until no process carries `marker`.
pub fn no_process_with(marker: &str) -> bool {
    wait_until(LIMIT, || marked(marker).is_empty())
}
