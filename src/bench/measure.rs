//! Measuring the bench process: percentiles, CPU time and peak RSS from getrusage, peak RSS
//! and open descriptors sampled from /proc/self, the open-files limit (raised with setrlimit
//! before a run, or a clear error), and the tool-spawn rate that bounds any workload.
//! It must not drive runs or format reports.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrlimit, getrusage, setrlimit, Resource, UsageWho};
use serde::{Deserialize, Serialize};

/// Descriptors one waiting run holds besides its model connection: the journal, which is
/// also its lock (engine.log is opened per line).
const FDS_PER_RUN: u64 = 1;
/// Descriptors the process needs besides the runs (runtime, listeners, std streams).
const FDS_BASE: u64 = 512;
/// Descriptors of one tool process in the engine: its stdout and stderr pipes, and stdin's
/// when it is fed.
const FDS_PER_TOOL: u64 = 3;
/// The fewest tools the bench lets run at once, whatever the descriptor arithmetic says.
const MIN_TOOLS_IN_FLIGHT: u64 = 16;
/// Where the descriptor count must be listed (kernels before 6.2, see [`open_fds`]), that
/// costs kernel time proportional to the open descriptors (8% of the samples at 1,000 runs
/// when sampled every 25 ms), so sample sparingly.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Tool starts per thread in one calibration round.
const SPAWN_CALIBRATION_PER_THREAD: usize = 100;
/// Calibration rounds after a warm-up one; the fastest is the machine's rate. One round of
/// 100 starts per thread ranged over 1,500–3,200 starts/s from one command to the next on
/// this machine (a slow moment, a CPU coming out of idle), and the ideal moved with it.
const SPAWN_CALIBRATION_ROUNDS: usize = 3;
/// Starts through the tool spawner to calibrate its rate, and how many at once.
const SPAWNER_CALIBRATION_STARTS: usize = 400;
const SPAWNER_CALIBRATION_CONCURRENCY: usize = 8;

/// Descriptors of one waiting run's model connection: none over HTTP/2 (thousands of calls
/// share a connection), one per call over HTTP/1.1, two with the scripted model in this
/// process (both ends).
pub fn connection_fds_per_run(http2: bool, in_process_server: bool) -> u64 {
    match (http2, in_process_server) {
        (true, _) => 0,
        (false, false) => 1,
        (false, true) => 2,
    }
}

/// Open files needed to drive `concurrency` runs at once, each with `connection_fds`
/// descriptors for its model call, before any tool starts.
pub fn open_files_needed(concurrency: usize, connection_fds: u64) -> u64 {
    FDS_BASE + (FDS_PER_RUN + connection_fds) * concurrency as u64
}

/// Tool processes the engine may run at once within `limit` descriptors once `concurrency`
/// runs hold theirs (the engine's tool descriptor budget).
pub fn tools_in_flight(limit: u64, concurrency: usize, connection_fds: u64) -> usize {
    let spare = limit.saturating_sub(open_files_needed(concurrency, connection_fds));
    (spare / FDS_PER_TOOL).max(MIN_TOOLS_IN_FLIGHT) as usize
}

/// Makes sure `RLIMIT_NOFILE` allows `needed` descriptors, raising the soft (and, when
/// permitted, the hard) limit. Returns the soft limit in force.
pub fn ensure_open_files(needed: u64) -> Result<u64, String> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| format!("cannot read the open-files limit (RLIMIT_NOFILE): {e}"))?;
    if soft >= needed && soft >= hard {
        return Ok(soft);
    }
    // As high as allowed: tools take what the runs leave.
    let new_hard = hard.max(needed);
    match setrlimit(Resource::RLIMIT_NOFILE, new_hard, new_hard) {
        Ok(()) => Ok(new_hard),
        Err(_) if soft >= needed => Ok(soft),
        Err(e) => Err(format!(
            "this bench needs about {needed} open files for its concurrency, but the open-files \
             limit is {soft} (hard limit {hard}) and raising it failed: {e}.\n\
             Hint: raise the hard limit (`ulimit -Hn {needed}` as root, or `nofile` in \
             /etc/security/limits.conf) or lower --max-parallel / the --sweep values"
        )),
    }
}

