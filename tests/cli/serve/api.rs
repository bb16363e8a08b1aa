//! REST endpoints and their errors, authentication, the migration of an old sessions.json,
//! and the refusal to listen beyond loopback without a fixed token.

use serde_json::{json, Value};

use super::{runtime, Root, Server, Viewer};
use crate::harness::delta_exe;

#[test]
fn serve_rest_sessions_and_workers_lifecycle() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let (status, list) = server.get("/api/sessions").await;
        assert_eq!((status, list), (200, json!([])));
        let (status, agents) = server.get("/api/agents").await;
        assert_eq!(status, 200);
        let ids: Vec<&str> = agents
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["shell", "delta", "fake", "printer"]);
        let mut dashboard = Viewer::connect(&server, "/ws/dashboard", None)
            .await
            .unwrap();
        assert_eq!(dashboard.json().await["type"], "sync");
        let session = server.session(&root).await;
        let (status, body) = server.get(&format!("/api/sessions/{session}")).await;
        assert_eq!(status, 200);
        assert_eq!(
            body["locationPath"],
            json!(root.workspace().canonicalize().unwrap())
        );
        assert_eq!(body["type"], "quick");

        let terminal = server.worker(&session, json!({"type": "terminal"})).await;
        assert_eq!(terminal["type"], "terminal");
        assert_eq!(terminal["epoch"], 1);
        let mut lifecycle = Vec::new();
        while lifecycle.len() < 2 {
            let event = dashboard.json().await;
            if event["type"] != "workspace" {
                lifecycle.push(event["type"].as_str().unwrap().to_string());
            }
        }
        assert_eq!(lifecycle, ["session-created", "worker-created"]);
        let agent = server
            .worker(
                &session,
                json!({"type": "agent", "agentId": "fake", "name": "F"}),
            )
            .await;
        assert_eq!(
            (agent["agentId"].clone(), agent["name"].clone()),
            (json!("fake"), json!("F"))
        );
        let (status, workers) = server
            .get(&format!("/api/sessions/{session}/workers"))
            .await;
        assert_eq!(status, 200);
        assert_eq!(workers.as_array().unwrap().len(), 2);

        let terminal_id = terminal["id"].as_str().unwrap();
        server
            .input(&session, terminal_id, "echo rest-$((6*7))\r")
            .await;
        let mut viewer = server.viewer(&session, terminal_id).await;
        let mut transcript = super::Transcript::start(&mut viewer).await;
        transcript.until(&mut viewer, "rest-42").await;

        let (status, restarted) = server
            .post(
                &format!("/api/sessions/{session}/workers/{terminal_id}/restart"),
                json!({}),
            )
            .await;
        assert_eq!(status, 200, "{restarted}");
        assert_eq!(restarted["worker"]["epoch"], 2);
        let (status, restarted) = server
            .post(
                &format!("/api/sessions/{session}/restart"),
                json!({"continueConversation": true}),
            )
            .await;
        assert_eq!(status, 200, "{restarted}");
        let agent_after = restarted["session"]["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["id"] == agent["id"])
            .unwrap()
            .clone();
        assert_eq!(agent_after["epoch"], 2);

        let (status, _) = server
            .delete(&format!("/api/sessions/{session}/workers/{terminal_id}"))
            .await;
        assert_eq!(status, 204);
        let (status, _) = server.delete(&format!("/api/sessions/{session}")).await;
        assert_eq!(status, 204);
        let (status, list) = server.get("/api/sessions").await;
        assert_eq!((status, list), (200, json!([])));
    });
}

