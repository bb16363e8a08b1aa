//! `delta bench serve-batch`: `delta serve` watching one big orchestration. Makes it first
//! (`delta orchestrate` with the scripted model: N runs, one in a hundred failing, then a
//! `combine` stage), starts `delta serve -w` on its workspace, then measures what a person
//! opening it waits for: the orchestration page in Chromium to its runs table (cold: the
//! server reads the orchestration for the first time; warm: again), the server's answer to
//! the page's list requests (percentiles over many pages, filters and sorts), the batch
//! timeline's request, and the server's memory and its CPU while it only watches.
//!
//! Owns its clap arguments, the phases and their report. Must not change what it measures:
//! it drives the real binaries, as a user would.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::Value;

use super::measure::percentile;
use super::serve_client::ServeChild;
use super::BenchFormat;
use crate::error::CliError;

/// The budgets: first paint of the orchestration page, list requests at p99, memory.
const FIRST_PAINT_BUDGET_MS: f64 = 1000.0;
const LIST_P99_BUDGET_MS: f64 = 100.0;
const RSS_BUDGET_MIB: f64 = 200.0;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  delta bench serve-batch                                   10,000 runs, 500 list requests, Chromium if installed
  delta bench serve-batch --runs 2000 --requests 200 --browser off --format json

The orchestration is made with the scripted model (an answer per run, no tool; one run in a
hundred fails). First paint is measured in headless Chromium (chromium and chromedriver on
PATH) from the page's navigation to its runs table drawn; list requests are the page's own
(/api/orchestrations/ID/runs with pages, status filters, text filters and sorts). Exit 1
when a budget is missed: first paint <= 1 s, list p99 <= 100 ms, server memory <= 200 MiB.")]
pub struct ServeBatchArgs {
    /// Runs of the orchestration's first stage.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(10..=100_000))]
    pub runs: u64,
    /// List requests measured.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub requests: u64,
    /// Measure the page in headless Chromium (`auto`: when chromium and chromedriver are on PATH).
    #[arg(long, value_enum, default_value_t = Browser::Auto)]
    pub browser: Browser,
    /// Keep the made workspace here instead of a temporary folder (a new or empty folder).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = BenchFormat::Text)]
    pub format: BenchFormat,
}

/// `--browser auto|on|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Browser {
    Auto,
    On,
    Off,
}

#[derive(Debug, Serialize)]
pub struct ServeBatchReport {
    pub runs: u64,
    pub orchestrate_seconds: f64,
    /// The page's first request for the orchestration (the server reads it), ms.
    pub first_detail_ms: f64,
    pub list_requests: usize,
    pub list_p50_ms: f64,
    pub list_p99_ms: f64,
    pub list_max_ms: f64,
    pub timeline_ms: f64,
    pub timeline_bytes: usize,
    /// From navigation to the runs table drawn, the first time the orchestration is opened.
    pub first_paint_cold_ms: Option<f64>,
    /// The same, opened again.
    pub first_paint_warm_ms: Option<f64>,
    /// Chromium's first contentful paint of the cold open.
    pub first_contentful_paint_ms: Option<f64>,
    pub server_peak_rss_mib: f64,
    pub server_rss_after_mib: f64,
    /// The server's CPU while it only watches the workspace (per cent of one core, 10 s).
    pub server_idle_cpu_percent: f64,
    /// Budgets missed, in words.
    pub missed: Vec<String>,
}

pub fn run(args: &ServeBatchArgs) -> Result<i32, CliError> {
    let temp = tempfile::Builder::new()
        .prefix("dsbb")
        .tempdir()
        .map_err(|e| CliError::Runtime(format!("cannot create a temporary folder: {e}")))?;
    let dir = match &args.work_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.canonicalize()?
        }
        None => temp.path().to_path_buf(),
    };
    let browser = match args.browser {
        Browser::Off => None,
        Browser::On => Some(chromium().ok_or_else(|| {
            CliError::Usage(
                "--browser on: chromium and chromedriver must be on PATH (apt-get install chromium chromium-driver)"
                    .into(),
            )
        })?),
        Browser::Auto => chromium(),
    };
    let (workspace, id, orchestrate_seconds) = make_orchestration(&dir, args.runs)?;
    std::fs::create_dir_all(dir.join("rt"))?;
    std::fs::write(dir.join("serve.yaml"), "agents: []\n")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut report = runtime
        .block_on(measure(args, &dir, &workspace, &id, browser))
        .map_err(CliError::Runtime)?;
    report.orchestrate_seconds = orchestrate_seconds;
    if let Some(paint) = report.first_paint_cold_ms {
        if paint > FIRST_PAINT_BUDGET_MS {
            report.missed.push(format!(
                "first paint {paint:.0} ms > {FIRST_PAINT_BUDGET_MS} ms"
            ));
        }
    }
    if report.list_p99_ms > LIST_P99_BUDGET_MS {
        report.missed.push(format!(
            "list p99 {:.1} ms > {LIST_P99_BUDGET_MS} ms",
            report.list_p99_ms
        ));
    }
    if report.server_peak_rss_mib > RSS_BUDGET_MIB {
        report.missed.push(format!(
            "server memory {:.1} MiB > {RSS_BUDGET_MIB} MiB",
            report.server_peak_rss_mib
        ));
    }
    match args.format {
        BenchFormat::Json => crate::output::emit_json(&report),
        BenchFormat::Text => crate::output::emit(&text(&report)),
    }
    Ok(if report.missed.is_empty() { 0 } else { 1 })
}

