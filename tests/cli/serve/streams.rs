//! Worker sockets: attach continuity across reconnects, close codes, a slow viewer, activity
//! detection driven by a scripted agent, and the dashboard feed.

use serde_json::json;

use super::{runtime, Frame, Root, Server, Transcript, Viewer};

#[test]
fn serve_attach_is_continuous_across_20_reconnects_while_a_worker_prints() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server
            .worker(&session, json!({"type": "agent", "agentId": "printer"}))
            .await;
        let worker_id = worker["id"].as_str().unwrap();
        let log = std::fs::read_dir(root.state().join("pty"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
            .join("output.log");
        let mut last_end = 0;
        for round in 0..20 {
            let mut viewer = server.viewer(&session, worker_id).await;
            let mut transcript = Transcript::start(&mut viewer).await;
            assert!(
                transcript.next >= last_end,
                "round {round}: the snapshot went back in time"
            );
            let start = transcript.next;
            let mut received = String::new();
            for _ in 0..5 {
                let frame = viewer.json().await;
                if frame["type"] == "output" {
                    received.push_str(frame["data"].as_str().unwrap());
                }
                transcript.take(&frame);
            }
            // What the viewer got is exactly the log between those offsets.
            let bytes = std::fs::read(&log).unwrap();
            assert_eq!(
                received.as_bytes(),
                &bytes[start as usize..transcript.next as usize],
                "round {round}"
            );
            last_end = transcript.next;
            viewer.close().await;
        }
        assert!(last_end > 0);
    });
}

#[test]
fn serve_close_codes_say_restarted_or_stopped() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_id = worker["id"].as_str().unwrap();
        let mut viewer = server.viewer(&session, worker_id).await;
        Transcript::start(&mut viewer).await;
        let path = format!("/api/sessions/{session}/workers/{worker_id}");
        let (status, _) = server.post(&format!("{path}/restart"), json!({})).await;
        assert_eq!(status, 200);
        let code = loop {
            if let Frame::Closed(code) = viewer.next().await {
                break code;
            }
        };
        assert_eq!(code, Some(4001));
        let mut viewer = server.viewer(&session, worker_id).await;
        let transcript = Transcript::start(&mut viewer).await;
        assert_eq!(transcript.epoch, 2);
        let (status, _) = server.delete(&path).await;
        assert_eq!(status, 204);
        let code = loop {
            if let Frame::Closed(code) = viewer.next().await {
                break code;
            }
        };
        assert_eq!(code, Some(1000));
    });
}

#[test]
fn serve_a_slow_viewer_gets_a_fresh_snapshot_and_does_not_stall_a_fast_one() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_id = worker["id"].as_str().unwrap();
        let mut slow = server.viewer(&session, worker_id).await;
        // The fast viewer reads on its own thread, as fast as it can.
        let url = server.ws_url(&format!("/ws/session/{session}/worker/{worker_id}"));
        let token = server.token.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let fast = std::thread::spawn(move || {
            super::runtime().block_on(async move {
                let mut fast = Viewer::connect_to(&url, &token, None).await.unwrap();
                let mut transcript = Transcript::start(&mut fast).await;
                ready_tx.send(()).unwrap();
                transcript.until(&mut fast, "slow-42-done").await;
                transcript.next
            })
        });
        ready_rx.recv_timeout(super::LIMIT).unwrap();
        // ~24 MiB of output while the slow viewer reads nothing. Written in 240 paced chunks
        // (at most ~10 MB/s) so that "fast" means faster than the producer, not faster than
        // the server: a debug-built client must not fall behind a release-speed server.
        server.input(&session, worker_id, "for i in $(seq 240); do head -c 100000 /dev/zero | tr '\\0' 'x' | fold -w 100; sleep 0.01; done; echo slow-$((6*7))-done\r").await;
        let fast_end = fast.join().unwrap();
        assert!(fast_end > 24_000_000, "the fast viewer got every byte without a snapshot");
        let mut snapshots = 0;
        let mut slow_transcript = Transcript::start(&mut slow).await;
        let mut recent = String::new();
        while !recent.contains("slow-42-done") {
            let frame = slow.json().await;
            if frame["type"] == "history" {
                snapshots += 1;
                slow_transcript.next = frame["offset"].as_u64().unwrap();
                recent = frame["data"].as_str().unwrap().to_string();
            } else if frame["type"] == "output" {
                slow_transcript.take(&frame);
                recent = frame["data"].as_str().unwrap().to_string();
            }
        }
        assert!(snapshots >= 1, "the slow viewer should have been sent a fresh snapshot");
    });
}

