//! `delta relay` on its own: it refuses a request without its token, and a `delta run`
//! given only the relay's URL and token completes against the model behind it; careless
//! flags (a short token, no endpoint, a taken port, limits out of range) are refused at once.
//!
//! The files beside this one hold the relay's hardening against hostile callers
//! (`hostile.rs`), its token sources (`token.rs`) and its pass-through of streamed answers and
//! errors (`streaming.rs`), against a scripted loopback endpoint (`upstream.rs`). This file
//! owns the relay process fixture ([`RelayProcess`]) and a raw HTTP/1.1 client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hostile;
mod streaming;
mod token;
mod upstream;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::harness::{delta_exe, wait_child};

/// A provider key the tests give the relay: it must never come back.
pub const KEY: &str = "sk-test-relay-key-0123456789";
/// The token the tests give the relay in its environment.
pub const TOKEN: &str = "relay-test-token-0123456789";

/// A running `delta relay`; killed on drop.
pub struct RelayProcess {
    pub child: Child,
    /// `http://127.0.0.1:PORT/v1`.
    pub url: String,
    /// The token it printed (generated), else the one given.
    pub token: String,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl RelayProcess {
    /// `delta relay --listen 127.0.0.1:0 ARGS` with a cleared environment plus `env`.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> RelayProcess {
        Self::try_start(args, env).unwrap_or_else(|stderr| panic!("relay did not start: {stderr}"))
    }

    /// Like [`start`](Self::start); `Err(stderr)` when it exits without printing its URL.
    pub fn try_start(args: &[&str], env: &[(&str, &str)]) -> Result<RelayProcess, String> {
        let dir = tempfile::tempdir().unwrap();
        let stderr_path = dir.path().join("relay.stderr");
        let mut child = Command::new(delta_exe())
            .args(["relay", "--listen", "127.0.0.1:0"])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let generated =
            !env.iter().any(|(k, _)| *k == "DELTA_RELAY_TOKEN") && !args.contains(&"--token-file");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let url = lines.next().and_then(Result::ok).unwrap_or_default();
            let token = if generated {
                lines.next().and_then(Result::ok).unwrap_or_default()
            } else {
                String::new()
            };
            let _ = tx.send((url, token));
            // Keep reading: nothing else is expected, but a full pipe must not stall it.
            for _ in lines {}
        });
        let (url, token) = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        if !url.starts_with("http://127.0.0.1:") {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::fs::read_to_string(&stderr_path).unwrap_or_default());
        }
        let token = if generated {
            token
        } else {
            env.iter()
                .find(|(k, _)| *k == "DELTA_RELAY_TOKEN")
                .map(|(_, v)| (*v).to_owned())
                .unwrap_or_default()
        };
        Ok(RelayProcess {
            child,
            url,
            token,
            stderr: stderr_path,
            _dir: dir,
        })
    }

    /// `127.0.0.1:PORT`.
    pub fn authority(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/v1")
            .to_owned()
    }

    /// The peak resident memory of the relay so far, in KiB (`VmHWM`).
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// What it wrote on stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// SIGTERM, wait (bounded), and return everything it wrote on stderr.
    pub fn stop(mut self) -> String {
        crate::harness::send_signal(self.child.id(), nix::sys::signal::Signal::SIGTERM);
        let status = wait_child(&mut self.child, Duration::from_secs(20));
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(status.success(), "relay exited {status:?}: {stderr}");
        stderr
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw HTTP/1.1 answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&self.body));
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request (`Connection: close`) and reads the whole answer (bounded).
pub fn send(authority: &str, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write_head(
        &mut stream,
        authority,
        method,
        path,
        token,
        Some(body.len()),
    );
    stream.write_all(body).unwrap();
    read_answer(&mut stream)
}

/// The request line and headers; `length: None` sends the body chunked.
pub fn write_head(
    stream: &mut TcpStream,
    authority: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    length: Option<usize>,
) {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let length = match length {
        Some(n) => format!("Content-Length: {n}\r\n"),
        None => "Transfer-Encoding: chunked\r\n".to_owned(),
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\n{auth}Content-Type: application/json\r\n{length}Connection: close\r\n\r\n"
    )
    .unwrap();
}

/// Reads an answer to the end of the connection (chunked bodies decoded).
pub fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_answer(&raw)
}

pub fn parse_answer(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut body = raw[split + 4..].to_vec();
    let answer = Answer {
        status,
        head,
        body: Vec::new(),
    };
    if answer
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    }
    Answer { body, ..answer }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 || data.len() < eol + 2 + size {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[(eol + 4 + size).min(data.len())..];
    }
}

/// A chat request body carrying `marker` (the scripted upstream keys its behaviour on it).
pub fn chat_body(marker: &str, stream: bool) -> Vec<u8> {
    serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": marker}],
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
    .to_string()
    .into_bytes()
}

fn script_file(dir: &Path) -> PathBuf {
    let script = dir.join("script.yaml");
    std::fs::write(&script, "steps:\n  - answer: \"relayed {{ task }}\"\n").unwrap();
    script
}