/// Nearest-rank percentile of `sorted` (ascending); 0 for an empty slice.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// CPU seconds of this process and of its children: the reaped ones, plus the running tool
/// spawner and the tools it reaped (tools are its children, not ours).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuUsage {
    pub user_s: f64,
    pub sys_s: f64,
    pub children_user_s: f64,
    pub children_sys_s: f64,
}

fn seconds(tv: nix::sys::time::TimeVal) -> f64 {
    tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6
}

impl CpuUsage {
    pub fn now() -> CpuUsage {
        let mut usage = CpuUsage::default();
        if let Ok(me) = getrusage(UsageWho::RUSAGE_SELF) {
            usage.user_s = seconds(me.user_time());
            usage.sys_s = seconds(me.system_time());
        }
        if let Ok(children) = getrusage(UsageWho::RUSAGE_CHILDREN) {
            usage.children_user_s = seconds(children.user_time());
            usage.children_sys_s = seconds(children.system_time());
        }
        if let Some(spawner) = delta_actors::tool::spawner::shared() {
            let (user_s, sys_s) = process_tree_cpu(spawner.pid());
            usage.children_user_s += user_s;
            usage.children_sys_s += sys_s;
        }
        usage
    }

    pub fn since(&self, earlier: &CpuUsage) -> CpuUsage {
        CpuUsage {
            user_s: self.user_s - earlier.user_s,
            sys_s: self.sys_s - earlier.sys_s,
            children_user_s: self.children_user_s - earlier.children_user_s,
            children_sys_s: self.children_sys_s - earlier.children_sys_s,
        }
    }
}

/// (user, system) CPU seconds of running process `pid` and of the children it reaped, from
/// /proc/<pid>/stat; zero when it is gone.
pub fn process_tree_cpu(pid: u32) -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return (0.0, 0.0);
    };
    let Some((_, fields)) = stat.rsplit_once(')') else {
        return (0.0, 0.0);
    };
    // utime, stime, cutime, cstime are fields 14-17 of proc(5); `fields` starts at field 3.
    let ticks: Vec<u64> = fields
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|t| t.parse::<u64>().unwrap_or(0))
        .collect();
    let [utime, stime, cutime, cstime] = ticks[..] else {
        return (0.0, 0.0);
    };
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (
        (utime + cutime) as f64 / per_second,
        (stime + cstime) as f64 / per_second,
    )
}

/// This process's high-water mark of resident memory since it started running delta:
/// `VmHWM` from `/proc/self/status`, which belongs to the current program image. Not
/// getrusage's `ru_maxrss`: that survives `execve`, so under `cargo run` (which execs delta)
/// it reported cargo's own ≈ 75 MiB for a bench that never went past 20 MiB.
pub fn max_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| vm_hwm_bytes(&status))
        .unwrap_or_else(|| {
            getrusage(UsageWho::RUSAGE_SELF)
                .map(|u| u.max_rss().max(0) as u64 * 1024)
                .unwrap_or(0)
        })
}

/// The `VmHWM:   1234 kB` line of a `/proc/<pid>/status` text, in bytes.
fn vm_hwm_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Peaks seen by the [`Sampler`] while it ran.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Peaks {
    pub rss_bytes: u64,
    pub open_fds: u64,
}

/// Samples resident memory and open descriptors of this process on a background thread.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Peaks>>,
    /// The sampling thread's kernel id (its CPU is the bench's, not the engine's).
    tid: Arc<AtomicI32>,
}

impl Sampler {
    pub fn start() -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let tid = Arc::new(AtomicI32::new(-1));
        let tid_slot = Arc::clone(&tid);
        let thread = std::thread::Builder::new()
            .name("bench-sampler".into())
            .spawn(move || {
                tid_slot.store(super::server_thread::this_thread_id(), Ordering::SeqCst);
                let mut peaks = sample_once(Peaks::default());
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(SAMPLE_EVERY);
                    peaks = sample_once(peaks);
                }
                peaks
            })
            .ok();
        Sampler { stop, thread, tid }
    }

    /// CPU the sampling thread used so far.
    pub fn cpu(&self) -> super::server_thread::ThreadCpu {
        super::server_thread::thread_cpu(self.tid.load(Ordering::SeqCst))
    }

    /// Stops sampling and returns the peaks (including one last sample).
    pub fn stop(mut self) -> Peaks {
        self.stop.store(true, Ordering::Relaxed);
        let peaks = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        sample_once(peaks)
    }
}

