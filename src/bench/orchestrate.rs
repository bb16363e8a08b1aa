//! `delta bench orchestrate`: the path a user runs, measured from outside. It writes a plan
//! of one `foreach` stage (N runs of the bench agent, K model calls each), starts `delta
//! mock-llm` as a child on 127.0.0.1, runs `delta orchestrate plan.yaml` as another child
//! against it over HTTP (the user's defaults: text summary, live reply file, journal fsync
//! on), and reports the orchestrate process's own CPU per model call. Its tools run in the
//! tool spawner, a child of its own, whose CPU is reported apart.
//!
//! The orchestrate process is left a zombie (`waitid(WNOWAIT)`) so that its own CPU
//! (`/proc/PID/stat` utime + stime, every thread) can be read apart from its reaped
//! children's before it is reaped: `wait4` and `/usr/bin/time` add the two together.
//!
//! Must not drive the engine in this process nor change what `delta orchestrate` does: it
//! only writes files, starts the two commands, and reads what they leave.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use serde::{Deserialize, Serialize};

use super::workload::{agent_yaml, script_yaml, LatencySpec, CONTEXT_YAML};
use super::{BenchFormat, OnOff};
use crate::error::CliError;

/// How long `delta mock-llm` may take to print its address.
const MOCK_START_LIMIT: Duration = Duration::from_secs(30);
/// How long one `delta orchestrate` may take before the bench gives up on it.
const ORCHESTRATE_LIMIT: Duration = Duration::from_secs(3600);

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  delta bench orchestrate --runs 1000 --max-parallel 1000 --calls 6 --latency-ms 200 --repeat 3
  delta bench orchestrate --runs 200 --max-parallel 200 --calls 6 --latency-ms 200 --http2 on
  delta bench orchestrate --runs 1000 --max-parallel 1000 --calls 6 --format json --out o.json

Each repeat writes a plan of one foreach stage in a new workspace under --work-dir, starts
`delta mock-llm` (the delta beside this program) on 127.0.0.1 and runs `delta orchestrate` against it as
a user would (DELTA_BASE_URL, text summary, live reply file, journal fsync on). The figure
is the orchestrate process's own CPU (user + sys, all threads) per model call; the tool
spawner and the tools it started are reported apart, as children.")]
pub struct OrchestrateBenchArgs {
    /// Runs of the plan's one stage.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub runs: u64,
    /// Runs in flight at once (`delta orchestrate --max-parallel`, 1-10000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub max_parallel: u64,
    /// Model calls per run (the last one is the final answer; the others each call the tool).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub calls: u32,
    /// The command each tool call runs (split like a shell word list, no shell).
    #[arg(long, default_value = "true")]
    pub tool: String,
    /// Model latency per call in milliseconds: `200` or `200±50` (also `200+-50`).
    #[arg(long, default_value = "0", value_parser = LatencySpec::parse)]
    pub latency_ms: LatencySpec,
    /// `on`: DELTA_LLM_HTTP2=1 (HTTP/2 without asking); `off`: DELTA_LLM_HTTP2=0 (HTTP/1.1
    /// only); unset: the user's default, auto (delta asks the http:// endpoint once whether
    /// it speaks HTTP/2, and the mock does).
    #[arg(long, value_enum)]
    pub http2: Option<OnOff>,
    /// Measure this many times, each in a new workspace (the report gives the range).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// Where plans, workspaces and logs go (default: a new temporary directory, removed
    /// after unless --keep).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Keep the work directory.
    #[arg(long)]
    pub keep: bool,
    /// What stdout carries.
    #[arg(long, value_enum, default_value_t = BenchFormat::Text)]
    pub format: BenchFormat,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE.json")]
    pub out: Option<PathBuf>,
}