fn chromium() -> Option<(PathBuf, PathBuf)> {
    let find = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    };
    Some((
        find("chromium").or_else(|| find("chromium-browser"))?,
        find("chromedriver")?,
    ))
}

/// Writes the agent, plan and script, and runs the orchestration; its workspace and id.
fn make_orchestration(dir: &Path, runs: u64) -> Result<(PathBuf, String, f64), CliError> {
    let agent = dir.join("agent");
    std::fs::create_dir_all(&agent)?;
    std::fs::write(
        agent.join("agent.yaml"),
        "name: worker\nllm:\n  model: scripted\n",
    )?;
    std::fs::write(agent.join("system_prompt.md"), "You answer.\n")?;
    std::fs::write(
        agent.join("context.yaml"),
        "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n",
    )?;
    std::fs::write(
        dir.join("script.yaml"),
        "rules:\n  - task_contains: \"0 fails\"\n    steps: [{ fail: 400 }]\n  - steps: [{ answer: \"done {{ task }}\" }]\n",
    )?;
    let items: Vec<String> = (0..runs)
        .map(|i| {
            if i % 100 == 37 {
                format!("item {i}0 fails")
            } else {
                format!("item {i}")
            }
        })
        .collect();
    let items = serde_json::to_string(&items).map_err(|e| CliError::Runtime(e.to_string()))?;
    std::fs::write(
        dir.join("plan.yaml"),
        format!("name: big\nmax_parallel: 1000\nstages:\n  - id: map\n    agent: ./agent\n    foreach: {{ items: {items} }}\n    message: \"{{{{ item }}}}\"\n    on_failure: continue\n  - id: combine\n    needs: [map]\n    agent: ./agent\n    message: \"combine\"\n"),
    )?;
    let workspace = dir.join("ws");
    std::fs::create_dir_all(&workspace)?;
    let exe = super::delta_exe()?;
    let started = Instant::now();
    let output = std::process::Command::new(exe)
        .current_dir(dir)
        .args([
            "orchestrate",
            "plan.yaml",
            "--llm-script",
            "script.yaml",
            "--format",
            "json",
            "-w",
        ])
        .arg(&workspace)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()?;
    let seconds = started.elapsed().as_secs_f64();
    let summary: Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        CliError::Runtime(format!(
            "delta orchestrate (exit {:?}) printed no summary: {e}",
            output.status.code()
        ))
    })?;
    let id = summary["orchestration_id"]
        .as_str()
        .ok_or_else(|| CliError::Runtime("the summary has no orchestration_id".into()))?
        .to_string();
    Ok((workspace.canonicalize()?, id, seconds))
}

fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn timed(server: &ServeChild, path: &str) -> Result<(f64, Value), String> {
    let started = Instant::now();
    let value = server.call(reqwest::Method::GET, path, None).await?;
    Ok((started.elapsed().as_secs_f64() * 1000.0, value))
}

