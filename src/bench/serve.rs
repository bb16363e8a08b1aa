//! `delta bench serve`: load on `delta serve` from outside, as browsers would put it. A
//! `delta serve` child on 127.0.0.1; N terminal workers, each with V viewers on WebSockets
//! (plus a few viewers that read nothing until the end); every worker prints B bytes as fast
//! as it can. Reports the aggregate fan-out (bytes delivered to viewers per second), the
//! server's peak and final RSS, offset gaps (must be 0), the slow viewers' resync snapshots,
//! then the keystroke-to-echo latency percentiles with every viewer attached.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::json;

use super::serve_client::{ServeChild, ViewerHandle};
use super::BenchFormat;
use crate::error::CliError;

const MARKER: &str = "bench-end-42";
const PHASE_LIMIT: Duration = Duration::from_secs(300);

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  delta bench serve                                      50 workers x 1 MiB x 3 viewers, 300 probes
  delta bench serve --workers 10 --viewers 2 --bytes 262144 --probes 50 --format json

Each worker is a bash in a PTY (as `delta serve` runs it); it is sent
`head -c BYTES /dev/zero | tr '\\0' x | fold -w 100; echo ...` and every viewer reads until
the end marker. The latency probe types one key on a viewer's socket and waits for its echo.")]
pub struct ServeBenchArgs {
    /// Terminal workers.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=500))]
    pub workers: u64,
    /// Viewers per worker.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=20))]
    pub viewers: u64,
    /// Bytes each worker prints.
    #[arg(long, default_value_t = 1024 * 1024, value_parser = clap::value_parser!(u64).range(1..=256 * 1024 * 1024))]
    pub bytes: u64,
    /// Extra viewers (on the first workers) that read nothing until the output is over.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub slow_viewers: u64,
    /// Keystroke-to-echo probes.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub probes: u64,
    #[arg(long, value_enum, default_value_t = BenchFormat::Text)]
    pub format: BenchFormat,
}

#[derive(Debug, Serialize)]
pub struct ServeBenchReport {
    pub workers: u64,
    pub viewers_per_worker: u64,
    pub bytes_per_worker: u64,
    pub delivered_bytes: u64,
    pub output_seconds: f64,
    pub fanout_mib_per_s: f64,
    /// CPU seconds the server process used while the workers printed.
    pub server_cpu_seconds: f64,
    /// MiB delivered per CPU second of the server (its rate with a core of its own).
    pub fanout_mib_per_server_cpu_s: f64,
    /// CPU seconds this bench client (the 150 viewers) used meanwhile.
    pub client_cpu_seconds: f64,
    pub gaps: u64,
    pub lagging_viewer_snapshots: u64,
    pub slow_viewers: u64,
    pub slow_viewer_snapshots: u64,
    pub server_peak_rss_mib: f64,
    pub server_rss_after_mib: f64,
    pub probes: usize,
    pub viewers_attached: usize,
    pub echo_p50_ms: f64,
    pub echo_p99_ms: f64,
    pub echo_max_ms: f64,
}

pub fn run(args: &ServeBenchArgs) -> Result<i32, CliError> {
    let dir = tempfile::Builder::new()
        .prefix("dsb")
        .tempdir()
        .map_err(|e| CliError::Runtime(format!("cannot create a temporary folder: {e}")))?;
    // Not "state": delta serve creates it private (0700) and refuses an open one.
    for sub in ["rt", "ws"] {
        std::fs::create_dir_all(dir.path().join(sub))?;
    }
    std::fs::write(dir.path().join("serve.yaml"), "agents: []\n")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = runtime
        .block_on(measure(args, dir.path()))
        .map_err(CliError::Runtime)?;
    match args.format {
        BenchFormat::Json => crate::output::emit_json(&report),
        BenchFormat::Text => crate::output::emit(&text(&report)),
    }
    Ok(if report.gaps == 0 { 0 } else { 1 })
}