#[test]
fn serve_activity_goes_active_idle_asking_from_a_scripted_agent() {
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let mut dashboard = Viewer::connect(&server, "/ws/dashboard", None)
            .await
            .unwrap();
        let sync = dashboard.json().await;
        assert_eq!(
            (sync["type"].clone(), sync["schemaVersion"].clone()),
            (json!("sync"), json!(1))
        );
        let session = server.session(&root).await;
        let worker = server
            .worker(&session, json!({"type": "agent", "agentId": "fake"}))
            .await;
        let worker_id = worker["id"].as_str().unwrap();
        let mut viewer = server.viewer(&session, worker_id).await;
        let mut states = Vec::new();
        while states.len() < 3 {
            let frame = viewer.json().await;
            if frame["type"] == "activity" {
                states.push((
                    frame["state"].as_str().unwrap().to_string(),
                    frame["source"].as_str().unwrap().to_string(),
                ));
            }
        }
        let expected = [
            ("active", "heuristic"),
            ("idle", "heuristic"),
            ("asking", "pattern"),
        ];
        assert_eq!(
            states,
            expected.map(|(s, k)| (s.to_string(), k.to_string()))
        );
        // The dashboard saw the same changes for this worker.
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let event = dashboard.json().await;
            if event["type"] == "worker-activity" && event["workerId"] == worker_id {
                seen.push(event["state"].as_str().unwrap().to_string());
            }
        }
        assert_eq!(seen, ["active", "idle", "asking"]);
        let (_, session_body) = server.get(&format!("/api/sessions/{session}")).await;
        assert_eq!(session_body["workers"][0]["activity"], "asking");
        // A viewer attaching now learns the state (and what decided it) after the snapshot.
        let mut late = server.viewer(&session, worker_id).await;
        assert_eq!(late.json().await["type"], "history");
        let activity = late.json().await;
        assert_eq!(
            (activity["state"].clone(), activity["source"].clone()),
            (json!("asking"), json!("pattern"))
        );
    });
}

#[test]
fn serve_worker_socket_input_resize_image_and_refused_messages() {
    use base64::Engine;
    use std::os::unix::fs::PermissionsExt;
    let root = Root::new();
    let server = Server::start(&root);
    runtime().block_on(async {
        let session = server.session(&root).await;
        let worker = server.worker(&session, json!({"type": "terminal"})).await;
        let worker_id = worker["id"].as_str().unwrap();
        let mut viewer = server.viewer(&session, worker_id).await;
        let mut transcript = Transcript::start(&mut viewer).await;
        viewer
            .send(json!({"type": "resize", "cols": 100, "rows": 40}))
            .await;
        viewer
            .send(json!({"type": "input", "data": "stty size; echo sized-$((6*7))\r"}))
            .await;
        transcript.until(&mut viewer, "sized-42").await;
        assert!(
            transcript.text.contains("40 100"),
            "{:?}",
            transcript.tail()
        );

        let picture = b"\x89PNG\r\n\x1a\nnot really a picture";
        let data = base64::engine::general_purpose::STANDARD.encode(picture);
        viewer
            .send(json!({"type": "image", "data": data, "mimeType": "image/png"}))
            .await;
        transcript.until(&mut viewer, ".png").await;
        let images = root.state().canonicalize().unwrap().join("images");
        let saved: Vec<_> = std::fs::read_dir(&images)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(saved.len(), 1);
        assert_eq!(std::fs::read(&saved[0]).unwrap(), picture);
        assert_eq!(
            std::fs::metadata(&saved[0]).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(transcript
            .text
            .contains(saved[0].file_name().unwrap().to_str().unwrap()));

        for (message, code) in [
            (
                json!({"type": "image", "data": "AAAA", "mimeType": "text/html"}),
                "bad_image",
            ),
            (
                json!({"type": "image", "data": "***", "mimeType": "image/png"}),
                "bad_image",
            ),
            (
                json!({"type": "resize", "cols": 0, "rows": 40}),
                "bad_resize",
            ),
            (
                json!({"type": "resize", "cols": 5000, "rows": 40}),
                "bad_resize",
            ),
            (
                json!({"type": "input", "data": "x".repeat(70_000)}),
                "too_large",
            ),
            (json!({"type": "teleport"}), "bad_message"),
        ] {
            viewer.send(message.clone()).await;
            let answer = loop {
                let frame = viewer.json().await;
                if frame["type"] == "error" {
                    break frame;
                }
                transcript.take(&frame);
            };
            assert_eq!(answer["code"], code, "{message}: {answer}");
        }
    });
}
