//! Many runs in one process (issue 14), end to end: the descriptor budget of waiting runs
//! (measured by `delta bench load` from its own /proc/self/fd), and the HTTP version a run
//! speaks to its endpoint (`llm.http2`, `DELTA_LLM_HTTP2`, `llm.max_connections`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

/// Descriptors one waiting run may hold on average over HTTP/2: its journal, which is also
/// its lock (1), plus a margin for files opened and closed around it (metadata, engine.log)
/// and the few shared model connections.
const FDS_PER_WAITING_RUN_BUDGET: f64 = 1.25;

/// 2,000 runs waiting for the model at once (one model call of 3 s each, no tools) stay
/// within [`FDS_PER_WAITING_RUN_BUDGET`]. Before the run lock moved onto the journal and
/// the model calls onto HTTP/2, each waiting run held 5 (lock, journal, and both ends of
/// its own model connection... plus engine.log before that).
#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn two_thousand_waiting_runs_stay_within_the_descriptor_budget() {
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("delta")
        .unwrap()
        .args(["bench", "load", "--runs", "2000", "--max-parallel", "2000"])
        .args(["--calls", "1", "--latency-ms", "3000", "--format", "json"])
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .current_dir(dir.path())
        .timeout(Duration::from_secs(240))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let point = &report["points"][0];
    assert_eq!(point["completed_runs"], 2000, "{point}");
    let per_run = point["fds_per_run"].as_f64().unwrap();
    let peak = point["peak_open_fds"].as_u64().unwrap();
    let before = point["open_fds_before"].as_u64().unwrap();
    // The runs did overlap: the peak is far above what the process held before them.
    assert!(peak >= before + 1000, "peak {peak}, before {before}");
    assert!(
        per_run <= FDS_PER_WAITING_RUN_BUDGET,
        "{per_run:.2} descriptors per waiting run (peak {peak}, before {before})"
    );
}

fn outcome(output: std::process::Output) -> Outcome {
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn stats_http2(case: &Case) -> u64 {
    case.mock.stats()["http2_requests"].as_u64().unwrap()
}

#[test]
fn delta_llm_http2_makes_a_run_speak_http2_to_a_plain_http_endpoint() {
    let case = Case::new("h2", "", &json!({"steps": [{"answer": "fine"}]}));
    let out = case
        .cmd()
        .env("DELTA_LLM_HTTP2", "1")
        .args(case.run_args("r1", "go"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    let out = outcome(out);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "fine");
    assert_eq!(stats_http2(&case), 1);

    // DELTA_LLM_HTTP2=0: HTTP/1.1 only.
    let out = case
        .cmd()
        .env("DELTA_LLM_HTTP2", "0")
        .args(case.run_args("r2", "go"))
        .output()
        .unwrap();
    outcome(out).assert_code(0);
    assert_eq!(stats_http2(&case), 1);
}

/// The connections `run` made to the mock (each look at its stats is one more, left out).
fn connections_of(case: &Case, run: impl FnOnce()) -> u64 {
    let before = case.mock.stats()["connections"].as_u64().unwrap();
    run();
    let after = case.mock.stats()["connections"].as_u64().unwrap();
    after - before - 1
}

/// Unset, a plain http:// endpoint that speaks HTTP/2 (the mock does) is spoken to over
/// HTTP/2 by itself: the first process asks it once (one more connection) and keeps the
/// answer in the endpoint memory; the next process goes straight to HTTP/2.
#[test]
fn an_http_endpoint_gets_http2_by_itself_and_the_answer_is_remembered() {
    let case = Case::new("h2", "", &json!({"steps": [{"answer": "fine"}]}));
    let first = connections_of(&case, || {
        case.run("r1", "go", &[]).assert_code(0);
    });
    assert_eq!(stats_http2(&case), 1);
    let memory = case.path().join("home/.cache/delta/endpoints.json");
    let remembered: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&memory).unwrap()).unwrap();
    let endpoint = case.mock.base_url.trim_end_matches('/').to_owned();
    assert_eq!(
        remembered["endpoints"][&endpoint]["*"]["http2"], true,
        "{remembered}"
    );

    let second = connections_of(&case, || {
        case.run("r2", "go", &[]).assert_code(0);
    });
    assert_eq!(stats_http2(&case), 2);
    assert_eq!(second, first - 1, "no question the second time");
}

#[test]
fn llm_http2_in_agent_yaml_and_its_override() {
    let script = json!({"steps": [{"answer": "fine"}]});
    let case = Case::new("h2", "  http2: true\n  max_connections: 4\n", &script);
    case.run("r1", "go", &[]).assert_code(0);
    assert_eq!(stats_http2(&case), 1);
    let out = case
        .cmd()
        .env("DELTA_LLM_HTTP2", "off")
        .args(case.run_args("r2", "go"))
        .output()
        .unwrap();
    outcome(out).assert_code(0);
    assert_eq!(
        stats_http2(&case),
        1,
        "DELTA_LLM_HTTP2=off wins over the agent"
    );
}

#[test]
fn bad_http2_settings_are_refused_naming_the_key() {
    let case = Case::new("h2", "", &json!({"steps": [{"answer": "fine"}]}));
    let out = case
        .cmd()
        .env("DELTA_LLM_HTTP2", "maybe")
        .args(case.run_args("r1", "go"))
        .output()
        .unwrap();
    let out = outcome(out);
    out.assert_code(126);
    assert!(
        out.stderr.contains("DELTA_LLM_HTTP2='maybe'"),
        "{}",
        out.stderr
    );

    let case = Case::new("h2", "  max_connections: 100000\n", &json!({"steps": []}));
    let out = case.run("r1", "go", &[]);
    out.assert_code(126);
    assert!(out.stderr.contains("llm.max_connections"), "{}", out.stderr);
    let case = Case::new("h2", "  http2: sometimes\n", &json!({"steps": []}));
    let out = case.run("r1", "go", &[]);
    out.assert_code(126);
    assert!(out.stderr.contains("llm.http2"), "{}", out.stderr);
}
