//! `delta bench load` (the `delta-bench` program): drives the real engine (Supervisor, run and tool actors, LLM gateway,
//! journal on disk) with many concurrent runs against the scripted model served over HTTP on
//! 127.0.0.1 inside this process (or an external `--endpoint`), and reports throughput,
//! latency percentiles, engine overhead, peak memory and descriptors, optionally beside a
//! process-per-run baseline and as a concurrency sweep with an SVG plot.
//!
//! Owns the clap arguments and the orchestration of one measurement; the workload files,
//! measuring, baseline, report and plot live in submodules. It must not change engine
//! behaviour: it only configures a `SupervisorConfig` and submits ordinary `RunRequest`s.

pub mod baseline;
pub mod measure;
pub mod orchestrate;
pub mod plot;
pub mod report;
pub mod serve;
pub mod serve_batch;
pub mod serve_client;
pub mod server_thread;
pub mod spawn;
pub mod webdriver_client;
pub mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use delta_actors::llm::{Dialect, Endpoint, HttpTransport, Script};
use delta_actors::tool::process::set_max_tool_processes;
use delta_actors::tool::spawner::{share_for_process, SpawnerCommand};
use delta_actors::RunStatus;
use delta_actors::{LlmTarget, Supervisor, SupervisorConfig};

use crate::error::CliError;
use report::{ApartCpu, BenchReport, Comparison, LoadPoint, RunSample};
use server_thread::ServerThread;
use workload::{LatencySpec, Workload};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Many concurrent runs through the engine against a scripted (or external) model
    Load(LoadArgs),
    /// `delta orchestrate` against `delta mock-llm` over HTTP, both as child processes: the
    /// orchestrate process's own CPU per model call (the path a user runs)
    Orchestrate(orchestrate::OrchestrateBenchArgs),
    /// `delta serve` under load: workers printing to many WebSocket viewers, echo latency
    Serve(serve::ServeBenchArgs),
    /// `delta serve` watching a big orchestration: its page's first paint in Chromium, list
    /// request latency, memory
    ServeBatch(serve_batch::ServeBatchArgs),
    /// CPU per tool start: from a small process, from one holding many descriptors, and
    /// through the tool spawner
    Spawn(spawn::SpawnArgs),
    /// Internal to `--baseline`: runs ARGV as a child and prints its exit status, peak RSS
    /// and CPU times as one JSON line (see `baseline::measure_child`).
    #[command(name = "__measure-child", hide = true)]
    MeasureChild {
        #[arg(last = true, required = true)]
        argv: Vec<std::ffi::OsString>,
    },
}

/// `--journal-fsync on|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// `--format text|json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchFormat {
    Text,
    Json,
}

/// `--baseline process-per-run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BaselineKind {
    /// One `delta run` process per run, at most --max-parallel at a time.
    ProcessPerRun,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  delta bench load --runs 1000 --max-parallel 1000 --calls 6 --latency-ms 200
  delta bench load --runs 10000 --max-parallel 10000 --calls 6 --latency-ms 200 --work-dir NEW_DIR --keep
  delta bench load --runs 1000 --max-parallel 1000 --http2 off --max-connections 256
  delta bench load --runs 1000 --max-parallel 1000 --calls 6 --latency-ms 200 --stream off
  delta bench load --runs 50 --max-parallel 50 --calls 6 --latency-ms 200 --baseline process-per-run
  delta bench load --sweep 10,100,1000 --calls 6 --latency-ms 200 --plot docs/bench/sweep.svg
  delta bench load --runs 100 --endpoint http://127.0.0.1:8000/v1 --model my-model

