//! The runs view over REST: a workspace's runs and orchestrations, a run's journal as a
//! timeline read from an offset, and answering a WAITING_FOR_INPUT run like `delta continue`.

use serde_json::{json, Value};

use super::browser::finished_example_orchestration;
use super::{eventually, runtime, Root, Server};
use crate::harness::Case;

#[test]
fn serve_runs_view_lists_runs_and_orchestrations_and_answers_a_waiting_run() {
    let script = json!({"steps": [
        {"tool": "ask_human", "args": {"prompt": "Deploy to production?"}},
        {"answer": "answer was: {{ last_observation }}"}
    ]});
    let case = Case::new("asker", "", &script);
    case.run("r1", "deploy", &[]).assert_code(101);
    finished_example_orchestration(&case.work_dir());
    let root = Root::new();
    let workspace = case.work_dir().canonicalize().unwrap();
    let ws = workspace.display().to_string();
    let server = Server::start_env(&root, &["-w", &ws], &case.env());
    runtime().block_on(async {
        let view = || async {
            let (_, views) = server.get("/api/workspaces").await;
            views
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["path"] == json!(ws))
                .cloned()
                .unwrap_or(Value::Null)
        };
        eventually("the workspace's first scan", || async {
            view().await != Value::Null
        })
        .await;
        let current = view().await;
        let r1 = current["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["runId"] == "r1")
            .unwrap()
            .clone();
        assert_eq!(
            (r1["status"].clone(), r1["agent"].clone()),
            (json!("WAITING_FOR_INPUT"), json!("asker"))
        );
        let orchestration = &current["orchestrations"][0];
        assert_eq!(orchestration["status"], "COMPLETED");
        let stages: Vec<(Value, Value)> = orchestration["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].clone(), s["status"].clone()))
            .collect();
        assert_eq!(
            stages,
            [
                (json!("map"), json!("COMPLETED")),
                (json!("reduce"), json!("COMPLETED"))
            ]
        );

        let timeline = format!("/api/runs/r1/timeline?workspace={ws}");
        let (status, first) = server.get(&timeline).await;
        assert_eq!(status, 200, "{first}");
        let kinds: Vec<&str> = first["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert!(kinds.contains(&"question"), "{kinds:?}");
        let next = first["next"].as_u64().unwrap();

        let (status, answer) = server
            .post(
                "/api/runs/r1/answer",
                json!({"workspace": ws, "message": "yes, go"}),
            )
            .await;
        // 202 once `delta continue` has taken the run, 200 if it already finished.
        assert!(matches!(status, 200 | 202), "{status} {answer}");
        assert_eq!(answer["continued"], true, "{answer}");
        eventually("the run to complete", || async {
            server.get(&timeline).await.1["status"] == "COMPLETED"
        })
        .await;
        let (_, rest) = server.get(&format!("{timeline}&from={next}")).await;
        let texts: Vec<&str> = rest["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["text"].as_str().unwrap())
            .collect();
        assert!(
            texts.iter().any(|t| t.contains("yes, go")),
            "only what came after the offset: {texts:?}"
        );

        let (status, again) = server
            .post(
                "/api/runs/r1/answer",
                json!({"workspace": ws, "message": "again"}),
            )
            .await;
        assert_eq!((status, again["code"].clone()), (409, json!("not_waiting")));
        let elsewhere = root.path().display().to_string();
        let (status, refused) = server
            .post(
                "/api/runs/r1/answer",
                json!({"workspace": elsewhere, "message": "x"}),
            )
            .await;
        assert_eq!(
            (status, refused["code"].clone()),
            (404, json!("unknown_workspace"))
        );
        let (status, missing) = server
            .get(&format!("/api/runs/nope/timeline?workspace={ws}"))
            .await;
        assert_eq!(
            (status, missing["code"].clone()),
            (404, json!("run_not_found"))
        );
    });
}

/// Regression (issue 24): one FIFO as a run's `metadata.json` in one watched workspace froze
/// the runs view of every workspace (the scan of all of them waited on it), and SIGTERM then
/// hung the server. The run is listed as unreadable, the other workspace is shown, and the
/// server exits on SIGTERM at once.
#[test]
fn a_fifo_in_one_workspace_freezes_neither_the_runs_view_nor_the_servers_exit() {
    let good = Case::new(
        "good",
        "tools: []\n",
        &json!({"steps": [{"answer": "done"}]}),
    );
    good.run("r1", "fine", &[]).assert_code(0);
    let hostile = Case::new(
        "hostile",
        "tools: []\n",
        &json!({"steps": [{"answer": "done"}]}),
    );
    hostile.run("r1", "fine", &[]).assert_code(0);
    let piped = hostile.run_dir("piped");
    std::fs::create_dir_all(&piped).unwrap();
    nix::unistd::mkfifo(&piped.join("metadata.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let root = Root::new();
    let good_ws = good
        .work_dir()
        .canonicalize()
        .unwrap()
        .display()
        .to_string();
    let hostile_ws = hostile
        .work_dir()
        .canonicalize()
        .unwrap()
        .display()
        .to_string();
    let mut server = Server::start_with(&root, &["-w", &hostile_ws, "-w", &good_ws]);
    runtime().block_on(async {
        let view = |ws: String| {
            let server = &server;
            async move {
                let (_, views) = server.get("/api/workspaces").await;
                views
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|v| v["path"] == json!(ws))
                    .cloned()
                    .unwrap_or(Value::Null)
            }
        };
        eventually("both workspaces scanned", || async {
            view(good_ws.clone()).await != Value::Null
                && view(hostile_ws.clone()).await != Value::Null
        })
        .await;
        assert_eq!(view(good_ws.clone()).await["runs"][0]["runId"], "r1");
        let hostile_view = view(hostile_ws.clone()).await;
        assert_eq!(hostile_view["runs"][0]["runId"], "r1");
        assert_eq!(hostile_view["unreadable"][0]["runId"], "piped");
        let reason = hostile_view["unreadable"][0]["reason"].as_str().unwrap();
        assert!(reason.contains("FIFO"), "{reason}");
    });
    crate::harness::send_signal(server.child.id(), nix::sys::signal::Signal::SIGTERM);
    crate::harness::wait_child(&mut server.child, std::time::Duration::from_secs(10));
}
