//! Regressions of the second attack round against `delta serve` (issue 24): the token is never
//! a cookie nor a query parameter (other servers on 127.0.0.1 received the cookie) and
//! `//host/?token=` redirects nowhere; WebSockets authenticate by subprotocol; a clean close
//! is answered at once.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{runtime, Frame, Root, Server, Viewer};
use crate::harness::delta_exe;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Regression (issue 24 item 1): `/?token=` set a `delta_serve_token` cookie, which the
/// browser sends to every server on 127.0.0.1 whatever its port. Now the page is public and
/// sets no cookie; neither a cookie nor `?token=` authenticates anything.
#[test]
fn serve_the_token_is_never_a_cookie_nor_read_from_a_query() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let client = client();
        for path in ["/".to_string(), format!("/?token={}", server.token)] {
            let response = client.get(server.url(&path)).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200, "{path}");
            assert!(
                response.headers().get("set-cookie").is_none(),
                "{path}: {:?}",
                response.headers()
            );
            assert!(response.headers().get("location").is_none(), "{path}");
        }
        let response = client
            .get(server.url("/api/sessions"))
            .header("cookie", format!("delta_serve_token={}", server.token))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401, "a cookie is no token");
        let response = client
            .get(server.url(&format!("/api/sessions?token={}", server.token)))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401, "a query is no token");
        let body = response.text().await.unwrap();
        assert!(
            body.contains("#token="),
            "the refusal says what to open: {body}"
        );
    });
}

/// The framing and script headers every answer must carry; `what` names the answer.
fn assert_no_framing_no_foreign_script(what: &str, headers: &reqwest::header::HeaderMap) {
    let policy = headers
        .get("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy in {headers:?}"))
        .to_str()
        .unwrap();
    let directive = |name: &str| {
        policy
            .split(';')
            .map(str::trim)
            .find_map(|d| d.strip_prefix(name).map(str::trim))
            .unwrap_or_else(|| panic!("{what}: no {name} in {policy}"))
            .to_string()
    };
    assert_eq!(directive("frame-ancestors"), "'none'", "{what}");
    assert_eq!(directive("script-src"), "'self'", "{what}: {policy}");
    assert_eq!(directive("default-src"), "'none'", "{what}");
    assert_eq!(
        headers.get("x-frame-options").map(|v| v.to_str().unwrap()),
        Some("DENY"),
        "{what}"
    );
    assert_eq!(
        headers
            .get("x-content-type-options")
            .map(|v| v.to_str().unwrap()),
        Some("nosniff"),
        "{what}"
    );
}

/// Regression (issue 31 item 1): any server on another 127.0.0.1 port could frame the page,
/// which shares `localStorage` with it (same site) and so was logged in; typing on the
/// framing page ran commands in a worker. Every answer (the page, its scripts, the API, its
/// refusals, a WebSocket upgrade) now forbids framing and any script but the page's own.
#[test]
fn serve_every_answer_forbids_framing_and_any_script_but_its_own() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let client = client();
        let bearer = format!("Bearer {}", server.token);
        let answers = [
            ("the page", "/", None, None, 200),
            ("a script", "/assets/app.js", None, None, 200),
            (
                "a vendored script",
                "/assets/vendor/xterm.js",
                None,
                None,
                200,
            ),
            ("the API", "/api/agents", Some(bearer.as_str()), None, 200),
            (
                "the login",
                "/api/identity",
                Some(bearer.as_str()),
                None,
                200,
            ),
            (
                "a refusal without the token",
                "/api/agents",
                None,
                None,
                401,
            ),
            (
                "the identity check refused",
                "/api/identity/check",
                None,
                None,
                401,
            ),
            (
                "an unknown path",
                "/nothing",
                Some(bearer.as_str()),
                None,
                404,
            ),
            (
                "a foreign origin",
                "/api/agents",
                Some(bearer.as_str()),
                Some("http://127.0.0.1:1"),
                403,
            ),
        ];
        for (what, path, authorization, origin, status) in answers {
            let mut request = client.get(server.url(path));
            if let Some(value) = authorization {
                request = request.header("authorization", value);
            }
            if let Some(value) = origin {
                request = request.header("origin", value);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), status, "{what}");
            assert_no_framing_no_foreign_script(what, response.headers());
        }
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = server
            .ws_url("/ws/dashboard")
            .into_client_request()
            .unwrap();
        request
            .headers_mut()
            .insert("authorization", bearer.parse().unwrap());
        let (_socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in response.headers() {
            headers.insert(
                reqwest::header::HeaderName::from_bytes(name.as_str().as_bytes()).unwrap(),
                reqwest::header::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            );
        }
        assert_no_framing_no_foreign_script("a WebSocket upgrade", &headers);
    });
}

