//! `delta serve`'s token kept from the user's other processes, its workers first (issue 31
//! item 7): a token file named in the environment (`DELTA_SERVE_TOKEN_FILE`) is on no command
//! line and reaches no worker, `--unlink-token-file` removes it once read, and the server's
//! environment (which may hold `DELTA_SERVE_TOKEN`) stays closed to the user's other
//! processes, as docs/serve.md says.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

use super::security::command_lines_with;
use super::{runtime, Root, Server, Transcript, LIMIT};
use crate::harness::delta_exe;

/// A token file only its owner can read.
fn private_token_file(path: &Path, token: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Regression (issue 31 item 7): `--token-file PATH` put the file's path on the server's
/// command line, which every process (the workers among them) reads, and the file stayed
/// there for them to read. Named by `DELTA_SERVE_TOKEN_FILE` instead, its path is on no
/// command line and in no worker's environment; with `--unlink-token-file` the file is gone
/// once the server has read it.
#[test]
fn serve_a_token_file_named_in_the_environment_is_on_no_command_line_and_removed_once_read() {
    let root = Root::new();
    let file = root.path().join("one-time-serve-token");
    let token = "token-from-a-file-0123";
    private_token_file(&file, token);
    let server = Server::start_env(
        &root,
        &["--unlink-token-file"],
        &[(
            "DELTA_SERVE_TOKEN_FILE".to_string(),
            file.display().to_string(),
        )],
    );
    assert_eq!(server.token, token);
    assert!(!file.exists(), "the token file is removed once read");
    let lines = command_lines_with(&["one-time-serve-token"]);
    assert!(
        lines.is_empty(),
        "the file's path is on a command line: {lines:?}"
    );
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker = worker["id"].as_str().unwrap();
        server
            .input(&session, worker, "env; echo END-$((6*7))\r")
            .await;
        let mut viewer = server.viewer(&session, worker).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        transcript.until(&mut viewer, "END-42").await;
        assert!(
            transcript.text.contains("DELTA_WORKER_ID="),
            "{}",
            transcript.tail()
        );
        for secret in ["DELTA_SERVE_TOKEN", "one-time-serve-token", token] {
            assert!(!transcript.text.contains(secret), "a worker sees {secret}");
        }
    });
}

/// `--unlink-token-file` without a token file is a usage error (2) that says how to name
/// one, and does not echo the token it got from the environment.
#[test]
fn serve_unlink_token_file_needs_a_file_it_can_remove() {
    let root = Root::new();
    let run = |env: &[(&str, String)]| {
        let mut command = assert_cmd::Command::new(delta_exe());
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--unlink-token-file",
                "--state-dir",
            ])
            .arg(root.state())
            .env_clear()
            .env("HOME", root.path().join("home"))
            .env("XDG_RUNTIME_DIR", root.path().join("rt"))
            .timeout(LIMIT);
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    };
    let output = run(&[("DELTA_SERVE_TOKEN", "from-the-environment-0123".into())]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--unlink-token-file") && stderr.contains("DELTA_SERVE_TOKEN_FILE"),
        "{stderr}"
    );
    assert!(!stderr.contains("from-the-environment-0123"), "{stderr}");
    assert!(output.stdout.is_empty());
}

/// Reads the first line `child` prints, within [`LIMIT`].
fn first_line(child: &mut std::process::Child) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(LIMIT).unwrap_or_default()
}

/// What docs/serve.md says holds for the workers (issue 31 item 7): `DELTA_SERVE_TOKEN` in
/// the server's environment is not readable from `/proc/<server>/environ` by another process
/// of the same user (the server is not dumpable, see `main.rs`), while an ordinary process of
/// that user is (the control). Run as root, the test runs both as `nobody`, since root reads
/// everything.
#[test]
fn serve_the_servers_environment_is_closed_to_the_users_other_processes() {
    let as_root = nix::unistd::geteuid().is_root();
    let user = |command: &mut Command| {
        if as_root {
            command.uid(65534).gid(65534);
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    for dir in ["state", "home", "rt"] {
        std::fs::create_dir(tmp.path().join(dir)).unwrap();
    }
    std::fs::set_permissions(
        tmp.path().join("state"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    if as_root {
        for path in [tmp.path().to_path_buf()]
            .into_iter()
            .chain(["state", "home", "rt"].map(|d| tmp.path().join(d)))
        {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        }
    }
    let secret = "environ-secret-0123456789";
    let environment = |command: &mut Command| {
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", tmp.path().join("home"))
            .env("XDG_RUNTIME_DIR", tmp.path().join("rt"))
            .env("DELTA_SERVE_TOKEN", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
    };
    let mut serve = Command::new(delta_exe());
    serve
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(tmp.path().join("state"));
    environment(&mut serve);
    user(&mut serve);
    let mut server = serve.spawn().unwrap();
    let line = first_line(&mut server);
    let mut control = Command::new("sleep");
    control.arg("60");
    environment(&mut control);
    user(&mut control);
    let mut control = control.spawn().unwrap();
    let read_environ = |pid: u32| {
        let mut cat = Command::new("cat");
        cat.arg(format!("/proc/{pid}/environ"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        user(&mut cat);
        cat.output().unwrap()
    };
    let from_server = read_environ(server.id());
    let from_control = read_environ(control.id());
    let _ = server.kill();
    let _ = server.wait();
    let _ = control.kill();
    let _ = control.wait();
    assert!(line.contains("/#token="), "the server started: {line:?}");
    assert!(
        from_control.status.success()
            && String::from_utf8_lossy(&from_control.stdout).contains(secret),
        "the control: another process of the user reads an ordinary process's environment"
    );
    assert!(
        !from_server.status.success(),
        "the server's environment was read by another process of its user"
    );
    assert!(!String::from_utf8_lossy(&from_server.stdout).contains(secret));
}
