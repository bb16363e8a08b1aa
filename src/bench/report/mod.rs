//! The bench report: its JSON schema (`schema_version` "2", every field required, documented
//! in BENCHMARKS.md and checked by tests/cli/bench.rs), the summaries computed from run
//! samples, and (in `text`) the text rendering. It must not run or time anything.

use std::time::Duration;

use delta_actors::RunResult;
use serde::{Deserialize, Serialize};

use super::measure::{self, CpuUsage, Peaks};
use super::workload::Workload;
use super::{BenchFormat, LoadArgs, OnOff};
use crate::error::CliError;

mod text;

pub use text::render_text;

pub const SCHEMA_VERSION: &str = "2";
const ERRORS_KEPT: usize = 5;

/// The whole `delta bench load` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchReport {
    pub schema_version: String,
    pub machine: Machine,
    pub workload: WorkloadInfo,
    /// Tool processes per second this machine starts and reaps: the faster of a calibration
    /// before the points and one after them.
    pub tool_spawn_rate_per_s: f64,
    /// The same through the tool spawner, as the engine starts tools (0 with
    /// `--tool-spawner off`).
    pub spawner_spawn_rate_per_s: f64,
    /// One point, or one per `--sweep` value.
    pub points: Vec<LoadPoint>,
    pub baseline: Option<BaselineResult>,
    pub comparison: Option<Comparison>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_total_bytes: u64,
    pub os: String,
    pub kernel: String,
    pub open_files_limit: u64,
    pub delta_version: String,
    /// `release` or `debug`: debug builds are several times slower.
    pub build: String,
    /// The global allocator (`mimalloc`, the product's, or `system`): glibc's malloc costs
    /// about a fifth more engine CPU. Reports made before it was recorded read as empty.
    #[serde(default)]
    pub allocator: String,
}

fn proc_field(file: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
}

