//! Unit tests of `run_hook`: env, stdin, record, statuses and reasons, redaction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::workspace::create_run_dir;

struct Fixture {
    _work: tempfile::TempDir,
    ctx: HookContext,
}

fn fixture() -> Fixture {
    let work = tempfile::tempdir().unwrap();
    let paths = create_run_dir(work.path(), "r1").unwrap();
    let env = vec![
        (
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        ),
        (
            "RUN_DIR".to_string(),
            "stale-value-from-the-user".to_string(),
        ),
    ];
    let ctx = HookContext::new(
        paths,
        "r1",
        Path::new("/agent/home"),
        work.path(),
        Arc::new(env),
    );
    Fixture { _work: work, ctx }
}

fn spec(script: &str, timeout_ms: Option<u64>) -> HookSpec {
    HookSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        timeout_ms,
    }
}

fn record(ctx: &HookContext, outcome: &HookOutcome) -> Value {
    let text = std::fs::read_to_string(ctx.paths.run_dir.join(&outcome.io_path_ref)).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn env_stdin_and_record() {
    let mut f = fixture();
    f.ctx.iteration = 3;
    f.ctx.tool_name = Some("ls".into());
    f.ctx.tool_result = Some("=== STDOUT ===\nfile.txt".into());
    let script = "printf '%s|%s|%s|%s|%s|%s|' \"$RUN_DIR\" \"$JOURNAL_PATH\" \"$ITERATION_COUNT\" \"$DELTA_RUN_ID\" \"$DELTA_HOOK\" \"$TOOL_NAME\"; cat \"$TOOL_RESULT\"; printf '|'; cat; pwd >&2";
    let payload = json!({"tool_name": "ls"});
    let outcome = run_hook(
        HookName::PostToolExecution,
        &spec(script, None),
        &payload,
        &f.ctx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(outcome.status, HookStatus::Success, "{outcome:?}");
    assert_eq!(outcome.reason, None);
    let parts: Vec<&str> = outcome.stdout.split('|').collect();
    assert_eq!(parts[0], f.ctx.paths.run_dir.to_string_lossy());
    assert_eq!(parts[1], f.ctx.paths.journal.to_string_lossy());
    assert_eq!(&parts[2..6], ["3", "r1", "post_tool_execution", "ls"]);
    assert_eq!(parts[6], "=== STDOUT ===\nfile.txt");
    assert_eq!(parts[7], payload.to_string());
    assert_eq!(
        std::fs::canonicalize(outcome.stderr.trim()).unwrap(),
        std::fs::canonicalize(&f.ctx.work_dir).unwrap(),
        "cwd is the workspace"
    );
    assert!(outcome
        .io_path_ref
        .starts_with("io/hooks/post_tool_execution_"));
    let rec = record(&f.ctx, &outcome);
    assert_eq!(rec["status"], "SUCCESS");
    assert_eq!(rec["exit_code"], 0);
    assert_eq!(rec["timeout_ms"], 30_000);
    assert_eq!(rec["command"][0], "sh");
    assert!(rec["stdout"]
        .as_str()
        .unwrap()
        .contains("post_tool_execution"));
    assert!(rec["duration_ms"].is_u64());
}

#[tokio::test]
async fn path_variables_are_expanded_in_argv() {
    let f = fixture();
    let hook = HookSpec {
        command: vec!["echo".into(), "${AGENT_HOME}/x".into(), "${CWD}".into()],
        timeout_ms: None,
    };
    let outcome = run_hook(
        HookName::OnRunEnd,
        &hook,
        &Value::Null,
        &f.ctx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(
        outcome.stdout.trim(),
        format!("/agent/home/x {}", f.ctx.work_dir.display())
    );
}

#[tokio::test]
async fn failure_reason_names_exit_code_and_first_stderr_line() {
    let f = fixture();
    let outcome = run_hook(
        HookName::OnError,
        &spec(
            "echo '' >&2; echo 'disk is full' >&2; echo more >&2; exit 3",
            None,
        ),
        &json!({}),
        &f.ctx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(outcome.status, HookStatus::Failed);
    assert_eq!(
        outcome.reason.as_deref(),
        Some("exited with code 3: disk is full")
    );
    assert_eq!(record(&f.ctx, &outcome)["status"], "FAILED");
}

#[tokio::test]
async fn missing_program_is_a_spawn_failure_with_reason() {
    let f = fixture();
    let hook = HookSpec {
        command: vec!["/no/such/hook-program".into()],
        timeout_ms: None,
    };
    let outcome = run_hook(
        HookName::OnError,
        &hook,
        &json!({}),
        &f.ctx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(outcome.status, HookStatus::Failed);
    let reason = outcome.reason.unwrap();
    assert!(
        reason.starts_with("could not start `/no/such/hook-program`"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_hanging_hook_times_out_and_its_group_is_killed() {
    let f = fixture();
    let script = "sleep 30 & sleep 30";
    let started = std::time::Instant::now();
    let outcome = run_hook(
        HookName::OnIterationStart,
        &spec(script, Some(200)),
        &json!({}),
        &f.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(outcome.status, HookStatus::TimedOut);
    assert!(outcome
        .reason
        .as_deref()
        .unwrap()
        .contains("timed out after 200 ms"));
    assert_eq!(record(&f.ctx, &outcome)["status"], "TIMED_OUT");
}

#[tokio::test]
async fn max_timeout_caps_the_spec() {
    let mut f = fixture();
    f.ctx.max_timeout = Some(Duration::from_millis(100));
    let outcome = run_hook(
        HookName::OnRunEnd,
        &spec("sleep 30", Some(60_000)),
        &json!({}),
        &f.ctx,
        CancellationToken::new(),
    )
    .await;
    assert_eq!(outcome.status, HookStatus::TimedOut);
    assert!(outcome.reason.unwrap().contains("after 100 ms"));
}

#[tokio::test]
async fn cancellation_kills_and_an_already_cancelled_run_skips() {
    let f = fixture();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let hook = spec("touch started; sleep 30", None);
    let payload = json!({});
    let marker = f.ctx.work_dir.join("started");
    let running = run_hook(HookName::PreToolExecution, &hook, &payload, &f.ctx, cancel);
    // Cancel once the hook is really running (bounded wait for its marker file).
    let (outcome, ()) = tokio::join!(running, async move {
        for _ in 0..2000 {
            if marker.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        trigger.cancel();
    });
    assert_eq!(outcome.status, HookStatus::Cancelled, "{outcome:?}");

    let done = CancellationToken::new();
    done.cancel();
    let outcome = run_hook(HookName::PreToolExecution, &hook, &json!({}), &f.ctx, done).await;
    assert_eq!(outcome.status, HookStatus::Skipped);
    assert!(outcome.reason.unwrap().contains("already stopping"));
}

#[tokio::test]
async fn sensitive_values_never_reach_the_record() {
    let mut f = fixture();
    f.ctx.secrets = SecretSet::new([("call_1", "hunter2")]);
    f.ctx.tool_result = Some("result: hunter2".to_string());
    f.ctx.error_message = Some("failed with hunter2".to_string());
    let outcome = run_hook(
        HookName::PreLlmRequest,
        &spec(
            "cat; printf '%s%s' hun ter2 >&2; cat \"$TOOL_RESULT\"; echo \"$ERROR_MESSAGE\"",
            None,
        ),
        &json!({"messages": [{"role": "tool", "content": "hunter2"}]}),
        &f.ctx,
        CancellationToken::new(),
    )
    .await;
    assert!(
        outcome.stdout.contains("\"content\":\"hunter2\""),
        "the hook itself sees it on stdin: {}",
        outcome.stdout
    );
    assert!(
        outcome.stdout.contains("failed with hunter2"),
        "and in its environment"
    );
    assert!(
        outcome.stdout.contains("result: [REDACTED"),
        "the TOOL_RESULT file under the run folder is redacted"
    );
    let text = std::fs::read_to_string(f.ctx.paths.run_dir.join(&outcome.io_path_ref)).unwrap();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains(&crate::redact::marker("call_1")));
}