async fn wait_all(
    what: &str,
    viewers: &[ViewerHandle],
    done: impl Fn(&ViewerHandle) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + PHASE_LIMIT;
    while !viewers.iter().all(&done) {
        if Instant::now() > deadline {
            return Err(format!("{what}: not done within {PHASE_LIMIT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

async fn measure(args: &ServeBenchArgs, dir: &std::path::Path) -> Result<ServeBenchReport, String> {
    let server = ServeChild::start(dir)?;
    let session = server
        .call(
            reqwest::Method::POST,
            "/api/sessions",
            Some(json!({"type": "quick", "locationPath": dir.join("ws")})),
        )
        .await?;
    let session_id = session["session"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let result = drive(args, &server, &session_id).await;
    let _ = server
        .call(
            reqwest::Method::DELETE,
            &format!("/api/sessions/{session_id}"),
            None,
        )
        .await;
    result
}

async fn drive(
    args: &ServeBenchArgs,
    server: &ServeChild,
    session_id: &str,
) -> Result<ServeBenchReport, String> {
    let origin = Instant::now();
    let (resume, resumed) = tokio::sync::watch::channel(false);
    let mut viewers = Vec::new();
    let mut firsts = Vec::new();
    let mut slow = Vec::new();
    for index in 0..args.workers {
        let worker = server
            .call(
                reqwest::Method::POST,
                &format!("/api/sessions/{session_id}/workers"),
                Some(json!({"type": "terminal"})),
            )
            .await?;
        let path = format!(
            "/ws/session/{session_id}/worker/{}",
            worker["worker"]["id"].as_str().unwrap_or_default()
        );
        for viewer in 0..args.viewers {
            let handle = ViewerHandle::connect(server, &path, MARKER, origin, None).await?;
            if viewer == 0 {
                firsts.push(viewers.len());
            }
            viewers.push(handle);
        }
        if index < args.slow_viewers {
            slow.push(
                ViewerHandle::connect(server, &path, MARKER, origin, Some(resumed.clone())).await?,
            );
        }
    }
    wait_all("attaching", &viewers, |v| {
        v.stats.snapshots.load(Ordering::Relaxed) >= 1
    })
    .await?;
    let command = format!(
        "head -c {} /dev/zero | tr '\\0' x | fold -w 100; echo bench-end-$((6*7))\r",
        args.bytes
    );
    let cpu_before = server.cpu_seconds();
    let client_before = super::measure::CpuUsage::now();
    let started = Instant::now();
    let before: u64 = viewers
        .iter()
        .map(|v| v.stats.bytes.load(Ordering::Relaxed))
        .sum();
    for first in &firsts {
        viewers[*first].send(&command);
    }
    wait_all("the output", &viewers, |v| {
        v.stats.marker_at.load(Ordering::Relaxed) != 0
    })
    .await?;
    let last = viewers
        .iter()
        .map(|v| v.stats.marker_at.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);
    let output_seconds = (Duration::from_nanos(last)
        .saturating_sub(started.duration_since(origin)))
    .as_secs_f64()
    .max(1e-9);
    let delivered: u64 = viewers
        .iter()
        .map(|v| v.stats.bytes.load(Ordering::Relaxed))
        .sum::<u64>()
        - before;
    let server_cpu_seconds = server.cpu_seconds() - cpu_before;
    let client = super::measure::CpuUsage::now().since(&client_before);
    let (peak, _) = server.memory();
    let _ = resume.send(true);
    wait_all("the slow viewers", &slow, |v| {
        v.stats.marker_at.load(Ordering::Relaxed) != 0
    })
    .await?;

    let mut latencies = Vec::new();
    for probe in 0..args.probes as usize {
        let viewer = &viewers[probe % viewers.len()];
        let took = viewer.probe("q", "q", Duration::from_secs(10)).await?;
        latencies.push(took.as_secs_f64() * 1000.0);
        viewer.send("\x7f");
    }
    latencies.sort_by(|a, b| a.total_cmp(b));
    let (_, after) = server.memory();
    let sum =
        |list: &[ViewerHandle], pick: fn(&ViewerHandle) -> u64| list.iter().map(pick).sum::<u64>();
    Ok(ServeBenchReport {
        workers: args.workers,
        viewers_per_worker: args.viewers,
        bytes_per_worker: args.bytes,
        delivered_bytes: delivered,
        output_seconds,
        fanout_mib_per_s: delivered as f64 / output_seconds / (1024.0 * 1024.0),
        server_cpu_seconds,
        fanout_mib_per_server_cpu_s: delivered as f64
            / server_cpu_seconds.max(1e-9)
            / (1024.0 * 1024.0),
        client_cpu_seconds: client.user_s + client.sys_s,
        gaps: sum(&viewers, |v| v.stats.gaps.load(Ordering::Relaxed))
            + sum(&slow, |v| v.stats.gaps.load(Ordering::Relaxed)),
        lagging_viewer_snapshots: sum(&viewers, |v| v.stats.snapshots.load(Ordering::Relaxed))
            - viewers.len() as u64,
        slow_viewers: slow.len() as u64,
        slow_viewer_snapshots: sum(&slow, |v| v.stats.snapshots.load(Ordering::Relaxed)),
        server_peak_rss_mib: peak as f64 / (1024.0 * 1024.0),
        server_rss_after_mib: after as f64 / (1024.0 * 1024.0),
        probes: latencies.len(),
        viewers_attached: viewers.len() + slow.len(),
        echo_p50_ms: super::measure::percentile(&latencies, 50.0),
        echo_p99_ms: super::measure::percentile(&latencies, 99.0),
        echo_max_ms: latencies.last().copied().unwrap_or(0.0),
    })
}

fn text(r: &ServeBenchReport) -> String {
    format!(
        "delta serve: {} workers x {} viewers, {} bytes each\n\
         fan-out        {:.1} MiB/s ({} bytes to viewers in {:.2} s; server CPU {:.2} s = {:.0} MiB per CPU second; client CPU {:.2} s)\n\
         continuity     {} gaps; {} snapshots sent to lagging viewers\n\
         slow viewers   {} (read nothing during the output): {} snapshots, then continuous\n\
         server RSS     peak {:.1} MiB, {:.1} MiB after\n\
         echo latency   p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} probes, {} viewers attached)\n",
        r.workers, r.viewers_per_worker, r.bytes_per_worker,
        r.fanout_mib_per_s, r.delivered_bytes, r.output_seconds, r.server_cpu_seconds, r.fanout_mib_per_server_cpu_s, r.client_cpu_seconds,
        r.gaps, r.lagging_viewer_snapshots,
        r.slow_viewers, r.slow_viewer_snapshots,
        r.server_peak_rss_mib, r.server_rss_after_mib,
        r.echo_p50_ms, r.echo_p99_ms, r.echo_max_ms, r.probes, r.viewers_attached,
    )
}
