//! Agent workers as issue 27 found them: one that exits 0 is done (not a red "exited 0") and
//! no longer "asking"; "Restart & continue" only where the agent has continue args (refused
//! otherwise, never a silent fresh start under a seam that says "continue args"); the
//! built-in `delta` agent on an ordinary folder asks which agent to run instead of exiting
//! 126, offline with `DELTA_LLM_SCRIPT`, and the runs it makes are listed without `-w`.

use serde_json::{json, Value};

use super::browser::{browser_or_skip, OPENED};
use super::webdriver::Driver;
use super::{eventually, runtime, Root, Server, Transcript};
use crate::harness::write_agent;

/// An agent that asks, waits long enough to be judged `asking`, then exits 0.
fn with_quick_agent(root: &Root) {
    let config = root.path().join("serve.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("  - id: quick\n    name: Quick agent\n    command: [bash, -c, 'printf \"Proceed? [y/n] \"; sleep 3; exit 0']\n    asking_patterns: ['Proceed\\? \\[y/n\\]\\s*$']\n");
    std::fs::write(config, text).unwrap();
}

async fn worker_state(server: &Server, session: &str, worker: &str) -> Value {
    let (_, workers) = server
        .get(&format!("/api/sessions/{session}/workers"))
        .await;
    workers
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == worker)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Regression (issue 27): a worker that exited 0 was shown as a red "exited 0" and still
/// reported `activity: "asking"`; "Restart & continue" was offered for every worker.
#[test]
fn serve_browser_an_agent_worker_that_exits_0_is_done_not_failed() {
    let Some((chromium, chromedriver)) =
        browser_or_skip("serve_browser_an_agent_worker_that_exits_0_is_done_not_failed")
    else {
        return;
    };
    let root = Root::new();
    with_quick_agent(&root);
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let quick = server
            .worker(&session, json!({"type": "agent", "agentId": "quick"}))
            .await["id"]
            .as_str()
            .unwrap()
            .to_string();
        eventually("the agent asking", || async {
            worker_state(&server, &session, &quick).await["activity"] == "asking"
        })
        .await;
        eventually("the agent exiting 0", || async {
            worker_state(&server, &session, &quick).await["exitCode"] == 0
        })
        .await;
        assert_eq!(
            worker_state(&server, &session, &quick).await["activity"],
            "unknown",
            "an exited program asks nothing"
        );
        let fake = server
            .worker(&session, json!({"type": "agent", "agentId": "fake"}))
            .await["id"]
            .as_str()
            .unwrap()
            .to_string();
        let terminal = server
            .worker(&session, json!({"type": "terminal"}))
            .await["id"]
            .as_str()
            .unwrap()
            .to_string();

        let driver = Driver::start(&chromium, &chromedriver).await;
        driver.goto(&format!("{}/#token={}", server.base, server.token)).await;
        driver.until("the page without the token in its address", OPENED).await;
        driver.goto(&format!("{}/#/session/{session}/worker/{quick}", server.base)).await;
        driver.until(
            "the exited worker shown as done",
            &format!("const badge = document.querySelector('[data-worker={quick:?}] .badge'); return !!badge && badge.textContent === 'done' && badge.classList.contains('done') && getComputedStyle(badge).color !== 'rgb(248, 81, 73)' && !document.body.textContent.includes('exited 0')"),
        )
        .await;
        driver.until("no Restart & continue for an agent without continue args", "return !!document.getElementById('restart-worker') && !document.getElementById('restart-continue')").await;
        driver.goto(&format!("{}/#/session/{session}/worker/{fake}", server.base)).await;
        driver.until("Restart & continue for an agent with continue args", "return !!document.getElementById('restart-continue')").await;
        driver.goto(&format!("{}/#/session/{session}/worker/{terminal}", server.base)).await;
        driver.until("none for a terminal", "return !!document.getElementById('restart-worker') && !document.getElementById('restart-continue')").await;
        driver.quit().await;
    });
}

