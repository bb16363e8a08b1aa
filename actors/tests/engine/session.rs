//! SessionManager / SessionActor: execs on one session serialise through the actor's mailbox
//! with every output intact; different sessions run in parallel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use delta_actors::session::shell::{ExecOptions, ShellConfig, StartOptions};
use delta_actors::SessionManager;

fn start_options(dir: &std::path::Path) -> StartOptions {
    StartOptions {
        shell: None,
        work_dir: dir.to_path_buf(),
        env: vec![("PATH".into(), std::env::var_os("PATH").unwrap())],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_parallel_execs_on_one_session_never_interleave() {
    let tmp = tempfile::tempdir().unwrap();
    let manager = SessionManager::new(ShellConfig::new(tmp.path().join(".sessions"))).unwrap();
    let session = manager.start_session(&start_options(tmp.path())).unwrap();
    let id = session.session_id.as_str();
    manager
        .exec(id, "N=0", ExecOptions::default())
        .await
        .unwrap();
    let execs = (0..20).map(|i| {
        let manager = &manager;
        async move {
            let command = format!(
                "echo start {i} >> trace; N=$((N+1)); for j in $(seq 200); do echo \"{i}-$j\"; done; echo end {i} >> trace"
            );
            (i, manager.exec(id, &command, ExecOptions::default()).await.unwrap())
        }
    });
    let outcomes = tokio::time::timeout(Duration::from_secs(60), futures_join_all(execs))
        .await
        .unwrap();
    for (i, outcome) in outcomes {
        let expected: String = (1..=200).map(|j| format!("{i}-{j}\n")).collect();
        assert_eq!(outcome.stdout, expected, "exec {i}");
        assert_eq!(outcome.exit_code, 0);
    }
    let trace = std::fs::read_to_string(tmp.path().join("trace")).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    assert_eq!(lines.len(), 40);
    for pair in lines.chunks(2) {
        let started = pair[0].strip_prefix("start ").unwrap();
        assert_eq!(pair[1], format!("end {started}"), "interleaved: {trace}");
    }
    let count = manager
        .exec(id, "echo $N", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(count.stdout, "20\n");
    manager.end(id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_in_parallel_with_each_its_own_state() {
    let tmp = tempfile::tempdir().unwrap();
    let manager = SessionManager::new(ShellConfig::new(tmp.path().join(".sessions"))).unwrap();
    let ids: Vec<String> = (0..20)
        .map(|_| {
            manager
                .start_session(&start_options(tmp.path()))
                .unwrap()
                .session_id
        })
        .collect();
    let started = Instant::now();
    let execs = ids.iter().enumerate().map(|(i, id)| {
        let manager = &manager;
        async move {
            manager
                .exec(id, &format!("sleep 1; MINE={i}"), ExecOptions::default())
                .await
                .unwrap();
            manager
                .exec(id, "echo $MINE", ExecOptions::default())
                .await
                .unwrap()
        }
    });
    let outcomes = tokio::time::timeout(Duration::from_secs(60), futures_join_all(execs))
        .await
        .unwrap();
    // Serialised, twenty one-second sleeps would take 20 s.
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
    for (i, outcome) in outcomes.iter().enumerate() {
        assert_eq!(outcome.stdout, format!("{i}\n"));
    }
    for id in &ids {
        manager.end(id).await.unwrap();
    }
    assert_eq!(manager.cleanup().unwrap().cleaned.len(), 20);
}

/// Joins futures concurrently without an extra dependency.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for future in futures {
        set.push(Box::pin(future));
    }
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, future) in outputs.iter_mut().zip(set.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *slot = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

#[tokio::test]
async fn unknown_and_ended_sessions_are_typed_errors() {
    use delta_actors::session::SessionError;
    let tmp = tempfile::tempdir().unwrap();
    let manager = SessionManager::new(ShellConfig::new(tmp.path().join(".sessions"))).unwrap();
    let err = manager
        .exec("sess_00ff00ff", "true", ExecOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::NotFound { .. }), "{err}");
    let id = manager
        .start_session(&start_options(tmp.path()))
        .unwrap()
        .session_id;
    manager.end(&id).await.unwrap();
    let err = manager
        .exec(&id, "true", ExecOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Terminated { .. }), "{err}");
    assert_eq!(manager.list().unwrap().len(), 1);
}