fn sample_once(peaks: Peaks) -> Peaks {
    Peaks {
        rss_bytes: peaks.rss_bytes.max(current_rss_bytes()),
        open_fds: peaks.open_fds.max(open_fds()),
    }
}

/// Resident memory now, from `/proc/self/statm` (0 where unavailable).
pub fn current_rss_bytes() -> u64 {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096)
        .max(0) as u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * page)
        .unwrap_or(0)
}

/// `program`'s absolute path when it is a bare name found on PATH; else as given.
fn resolve_on_path(program: &str) -> String {
    if program.contains('/') {
        return program.to_string();
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(program))
                .find(|candidate| candidate.is_file())
        })
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.to_string())
}

/// Open descriptors now, from `/proc/self/fd` (0 where unavailable). Linux 6.2 and later
/// report the count as the folder's size, a few microseconds at any count; listing the
/// folder instead took ≈ 9 ms per sample at 16,000 descriptors (10,000 concurrent runs),
/// CPU the point's runs were then short of. Older kernels report 0 and are listed.
pub fn open_fds() -> u64 {
    match std::fs::metadata("/proc/self/fd") {
        Ok(meta) if meta.len() > 0 => meta.len(),
        _ => std::fs::read_dir("/proc/self/fd")
            .map(|dir| dir.count() as u64)
            .unwrap_or(0),
    }
}

/// How many tool processes per second this machine can start and reap: one spawner per CPU,
/// each starting the tool with piped output (as the engine does) and waiting for it. The
/// fastest of [`SPAWN_CALIBRATION_ROUNDS`] rounds after a warm-up: a lower bound needs the
/// machine's best rate, not one slow moment's.
pub fn tool_spawn_rate(argv: &[String], cwd: &std::path::Path) -> Result<f64, String> {
    let Some((program, rest)) = argv.split_first() else {
        return Err("--tool is empty: give a command such as `true`".into());
    };
    // Like the engine, find the program once rather than letting every exec search PATH.
    let program = resolve_on_path(program);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    fastest_after_warm_up(SPAWN_CALIBRATION_ROUNDS, || {
        spawn_round(&program, rest, cwd, threads)
    })
}

/// Runs `round` once to warm up, then `rounds` times; the highest rate of those.
fn fastest_after_warm_up(
    rounds: usize,
    mut round: impl FnMut() -> Result<f64, String>,
) -> Result<f64, String> {
    round()?;
    let mut best: f64 = 0.0;
    for _ in 0..rounds {
        best = best.max(round()?);
    }
    Ok(best)
}