#[test]
fn serve_rest_errors_are_typed_4xx_never_500() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let missing = root.path().join("no-such-folder");
        let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
            (
                "POST",
                "/api/sessions".into(),
                Some("{not json".into()),
                400,
                "bad_json",
            ),
            (
                "POST",
                "/api/sessions".into(),
                Some(json!({"type": "quick", "locationPath": missing}).to_string()),
                400,
                "no_such_folder",
            ),
            (
                "POST",
                "/api/sessions".into(),
                Some(json!({"type": "nope", "locationPath": "/"}).to_string()),
                400,
                "bad_json",
            ),
            (
                "POST",
                "/api/sessions".into(),
                Some(json!({"type": "quick", "locationPath": "/", "agentId": "ghost"}).to_string()),
                400,
                "unknown_agent",
            ),
            (
                "GET",
                "/api/sessions/s-000000000000".into(),
                None,
                404,
                "session_not_found",
            ),
            (
                "GET",
                "/api/sessions/..%2Fetc".into(),
                None,
                400,
                "invalid_id",
            ),
            (
                "DELETE",
                "/api/sessions/s-000000000000".into(),
                None,
                404,
                "session_not_found",
            ),
            (
                "POST",
                "/api/sessions/s-000000000000/restart".into(),
                Some("{}".into()),
                404,
                "session_not_found",
            ),
            (
                "POST",
                format!("/api/sessions/{session}/workers"),
                Some(json!({"type": "agent", "agentId": "ghost"}).to_string()),
                400,
                "unknown_agent",
            ),
            (
                "POST",
                format!("/api/sessions/{session}/workers"),
                Some(json!({"type": "terminal", "name": "x".repeat(101)}).to_string()),
                400,
                "bad_request",
            ),
            (
                "DELETE",
                format!("/api/sessions/{session}/workers/w-000000000000"),
                None,
                404,
                "worker_not_found",
            ),
            (
                "POST",
                format!("/api/sessions/{session}/workers/w-000000000000/restart"),
                Some("{}".into()),
                404,
                "worker_not_found",
            ),
            (
                "POST",
                format!("/api/sessions/{session}/workers/w-000000000000/input"),
                Some(json!({"data": "x"}).to_string()),
                404,
                "worker_not_found",
            ),
            (
                "POST",
                format!("/api/sessions/{session}/restart"),
                Some("[1]".into()),
                400,
                "bad_json",
            ),
            ("GET", "/api/nothing-here".into(), None, 404, "not_found"),
            (
                "POST",
                "/api/sessions".into(),
                Some(
                    json!({"type": "worktree", "locationPath": "/", "repositoryId": "r",
                           "worktreeId": "w".repeat(257)})
                    .to_string(),
                ),
                400,
                "bad_request",
            ),
            (
                "POST",
                "/api/sessions".into(),
                Some(format!(
                    "{{\"type\":\"quick\",\"locationPath\":\"{}\"}}",
                    "x".repeat(300_000)
                )),
                413,
                "too_large",
            ),
            (
                "GET",
                "/api/runs/R1/timeline?workspace=/etc".into(),
                None,
                404,
                "unknown_workspace",
            ),
        ];
        for (method, path, body, status, code) in cases {
            let (got, answer) = server.call(method, &path, body.as_deref()).await;
            assert_eq!(
                (got, answer["code"].as_str()),
                (status, Some(code)),
                "{method} {path}: {answer}"
            );
            assert!(
                answer["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{answer}"
            );
        }
        let terminal = server.worker(&session, json!({"type": "terminal"})).await;
        let path = format!(
            "/api/sessions/{session}/workers/{}/input",
            terminal["id"].as_str().unwrap()
        );
        let (status, answer) = server
            .post(&path, json!({"data": "x".repeat(70_000)}))
            .await;
        assert_eq!(
            (status, answer["code"].clone()),
            (413, json!("too_large")),
            "{answer}"
        );
    });
}

#[test]
fn serve_refuses_unauthenticated_requests_and_foreign_origins() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_id = worker["id"].as_str().unwrap();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        for path in ["/api/sessions", "/ws/dashboard"] {
            let response = client.get(server.url(path)).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 401, "{path}");
        }
        let response = client
            .get(server.url("/api/sessions"))
            .bearer_auth("wrong-token")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401);

        let path = format!("/ws/session/{session}/worker/{worker_id}");
        let foreign = Viewer::connect(&server, &path, Some("http://evil.example")).await;
        assert_eq!(foreign.err(), Some(403));
        let own = server.base.clone();
        assert!(Viewer::connect(&server, &path, Some(&own)).await.is_ok());
        let response = client
            .post(server.url("/api/sessions"))
            .bearer_auth(&server.token)
            .header("origin", "http://evil.example")
            .header("content-type", "application/json")
            .body(json!({"type": "quick", "locationPath": root.workspace()}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 403);
    });
}

