//! `delta bench orchestrate` end to end: a plan run by `delta orchestrate` against `delta
//! mock-llm` over HTTP, both child processes; the JSON report (every field required, unknown
//! fields rejected) counts the model calls the mock answered and the orchestrate process's
//! own CPU apart from its children's.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use assert_cmd::Command;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Report {
    runs: u64,
    max_parallel: u64,
    calls_per_run: u32,
    latency_ms: u64,
    http2: Option<bool>,
    build: String,
    repeats: Vec<Sample>,
    cpu_ms_per_call_min: f64,
    cpu_ms_per_call_max: f64,
    cpu_ms_per_call_median: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sample {
    exit_code: Option<i32>,
    wall_s: f64,
    user_s: f64,
    sys_s: f64,
    children_user_s: f64,
    children_sys_s: f64,
    peak_rss_bytes: u64,
    model_calls: u64,
    connections: u64,
    http2_requests: u64,
    cpu_ms_per_call: f64,
}

fn bench(args: &[&str]) -> (Report, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("delta")
        .unwrap()
        .args([
            "bench",
            "orchestrate",
            "--format",
            "json",
            "--keep",
            "--work-dir",
        ])
        .arg(dir.path().join("b"))
        .args(args)
        .env_remove("DELTA_LLM_HTTP2")
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_slice(&out.stdout).unwrap(), dir)
}

#[test]
fn every_repeat_runs_the_plan_over_http_and_counts_the_orchestrate_process_alone() {
    let (report, dir) = bench(&[
        "--runs",
        "4",
        "--max-parallel",
        "2",
        "--calls",
        "3",
        "--repeat",
        "2",
    ]);
    assert_eq!(report.repeats.len(), 2);
    assert_eq!(report.http2, None);
    for sample in &report.repeats {
        assert_eq!(sample.exit_code, Some(0), "{sample:?}");
        // Counted by the mock model: every call went over HTTP to the other process, and
        // over HTTP/2, as a user's default (auto) speaks to an endpoint that answers it.
        assert_eq!(sample.model_calls, 12, "{sample:?}");
        assert!(
            sample.connections >= 1 && sample.http2_requests == 12,
            "{sample:?}"
        );
        let own_ms = (sample.user_s + sample.sys_s) * 1000.0;
        assert!(own_ms > 0.0, "{sample:?}");
        assert!(
            (sample.cpu_ms_per_call - own_ms / 12.0).abs() < 1e-9,
            "{sample:?}"
        );
        assert!(sample.peak_rss_bytes > 0);
    }
    assert!(report.cpu_ms_per_call_min <= report.cpu_ms_per_call_median);
    assert!(report.cpu_ms_per_call_median <= report.cpu_ms_per_call_max);
    // What delta learned about the mock is kept in the bench's folder, not the user's cache.
    let memory = std::fs::read_to_string(dir.path().join("b/cache/delta/endpoints.json")).unwrap();
    assert!(memory.contains("\"http2\": true"), "{memory}");
    // Each repeat ran in a workspace of its own, through the plan it wrote.
    for index in 0..2 {
        let orchestrations = dir
            .path()
            .join(format!("b/ws{index}/.delta/orchestrations"));
        assert_eq!(std::fs::read_dir(&orchestrations).unwrap().count(), 1);
    }
}

#[test]
fn http2_on_sends_every_call_over_h2c() {
    let (report, _dir) = bench(&[
        "--runs",
        "3",
        "--max-parallel",
        "3",
        "--calls",
        "2",
        "--http2",
        "on",
    ]);
    let sample = &report.repeats[0];
    assert_eq!(report.http2, Some(true));
    assert_eq!(sample.model_calls, 6);
    assert_eq!(sample.http2_requests, 6, "{sample:?}");
}

#[test]
fn http2_off_sends_every_call_over_http1() {
    let (report, _dir) = bench(&[
        "--runs",
        "2",
        "--max-parallel",
        "2",
        "--calls",
        "2",
        "--http2",
        "off",
    ]);
    let sample = &report.repeats[0];
    assert_eq!(report.http2, Some(false));
    assert_eq!(sample.model_calls, 4);
    assert_eq!(sample.http2_requests, 0, "{sample:?}");
}

#[test]
fn a_bad_count_is_a_usage_error_naming_the_flag() {
    let out = Command::cargo_bin("delta")
        .unwrap()
        .args(["bench", "orchestrate", "--runs", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--runs"));
}
