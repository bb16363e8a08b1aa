//! `delta relay` on its own: it refuses a request without its token, and a `delta run`
//! given only the relay's URL and token completes against the model behind it; careless
//! flags (a short token, no endpoint, a taken port, limits out of range) are refused at once.
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

/// Careless or hostile `delta relay` flags: each refused at once with a clear error, before
/// anything listens.
#[test]
fn relay_refuses_a_short_token_no_endpoint_a_taken_port_and_out_of_range_limits() {
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), "steps:\n  - answer: x\n").unwrap();
    let relay = |args: &[&str]| {
        let out = Command::new(assert_cmd::cargo::cargo_bin("delta"))
            .arg("relay")
            .args(args)
            .env_remove("DELTA_BASE_URL")
            .env_remove("DELTA_API_KEY")
            .env_remove("DELTA_RELAY_TOKEN")
            .env_remove("DELTA_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let script = script.path().to_str().unwrap();

    let (code, stderr) = relay(&["--llm-script", script, "--token", "short"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("at least 16 characters"), "{stderr}");

    let (code, stderr) = relay(&["--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(126), "{stderr}");
    assert!(stderr.contains("DELTA_BASE_URL"), "{stderr}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = relay(&["--llm-script", script, "--listen", &addr]);
    assert_eq!(code, Some(126), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");

    for flag in ["--max-in-flight", "--requests-per-minute"] {
        for value in ["0", "99999999999"] {
            let (code, stderr) = relay(&["--llm-script", script, flag, value]);
            assert_eq!(code, Some(2), "{flag} {value}: {stderr}");
            assert!(stderr.contains(flag), "{stderr}");
        }
    }
}