Every run is a real delta run (agent, journal, metadata, tool processes) in its own work
directory under --work-dir. Each of the first calls-1 model replies calls the tool once;
the last reply is the final answer. The report gives the engine's own CPU per iteration
and the part of it in the kernel (this process less the scripted model's and the sampler's
threads; tools and the tool spawner are other processes), its descriptors per concurrent
run, and the wall against an ideal: the longer of the model latency chain and the time to
start every tool at this machine's spawn rate, calibrated before and after the points (the
faster rate is kept).")]
pub struct LoadArgs {
    /// Number of runs.
    #[arg(long, default_value_t = 100)]
    pub runs: usize,
    /// Runs driven at once (the Supervisor's max_parallel).
    #[arg(long, default_value_t = 100)]
    pub max_parallel: usize,
    /// Model calls per run (the last one is the final answer; the others each call the tool).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub calls: u32,
    /// The command each tool call runs (split like a shell word list, no shell).
    #[arg(long, default_value = "true")]
    pub tool: String,
    /// Model latency per call in milliseconds: `200` or `200±50` (also `200+-50`).
    #[arg(long, default_value = "0", value_parser = LatencySpec::parse)]
    pub latency_ms: LatencySpec,
    /// fsync journal and metadata at status changes.
    #[arg(long, value_enum, default_value_t = OnOff::Off)]
    pub journal_fsync: OnOff,
    /// Start tools through the tool spawner, as `delta run` does (`off`: from the engine
    /// process, to compare; see docs/tool-spawner.md).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub tool_spawner: OnOff,
    /// Keep each streamed reply with text in the run's io/reply.partial, as `delta
    /// orchestrate` does (`off`: as with its --no-live-reply).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub live_reply: OnOff,
    /// Talk to the model over HTTP/2 (`off`: HTTP/1.1, one connection per call in flight).
    /// The built-in scripted model speaks both; an --endpoint must speak HTTP/2 without TLS
    /// for `on` with an http:// URL (see `llm.http2` in the README).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub http2: OnOff,
    /// Stream the model's replies (SSE), as delta does by default (`off`: one JSON body per
    /// reply, as with `llm.stream: false`).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub stream: OnOff,
    /// Cap on connections (HTTP/1.1) or requests open at once to the endpoint, as
    /// `llm.max_connections` does.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_connections: Option<u32>,
    /// Where run work directories go (default: a new temporary directory).
    ///
    /// For repeatable figures give a new directory with --keep: on ext4 without a journal the
    /// kernel makes file creation slow for minutes after many deletions, so a bench that
    /// removes its files slows the next one (BENCHMARKS.md, "Filesystem").
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the work directory (a temporary one is removed otherwise).
    #[arg(long)]
    pub keep: bool,
    /// An external OpenAI-compatible base URL (including /v1) instead of the built-in
    /// scripted model; the key is read from DELTA_API_KEY.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Model name sent to the endpoint.
    #[arg(long, default_value = "delta-scripted")]
    pub model: String,
    /// Also run the workload as one `delta run` process per run and compare.
    #[arg(long, value_enum)]
    pub baseline: Option<BaselineKind>,
    /// Concurrency sweep: for each value V, V runs at --max-parallel V (overrides --runs and
    /// --max-parallel).
    #[arg(long, value_delimiter = ',', value_name = "A,B,C")]
    pub sweep: Vec<usize>,
    /// Draw throughput and p99 latency against concurrency (needs --sweep) into this SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Arbiter threads hosting run actors (default: the engine's, one per CPU).
    #[arg(long)]
    pub arbiters: Option<usize>,
    /// What stdout carries.
    #[arg(long, value_enum, default_value_t = BenchFormat::Text)]
    pub format: BenchFormat,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE.json")]
    pub out: Option<PathBuf>,
}

pub fn run(command: &BenchCommand) -> Result<i32, CliError> {
    match command {
        BenchCommand::Load(args) => load(args),
        BenchCommand::Orchestrate(args) => orchestrate::run(args),
        BenchCommand::Serve(args) => serve::run(args),
        BenchCommand::ServeBatch(args) => serve_batch::run(args),
        BenchCommand::Spawn(args) => spawn::run(args),
        BenchCommand::MeasureChild { argv } => baseline::measure_child(argv),
    }
}