async fn measure(
    args: &ServeBatchArgs,
    dir: &Path,
    workspace: &Path,
    id: &str,
    browser: Option<(PathBuf, PathBuf)>,
) -> Result<ServeBatchReport, String> {
    let server = ServeChild::start_with(dir, &["-w".as_ref(), workspace.as_os_str()])?;
    let ws = encode(&workspace.display().to_string());
    // The watcher's first scan of the workspace (the page lists it from there).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let views = server
            .call(reqwest::Method::GET, "/api/workspaces", None)
            .await?;
        let seen = views.as_array().is_some_and(|views| {
            views
                .iter()
                .any(|v| v["path"].as_str() == Some(&workspace.display().to_string()))
        });
        if seen {
            break;
        }
        if Instant::now() > deadline {
            return Err("delta serve did not list the workspace within 120 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let page = format!("/#/runs/{ws}/o/{id}");
    let (cold, warm, fcp) = match &browser {
        Some((chromium, chromedriver)) => {
            let driver = super::webdriver_client::Driver::start(chromium, chromedriver).await?;
            driver
                .goto(&format!("{}/#token={}", server.base, server.token))
                .await?;
            // A new document each time (the query differs), so the clock starts at its navigation.
            let mut paints = Vec::new();
            for attempt in 0..2 {
                driver
                    .goto(&format!("{}/?open={attempt}{page}", server.base))
                    .await?;
                let painted = driver
                    .wait_for("return window.deltaServe && window.deltaServe.batchPaintedAt ? window.deltaServe.batchPaintedAt : null")
                    .await?;
                let fcp = driver
                    .script("const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null")
                    .await?;
                paints.push((painted.as_f64().unwrap_or(0.0), fcp.as_f64()));
            }
            driver.quit().await;
            (Some(paints[0].0), Some(paints[1].0), paints[0].1)
        }
        None => (None, None, None),
    };
    let base = format!("/api/orchestrations/{id}");
    let (first_detail_ms, _) = timed(&server, &format!("{base}?workspace={ws}")).await?;
    let queries = [
        "sort=index",
        "status=FAILED",
        "sort=duration&order=desc",
        "sort=tokens",
        "sort=status",
        "q=fails",
        "stage=map&status=COMPLETED",
    ];
    let pages = (args.runs / 100).max(1);
    let mut latencies = Vec::new();
    for i in 0..args.requests {
        let query = queries[i as usize % queries.len()];
        let offset = (i * 37 % pages) * 100;
        let (ms, _) = timed(
            &server,
            &format!("{base}/runs?workspace={ws}&{query}&offset={offset}&limit=100"),
        )
        .await?;
        latencies.push(ms);
        if i % 10 == 0 {
            // The page asks for the header with each refresh too.
            timed(&server, &format!("{base}?workspace={ws}")).await?;
        }
    }
    latencies.sort_by(|a, b| a.total_cmp(b));
    let started = Instant::now();
    let timeline = server
        .call(
            reqwest::Method::GET,
            &format!("{base}/timeline?workspace={ws}"),
            None,
        )
        .await?;
    let timeline_ms = started.elapsed().as_secs_f64() * 1000.0;
    let cpu_before = server.cpu_seconds();
    let idle = Duration::from_secs(10);
    tokio::time::sleep(idle).await;
    let idle_cpu = (server.cpu_seconds() - cpu_before) / idle.as_secs_f64() * 100.0;
    let (peak, after) = server.memory();
    Ok(ServeBatchReport {
        runs: args.runs,
        orchestrate_seconds: 0.0,
        first_detail_ms,
        list_requests: latencies.len(),
        list_p50_ms: percentile(&latencies, 50.0),
        list_p99_ms: percentile(&latencies, 99.0),
        list_max_ms: latencies.last().copied().unwrap_or(0.0),
        timeline_ms,
        timeline_bytes: timeline.to_string().len(),
        first_paint_cold_ms: cold,
        first_paint_warm_ms: warm,
        first_contentful_paint_ms: fcp,
        server_peak_rss_mib: peak as f64 / (1024.0 * 1024.0),
        server_rss_after_mib: after as f64 / (1024.0 * 1024.0),
        server_idle_cpu_percent: idle_cpu,
        missed: Vec::new(),
    })
}

fn text(r: &ServeBatchReport) -> String {
    let ms = |v: Option<f64>| v.map_or("not measured".to_string(), |v| format!("{v:.0} ms"));
    format!(
        "delta serve watching a {} run orchestration (made in {:.1} s)\n\
         page            first paint {} cold, {} warm (first contentful paint {})\n\
         first request   {:.1} ms (the server reads the orchestration)\n\
         list requests   p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} requests)\n\
         timeline        {:.1} ms, {} bytes\n\
         server memory   peak {:.1} MiB, {:.1} MiB after\n\
         server idle CPU {:.1} % of a core while watching\n\
         {}\n",
        r.runs,
        r.orchestrate_seconds,
        ms(r.first_paint_cold_ms),
        ms(r.first_paint_warm_ms),
        ms(r.first_contentful_paint_ms),
        r.first_detail_ms,
        r.list_p50_ms,
        r.list_p99_ms,
        r.list_max_ms,
        r.list_requests,
        r.timeline_ms,
        r.timeline_bytes,
        r.server_peak_rss_mib,
        r.server_rss_after_mib,
        r.server_idle_cpu_percent,
        if r.missed.is_empty() {
            "every budget met".to_string()
        } else {
            format!("MISSED: {}", r.missed.join("; "))
        }
    )
}