#[test]
fn relay_refuses_requests_without_its_token_and_serves_a_run_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = script_file(dir.path());
    crate::orchestrate::write_agent(dir.path(), "worker", "");
    let relay = RelayProcess::start(&["--llm-script", script.to_str().unwrap()], &[]);
    let authority = relay.authority();
    let refused = send(&authority, "GET", "/v1/models", None, b"").status;
    let wrong = send(&authority, "GET", "/v1/models", Some("not-the-token"), b"").status;
    let allowed = send(&authority, "GET", "/v1/models", Some(&relay.token), b"").status;
    let run = Command::new(delta_exe())
        .current_dir(dir.path())
        .args([
            "run",
            "--agent",
            "agents/worker",
            "-m",
            "hello",
            "-y",
            "-w",
            "ws",
            "--format",
            "json",
        ])
        .env_remove("DELTA_LLM_SCRIPT")
        .env("DELTA_BASE_URL", &relay.url)
        .env("DELTA_API_KEY", &relay.token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = relay.stop();
    assert_eq!((refused, wrong, allowed), (401, 401, 200));
    let result: serde_json::Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&run.stderr)));
    assert_eq!(result["status"], "COMPLETED", "{result:#}");
    assert_eq!(result["result"], "relayed hello");
    assert!(
        stderr.contains("relay stopped: 1 requests answered"),
        "{stderr}"
    );
}

/// The pass-through in front of a real HTTP endpoint (`delta mock-llm`): a run's calls go
/// through as they are and its answers come back as the endpoint sent them.
#[test]
fn relay_passes_a_runs_calls_through_to_an_http_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let script = script_file(dir.path());
    let endpoint = crate::harness::MockLlm::start(&script);
    crate::orchestrate::write_agent(dir.path(), "worker", "");
    let relay = RelayProcess::start(
        &[],
        &[
            ("DELTA_BASE_URL", endpoint.base_url.as_str()),
            ("DELTA_API_KEY", KEY),
            ("DELTA_RELAY_TOKEN", TOKEN),
        ],
    );
    let run = Command::new(delta_exe())
        .current_dir(dir.path())
        .args([
            "run",
            "--agent",
            "agents/worker",
            "-m",
            "over http",
            "-y",
            "-w",
            "ws",
            "--format",
            "json",
        ])
        .env_remove("DELTA_LLM_SCRIPT")
        .env("DELTA_BASE_URL", &relay.url)
        .env("DELTA_API_KEY", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&run.stderr)));
    assert_eq!(result["status"], "COMPLETED", "{result:#}");
    assert_eq!(result["result"], "relayed over http");
    let models = send(&relay.authority(), "GET", "/v1/models", Some(TOKEN), b"");
    assert_eq!(models.status, 200, "{}", models.text());
    let stderr = relay.stop();
    // Streamed or not (the engine's choice), the call is answered and its usage counted.
    assert!(
        stderr.contains("relay stopped: 1 requests answered")
            && !stderr.contains("; 0 tokens in, 0 out"),
        "{stderr}"
    );
}

/// Careless or hostile `delta relay` flags: each refused at once with a clear error, before
/// anything listens.
#[test]
fn relay_refuses_a_short_token_no_endpoint_a_taken_port_and_out_of_range_limits() {
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), "steps:\n  - answer: x\n").unwrap();
    let relay = |args: &[&str], env: &[(&str, &str)]| {
        let out = Command::new(delta_exe())
            .arg("relay")
            .args(args)
            .env_remove("DELTA_BASE_URL")
            .env_remove("DELTA_API_KEY")
            .env_remove("DELTA_RELAY_TOKEN")
            .env_remove("DELTA_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let script = script.path().to_str().unwrap();

    let (code, stderr) = relay(&["--llm-script", script], &[("DELTA_RELAY_TOKEN", "short")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("DELTA_RELAY_TOKEN: use 16-256 characters"),
        "{stderr}"
    );

    let (code, stderr) = relay(&["--listen", "127.0.0.1:0"], &[]);
    assert_eq!(code, Some(126), "{stderr}");
    assert!(stderr.contains("DELTA_BASE_URL"), "{stderr}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = relay(&["--llm-script", script, "--listen", &addr], &[]);
    assert_eq!(code, Some(126), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");

    for flag in ["--max-in-flight", "--requests-per-minute"] {
        for value in ["0", "99999999999"] {
            let (code, stderr) = relay(&["--llm-script", script, flag, value], &[]);
            assert_eq!(code, Some(2), "{flag} {value}: {stderr}");
            assert!(stderr.contains(flag), "{stderr}");
        }
    }
    for (args, expected) in [
        (&["--max-body", "12parsecs"][..], "unknown size unit"),
        (&["--max-body", "10"][..], "at least 1 KiB"),
        (
            &["--max-body", "16MiB", "--max-body-memory", "8MiB"][..],
            "at most",
        ),
    ] {
        let mut all = vec!["--llm-script", script];
        all.extend_from_slice(args);
        let (code, stderr) = relay(&all, &[]);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