fn load(args: &LoadArgs) -> Result<i32, CliError> {
    validate(args)?;
    let points_spec: Vec<(usize, usize)> = if args.sweep.is_empty() {
        vec![(args.runs, args.max_parallel)]
    } else {
        args.sweep.iter().map(|&v| (v, v)).collect()
    };
    let widest = points_spec.iter().map(|p| p.1.min(p.0)).max().unwrap_or(1);
    let fd_limit =
        measure::ensure_open_files(measure::open_files_needed(widest, connection_fds(args)))
            .map_err(CliError::Config)?;
    let workload = Workload::create(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(format!("cannot start the async runtime: {e}")))?;
    let outcome = rt.block_on(async { measure_all(args, &workload, &points_spec, fd_limit).await });
    let cleanup = workload.finish(args.keep);
    let report = outcome?;
    cleanup?;
    report::emit(&report, args)?;
    if let Some(path) = &args.plot {
        plot::write_svg(path, &report.points)?;
    }
    let failed = report.points.iter().any(|p| p.failed_runs > 0)
        || report.baseline.as_ref().is_some_and(|b| b.failed_runs > 0);
    Ok(if failed { 1 } else { 0 })
}

/// Descriptors of one waiting run's model connection in this process.
fn connection_fds(args: &LoadArgs) -> u64 {
    measure::connection_fds_per_run(args.http2 == OnOff::On, args.endpoint.is_none())
}

fn validate(args: &LoadArgs) -> Result<(), CliError> {
    if args.sweep.is_empty() && (args.runs == 0 || args.max_parallel == 0) {
        return Err(CliError::Usage(
            "--runs and --max-parallel must be at least 1".into(),
        ));
    }
    if args.sweep.contains(&0) {
        return Err(CliError::Usage(
            "--sweep values must be at least 1, e.g. --sweep 10,100,1000".into(),
        ));
    }
    if args.plot.is_some() && args.sweep.len() < 2 {
        return Err(CliError::Usage(
            "--plot needs a sweep of at least two values, e.g. --sweep 10,100,1000 --plot sweep.svg"
                .into(),
        ));
    }
    if args.baseline.is_some() && !args.sweep.is_empty() {
        return Err(CliError::Usage(
            "--baseline compares one point: use it with --runs/--max-parallel, not --sweep".into(),
        ));
    }
    if args.baseline.is_some() && args.endpoint.is_some() {
        return Err(CliError::Usage(
            "--baseline drives the built-in scripted model; drop --endpoint".into(),
        ));
    }
    Ok(())
}

