//! Process lifecycle: restart fresh and with continue args, a SIGKILLed server that
//! re-attaches to a running shell, a killed holder revived in a new epoch, and deletion that
//! leaves no process of the worker alive.

use serde_json::json;

use super::{marked, no_process_with, runtime, Root, Server, Transcript, LIMIT};

#[test]
fn serve_worker_restart_fresh_and_with_continue_args() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server
            .worker(&session, json!({"type": "agent", "agentId": "fake"}))
            .await;
        let worker_id = worker["id"].as_str().unwrap();
        let path = format!("/api/sessions/{session}/workers/{worker_id}/restart");
        let (status, fresh) = server
            .post(&path, json!({"continueConversation": false}))
            .await;
        assert_eq!(status, 200, "{fresh}");
        assert_eq!(fresh["worker"]["epoch"], 2);
        let mut viewer = server.viewer(&session, worker_id).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        transcript
            .until_after(&mut viewer, "epoch 2", "working 1")
            .await;
        let after_seam = transcript
            .text
            .rsplit("epoch 2")
            .next()
            .unwrap()
            .to_string();
        assert!(after_seam.contains("args:\r\n"), "{after_seam:?}");

        let (status, continued) = server
            .post(&path, json!({"continueConversation": true}))
            .await;
        assert_eq!(status, 200, "{continued}");
        assert_eq!(continued["worker"]["epoch"], 3);
        let mut viewer = server.viewer(&session, worker_id).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        assert_eq!(transcript.epoch, 3);
        transcript.until(&mut viewer, "args:--continued").await;
    });
}

#[test]
fn serve_sigkill_of_the_server_keeps_a_bash_workers_state_and_history() {
    let root = Root::new();
    let mut server = Server::start(&root);
    let (session, worker_id, pid) = runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_id = worker["id"].as_str().unwrap().to_string();
        let mut viewer = server.viewer(&session, &worker_id).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        server
            .input(
                &session,
                &worker_id,
                "export KEPT=value-$((6*7)); echo before-the-kill\r",
            )
            .await;
        transcript.until(&mut viewer, "before-the-kill\r\n").await;
        (session, worker_id, worker["pid"].as_i64().unwrap())
    });
    server.kill9();
    assert!(
        crate::harness::process_alive(pid as i32),
        "the shell must survive the server"
    );
    let server = Server::start(&root);
    runtime().block_on(async {
        let mut viewer = server.viewer(&session, &worker_id).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        assert_eq!(transcript.epoch, 1, "re-attached, not restarted");
        assert!(
            transcript.text.contains("before-the-kill"),
            "history kept: {:?}",
            transcript.tail()
        );
        server
            .input(&session, &worker_id, "echo \"kept=$KEPT\"\r")
            .await;
        transcript.until(&mut viewer, "kept=value-42").await;
        let (_, body) = server.get(&format!("/api/sessions/{session}")).await;
        assert_eq!(body["workers"][0]["pid"], pid);
    });
}

#[test]
fn serve_a_worker_whose_holder_was_killed_is_revived_in_a_new_epoch() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server
            .worker(&session, json!({"type": "agent", "agentId": "fake"}))
            .await;
        let worker_id = worker["id"].as_str().unwrap();
        let holder = worker["holder"]["holderPid"].as_i64().unwrap() as i32;
        crate::harness::kill_pid(holder);
        let path = format!("/api/sessions/{session}");
        super::eventually("the revival", || async {
            let (_, body) = server.get(&path).await;
            body["workers"][0]["epoch"] == 2 && body["workers"][0]["holder"]["holderPid"] != holder
        })
        .await;
        let mut viewer = server.viewer(&session, worker_id).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        assert_eq!(transcript.epoch, 2);
        transcript.until(&mut viewer, "args:--continued").await;
        assert!(
            transcript.text.contains("epoch 2"),
            "the seam is marked: {:?}",
            transcript.tail()
        );
    });
}

#[test]
fn serve_delete_leaves_no_process_of_the_worker_alive() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_id = worker["id"].as_str().unwrap();
        let marker = format!("DELTA_WORKER_ID={worker_id}");
        let mut viewer = server.viewer(&session, worker_id).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        // Background jobs of an interactive shell get process groups of their own.
        server.input(&session, worker_id, "sleep 1000 & sleep 1001 & trap '' TERM HUP; (trap '' TERM HUP; sleep 1002) & echo started-$((6*7))\r").await;
        transcript.until(&mut viewer, "started-42").await;
        // A job caught inside its execve has no readable environment for a moment: wait for
        // all five (holder, shell, three jobs) rather than counting once.
        super::eventually("holder, shell and three jobs", || async { marked(&marker).len() >= 5 })
            .await;
        let (status, _) = server.delete(&format!("/api/sessions/{session}/workers/{worker_id}")).await;
        assert_eq!(status, 204);
        assert!(no_process_with(&marker), "left alive: {:?}", marked(&marker));
    });
}

#[test]
fn serve_a_program_that_exits_is_reported_and_not_revived_after_a_restart() {
    let root = Root::new();
    let mut server = Server::start(&root);
    let (session, worker_id) = runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_id = worker["id"].as_str().unwrap().to_string();
        let mut viewer = server.viewer(&session, &worker_id).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        server
            .input(&session, &worker_id, "echo last-words-$((6*7)); exit 3\r")
            .await;
        let exit = loop {
            let frame = viewer.json().await;
            if frame["type"] == "exit" {
                break frame;
            }
            transcript.take(&frame);
        };
        assert_eq!(exit["exitCode"], 3);
        assert!(matches!(
            viewer.next().await,
            super::Frame::Closed(Some(1000))
        ));
        let path = format!("/api/sessions/{session}");
        super::eventually("the exit code in the session", || async {
            server.get(&path).await.1["workers"][0]["exitCode"] == 3
        })
        .await;
        let (status, refused) = server
            .post(
                &format!("{path}/workers/{worker_id}/input"),
                json!({"data": "x"}),
            )
            .await;
        assert_eq!((status, refused["code"].clone()), (409, json!("conflict")));
        (session, worker_id)
    });
    server.kill9();
    let server = Server::start(&root);
    runtime().block_on(async {
        let (_, body) = server.get(&format!("/api/sessions/{session}")).await;
        assert_eq!(
            (
                body["workers"][0]["epoch"].clone(),
                body["workers"][0]["exitCode"].clone()
            ),
            (json!(1), json!(3))
        );
        let mut viewer = server.viewer(&session, &worker_id).await;
        let history = viewer.json().await;
        assert!(
            history["data"].as_str().unwrap().contains("last-words-42"),
            "{history}"
        );
        assert_eq!(viewer.json().await["type"], "exit");
        assert!(matches!(
            viewer.next().await,
            super::Frame::Closed(Some(1000))
        ));
    });
}

/// Regression: `delta serve` printed its address before it caught SIGINT and SIGTERM (the
/// handlers were set up by tasks that had not run yet), so stopping it right after reading
/// the address could kill it by the signal's default action. It now stops cleanly (exit 0)
/// however early the signal comes.
#[test]
fn serve_stopped_the_moment_it_prints_its_address_stops_cleanly() {
    for signal in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let root = Root::new();
        let mut server = Server::start(&root);
        crate::harness::send_signal(server.child.id(), signal);
        let status = crate::harness::wait_child(&mut server.child, LIMIT);
        assert_eq!(status.code(), Some(0), "{signal}: {status:?}");
    }
}