/// Regression (issue 24 item 15): `GET //evil.example/?token=<token>` answered 303 with
/// `Location: //evil.example/`, a redirect off-site.
#[test]
fn serve_a_double_slash_token_url_is_not_an_open_redirect() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let url = server.url(&format!("//evil.example/?token={}", server.token));
        let response = client().get(&url).send().await.unwrap();
        assert_eq!(
            response.url().path(),
            "//evil.example/",
            "the request went as written"
        );
        assert!(
            !response.status().is_redirection() && response.headers().get("location").is_none(),
            "{} {:?}",
            response.status(),
            response.headers()
        );
    });
}

/// Regression (issue 24 item 1): the page's WebSockets carried the cookie; a browser cannot set
/// `Authorization` on them, so they now offer the token as a subprotocol, and the server's
/// answer names `delta.v1` only, never the token.
#[test]
fn serve_websockets_authenticate_by_subprotocol_and_never_echo_the_token() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_path = format!(
            "/ws/session/{session}/worker/{}",
            worker["id"].as_str().unwrap()
        );
        for path in [worker_path.as_str(), "/ws/dashboard"] {
            let url = server.ws_url(path);
            let (mut viewer, chosen) = Viewer::connect_as_page(&url, &server.token).await.unwrap();
            assert_eq!(chosen.as_deref(), Some("delta.v1"), "{path}");
            assert!(matches!(viewer.next().await, Frame::Json(_)), "{path}");
            viewer.close().await;
            let refused = Viewer::connect_as_page(&url, "not-the-token").await;
            assert_eq!(refused.err(), Some(401), "{path}");
        }
    });
}

/// Regression (issue 24 item 15): a clean WebSocket close took 0.5-1 s: the server's Close
/// carried no code and the connection stayed open until actix's 1 s linger ran out (the
/// client waits for the server to end it). Now the Close is echoed with the client's code
/// and the server ends the connection itself: the test waits for that end (the event, not a
/// clock: a loaded machine may be slow, issue 31 item 23), within the generous bound every
/// read has. Without the server's end the client would wait for the linger, or forever.
#[test]
fn serve_a_clean_websocket_close_is_answered_at_once() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_path = format!(
            "/ws/session/{session}/worker/{}",
            worker["id"].as_str().unwrap()
        );
        for path in [worker_path.as_str(), "/ws/dashboard"] {
            let mut viewer = Viewer::connect(&server, path, None).await.unwrap();
            assert!(matches!(viewer.next().await, Frame::Json(_)), "{path}");
            viewer.send_close(1000).await;
            // Frames already on their way may come first; then the echo.
            let echoed = loop {
                match viewer.next().await {
                    Frame::Json(_) => continue,
                    Frame::Closed(code) => break code,
                }
            };
            assert_eq!(
                echoed,
                Some(1000),
                "{path}: the Close is answered with its code"
            );
            assert!(
                matches!(viewer.next().await, Frame::Closed(None)),
                "{path}: the server ends the connection"
            );
        }
    });
}

