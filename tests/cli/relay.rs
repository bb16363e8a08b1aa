//! `delta relay` on its own: it refuses a request without its token, and a `delta run`
//! given only the relay's URL and token completes against the model behind it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::harness::delta_exe;

/// `GET <path>` on `authority` with an optional bearer token; the status code.
fn status_of(authority: &str, path: &str, token: Option<&str>) -> u16 {
    let mut stream = TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn relay_refuses_requests_without_its_token_and_serves_a_run_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.yaml");
    std::fs::write(&script, "steps:\n  - answer: \"relayed {{ task }}\"\n").unwrap();
    crate::orchestrate::write_agent(dir.path(), "worker", "");
    let mut relay = Command::new(delta_exe())
        .args(["relay", "--listen", "127.0.0.1:0", "--llm-script"])
        .arg(&script)
        .env_remove("DELTA_RELAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = relay.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let url = lines.next().and_then(Result::ok).unwrap_or_default();
        let token = lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = tx.send((url, token));
    });
    let (url, token) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let authority = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let refused = status_of(&authority, "/v1/models", None);
    let wrong = status_of(&authority, "/v1/models", Some("not-the-token"));
    let allowed = status_of(&authority, "/v1/models", Some(&token));
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
        .env("DELTA_BASE_URL", &url)
        .env("DELTA_API_KEY", &token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = relay.kill();
    let _ = relay.wait();
    assert_eq!((refused, wrong, allowed), (401, 401, 200));
    let result: serde_json::Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&run.stderr)));
    assert_eq!(result["status"], "COMPLETED", "{result:#}");
    assert_eq!(result["result"], "relayed hello");
}