/// Issue 24 §2: a fixed token comes from a private `--token-file` (never from argv).
#[test]
fn serve_takes_its_token_from_a_private_token_file() {
    use std::os::unix::fs::PermissionsExt;
    let root = Root::new();
    let file = root.path().join("serve-token");
    std::fs::write(&file, "serve-file-token-0123\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = Server::start_with(&root, &["--token-file", file.to_str().unwrap()]);
    assert_eq!(server.token, "serve-file-token-0123");
    runtime().block_on(async {
        let (status, _) = server.get("/api/sessions").await;
        assert_eq!(status, 200);
    });
}

#[test]
fn serve_refuses_a_non_loopback_address_without_a_token() {
    let root = Root::new();
    let output = std::process::Command::new(delta_exe())
        .args(["serve", "--listen", "0.0.0.0:0", "--state-dir"])
        .arg(root.state())
        .env_clear()
        .env("HOME", root.path().join("home"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(126));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--token") && stderr.contains("0.0.0.0"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn serve_migrates_an_old_format_sessions_file_and_keeps_the_original() {
    let root = Root::new();
    let old = json!([{
        "id": "session-abc-123", "worktreePath": root.workspace(), "repositoryId": "repo-1",
        "pid": 999_999, "serverPid": 12345, "createdAt": "2025-01-01T00:00:00.000Z"
    }]);
    let original = serde_json::to_string_pretty(&old).unwrap();
    std::fs::write(root.state().join("sessions.json"), &original).unwrap();
    let server = Server::start(&root);
    runtime().block_on(async {
        let (status, sessions) = server.get("/api/sessions").await;
        assert_eq!(status, 200);
        let session: &Value = &sessions[0];
        assert_eq!(session["id"], "session-abc-123");
        assert_eq!(session["type"], "worktree");
        assert_eq!(session["repositoryId"], "repo-1");
        assert_eq!(session["workers"][0]["id"], "session-abc-123-agent");
        assert_eq!(session["workers"][0]["agentId"], "claude-code-builtin");
    });
    let backup = std::fs::read_to_string(root.state().join("sessions.json.pre-migration")).unwrap();
    assert_eq!(backup, original);
    let rewritten: Value =
        serde_json::from_str(&std::fs::read_to_string(root.state().join("sessions.json")).unwrap())
            .unwrap();
    assert_eq!(rewritten[0]["type"], "worktree");
}

#[test]
fn serve_the_number_of_sessions_is_bounded() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        // The same folder each time, which must then be said to be meant.
        let request =
            json!({"type": "quick", "locationPath": root.workspace(), "allowDuplicate": true});
        for _ in 0..256 {
            let (status, body) = server.post("/api/sessions", request.clone()).await;
            assert_eq!(status, 201, "{body}");
        }
        let refused = server.post("/api/sessions", request).await;
        assert_conflict_naming(refused, "256 sessions");
    });
}

/// A 409 `conflict` whose message names `limit`.
fn assert_conflict_naming((status, body): (u16, Value), limit: &str) {
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("conflict")),
        "{body}"
    );
    assert!(body["error"].as_str().unwrap().contains(limit), "{body}");
}

#[test]
fn serve_the_number_of_workers_in_a_session_is_bounded() {
    let root = Root::new();
    // A session that already holds 64 finished workers, as a long-lived server leaves it.
    let workers: Vec<Value> = (0..64)
        .map(|i| {
            json!({
                "id": format!("w-{i:012}"), "name": format!("Terminal {}", i + 1),
                "createdAt": "2026-01-01T00:00:00.000Z", "type": "terminal",
                "epoch": 1, "exitCode": 0
            })
        })
        .collect();
    let sessions = json!([{
        "id": "s-full", "type": "quick", "locationPath": root.workspace(),
        "status": "inactive", "createdAt": "2026-01-01T00:00:00.000Z", "workers": workers
    }]);
    std::fs::write(root.state().join("sessions.json"), sessions.to_string()).unwrap();
    let server = Server::start(&root);
    runtime().block_on(async {
        let (status, listed) = server.get("/api/sessions/s-full/workers").await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(listed.as_array().map(Vec::len), Some(64), "{listed}");
        let refused = server
            .post("/api/sessions/s-full/workers", json!({"type": "terminal"}))
            .await;
        assert_conflict_naming(refused, "64 workers");
    });
}