/// Regression (issue 24 item 5): `--state-dir` pointed at a shared folder (the system temp
/// folder) made it 0700, locking every other user out; through a symlink, its target. Both are
/// now refused (exit 126, the folder and a fix named) and left exactly as they were.
#[test]
fn serve_refuses_a_shared_or_symlinked_state_folder_and_leaves_it_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let root = Root::new();
    // Like /tmp: world-writable with the sticky bit (the real one is not touched by tests).
    let shared = root.path().join("shared-tmp");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let target = root.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = root.path().join("state-link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for (state, real, mode, problem) in [
        (&shared, &shared, 0o1777, "chmod 700"),
        (&link, &target, 0o755, "symlink"),
    ] {
        let output = assert_cmd::Command::new(delta_exe())
            .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(state)
            .env_clear()
            .env("HOME", root.path().join("home"))
            .env("XDG_RUNTIME_DIR", root.path().join("rt"))
            .timeout(super::LIMIT)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(126),
            "{}: {stderr}",
            state.display()
        );
        assert!(
            stderr.contains(&*state.to_string_lossy()) && stderr.contains(problem),
            "{stderr}"
        );
        assert!(output.stdout.is_empty());
        let after = std::fs::metadata(real).unwrap().permissions().mode() & 0o7777;
        assert_eq!(after, mode, "{} was changed", real.display());
    }
}

/// Regression (issue 24 item 10): two servers on one state folder revived each other's deleted
/// workers and overwrote each other's sessions. The second now refuses (126), naming the
/// first's pid and address; once the first is gone (even by SIGKILL, its workers' holders
/// still running) the folder is free again.
#[test]
fn serve_a_second_server_on_the_same_state_folder_refuses_naming_the_first() {
    let root = Root::new();
    let mut first = Server::start(&root);
    let session = runtime().block_on(async {
        let session = first.session(&root).await;
        first.worker(&session, json!({"type": "terminal"})).await;
        session
    });
    let output = assert_cmd::Command::new(delta_exe())
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(root.state())
        .arg("--config")
        .arg(root.path().join("serve.yaml"))
        .env_clear()
        .env("HOME", root.path().join("home"))
        .env("XDG_RUNTIME_DIR", root.path().join("rt"))
        .timeout(super::LIMIT)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(126), "{stderr}");
    let address = first.base.trim_start_matches("http://");
    assert!(
        stderr.contains(&format!("pid {}", first.child.id())) && stderr.contains(address),
        "{stderr}"
    );
    assert!(stderr.contains("--state-dir"), "{stderr}");
    assert!(output.stdout.is_empty());

    first.kill9();
    let second = Server::start(&root);
    runtime().block_on(async {
        let (status, body) = second.get(&format!("/api/sessions/{session}")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["workers"].as_array().map(Vec::len), Some(1), "{body}");
    });
}

/// Whether process `pid`'s environment holds a variable named `name`.
fn environment_has(pid: u64, name: &str) -> bool {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    environ
        .split(|b| *b == 0)
        .any(|var| var.starts_with(format!("{name}=").as_bytes()))
}

/// Regression (issue 24 item 3): every worker (terminal or agent) and its PTY holder inherited
/// `DELTA_SERVE_TOKEN` from the server, so one prompt-injected agent could drive all the
/// others. Real workers print their environment: the markers are there, the token is not.
#[test]
fn serve_workers_and_their_holders_do_not_inherit_the_server_token() {
    let root = Root::new();
    let config = root.path().join("serve.yaml");
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str(
        "  - id: env-printer\n    command: [bash, -c, 'env; echo END-OF-ENV; exec cat']\n",
    );
    std::fs::write(&config, yaml).unwrap();
    let token = "fixed-serve-token-0123456789";
    let server = Server::start_env(
        &root,
        &[],
        &[("DELTA_SERVE_TOKEN".to_string(), token.to_string())],
    );
    assert_eq!(server.token, token);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let agent = server
            .worker(&session, json!({"type": "agent", "agentId": "env-printer"}))
            .await;
        let terminal = server.worker(&session, json!({"type": "terminal"})).await;
        let terminal_id = terminal["id"].as_str().unwrap();
        server
            .input(&session, terminal_id, "env; echo END-$((6*7))\r")
            .await;
        for (worker, end) in [(&agent, "END-OF-ENV"), (&terminal, "END-42")] {
            let id = worker["id"].as_str().unwrap();
            let mut viewer = server.viewer(&session, id).await;
            let mut transcript = super::Transcript::start(&mut viewer).await;
            transcript.until(&mut viewer, end).await;
            assert!(
                transcript.text.contains(&format!("DELTA_WORKER_ID={id}")),
                "the markers are there: {}",
                transcript.tail()
            );
            assert!(!transcript.text.contains("DELTA_SERVE_TOKEN"), "{id}");
            assert!(!transcript.text.contains(token), "{id}");
            for pid in [
                worker["pid"].as_u64(),
                worker["holder"]["holderPid"].as_u64(),
            ] {
                let pid = pid.unwrap();
                assert!(
                    !environment_has(pid, "DELTA_SERVE_TOKEN"),
                    "pid {pid} of {id}"
                );
                assert!(environment_has(pid, "DELTA_WORKER_ID"), "pid {pid} of {id}");
            }
        }
    });
}

