//! `--baseline process-per-run`: the same workload driven the way the original engine is
//! orchestrated with shell loops, as one `delta run` process per run (at most C at a time)
//! against the same in-process scripted endpoint (DELTA_BASE_URL / DELTA_API_KEY). Memory is
//! the sum of each process's peak RSS as `wait4` reports it. It must not drive the engine in
//! this process.
//!
//! Each `delta run` is started through a small launcher (`delta-bench __measure-child`) that
//! reports the child's `wait4` figures. Started directly from this process, a child's
//! `ru_maxrss` would be at least this process's own peak: `execve` records the old memory
//! image's high-water mark, and a spawned child's old image is ours (measured: every baseline
//! process "used" exactly the bench's 20 MiB while a lone `delta run` peaks near 10 MiB). The
//! launcher's image is a few MiB, below what any `delta run` uses, so the figure is the
//! child's own.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::report::{BaselineResult, Percentiles};
use super::workload::Workload;
use crate::error::CliError;

/// What one child process reported when it was reaped.
#[derive(Debug, Clone, PartialEq)]
struct ChildOutcome {
    success: bool,
    /// The exit status or signal, and the last stderr line, when it failed.
    failure: Option<String>,
    wall_ms: f64,
    peak_rss_bytes: u64,
    user_s: f64,
    sys_s: f64,
}

struct Job {
    /// This program: `__measure-child` is its subcommand.
    launcher: PathBuf,
    /// The `delta` beside it, whose `run` is measured.
    exe: PathBuf,
    agent_dir: PathBuf,
    base_url: String,
}

/// Runs `runs` `delta run` processes, at most `max_parallel` at once, and summarises them.
pub async fn process_per_run(
    workload: &Workload,
    base_url: &str,
    runs: usize,
    max_parallel: usize,
) -> Result<BaselineResult, CliError> {
    let launcher = std::env::current_exe().map_err(|e| {
        CliError::Runtime(format!(
            "cannot find the delta-bench executable for the baseline: {e}"
        ))
    })?;
    let exe = super::delta_exe()?;
    let dirs = workload.run_dirs("baseline", runs)?;
    let job = Arc::new(Job {
        launcher,
        exe,
        agent_dir: workload.agent_dir.clone(),
        base_url: base_url.to_string(),
    });
    let started = Instant::now();
    let outcomes = tokio::task::spawn_blocking(move || run_pool(&job, dirs, max_parallel))
        .await
        .map_err(|e| CliError::Runtime(format!("the baseline pool failed: {e}")))?;
    let wall_s = super::secs(started.elapsed());
    let completed_runs = outcomes.iter().filter(|o| o.success).count();
    Ok(BaselineResult {
        kind: "process-per-run".into(),
        runs,
        max_parallel,
        completed_runs,
        failed_runs: runs - completed_runs,
        errors: outcomes
            .iter()
            .filter_map(|o| o.failure.clone())
            .take(5)
            .collect(),
        wall_s,
        runs_per_s: completed_runs as f64 / wall_s,
        run_latency_ms: Percentiles::of(outcomes.iter().map(|o| o.wall_ms).collect()),
        total_peak_rss_bytes: outcomes.iter().map(|o| o.peak_rss_bytes).sum(),
        max_process_peak_rss_bytes: outcomes.iter().map(|o| o.peak_rss_bytes).max().unwrap_or(0),
        cpu_user_s: outcomes.iter().map(|o| o.user_s).sum(),
        cpu_sys_s: outcomes.iter().map(|o| o.sys_s).sum(),
    })
}