/// The `delta bench orchestrate --format json` report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrchestrateReport {
    pub runs: u64,
    pub max_parallel: u64,
    pub calls_per_run: u32,
    pub latency_ms: u64,
    pub http2: Option<bool>,
    pub build: String,
    pub repeats: Vec<OrchestrateSample>,
    /// Lowest and highest `cpu_ms_per_call` of the repeats.
    pub cpu_ms_per_call_min: f64,
    pub cpu_ms_per_call_max: f64,
    /// The middle `cpu_ms_per_call` of the repeats (the mean of the two middle ones for an
    /// even count): the figure to compare with a target, as one noisy repeat moves it least.
    pub cpu_ms_per_call_median: f64,
}

/// One `delta orchestrate` as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrchestrateSample {
    pub exit_code: Option<i32>,
    pub wall_s: f64,
    /// The orchestrate process's own CPU, every thread, in seconds.
    pub user_s: f64,
    pub sys_s: f64,
    /// Its reaped children's (the tool spawner and the tools it started).
    pub children_user_s: f64,
    pub children_sys_s: f64,
    pub peak_rss_bytes: u64,
    /// Chat completions the mock model answered.
    pub model_calls: u64,
    /// TCP connections the mock model accepted, and requests that came over HTTP/2.
    pub connections: u64,
    pub http2_requests: u64,
    /// (user_s + sys_s) / model_calls, in milliseconds.
    pub cpu_ms_per_call: f64,
}