/// Regression (issue 24 item 15): under a low open-files limit `delta serve` panicked while
/// starting its arbiters; like the other commands, it now stops first with exit 126, the
/// limit and how to raise it.
#[test]
fn serve_under_a_low_open_files_limit_is_a_clear_error_not_a_panic() {
    let root = Root::new();
    let output = assert_cmd::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 20 && exec \"$0\" \"$@\"")
        .arg(delta_exe())
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(root.state())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", root.path().join("home"))
        .env("XDG_RUNTIME_DIR", root.path().join("rt"))
        .timeout(super::LIMIT)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(126), "{stderr}");
    assert!(
        stderr.contains("too many open files (limit 20; need about"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ulimit -n") && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

/// Every file under `dir` (recursively), with its bytes.
fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            found.extend(files_under(&path));
        } else if kind.is_file() {
            found.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    found
}

/// Regression (issue 24 item 12): a password typed into a serve worker stayed in clear in its
/// PTY holder's `input.log`. Serve workers keep no input log: the password, typed at a prompt
/// that hides it, is in no file of the state folder, and neither is a terminal's command.
#[test]
fn serve_a_password_typed_into_a_worker_is_in_no_file() {
    let root = Root::new();
    let config = root.path().join("serve.yaml");
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str(
        "  - id: password-reader\n    command: [bash, -c, 'stty -echo; printf \"Password: \"; read -r pw; stty echo; echo; echo \"got ${#pw} characters\"; exec cat']\n",
    );
    std::fs::write(&config, yaml).unwrap();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let agent = server
            .worker(
                &session,
                json!({"type": "agent", "agentId": "password-reader"}),
            )
            .await;
        let agent_id = agent["id"].as_str().unwrap();
        let mut viewer = server.viewer(&session, agent_id).await;
        let mut transcript = super::Transcript::start(&mut viewer).await;
        transcript.until(&mut viewer, "Password: ").await;
        server.input(&session, agent_id, "hunter2-secret\r").await;
        transcript.until(&mut viewer, "got 14 characters").await;

        let terminal = server.worker(&session, json!({"type": "terminal"})).await;
        let terminal_id = terminal["id"].as_str().unwrap();
        server
            .input(&session, terminal_id, "echo typed-$((6*7))\r")
            .await;
        let mut viewer = server.viewer(&session, terminal_id).await;
        let mut transcript = super::Transcript::start(&mut viewer).await;
        transcript.until(&mut viewer, "typed-42").await;
    });
    let files = files_under(&root.state());
    assert!(files.iter().any(|(path, _)| path.ends_with("output.log")));
    for (path, bytes) in &files {
        assert!(!path.ends_with("input.log"), "{}", path.display());
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains("hunter2"), "{}: {text}", path.display());
    }
}

/// The command lines of every process whose arguments contain all of `words`.
pub(super) fn command_lines_with(words: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&bytes).replace('\0', " ");
        if words.iter().all(|word| line.contains(word)) {
            found.push(line);
        }
    }
    found
}

/// Opens a FIFO for writing once its reader is there (bounded) and writes one byte.
fn release(fifo: &std::path::Path) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let deadline = Instant::now() + super::LIMIT;
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
        {
            Ok(mut writer) => {
                writer.write_all(b"x").unwrap();
                return;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{}: {e}", fifo.display()),
        }
    }
}