impl Machine {
    pub fn detect(open_files_limit: u64) -> Machine {
        Machine {
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            cpu_model: proc_field("/proc/cpuinfo", "model name").unwrap_or_default(),
            memory_total_bytes: proc_field("/proc/meminfo", "MemTotal")
                .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|kib| kib * 1024)
                .unwrap_or(0),
            os: std::env::consts::OS.to_string(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            open_files_limit,
            delta_version: env!("CARGO_PKG_VERSION").to_string(),
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_string(),
            allocator: crate::allocator::NAME.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadInfo {
    pub runs: usize,
    pub max_parallel: usize,
    pub calls_per_run: u32,
    pub tool: String,
    pub latency_ms: u64,
    pub latency_jitter_ms: u64,
    pub journal_fsync: bool,
    /// `in-process scripted model over HTTP` or the `--endpoint` URL.
    pub endpoint: String,
    /// Model calls over HTTP/2 (`--http2`).
    pub http2: bool,
    /// Replies streamed (`--stream`); reports made before streaming existed read as false.
    #[serde(default)]
    pub stream: bool,
    pub max_connections: Option<u32>,
    pub sweep: Vec<usize>,
}

impl WorkloadInfo {
    pub fn from_args(args: &LoadArgs, workload: &Workload) -> WorkloadInfo {
        WorkloadInfo {
            runs: args.runs,
            max_parallel: args.max_parallel,
            calls_per_run: workload.calls,
            tool: args.tool.clone(),
            latency_ms: args.latency_ms.base_ms,
            latency_jitter_ms: args.latency_ms.jitter_ms,
            journal_fsync: args.journal_fsync == OnOff::On,
            endpoint: args
                .endpoint
                .clone()
                .unwrap_or_else(|| "in-process scripted model over HTTP".into()),
            http2: args.http2 == OnOff::On,
            stream: args.stream == OnOff::On,
            max_connections: args.max_connections,
            sweep: args.sweep.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(mut values: Vec<f64>) -> Percentiles {
        values.sort_by(f64::total_cmp);
        Percentiles {
            p50: measure::percentile(&values, 50.0),
            p95: measure::percentile(&values, 95.0),
            p99: measure::percentile(&values, 99.0),
            max: values.last().copied().unwrap_or(0.0),
        }
    }
}

/// The ideal time for the workload: no run can beat its chain of model latencies, and no
/// machine can start tools faster than its measured spawn rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LowerBound {
    /// waves × calls × latency, where waves = ceil(runs / max_parallel).
    pub latency_chain_s: f64,
    /// runs × (calls − 1) / tool spawn rate.
    pub tool_spawn_s: f64,
    /// The larger of the two.
    pub ideal_s: f64,
    /// Measured wall / ideal (1.0 is perfect; 0 when the ideal is 0).
    pub achieved_ratio: f64,
}

impl LowerBound {
    pub fn for_workload(
        runs: usize,
        max_parallel: usize,
        calls: u32,
        latency_ms: f64,
        spawn_rate: f64,
    ) -> LowerBound {
        let waves = runs.div_ceil(max_parallel.clamp(1, runs.max(1)));
        let latency_chain_s = waves as f64 * f64::from(calls) * latency_ms / 1000.0;
        let tools = runs as f64 * f64::from(calls.saturating_sub(1));
        let tool_spawn_s = if spawn_rate > 0.0 {
            tools / spawn_rate
        } else {
            0.0
        };
        LowerBound {
            latency_chain_s,
            tool_spawn_s,
            ideal_s: latency_chain_s.max(tool_spawn_s),
            achieved_ratio: 0.0,
        }
    }

    /// This bound with `wall_s` measured against it.
    pub fn judge(mut self, wall_s: f64) -> LowerBound {
        self.achieved_ratio = if self.ideal_s > 0.0 {
            wall_s / self.ideal_s
        } else {
            0.0
        };
        self
    }
}

/// What one finished run contributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunSample {
    pub duration_ms: u64,
    pub model_time_ms: u64,
    pub queue_time_ms: u64,
    pub tool_time_ms: u64,
    pub iterations: u32,
    pub completed: bool,
}

impl RunSample {
    pub fn from_result(result: &RunResult) -> RunSample {
        let m = &result.metrics;
        RunSample {
            duration_ms: m.duration_ms,
            model_time_ms: m.model_time_ms,
            queue_time_ms: m.queue_time_ms,
            tool_time_ms: m.tool_time_ms,
            iterations: m.iterations,
            completed: result.status == delta_actors::RunStatus::Completed,
        }
    }

    /// Wall time of the run not spent waiting for the model, its limits or tools, per
    /// iteration: what the engine itself costs.
    pub fn overhead_per_iteration_ms(&self) -> f64 {
        let waiting = self.model_time_ms + self.queue_time_ms + self.tool_time_ms;
        self.duration_ms.saturating_sub(waiting) as f64 / f64::from(self.iterations.max(1))
    }
}

/// One measured point (one `--runs`/`--max-parallel` pair).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadPoint {
    pub runs: usize,
    pub max_parallel: usize,
    pub completed_runs: usize,
    pub failed_runs: usize,
    /// The first few failure messages.
    pub errors: Vec<String>,
    pub wall_s: f64,
    pub runs_per_s: f64,
    pub model_calls_per_s: f64,
    pub tool_executions_per_s: f64,
    /// Each run's duration as the engine measured it (start to final status).
    pub run_latency_ms: Percentiles,
    /// (duration − model time − queue time − tool time) / iterations, per run.
    pub engine_overhead_per_iteration_ms: Percentiles,
    /// Lifetime high-water mark of this process (getrusage ru_maxrss).
    pub peak_rss_bytes: u64,
    /// Highest resident memory sampled during this point only.
    pub peak_rss_sampled_bytes: u64,
    pub peak_open_fds: u64,
    /// Descriptors open just before the point's first run.
    pub open_fds_before: u64,
    /// (peak descriptors − those before) / runs driven at once.
    pub fds_per_run: f64,
    /// Tool processes allowed to hold their pipes at once (the engine's descriptor budget).
    pub max_tool_processes: usize,
    pub cpu: CpuUsage,
    /// Model calls made (each one iteration).
    pub iterations: u64,
    /// This process's CPU seconds less the scripted model's thread and the sampler's: the
    /// engine alone (tools and the tool spawner are other processes, in `cpu.children_*`).
    pub engine_cpu_s: f64,
    /// `engine_cpu_s` / iterations, in milliseconds.
    pub engine_cpu_per_iteration_ms: f64,
    /// The part of `engine_cpu_s` spent in the kernel (system calls: file creation, pipes,
    /// sockets; page faults). Absent from reports written before it was measured.
    #[serde(default)]
    pub engine_sys_s: f64,
    /// CPU seconds of the in-process scripted model's thread (0 with --endpoint).
    pub scripted_server_cpu_s: f64,
    pub lower_bound: LowerBound,
}

/// CPU seconds of the bench's own threads, kept out of the engine's figure.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ApartCpu {
    pub sampler_s: f64,
    pub server_s: f64,
    /// The system part of the two.
    pub sys_s: f64,
}

impl std::ops::Sub for ApartCpu {
    type Output = ApartCpu;
    fn sub(self, earlier: ApartCpu) -> ApartCpu {
        ApartCpu {
            sampler_s: self.sampler_s - earlier.sampler_s,
            server_s: self.server_s - earlier.server_s,
            sys_s: self.sys_s - earlier.sys_s,
        }
    }
}

impl LoadPoint {
    /// The share of `cpus` CPUs' time over the wall that this process and its children used
    /// (engine, scripted model, spawner, tools), in percent: near 100, the point is bound by
    /// the CPU and no longer by waiting.
    pub fn cpu_busy_percent(&self, cpus: usize) -> f64 {
        let c = &self.cpu;
        let used = c.user_s + c.sys_s + c.children_user_s + c.children_sys_s;
        let available = self.wall_s * cpus.max(1) as f64;
        if available > 0.0 {
            100.0 * used / available
        } else {
            0.0
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn summarise(
        runs: usize,
        max_parallel: usize,
        calls: u32,
        wall: Duration,
        samples: &[RunSample],
        failures: Vec<String>,
        cpu: CpuUsage,
        peaks: Peaks,
        lower_bound: LowerBound,
    ) -> LoadPoint {
        let wall_s = super::secs(wall);
        let lower_bound = lower_bound.judge(wall_s);
        let model_calls: u64 = samples.iter().map(|s| u64::from(s.iterations)).sum();
        let tool_executions: u64 = samples
            .iter()
            .map(|s| u64::from(s.iterations.min(calls).saturating_sub(1)))
            .sum();
        let completed_runs = samples.iter().filter(|s| s.completed).count();
        LoadPoint {
            runs,
            max_parallel,
            completed_runs,
            failed_runs: runs.saturating_sub(completed_runs),
            errors: failures.into_iter().take(ERRORS_KEPT).collect(),
            wall_s,
            runs_per_s: samples.len() as f64 / wall_s,
            model_calls_per_s: model_calls as f64 / wall_s,
            tool_executions_per_s: tool_executions as f64 / wall_s,
            run_latency_ms: Percentiles::of(samples.iter().map(|s| s.duration_ms as f64).collect()),
            engine_overhead_per_iteration_ms: Percentiles::of(
                samples
                    .iter()
                    .map(RunSample::overhead_per_iteration_ms)
                    .collect(),
            ),
            peak_rss_bytes: measure::max_rss_bytes(),
            peak_rss_sampled_bytes: peaks.rss_bytes,
            peak_open_fds: peaks.open_fds,
            open_fds_before: 0,
            fds_per_run: 0.0,
            max_tool_processes: delta_actors::tool::process::max_tool_processes(),
            cpu,
            iterations: model_calls,
            engine_cpu_s: cpu.user_s + cpu.sys_s,
            engine_cpu_per_iteration_ms: (cpu.user_s + cpu.sys_s) * 1000.0
                / model_calls.max(1) as f64,
            engine_sys_s: cpu.sys_s,
            scripted_server_cpu_s: 0.0,
            lower_bound,
        }
    }

    /// Measures the point against the bound at `spawn_rate` (the machine's rate, calibrated
    /// again after the points: see `measure_all`).
    pub fn judge_at_spawn_rate(&mut self, calls: u32, latency_ms: f64, spawn_rate: f64) {
        self.lower_bound =
            LowerBound::for_workload(self.runs, self.max_parallel, calls, latency_ms, spawn_rate)
                .judge(self.wall_s);
    }

    /// Takes the bench's own threads out of the CPU figure and relates descriptors to runs.
    pub fn add_engine_figures(
        &mut self,
        apart: ApartCpu,
        in_process_server: bool,
        fds_before: u64,
    ) {
        let process_s = self.cpu.user_s + self.cpu.sys_s;
        self.engine_cpu_s = (process_s - apart.sampler_s - apart.server_s).max(0.0);
        self.engine_sys_s = (self.cpu.sys_s - apart.sys_s).clamp(0.0, self.engine_cpu_s);
        self.engine_cpu_per_iteration_ms =
            self.engine_cpu_s * 1000.0 / self.iterations.max(1) as f64;
        self.scripted_server_cpu_s = if in_process_server {
            apart.server_s
        } else {
            0.0
        };
        self.open_fds_before = fds_before;
        let concurrent = self.max_parallel.min(self.runs).max(1);
        self.fds_per_run = self.peak_open_fds.saturating_sub(fds_before) as f64 / concurrent as f64;
    }
}

/// The same workload as one `delta run` process per run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineResult {
    pub kind: String,
    pub runs: usize,
    pub max_parallel: usize,
    pub completed_runs: usize,
    pub failed_runs: usize,
    pub errors: Vec<String>,
    pub wall_s: f64,
    pub runs_per_s: f64,
    /// Each process's wall time, spawn to exit.
    pub run_latency_ms: Percentiles,
    /// Sum over processes of each one's peak RSS (wait4 rusage): the memory the fleet needs.
    pub total_peak_rss_bytes: u64,
    pub max_process_peak_rss_bytes: u64,
    /// CPU seconds of the processes (and their tools).
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
}

/// Baseline divided by engine: how many times better one process with actors does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    pub wall_ratio: f64,
    pub memory_ratio: f64,
    pub cpu_ratio: f64,
}

impl Comparison {
    pub fn new(engine: &LoadPoint, baseline: &BaselineResult) -> Comparison {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let engine_cpu = engine.cpu.user_s
            + engine.cpu.sys_s
            + engine.cpu.children_user_s
            + engine.cpu.children_sys_s;
        Comparison {
            wall_ratio: ratio(baseline.wall_s, engine.wall_s),
            memory_ratio: ratio(
                baseline.total_peak_rss_bytes as f64,
                engine.peak_rss_bytes as f64,
            ),
            cpu_ratio: ratio(baseline.cpu_user_s + baseline.cpu_sys_s, engine_cpu),
        }
    }
}

/// Writes `report` as pretty JSON to `--out`, when given (every bench's reports).
pub(crate) fn write_out<T: serde::Serialize>(
    report: &T,
    out: Option<&std::path::Path>,
) -> Result<(), CliError> {
    if let Some(path) = out {
        let text = serde_json::to_string_pretty(report)
            .map_err(|e| CliError::Runtime(format!("cannot serialize the report: {e}")))?;
        std::fs::write(path, text + "\n").map_err(|e| {
            CliError::Runtime(format!("cannot write --out {}: {e}", path.display()))
        })?;
    }
    Ok(())
}

/// Prints the report in the chosen format and writes `--out`.
pub fn emit(report: &BenchReport, args: &LoadArgs) -> Result<(), CliError> {
    write_out(report, args.out.as_deref())?;
    match args.format {
        BenchFormat::Json => crate::output::emit_json(report),
        BenchFormat::Text => crate::output::emit(&render_text(report)),
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn sample(duration: u64, model: u64, tool: u64) -> RunSample {
        RunSample {
            duration_ms: duration,
            model_time_ms: model,
            queue_time_ms: 0,
            tool_time_ms: tool,
            iterations: 6,
            completed: true,
        }
    }

    #[test]
    fn overhead_is_the_unexplained_time_per_iteration() {
        assert_eq!(sample(1212, 1200, 6).overhead_per_iteration_ms(), 1.0);
        assert_eq!(sample(10, 20, 0).overhead_per_iteration_ms(), 0.0);
    }

    #[test]
    fn lower_bound_takes_the_larger_limit() {
        let b = LowerBound::for_workload(1000, 1000, 6, 200.0, 2500.0);
        assert!((b.latency_chain_s - 1.2).abs() < 1e-9);
        assert!((b.tool_spawn_s - 2.0).abs() < 1e-9);
        assert_eq!(b.ideal_s, b.tool_spawn_s);
        let waves = LowerBound::for_workload(100, 10, 2, 100.0, 1e9);
        assert!((waves.latency_chain_s - 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_point_judged_at_a_faster_spawn_rate_has_a_shorter_ideal() {
        let samples = vec![sample(1300, 1200, 50); 10];
        // 10 runs x 5 tools at 10 starts/s: 5 s of tool spawning, above the 1.2 s chain.
        let lower = LowerBound::for_workload(10, 10, 6, 200.0, 10.0);
        let mut p = LoadPoint::summarise(
            10,
            10,
            6,
            Duration::from_secs(10),
            &samples,
            vec![],
            CpuUsage::default(),
            Peaks::default(),
            lower,
        );
        assert!((p.lower_bound.achieved_ratio - 2.0).abs() < 1e-9);
        p.judge_at_spawn_rate(6, 200.0, 25.0);
        assert!((p.lower_bound.tool_spawn_s - 2.0).abs() < 1e-9);
        assert!((p.lower_bound.ideal_s - 2.0).abs() < 1e-9);
        assert!((p.lower_bound.achieved_ratio - 5.0).abs() < 1e-9);
    }

    #[test]
    fn summary_counts_rates_and_ratio() {
        let samples = vec![sample(1300, 1200, 50); 10];
        let lower = LowerBound::for_workload(10, 10, 6, 200.0, 1e9);
        let p = LoadPoint::summarise(
            10,
            10,
            6,
            Duration::from_secs(2),
            &samples,
            vec![],
            CpuUsage::default(),
            Peaks::default(),
            lower,
        );
        assert_eq!(p.completed_runs, 10);
        assert!((p.runs_per_s - 5.0).abs() < 1e-9);
        assert!((p.model_calls_per_s - 30.0).abs() < 1e-9);
        assert!((p.tool_executions_per_s - 25.0).abs() < 1e-9);
        assert!((p.lower_bound.achieved_ratio - 2.0 / 1.2).abs() < 1e-9);
        assert!((p.engine_overhead_per_iteration_ms.p99 - 50.0 / 6.0).abs() < 1e-9);
        let mut p = p;
        p.cpu.user_s = 0.5;
        p.cpu.sys_s = 0.1;
        p.peak_open_fds = 40;
        p.add_engine_figures(
            ApartCpu {
                sampler_s: 0.05,
                server_s: 0.25,
                sys_s: 0.04,
            },
            true,
            20,
        );
        assert!((p.engine_cpu_s - 0.3).abs() < 1e-9);
        // The process's 0.1 s in the kernel, less the 0.04 s of the two threads apart.
        assert!((p.engine_sys_s - 0.06).abs() < 1e-9);
        assert!((p.engine_cpu_per_iteration_ms - 300.0 / 60.0).abs() < 1e-9);
        assert!((p.scripted_server_cpu_s - 0.25).abs() < 1e-9);
        assert!((p.fds_per_run - 2.0).abs() < 1e-9);
        p.cpu.children_user_s = 2.6;
        p.cpu.children_sys_s = 0.4;
        // 0.5 + 0.1 + 2.6 + 0.4 = 3.6 cpu-s over 2 s of wall on 2 CPUs.
        assert!((p.cpu_busy_percent(2) - 90.0).abs() < 1e-9);
        assert!((p.cpu_busy_percent(0) - 180.0).abs() < 1e-9);
        let text = render_text(&BenchReport {
            schema_version: SCHEMA_VERSION.into(),
            machine: Machine::detect(1024),
            workload: WorkloadInfo {
                runs: 10,
                max_parallel: 10,
                calls_per_run: 6,
                tool: "true".into(),
                latency_ms: 200,
                latency_jitter_ms: 0,
                journal_fsync: false,
                endpoint: "x".into(),
                http2: true,
                stream: true,
                max_connections: None,
                sweep: vec![],
            },
            tool_spawn_rate_per_s: 1.0,
            spawner_spawn_rate_per_s: 1.0,
            points: vec![p],
            baseline: None,
            comparison: None,
        });
        assert!(text.contains("10 completed, 0 failed"), "{text}");
        assert!(text.contains("engine overhead"));
        assert!(text.contains("engine CPU per iteration"), "{text}");
    }
}
