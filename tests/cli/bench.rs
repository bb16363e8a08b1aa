//! `delta bench load` end to end: the JSON report validates against its documented schema
//! (the structs below: every field required, unknown fields rejected), `--out` and
//! `--plot` write their files, and impossible settings fail before any run starts.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use assert_cmd::Command;
use serde::Deserialize;

/// Schema version 2 of the `delta bench load --format json` report (see BENCHMARKS.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BenchReport {
    schema_version: String,
    machine: Machine,
    workload: Workload,
    tool_spawn_rate_per_s: f64,
    spawner_spawn_rate_per_s: f64,
    points: Vec<LoadPoint>,
    baseline: Option<Baseline>,
    comparison: Option<Comparison>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Machine {
    cpus: usize,
    cpu_model: String,
    memory_total_bytes: u64,
    os: String,
    kernel: String,
    open_files_limit: u64,
    delta_version: String,
    build: String,
    allocator: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Workload {
    runs: usize,
    max_parallel: usize,
    calls_per_run: u32,
    tool: String,
    latency_ms: u64,
    latency_jitter_ms: u64,
    journal_fsync: bool,
    endpoint: String,
    http2: bool,
    stream: bool,
    max_connections: Option<u32>,
    sweep: Vec<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Percentiles {
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cpu {
    user_s: f64,
    sys_s: f64,
    children_user_s: f64,
    children_sys_s: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LowerBound {
    latency_chain_s: f64,
    tool_spawn_s: f64,
    ideal_s: f64,
    achieved_ratio: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadPoint {
    runs: usize,
    max_parallel: usize,
    completed_runs: usize,
    failed_runs: usize,
    errors: Vec<String>,
    wall_s: f64,
    runs_per_s: f64,
    model_calls_per_s: f64,
    tool_executions_per_s: f64,
    run_latency_ms: Percentiles,
    engine_overhead_per_iteration_ms: Percentiles,
    peak_rss_bytes: u64,
    peak_rss_sampled_bytes: u64,
    peak_open_fds: u64,
    open_fds_before: u64,
    fds_per_run: f64,
    max_tool_processes: usize,
    cpu: Cpu,
    iterations: u64,
    engine_cpu_s: f64,
    engine_cpu_per_iteration_ms: f64,
    engine_sys_s: f64,
    scripted_server_cpu_s: f64,
    lower_bound: LowerBound,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Baseline {
    kind: String,
    runs: usize,
    max_parallel: usize,
    completed_runs: usize,
    failed_runs: usize,
    errors: Vec<String>,
    wall_s: f64,
    runs_per_s: f64,
    run_latency_ms: Percentiles,
    total_peak_rss_bytes: u64,
    max_process_peak_rss_bytes: u64,
    cpu_user_s: f64,
    cpu_sys_s: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Comparison {
    wall_ratio: f64,
    memory_ratio: f64,
    cpu_ratio: f64,
}

fn delta() -> Command {
    Command::cargo_bin("delta").unwrap()
}

/// `delta bench load ARGS --format json`, which must succeed; its report.
fn bench_json(args: &[&str]) -> BenchReport {
    let out = delta()
        .args(["bench", "load"])
        .args(args)
        .args(["--format", "json"])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn json_report_validates_against_the_schema() {
    let report = bench_json(&[
        "--runs",
        "20",
        "--max-parallel",
        "10",
        "--calls",
        "3",
        "--latency-ms",
        "5",
    ]);
    assert_eq!(report.schema_version, "2");
    // The engine figures are the product's only with the product's allocator.
    assert_eq!(report.machine.allocator, "mimalloc");
    assert!(report.workload.http2, "HTTP/2 by default");
    assert!(report.workload.stream, "streamed by default");
    assert!(report.spawner_spawn_rate_per_s > 0.0);
    assert_eq!(report.workload.calls_per_run, 3);
    assert_eq!(report.workload.latency_ms, 5);
    assert!(report.tool_spawn_rate_per_s > 0.0);
    assert!(report.baseline.is_none() && report.comparison.is_none());
    let [point] = report.points.as_slice() else {
        panic!("one point expected: {:?}", report.points)
    };
    assert_eq!((point.runs, point.max_parallel), (20, 10));
    assert_eq!(point.completed_runs, 20, "{:?}", point.errors);
    assert_eq!(point.failed_runs, 0);
    assert!(point.wall_s > 0.0 && point.runs_per_s > 0.0);
    // 3 model calls and 2 tool executions per run.
    assert!((point.model_calls_per_s / point.runs_per_s - 3.0).abs() < 1e-6);
    assert!((point.tool_executions_per_s / point.runs_per_s - 2.0).abs() < 1e-6);
    // Three model calls of at least 5 ms each.
    assert!(
        point.run_latency_ms.p50 >= 15.0,
        "{:?}",
        point.run_latency_ms
    );
    let l = &point.run_latency_ms;
    assert!(l.p50 <= l.p95 && l.p95 <= l.p99 && l.p99 <= l.max);
    assert!(point.peak_rss_bytes > 0 && point.peak_open_fds > 3);
    assert!(point.lower_bound.ideal_s > 0.0 && point.lower_bound.achieved_ratio > 0.0);
    assert_eq!(point.iterations, 60);
    assert!(point.engine_cpu_s > 0.0 && point.engine_cpu_s <= point.cpu.user_s + point.cpu.sys_s);
    let per_iteration = point.engine_cpu_s * 1000.0 / 60.0;
    assert!((point.engine_cpu_per_iteration_ms - per_iteration).abs() < 1e-6);
    assert!(point.engine_sys_s >= 0.0 && point.engine_sys_s <= point.engine_cpu_s);
    assert!(point.engine_sys_s <= point.cpu.sys_s);
    assert!(point.scripted_server_cpu_s >= 0.0);
    assert!(point.open_fds_before > 3 && point.peak_open_fds >= point.open_fds_before);
    assert!(point.max_tool_processes >= 16);
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn http1_with_a_connection_cap_still_completes() {
    let report = bench_json(&[
        "--runs",
        "8",
        "--max-parallel",
        "8",
        "--calls",
        "2",
        "--latency-ms",
        "20",
        "--http2",
        "off",
        "--max-connections",
        "2",
    ]);
    assert!(!report.workload.http2);
    assert_eq!(report.workload.max_connections, Some(2));
    assert_eq!(
        report.points[0].completed_runs, 8,
        "{:?}",
        report.points[0].errors
    );
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn sweep_writes_out_and_plot_and_baseline_compares() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("plots/sweep.svg");
    let json = dir.path().join("sweep.json");
    let text = delta()
        .args([
            "bench",
            "load",
            "--sweep",
            "2,4",
            "--calls",
            "2",
            "--latency-ms",
            "1",
        ])
        .arg("--plot")
        .arg(&svg)
        .arg("--out")
        .arg(&json)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("2 runs, max parallel 2") && stdout.contains("4 runs, max parallel 4"),
        "{stdout}"
    );
    let report: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.points.len(), 2);
    assert_eq!(report.workload.sweep, vec![2, 4]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.matches("<circle").count() == 4);

    let report = bench_json(&[
        "--runs",
        "3",
        "--max-parallel",
        "3",
        "--calls",
        "2",
        "--latency-ms",
        "1",
        "--baseline",
        "process-per-run",
    ]);
    let baseline = report.baseline.unwrap();
    assert_eq!(baseline.completed_runs, 3, "{:?}", baseline.errors);
    assert!(baseline.total_peak_rss_bytes >= baseline.max_process_peak_rss_bytes);
    assert!(baseline.max_process_peak_rss_bytes > 0);
    assert!(report.comparison.unwrap().memory_ratio > 0.0);
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn impossible_open_files_limit_fails_before_running() {
    let nr_open: usize = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(1 << 20);
    let too_many = (nr_open + 1000).to_string();
    let out = delta()
        .args([
            "bench",
            "load",
            "--runs",
            &too_many,
            "--max-parallel",
            &too_many,
        ])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("open-files limit") && stderr.contains("--max-parallel"),
        "{stderr}"
    );
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn usage_errors_name_the_flag() {
    let out = delta()
        .args(["bench", "load", "--runs", "2", "--plot", "x.svg"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--plot needs a sweep"));
    let out = delta()
        .args(["bench", "load", "--latency-ms", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("200±50"));
}

#[test]
#[cfg_attr(
    not(feature = "bench"),
    ignore = "needs the delta-bench program: --features bench"
)]
fn the_baseline_launcher_reports_the_childs_status_memory_and_cpu() {
    let measure = |script: &str| -> serde_json::Value {
        let out = delta()
            .args(["bench", "__measure-child", "--", "sh", "-c", script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let exited = measure("echo to-null; exit 3");
    assert_eq!(exited["exit_code"], 3, "{exited}");
    assert!(exited["signal"].is_null(), "{exited}");
    assert!(exited["peak_rss_bytes"].as_u64().unwrap() > 0, "{exited}");
    assert!(exited["user_s"].as_f64().unwrap() >= 0.0, "{exited}");
    let killed = measure("kill -9 $$");
    assert!(killed["exit_code"].is_null(), "{killed}");
    assert_eq!(killed["signal"], 9, "{killed}");

    let missing = delta()
        .args(["bench", "__measure-child", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/program"));
}

/// `delta bench` with no `delta-bench` beside it (a `delta` built without the `bench`
/// feature) exits 126 naming the missing program and how to build it, rather than running a
/// benchmark of its own or one found elsewhere.
#[test]
fn bench_without_the_bench_program_beside_delta_says_how_to_build_it() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lone = dir.path().join("delta");
    // A hard link keeps /proc/self/exe in `dir` (a symlink would resolve to target/debug).
    if std::fs::hard_link(assert_cmd::cargo::cargo_bin("delta"), &lone).is_err() {
        std::fs::copy(assert_cmd::cargo::cargo_bin("delta"), &lone).unwrap();
    }
    let out = Command::new(&lone)
        .args(["bench", "load", "--runs", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(stderr.contains("delta-bench"), "{stderr}");
    assert!(stderr.contains("--features bench"), "{stderr}");
    assert!(out.stdout.is_empty());
}