/// Regression (issue 24 item 6): an answer given on the page became an argument of the
/// `delta continue` that drives the rest of the run, readable by every local user in
/// `/proc/<pid>/cmdline` (passwords too), and one beginning with `-` was parsed as an option
/// and lost. The answer now goes on the child's stdin. The run's next tool waits on a FIFO so
/// the child is alive while every command line on the machine is read.
#[test]
fn serve_an_answer_is_in_no_command_line_and_may_begin_with_a_dash() {
    let root = Root::new();
    let fifo = root.path().join("gate.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let tools = format!(
        "tools:\n  - name: gate\n    description: waits for the test\n    exec: \"head -c 1 {}\"\n",
        fifo.display()
    );
    let script = json!({"steps": [
        {"tool": "ask_human", "args": {"prompt": "Password?"}},
        {"tool": "gate", "args": {}},
        {"answer": "done"}
    ]});
    let case = crate::harness::Case::new("asker", &tools, &script);
    case.run("r1", "deploy", &[]).assert_code(101);
    let ws = case
        .work_dir()
        .canonicalize()
        .unwrap()
        .display()
        .to_string();
    let server = Server::start_env(&root, &["-w", &ws], &case.env());
    let answer = "-s3cret answer";
    runtime().block_on(async {
        super::eventually("the workspace is watched", || async {
            server
                .get("/api/workspaces")
                .await
                .1
                .to_string()
                .contains("\"r1\"")
        })
        .await;
        let (status, body) = server
            .post(
                "/api/runs/r1/answer",
                json!({"workspace": ws, "message": answer}),
            )
            .await;
        assert_eq!(
            (status, body["continued"].clone(), body["status"].clone()),
            (202, json!(true), json!("RUNNING")),
            "{body}"
        );
        let continuing = command_lines_with(&["continue", "--run-id", "r1"]);
        assert!(
            !continuing.is_empty(),
            "the delta continue child is running"
        );
        for line in continuing.iter().chain(&command_lines_with(&["s3cret"])) {
            assert!(
                !line.contains("s3cret"),
                "the answer is in a command line: {line}"
            );
        }
        release(&fifo);
        let timeline = format!("/api/runs/r1/timeline?workspace={ws}");
        super::eventually("the run to complete", || async {
            server.get(&timeline).await.1["status"] == "COMPLETED"
        })
        .await;
    });
    let journal = crate::harness::read_journal(&case.run_dir("r1").join("journal.jsonl"));
    let received = journal
        .iter()
        .find(|e| e["type"] == "HUMAN_INPUT_RECEIVED")
        .unwrap();
    assert!(received.to_string().contains(answer), "{received}");
}

/// Regression (issue 24 item 6): the endpoint answered 202 even when `delta continue` failed
/// at once (here the run's agent folder was broken meanwhile). The failure is now reported
/// with what `continue` said, and the run still waits for its answer.
#[test]
fn serve_an_answer_whose_continue_fails_is_reported_not_accepted() {
    let script = json!({"steps": [
        {"tool": "ask_human", "args": {"prompt": "Deploy?"}},
        {"answer": "answer was: {{ last_observation }}"}
    ]});
    let case = crate::harness::Case::new("asker", "", &script);
    case.run("r1", "deploy", &[]).assert_code(101);
    std::fs::write(case.agent_dir().join("agent.yaml"), "name: [broken\n").unwrap();
    let root = Root::new();
    let ws = case
        .work_dir()
        .canonicalize()
        .unwrap()
        .display()
        .to_string();
    let server = Server::start_env(&root, &["-w", &ws], &case.env());
    runtime().block_on(async {
        super::eventually("the workspace is watched", || async {
            server
                .get("/api/workspaces")
                .await
                .1
                .to_string()
                .contains("\"r1\"")
        })
        .await;
        let (status, body) = server
            .post(
                "/api/runs/r1/answer",
                json!({"workspace": ws, "message": "yes"}),
            )
            .await;
        assert_eq!(
            (status, body["code"].clone()),
            (500, json!("continue_failed")),
            "{body}"
        );
        let error = body["error"].as_str().unwrap();
        assert!(
            error.contains("exited with code 126") && error.contains("agent.yaml"),
            "{error}"
        );
    });
    assert_eq!(case.metadata("r1")["status"], "WAITING_FOR_INPUT");
}