/// One calibration round: `threads` threads each start the tool
/// [`SPAWN_CALIBRATION_PER_THREAD`] times; the starts per second.
fn spawn_round(
    program: &str,
    rest: &[String],
    cwd: &std::path::Path,
    threads: usize,
) -> Result<f64, String> {
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let program = program.to_owned();
            let rest = rest.to_vec();
            let cwd = cwd.to_path_buf();
            std::thread::spawn(move || -> Result<(), String> {
                for _ in 0..SPAWN_CALIBRATION_PER_THREAD {
                    std::process::Command::new(&program)
                        .args(&rest)
                        .current_dir(&cwd)
                        .stdin(std::process::Stdio::null())
                        .output()
                        .map_err(|e| {
                            format!("--tool: cannot start '{program}': {e} (hint: is it on PATH?)")
                        })?;
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker
            .join()
            .map_err(|_| "the spawn-rate calibration thread panicked".to_string())??;
    }
    Ok((threads * SPAWN_CALIBRATION_PER_THREAD) as f64 / super::secs(started.elapsed()))
}

/// Tool starts per second through the tool spawner, as the engine starts tools: a few
/// concurrent loops of `run_process` with piped output, each waiting for its tool.
pub async fn spawner_spawn_rate(
    argv: &[String],
    cwd: &std::path::Path,
    spawner: Arc<delta_actors::tool::spawner::Spawner>,
) -> Result<f64, String> {
    use delta_actors::tool::process::{run_process, ProcessSpec, Termination};
    let env = vec![(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
    )];
    let per_loop = SPAWNER_CALIBRATION_STARTS / SPAWNER_CALIBRATION_CONCURRENCY;
    let started = Instant::now();
    let loops = (0..SPAWNER_CALIBRATION_CONCURRENCY).map(|_| {
        let (argv, env, spawner) = (argv.to_vec(), env.clone(), Arc::clone(&spawner));
        let cwd = cwd.to_path_buf();
        async move {
            for _ in 0..per_loop {
                let mut spec = ProcessSpec::new(argv.clone(), cwd.clone(), env.clone());
                spec.spawner = Some(Arc::clone(&spawner));
                let outcome = run_process(spec, Default::default()).await;
                if let Termination::SpawnFailed(reason) = &outcome.termination {
                    return Err(format!(
                        "--tool cannot start through the tool spawner: {reason}"
                    ));
                }
            }
            Ok(())
        }
    });
    for result in futures_util::future::join_all(loops).await {
        result?;
    }
    Ok((per_loop * SPAWNER_CALIBRATION_CONCURRENCY) as f64 / super::secs(started.elapsed()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn process_tree_cpu_is_read_from_proc_stat() {
        let busy_until = Instant::now() + Duration::from_millis(50);
        while Instant::now() < busy_until {
            std::hint::black_box(0u64);
        }
        let (user_s, sys_s) = process_tree_cpu(std::process::id());
        assert!(user_s + sys_s > 0.0);
        assert_eq!(process_tree_cpu(u32::MAX), (0.0, 0.0));
    }

    #[test]
    fn peak_rss_is_read_from_vm_hwm() {
        let status = "Name:\tdelta\nVmPeak:\t  99999 kB\nVmHWM:\t   20480 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(vm_hwm_bytes(status), Some(20 * 1024 * 1024));
        assert_eq!(vm_hwm_bytes("Name:\tx\n"), None);
        // The live process: at least a buffer it holds, touched page by page. (Not "at least
        // what was resident a moment before": another test's memory given back with
        // `madvise` in between lowers the resident size without raising the mark first.)
        const HELD: usize = 32 << 20;
        let held = std::hint::black_box(vec![1u8; HELD]);
        assert!(max_rss_bytes() >= HELD as u64);
        drop(held);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn open_files_limit_already_sufficient_is_kept() {
        let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(ensure_open_files(soft.min(64)).unwrap(), soft);
    }

    #[test]
    fn impossible_open_files_limit_is_a_clear_error() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // Not even root may go beyond the kernel's per-process ceiling.
        let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(1 << 20);
        if hard == u64::MAX {
            return;
        }
        let err = ensure_open_files(hard.max(nr_open) + 1).unwrap_err();
        assert!(
            err.contains("open-files limit") && err.contains("--max-parallel"),
            "{err}"
        );
    }

    #[test]
    fn sampler_sees_descriptors_opened_while_it_runs() {
        let sampler = Sampler::start();
        let files: Vec<_> = (0..40).map(|_| tempfile::tempfile().unwrap()).collect();
        let peaks = sampler.stop();
        // Other tests open and close descriptors concurrently, so only a floor is certain:
        // our 40 files and the three standard streams were open at the last sample.
        assert!(peaks.open_fds >= 43, "{peaks:?}");
        assert!(peaks.rss_bytes > 0);
        drop(files);
    }

    #[test]
    fn the_calibrated_rate_is_the_fastest_round_after_the_warm_up() {
        let mut rates = [9.0, 1.0, 4.0, 2.0].into_iter();
        let best = fastest_after_warm_up(3, || Ok(rates.next().unwrap())).unwrap();
        assert_eq!(best, 4.0, "the warm-up round (9.0) does not count");
        let mut failing = [Ok(1.0), Err("no such tool".to_string())].into_iter();
        let error = fastest_after_warm_up(3, || failing.next().unwrap()).unwrap_err();
        assert_eq!(error, "no such tool");
    }

    #[test]
    fn spawn_rate_is_positive_and_bad_tools_fail_clearly() {
        let here = std::env::temp_dir();
        assert!(tool_spawn_rate(&["true".to_string()], &here).unwrap() > 0.0);
        assert!(resolve_on_path("true").starts_with('/'));
        assert_eq!(resolve_on_path("./x"), "./x");
        let err = tool_spawn_rate(&["/nonexistent/tool".to_string()], &here).unwrap_err();
        assert!(err.contains("/nonexistent/tool"));
    }
}