/// `max_parallel` threads, each starting the next run's process and reaping it.
fn run_pool(job: &Arc<Job>, dirs: Vec<PathBuf>, max_parallel: usize) -> Vec<ChildOutcome> {
    let dirs = Arc::new(dirs);
    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::with_capacity(dirs.len())));
    let workers: Vec<_> = (0..max_parallel.clamp(1, dirs.len().max(1)))
        .map(|_| {
            let (job, dirs, next, outcomes) = (
                Arc::clone(job),
                Arc::clone(&dirs),
                Arc::clone(&next),
                Arc::clone(&outcomes),
            );
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(dir) = dirs.get(i) else { break };
                let outcome = run_one(&job, dir, i);
                if let Ok(mut all) = outcomes.lock() {
                    all.push(outcome);
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
    let mut guard = match outcomes.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    std::mem::take(&mut *guard)
}

fn run_one(job: &Job, dir: &Path, index: usize) -> ChildOutcome {
    let failed = |message: String| ChildOutcome {
        success: false,
        failure: Some(message),
        wall_ms: 0.0,
        peak_rss_bytes: 0,
        user_s: 0.0,
        sys_s: 0.0,
    };
    let stderr_path = dir.join("baseline.stderr");
    let stderr = match std::fs::File::create(&stderr_path) {
        Ok(f) => f,
        Err(e) => return failed(format!("cannot create {}: {e}", stderr_path.display())),
    };
    let started = Instant::now();
    let child = std::process::Command::new(&job.launcher)
        .args(["__measure-child", "--"])
        .arg(&job.exe)
        .arg("run")
        .arg("--agent")
        .arg(&job.agent_dir)
        .arg("-m")
        .arg(format!("bench task {index}"))
        .arg("-w")
        .arg(dir)
        .arg("-y")
        .args(["--format", "json", "--run-id"])
        .arg(format!("bench-{index:05}"))
        .current_dir(dir)
        .env_remove("DELTA_LLM_SCRIPT")
        .env_remove("DELTA_MODEL")
        .env("DELTA_BASE_URL", &job.base_url)
        .env("DELTA_API_KEY", "bench")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot start {}: {e}", job.launcher.display())),
    };
    let report = child.wait_with_output();
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    let report = match report {
        Ok(output) => output,
        Err(e) => return failed(format!("cannot reap the delta run launcher: {e}")),
    };
    let measured: Option<MeasuredChild> = String::from_utf8_lossy(&report.stdout)
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok());
    let Some(measured) = measured else {
        return failed(format!(
            "the launcher reported nothing (status {}); see {}",
            report.status,
            stderr_path.display()
        ));
    };
    let success = measured.exit_code == Some(0);
    let failure = (!success).then(|| {
        let last_line = std::fs::read_to_string(&stderr_path)
            .ok()
            .and_then(|s| s.lines().last().map(str::to_string))
            .unwrap_or_default();
        format!("delta run ended with {}: {last_line}", measured.describe())
    });
    ChildOutcome {
        success,
        failure,
        wall_ms,
        peak_rss_bytes: measured.peak_rss_bytes,
        user_s: measured.user_s,
        sys_s: measured.sys_s,
    }
}

/// What `delta bench __measure-child` prints about the process it ran.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct MeasuredChild {
    exit_code: Option<i32>,
    signal: Option<i32>,
    peak_rss_bytes: u64,
    user_s: f64,
    sys_s: f64,
}

impl MeasuredChild {
    fn describe(&self) -> String {
        match (self.exit_code, self.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "an unknown status".into(),
        }
    }
}

/// `delta bench __measure-child -- ARGV`: runs ARGV (stdin and stderr inherited, stdout
/// discarded), reaps it with `wait4`, prints a [`MeasuredChild`] JSON line, and exits 0 when
/// it could measure. Exit 1 (with the reason on stderr) when ARGV could not start.
pub fn measure_child(argv: &[std::ffi::OsString]) -> Result<i32, CliError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(CliError::Usage(
            "__measure-child needs a command after --".into(),
        ));
    };
    let child = std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| {
            CliError::Runtime(format!("cannot start {}: {e}", program.to_string_lossy()))
        })?;
    let (status, usage) = wait_with_rusage(child.id())
        .map_err(|e| CliError::Runtime(format!("cannot reap the measured process: {e}")))?;
    // Reaped by wait4 above; dropping a std Child never waits, so nothing else touches the pid.
    drop(child);
    let measured = MeasuredChild {
        exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        peak_rss_bytes: usage.ru_maxrss.max(0) as u64 * 1024,
        user_s: usage.ru_utime.tv_sec as f64 + usage.ru_utime.tv_usec as f64 / 1e6,
        sys_s: usage.ru_stime.tv_sec as f64 + usage.ru_stime.tv_usec as f64 / 1e6,
    };
    let line = serde_json::to_string(&measured)
        .map_err(|e| CliError::Runtime(format!("cannot encode the measurement: {e}")))?;
    crate::emit_line!("{line}");
    Ok(0)
}

/// Blocks until child `pid` exits; its raw wait status and rusage (peak RSS, CPU times of it
/// and of the tools it reaped).
fn wait_with_rusage(pid: u32) -> std::io::Result<(i32, libc::rusage)> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| std::io::Error::other(format!("pid {pid} out of range")))?;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is plain old data that wait4 fills in; zeroed is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to live, writable locals of the right types; `pid` is
        // our own unreaped child.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if rc == pid {
            return Ok((status, usage));
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::zombie_processes)] // reaped by wait_with_rusage, which clippy cannot see
    fn wait4_reports_exit_status_and_peak_rss() {
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let (status, usage) = wait_with_rusage(child.id()).unwrap();
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 3);
        assert!(usage.ru_maxrss > 0);
    }
}