async fn measure_all(
    args: &LoadArgs,
    workload: &Workload,
    points_spec: &[(usize, usize)],
    fd_limit: u64,
) -> Result<BenchReport, CliError> {
    let server = match &args.endpoint {
        Some(_) => None,
        None => Some(ServerThread::start(script_arc(&workload.script_yaml)?)?),
    };
    let endpoint = Endpoint::new(
        match (&args.endpoint, &server) {
            (Some(url), _) => url.clone(),
            (None, Some(s)) => s.base_url(),
            (None, None) => String::new(),
        },
        Some(std::env::var("DELTA_API_KEY").unwrap_or_else(|_| "bench".into())),
    )
    .with_transport(HttpTransport {
        http2: Some(args.http2 == OnOff::On),
        max_connections: args.max_connections,
    })
    .with_dialect(Dialect {
        stream: Some(args.stream == OnOff::On),
        ..Dialect::default()
    });
    // Calibration tools run in a folder of the bench's own, not wherever it was started.
    let calibration_dir = workload.calibration_dir()?;
    let spawn_rate = measure::tool_spawn_rate(&workload.tool_argv, &calibration_dir)
        .map_err(CliError::Config)?;
    let spawner = match args.tool_spawner {
        OnOff::On => Some(
            share_for_process(&spawner_command()?).map_err(|e| CliError::Runtime(e.to_string()))?,
        ),
        OnOff::Off => None,
    };
    let spawner_rate = match &spawner {
        Some(spawner) => {
            measure::spawner_spawn_rate(&workload.tool_argv, &calibration_dir, spawner.clone())
                .await
                .map_err(CliError::Config)?
        }
        None => 0.0,
    };
    let mut points = Vec::new();
    for (index, &(runs, max_parallel)) in points_spec.iter().enumerate() {
        set_max_tool_processes(measure::tools_in_flight(
            fd_limit,
            max_parallel.min(runs),
            connection_fds(args),
        ));
        let target = LlmTarget::Http(endpoint.clone());
        let point = measure_point(
            args,
            workload,
            target,
            (index, runs, max_parallel),
            spawn_rate,
            server.as_ref(),
        )
        .await?;
        points.push(point);
    }
    drop(spawner);
    // Calibrated again now, and the faster rate kept: a round taken while the machine was
    // still writing back an earlier command's files came out up to 1.5x slow (an ideal of
    // 2.27 s instead of 1.5 s at 1,000 @ 1,000), which made every ratio look better than
    // it was. The faster rate gives the shorter ideal, so this only ever makes them stricter.
    let spawn_rate = spawn_rate.max(
        measure::tool_spawn_rate(&workload.tool_argv, &calibration_dir)
            .map_err(CliError::Config)?,
    );
    for point in &mut points {
        point.judge_at_spawn_rate(args.calls, args.latency_ms.mean_ms(), spawn_rate);
    }
    let baseline = match (args.baseline, &server) {
        (Some(BaselineKind::ProcessPerRun), Some(server)) => {
            let (runs, max_parallel) = points_spec[0];
            Some(baseline::process_per_run(workload, &server.base_url(), runs, max_parallel).await?)
        }
        _ => None,
    };
    let comparison = baseline.as_ref().map(|b| Comparison::new(&points[0], b));
    if let Some(server) = server {
        server.stop();
    }
    Ok(BenchReport {
        schema_version: report::SCHEMA_VERSION.to_string(),
        machine: report::Machine::detect(fd_limit),
        workload: report::WorkloadInfo::from_args(args, workload),
        tool_spawn_rate_per_s: spawn_rate,
        spawner_spawn_rate_per_s: spawner_rate,
        points,
        baseline,
        comparison,
    })
}

/// `delta __spawner`, as the engine starts it.
fn spawner_command() -> Result<SpawnerCommand, CliError> {
    Ok(SpawnerCommand::new(
        delta_exe()?,
        [crate::spawner::SUBCOMMAND],
    ))
}

/// The `delta` program beside this one (`delta-bench` is built and installed next to it):
/// the baseline's runs, the tool spawner and the served `delta serve` are its subcommands.
pub(crate) fn delta_exe() -> Result<PathBuf, CliError> {
    let bench = std::env::current_exe()
        .map_err(|e| CliError::Runtime(format!("cannot find the delta-bench executable: {e}")))?;
    let delta = bench.with_file_name("delta");
    if delta.is_file() {
        Ok(delta)
    } else {
        Err(CliError::Config(format!(
            "{} not found: delta-bench drives the delta program installed beside it; build both \
             (`cargo build --features bench`) or install them into one folder",
            delta.display()
        )))
    }
}

/// Supervisor settings as `delta run` has them: tools find `delta-sessions` next to `delta`
/// and start from `delta __spawner`.
fn supervisor_config(arbiters: usize, max_parallel: usize) -> Result<SupervisorConfig, CliError> {
    let delta = delta_exe()?;
    Ok(SupervisorConfig {
        arbiters,
        max_parallel,
        tool_path_dir: delta.parent().map(std::path::Path::to_path_buf),
        tool_spawner: Some(SpawnerCommand::new(delta, [crate::spawner::SUBCOMMAND])),
        ..SupervisorConfig::default()
    })
}