pub fn run(args: &OrchestrateBenchArgs) -> Result<i32, CliError> {
    // `delta mock-llm` and `delta orchestrate` are the product's: the delta beside this program.
    let exe = super::delta_exe()?;
    let (root, temporary) = match &args.work_dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!(
                "delta-bench-orchestrate-{}",
                uuid::Uuid::new_v4().simple()
            )),
            true,
        ),
    };
    write_files(&root, args)?;
    let mock = MockModel::start(&exe, &root)?;
    let mut repeats = Vec::new();
    let mut failure = None;
    for index in 0..args.repeat {
        match measure_once(&exe, &root, &mock, args, index) {
            Ok(sample) => repeats.push(sample),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    mock.stop();
    if temporary && !args.keep {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        #[allow(clippy::print_stderr)]
        {
            crate::notice!("bench files kept in {}", root.display());
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let per_call = repeats.iter().map(|s| s.cpu_ms_per_call);
    let report = OrchestrateReport {
        runs: args.runs,
        max_parallel: args.max_parallel,
        calls_per_run: args.calls,
        latency_ms: args.latency_ms.base_ms,
        http2: args.http2.map(|h| h == OnOff::On),
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .into(),
        cpu_ms_per_call_min: per_call.clone().fold(f64::INFINITY, f64::min),
        cpu_ms_per_call_max: per_call.clone().fold(0.0, f64::max),
        cpu_ms_per_call_median: median(per_call.collect()),
        repeats,
    };
    emit(&report, args)?;
    let all_completed = report
        .repeats
        .iter()
        .all(|s| s.exit_code == Some(0) && s.model_calls == args.runs * u64::from(args.calls));
    Ok(if all_completed { 0 } else { 1 })
}

fn io_error(path: &Path, e: std::io::Error) -> CliError {
    CliError::Config(format!(
        "cannot prepare the bench directory {}: {e} (hint: choose another --work-dir)",
        path.display()
    ))
}

/// The agent, the mock model's script and the items the plan's stage runs over.
fn write_files(root: &Path, args: &OrchestrateBenchArgs) -> Result<(), CliError> {
    let agent_dir = root.join("agent");
    std::fs::create_dir_all(&agent_dir).map_err(|e| io_error(&agent_dir, e))?;
    let write =
        |path: PathBuf, text: &str| std::fs::write(&path, text).map_err(|e| io_error(&path, e));
    write(
        agent_dir.join("agent.yaml"),
        &agent_yaml("delta-scripted", &args.tool, args.calls)?,
    )?;
    write(
        agent_dir.join("system_prompt.md"),
        "You are the delta orchestrate-benchmark agent.\n",
    )?;
    write(agent_dir.join("context.yaml"), CONTEXT_YAML)?;
    write(
        root.join("script.yaml"),
        &script_yaml(args.calls, args.latency_ms),
    )?;
    let items: String = (0..args.runs).map(|i| format!("item {i}\n")).collect();
    write(root.join("items.txt"), &items)?;
    Ok(())
}

/// The plan of repeat `index`: its own workspace, so no repeat deletes files the next one
/// would pay for (BENCHMARKS.md, "Filesystem").
fn plan_yaml(root: &Path, args: &OrchestrateBenchArgs, index: u32) -> Result<String, CliError> {
    let workspace = root.join(format!("ws{index}"));
    let doc = serde_json::json!({
        "name": "bench-orchestrate",
        "workspace": workspace.display().to_string(),
        "max_parallel": args.max_parallel,
        "stages": [{
            "id": "work",
            "agent": "./agent",
            "foreach": { "lines": "items.txt" },
            "message": "bench task {{ index }}",
        }],
    });
    serde_yaml::to_string(&doc)
        .map_err(|e| CliError::Runtime(format!("cannot write the bench plan.yaml: {e}")))
}

fn measure_once(
    exe: &Path,
    root: &Path,
    mock: &MockModel,
    args: &OrchestrateBenchArgs,
    index: u32,
) -> Result<OrchestrateSample, CliError> {
    let plan = root.join(format!("plan{index}.yaml"));
    std::fs::write(&plan, plan_yaml(root, args, index)?).map_err(|e| io_error(&plan, e))?;
    let log = |name: &str| {
        let path = root.join(format!("{name}{index}.log"));
        std::fs::File::create(&path).map_err(|e| io_error(&path, e))
    };
    let before = mock.stats()?;
    let mut command = Command::new(exe);
    command
        .arg("orchestrate")
        .arg(&plan)
        .current_dir(root)
        .env_remove("DELTA_LLM_SCRIPT")
        .env_remove("DELTA_MODEL")
        .env("DELTA_BASE_URL", &mock.base_url)
        // The endpoint memory (what delta learned about the mock, its HTTP version too) in
        // the bench's folder: the user's cache is not written, and the first repeat asks
        // the mock what the later ones recall, as a user's second batch would.
        .env(
            "XDG_CACHE_HOME",
            std::path::absolute(root.join("cache")).unwrap_or_else(|_| root.join("cache")),
        )
        .env("DELTA_API_KEY", "bench")
        .stdin(Stdio::null())
        .stdout(log("summary")?)
        .stderr(log("progress")?);
    match args.http2 {
        Some(OnOff::On) => command.env("DELTA_LLM_HTTP2", "1"),
        Some(OnOff::Off) => command.env("DELTA_LLM_HTTP2", "0"),
        None => command.env_remove("DELTA_LLM_HTTP2"),
    };
    let started = Instant::now();
    let child = command
        .spawn()
        .map_err(|e| CliError::Runtime(format!("cannot start {}: {e}", exe.display())))?;
    let measured = own_and_children_cpu(&child, started);
    let wall_s = started.elapsed().as_secs_f64();
    let (status, usage, own) = measured?;
    drop(child);
    let after = mock.stats()?;
    let model_calls = after.completions.saturating_sub(before.completions);
    let cpu_s = own.user_s + own.sys_s;
    Ok(OrchestrateSample {
        exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        wall_s,
        user_s: own.user_s,
        sys_s: own.sys_s,
        children_user_s: own.children_user_s,
        children_sys_s: own.children_sys_s,
        peak_rss_bytes: usage.ru_maxrss.max(0) as u64 * 1024,
        model_calls,
        connections: after.connections.saturating_sub(before.connections),
        http2_requests: after.http2_requests.saturating_sub(before.http2_requests),
        cpu_ms_per_call: cpu_s * 1000.0 / model_calls.max(1) as f64,
    })
}

/// CPU seconds of a finished process, read from its zombie's `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ProcessCpu {
    user_s: f64,
    sys_s: f64,
    children_user_s: f64,
    children_sys_s: f64,
}

impl ProcessCpu {
    /// Fields 14-17 (utime, stime, cutime, cstime, in clock ticks) of a `stat` line; the
    /// command name (field 2) may hold spaces and parentheses, so fields count from its end.
    fn parse(stat: &str, ticks_per_s: f64) -> Option<ProcessCpu> {
        let after_name = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // after_name starts at field 3 (state): field n is fields[n - 3].
        let tick = |n: usize| -> Option<f64> {
            Some(fields.get(n - 3)?.parse::<f64>().ok()? / ticks_per_s)
        };
        Some(ProcessCpu {
            user_s: tick(14)?,
            sys_s: tick(15)?,
            children_user_s: tick(16)?,
            children_sys_s: tick(17)?,
        })
    }
}

/// Waits (bounded) for `child` to exit, reads its own and its children's CPU while it is a
/// zombie, then reaps it; its wait status and rusage.
fn own_and_children_cpu(
    child: &Child,
    started: Instant,
) -> Result<(i32, libc::rusage, ProcessCpu), CliError> {
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| CliError::Runtime("child pid out of range".into()))?;
    loop {
        // SAFETY: siginfo_t is plain old data that waitid fills in; zeroed is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a live, writable local; `pid` is our own unreaped child.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(CliError::Runtime(format!(
                "cannot wait for delta orchestrate: {err}"
            )));
        }
        // SAFETY: reading the pid field of a siginfo_t that waitid filled (0 while running).
        if unsafe { info.si_pid() } == pid {
            break;
        }
        if started.elapsed() > ORCHESTRATE_LIMIT {
            // SAFETY: signalling our own child by its pid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stat_path = format!("/proc/{pid}/stat");
    // SAFETY: sysconf has no memory effects.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let own = std::fs::read_to_string(&stat_path)
        .ok()
        .and_then(|stat| ProcessCpu::parse(&stat, ticks))
        .ok_or_else(|| {
            CliError::Runtime(format!(
                "cannot read {stat_path} of the finished delta orchestrate"
            ))
        })?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data that wait4 fills in; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live, writable locals; `pid` is our exited child.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if rc == pid {
            return Ok((status, usage, own));
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(CliError::Runtime(format!(
                "cannot reap delta orchestrate: {err}"
            )));
        }
    }
}