/// Regression (issue 27): "Restart & continue" on a worker whose agent has no continue args
/// started a new task while the seam said "restarted with its continue args".
#[test]
fn serve_restart_and_continue_is_refused_without_continue_args() {
    let root = Root::new();
    with_quick_agent(&root);
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        for request in [
            json!({"type": "agent", "agentId": "quick"}),
            json!({"type": "terminal"}),
        ] {
            let worker = server.worker(&session, request).await;
            let path = format!(
                "/api/sessions/{session}/workers/{}/restart",
                worker["id"].as_str().unwrap()
            );
            let (status, refused) = server
                .post(&path, json!({"continueConversation": true}))
                .await;
            assert_eq!(
                (status, refused["code"].clone()),
                (400, json!("no_continue_args")),
                "{refused}"
            );
            assert!(refused["error"]
                .as_str()
                .unwrap()
                .contains("continueConversation"));
            let (status, fresh) = server
                .post(&path, json!({"continueConversation": false}))
                .await;
            assert_eq!((status, fresh["worker"]["epoch"].clone()), (200, json!(2)));
        }
        // A session restart continues only the agents that can.
        let (status, restarted) = server
            .post(&format!("/api/sessions/{session}/restart"), json!({}))
            .await;
        assert_eq!(status, 200, "{restarted}");
    });
}

/// Regression (issue 27): the built-in `delta` agent treated the session folder as the agent
/// and exited 126 on an ordinary folder; the run an agent worker made was not listed unless
/// its workspace was passed with `-w`.
#[test]
fn serve_the_delta_agent_asks_which_agent_on_an_ordinary_folder_and_its_runs_are_listed() {
    let root = Root::new();
    let plain = root.path().join("plain");
    let agent = root.path().join("plain/agents/helper");
    write_agent(&agent, "helper", "");
    let script = root.path().join("script.yaml");
    std::fs::write(
        &script,
        "rules:\n  - steps: [{ answer: \"hello from {{ task }}\" }]\n",
    )
    .unwrap();
    let env = [("DELTA_LLM_SCRIPT".to_string(), script.display().to_string())];
    let server = Server::start_env(&root, &[], &env);
    let views = |path: std::path::PathBuf| {
        let server = &server;
        async move {
            let (_, views) = server.get("/api/workspaces").await;
            views
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["path"] == json!(path))
                .cloned()
                .unwrap_or(Value::Null)
        }
    };
    runtime().block_on(async {
        // An ordinary folder: the worker asks which agent, runs it with the folder as workspace.
        let (status, made) = server
            .post(
                "/api/sessions",
                json!({"type": "quick", "locationPath": plain, "agentId": "delta"}),
            )
            .await;
        assert_eq!(status, 201, "{made}");
        let session = made["session"]["id"].as_str().unwrap().to_string();
        let worker = made["session"]["workers"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut viewer = server.viewer(&session, &worker).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        transcript.until(&mut viewer, "Agent folder to run: ").await;
        assert!(
            transcript.text.contains("agents/helper"),
            "lists the agents found: {}",
            transcript.text
        );
        server.input(&session, &worker, "agents/helper\r").await;
        transcript.until(&mut viewer, "Task: ").await;
        server.input(&session, &worker, "say hi\r").await;
        transcript.until(&mut viewer, "hello from say hi").await;
        let plain_path = plain.canonicalize().unwrap();
        eventually("the run listed under the session folder", || async {
            let view = views(plain_path.clone()).await;
            view["runs"].as_array().is_some_and(|runs| {
                runs.iter()
                    .any(|r| r["task"] == "say hi" && r["status"] == "COMPLETED")
            })
        })
        .await;

        // An agent folder: the worker runs it; its run is in the agent's workspaces/W001.
        let (status, made) = server
            .post(
                "/api/sessions",
                json!({"type": "quick", "locationPath": agent, "agentId": "delta"}),
            )
            .await;
        assert_eq!(status, 201, "{made}");
        let session = made["session"]["id"].as_str().unwrap().to_string();
        let worker = made["session"]["workers"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let mut viewer = server.viewer(&session, &worker).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        transcript.until(&mut viewer, "Task: ").await;
        assert!(
            !transcript.text.contains("Agent folder"),
            "{}",
            transcript.text
        );
        server.input(&session, &worker, "wave\r").await;
        transcript.until(&mut viewer, "hello from wave").await;
        let workspace = agent.canonicalize().unwrap().join("workspaces/W001");
        eventually(
            "the run listed under the agent's workspace, without -w",
            || async {
                let view = views(workspace.clone()).await;
                view["runs"].as_array().is_some_and(|runs| {
                    runs.iter()
                        .any(|r| r["task"] == "wave" && r["status"] == "COMPLETED")
                })
            },
        )
        .await;
    });
}