async fn measure_point(
    args: &LoadArgs,
    workload: &Workload,
    target: LlmTarget,
    (index, runs, max_parallel): (usize, usize, usize),
    spawn_rate: f64,
    server: Option<&ServerThread>,
) -> Result<LoadPoint, CliError> {
    let requests = workload.requests(index, runs, &target)?;
    let mut config = SupervisorConfig {
        max_parallel,
        journal_fsync: args.journal_fsync == OnOff::On,
        llm_max_in_flight: runs.max(max_parallel).max(1),
        ..supervisor_config(
            args.arbiters
                .unwrap_or_else(|| SupervisorConfig::default().arbiters),
            max_parallel,
        )?
    };
    if args.tool_spawner == OnOff::Off {
        config.tool_spawner = None;
    }
    config.partial_reply_file = args.live_reply == OnOff::On;
    // Trace export as the OTEL_* variables say (docs/observability.md), to measure its cost:
    // each run is a trace of its own.
    // Non-UTF-8 variables are skipped, as `delta run` skips them.
    let env: std::collections::BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let observability = crate::observe::observe(&env, None, &mut config)?;
    let requests: Vec<_> = requests
        .into_iter()
        .map(
            |request| match observability.as_ref().and_then(|o| o.root_span()) {
                Some(root) => request.with_trace(root),
                None => request,
            },
        )
        .collect();
    let supervisor = Supervisor::start(config)?;
    let fds_before = measure::open_fds();
    let sampler = measure::Sampler::start();
    let usage_before = measure::CpuUsage::now();
    let apart_before = apart_cpu(&sampler, server);
    let started = Instant::now();
    let mut waiters = tokio::task::JoinSet::new();
    for request in requests {
        let handle = supervisor
            .submit(request)
            .await
            .map_err(|e| CliError::Runtime(format!("the engine refused a bench run: {e}")))?;
        waiters.spawn(async move { handle.wait().await });
    }
    let mut samples = Vec::with_capacity(runs);
    let mut failures: Vec<String> = Vec::new();
    while let Some(joined) = waiters.join_next().await {
        match joined {
            Ok(Ok(result)) => {
                if result.status != RunStatus::Completed {
                    failures.push(
                        result
                            .error
                            .as_ref()
                            .map(|e| format!("{}: {}", e.kind, e.message))
                            .unwrap_or_else(|| format!("{:?}", result.status)),
                    );
                }
                samples.push(RunSample::from_result(&result));
            }
            Ok(Err(e)) => failures.push(e.to_string()),
            Err(e) => failures.push(format!("waiter task failed: {e}")),
        }
    }
    let wall = started.elapsed();
    let cpu = measure::CpuUsage::now().since(&usage_before);
    let apart = apart_cpu(&sampler, server) - apart_before;
    let peaks = sampler.stop();
    supervisor.shutdown();
    if let Some(observability) = observability {
        observability.finish();
    }
    let lower = report::LowerBound::for_workload(
        runs,
        max_parallel,
        args.calls,
        args.latency_ms.mean_ms(),
        spawn_rate,
    );
    let mut point = LoadPoint::summarise(
        runs,
        max_parallel,
        args.calls,
        wall,
        &samples,
        failures,
        cpu,
        peaks,
        lower,
    );
    point.add_engine_figures(apart, server.is_some(), fds_before);
    Ok(point)
}

/// CPU seconds of this process's threads that are not the engine: the sampler's and the
/// in-process scripted model's.
fn apart_cpu(sampler: &measure::Sampler, server: Option<&ServerThread>) -> ApartCpu {
    let sampler = sampler.cpu();
    let server = server.map(ServerThread::cpu).unwrap_or_default();
    ApartCpu {
        sampler_s: sampler.total_s(),
        server_s: server.total_s(),
        sys_s: sampler.sys_s + server.sys_s,
    }
}

/// Elapsed seconds as a float, for rates.
pub(crate) fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64().max(1e-9)
}

/// The scripted model the bench serves (shared by the engine and the baseline processes).
pub(crate) fn script_arc(yaml: &str) -> Result<Arc<Script>, CliError> {
    Script::from_yaml_str(yaml, "bench-script.yaml")
        .map(Arc::new)
        .map_err(|e| CliError::Runtime(format!("the generated bench script is invalid: {e}")))
}