/// `delta mock-llm` running as a child on 127.0.0.1.
struct MockModel {
    child: Child,
    base_url: String,
    addr: String,
}

/// The counters of the mock's `GET /v1/stats` that the bench reads.
#[derive(Debug, Default, Deserialize)]
struct MockStats {
    completions: u64,
    connections: u64,
    http2_requests: u64,
}

impl MockModel {
    fn start(exe: &Path, root: &Path) -> Result<MockModel, CliError> {
        let stderr = std::fs::File::create(root.join("mock-llm.log"))
            .map_err(|e| io_error(&root.join("mock-llm.log"), e))?;
        let mut child = Command::new(exe)
            .arg("mock-llm")
            .arg("--script")
            .arg(root.join("script.yaml"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| CliError::Runtime(format!("cannot start delta mock-llm: {e}")))?;
        let first_line = child.stdout.take().map(|stdout| {
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(stdout).read_line(&mut line);
                let _ = sender.send(line);
            });
            receiver.recv_timeout(MOCK_START_LIMIT)
        });
        let mut mock = MockModel {
            child,
            base_url: String::new(),
            addr: String::new(),
        };
        let line = match first_line {
            Some(Ok(line)) if line.starts_with("http://") => line.trim().to_string(),
            _ => {
                mock.stop();
                return Err(CliError::Runtime(format!(
                    "delta mock-llm printed no address within {}s; see {}",
                    MOCK_START_LIMIT.as_secs(),
                    root.join("mock-llm.log").display()
                )));
            }
        };
        mock.addr = line
            .trim_start_matches("http://")
            .trim_end_matches("/v1")
            .to_string();
        mock.base_url = line;
        Ok(mock)
    }

    /// `GET /v1/stats` over a plain HTTP/1.1 connection.
    fn stats(&self) -> Result<MockStats, CliError> {
        let failed =
            |e: String| CliError::Runtime(format!("cannot read the mock model's stats: {e}"));
        let mut stream =
            std::net::TcpStream::connect(&self.addr).map_err(|e| failed(e.to_string()))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| failed(e.to_string()))?;
        write!(
            stream,
            "GET /v1/stats HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .map_err(|e| failed(e.to_string()))?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .map_err(|e| failed(e.to_string()))?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body)
            .ok_or_else(|| failed("no body".into()))?;
        serde_json::from_str(body).map_err(|e| failed(e.to_string()))
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn emit(report: &OrchestrateReport, args: &OrchestrateBenchArgs) -> Result<(), CliError> {
    super::report::write_out(report, args.out.as_deref())?;
    match args.format {
        BenchFormat::Json => crate::output::emit_json(report),
        BenchFormat::Text => crate::output::emit(&render_text(report)),
    }
    Ok(())
}

fn render_text(report: &OrchestrateReport) -> String {
    let mut text = format!(
        "delta orchestrate against delta mock-llm over HTTP ({} build): {} runs @ {}, {} calls, {} ms latency, http2 {}\n",
        report.build,
        report.runs,
        report.max_parallel,
        report.calls_per_run,
        report.latency_ms,
        match report.http2 {
            Some(true) => "on",
            Some(false) => "off",
            None => "auto",
        }
    );
    for (i, s) in report.repeats.iter().enumerate() {
        text.push_str(&format!(
            "  #{}: exit {}, {} model calls, wall {:.2} s, orchestrate CPU {:.3} s (user {:.3}, sys {:.3}) = {:.3} ms per call; spawner+tools {:.3} s; peak RSS {} MiB; {} connections, {} over HTTP/2\n",
            i + 1,
            s.exit_code.map_or("signal".into(), |c| c.to_string()),
            s.model_calls,
            s.wall_s,
            s.user_s + s.sys_s,
            s.user_s,
            s.sys_s,
            s.cpu_ms_per_call,
            s.children_user_s + s.children_sys_s,
            s.peak_rss_bytes / (1024 * 1024),
            s.connections,
            s.http2_requests,
        ));
    }
    text.push_str(&format!(
        "engine CPU per model call: {:.3}–{:.3} ms, median {:.3} ms of {} repeat{}\n",
        report.cpu_ms_per_call_min,
        report.cpu_ms_per_call_max,
        report.cpu_ms_per_call_median,
        report.repeats.len(),
        if report.repeats.len() == 1 { "" } else { "s" },
    ));
    text
}

/// The middle value (the mean of the two middle ones for an even count; 0 for none).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[mid],
        _ => (values[mid - 1] + values[mid]) / 2.0,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_repeat_or_the_mean_of_the_two_middle_ones() {
        assert_eq!(median(vec![0.40, 0.33, 0.36]), 0.36);
        assert!((median(vec![0.40, 0.33, 0.36, 0.34]) - 0.35).abs() < 1e-12);
        assert_eq!(median(vec![0.5]), 0.5);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn stat_fields_count_from_the_end_of_the_command_name() {
        let stat = "4242 (delta (x) y) Z 1 2 3 4 5 6 7 8 9 10 250 50 700 30 20 0 1";
        let cpu = ProcessCpu::parse(stat, 100.0).unwrap();
        assert_eq!(
            cpu,
            ProcessCpu {
                user_s: 2.5,
                sys_s: 0.5,
                children_user_s: 7.0,
                children_sys_s: 0.3
            }
        );
        assert_eq!(ProcessCpu::parse("4242 (delta) Z 1", 100.0), None);
    }
}
