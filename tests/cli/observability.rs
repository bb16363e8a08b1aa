//! Traces and metrics through the `delta` binary against real receivers (issue 33): a plan
//! with a fan-out, a tool call, a retried model call and an MCP call lands in Arize Phoenix
//! as one trace with the expected span tree (its REST API read back); Prometheus scrapes
//! `delta orchestrate --metrics-listen` and its query API returns the batch's counters; a
//! collector that is down, or accepts and never answers, changes neither the outcome nor the
//! duration of a batch beyond noise.
//!
//! Phoenix comes from `scripts/phoenix-local.sh` (DELTA_PHOENIX_URL, started by
//! `scripts/test`), Prometheus from Debian's package (DELTA_PROMETHEUS_BIN; the test starts
//! it on loopback with a generated config and a temporary storage folder, and stops it).
//! Without them the tests fail loudly, unless DELTA_SKIP_OTEL=1 / DELTA_SKIP_PROMETHEUS=1
//! say to skip them knowingly (they print SKIPPED).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

const LIMIT: Duration = Duration::from_secs(90);

/// A service's address from `var`, or `None` when `skip_var=1` skips the test knowingly.
fn service(test: &str, var: &str, skip_var: &str, how: &str) -> Option<String> {
    if let Ok(value) = std::env::var(var) {
        if !value.is_empty() {
            return Some(value);
        }
    }
    if std::env::var(skip_var).as_deref() == Ok("1") {
        eprintln!("SKIPPED {test}: {skip_var}=1 and {var} is not set");
        return None;
    }
    panic!("{test} needs {var}: {how} (scripts/test does), or skip it knowingly with {skip_var}=1");
}

/// The MCP reference servers' `node_modules/.bin`, when installed.
fn mcp_bin() -> Option<PathBuf> {
    let dir = std::env::var("DELTA_MCP_SERVERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-servers"));
    let bin = dir.join("node_modules/.bin");
    bin.join("mcp-server-everything").exists().then_some(bin)
}

/// A plan folder: `worker` (a tool, and the `everything` MCP server when `mcp` is given)
/// fanned out over two items, then a `sum` stage; each run's first model call fails once
/// with a 500 and is retried.
struct Batch {
    dir: tempfile::TempDir,
}

impl Batch {
    fn new(mcp: Option<&Path>) -> Batch {
        let dir = tempfile::tempdir().unwrap();
        let servers = mcp.map_or(String::new(), |bin| {
            format!(
                "mcp:\n  everything:\n    command: {}\n    args: [stdio]\n",
                bin.join("mcp-server-everything").display()
            )
        });
        write_agent(
            &dir.path().join("agents/worker"),
            "worker",
            &format!("tools:\n  - name: shout\n    exec: \"echo loud\"\n{servers}"),
        );
        std::fs::write(
            dir.path().join("plan.yaml"),
            "name: fanout\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n  - id: sum\n    needs: [work]\n    message: sum\n",
        )
        .unwrap();
        let mcp_step = if mcp.is_some() {
            "  - tool: everything__get-sum\n    args: { a: 2, b: 40 }\n"
        } else {
            ""
        };
        std::fs::write(
            dir.path().join("script.yaml"),
            format!("steps:\n  - fail: 500\n    times: 1\n    then: {{ tool: shout, args: {{}} }}\n{mcp_step}  - answer: \"done {{{{ last_user }}}}\"\n"),
        )
        .unwrap();
        Batch { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `delta orchestrate` of the plan with `env` added to a hermetic environment.
    fn command(&self, ws: &str, env: &[(&str, String)]) -> Command {
        let mut cmd = Command::new(delta_exe());
        cmd.args([
            "orchestrate",
            "plan.yaml",
            "--llm-script",
            "script.yaml",
            "-w",
            ws,
            "--format",
            "json",
        ])
        .current_dir(self.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", self.path())
        .env("DELTA_RETRY_BASE_MS", "5")
        .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    fn run(&self, ws: &str, env: &[(&str, String)]) -> (Outcome, Duration) {
        let started = Instant::now();
        let child = self
            .command(ws, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let outcome = wait_output(child, LIMIT);
        (outcome, started.elapsed())
    }
}

/// `GET url` on loopback, the body as JSON.
fn get_json(url: &str) -> Value {
    let rest = url.trim_start_matches("http://");
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let mut stream = TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    serde_json::from_str(&body).unwrap_or(Value::Null)
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

#[test]
fn a_traced_batch_lands_in_phoenix_as_one_span_tree() {
    let test = "a_traced_batch_lands_in_phoenix_as_one_span_tree";
    let Some(phoenix) = service(
        test,
        "DELTA_PHOENIX_URL",
        "DELTA_SKIP_OTEL",
        "start Arize Phoenix with scripts/phoenix-local.sh up and export its env",
    ) else {
        return;
    };
    let mcp = mcp_bin();
    if mcp.is_none() {
        assert_eq!(std::env::var("DELTA_SKIP_MCP").as_deref(), Ok("1"), "{test} calls an MCP tool: install the servers with scripts/mcp-local.sh install, or DELTA_SKIP_MCP=1");
        eprintln!("{test}: DELTA_SKIP_MCP=1: the batch makes no MCP call");
    }
    let batch = Batch::new(mcp.as_deref());
    let project = format!("delta-test-{}-{}", std::process::id(), fastrand_suffix());
    let (outcome, _) = batch.run(
        "ws",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.clone()),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                format!("openinference.project.name={project}"),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "200".into()),
        ],
    );
    assert_eq!(outcome.code, 0, "{outcome:?}");
    assert!(
        !outcome.stderr.contains("did not reach the collector"),
        "{}",
        outcome.stderr
    );
    // Spans: the workflow, 2 stages, 3 runs, 6 model calls, 3 tool calls (+3 MCP calls).
    let expected = 15 + if mcp.is_some() { 6 } else { 0 };
    let url = format!("{phoenix}/v1/projects/{project}/spans?limit=1000");
    let mut spans = Vec::new();
    let found = wait_until(Duration::from_secs(30), || {
        spans = get_json(&url)["data"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        spans.len() >= expected
    });
    assert!(
        found,
        "Phoenix holds {} of {expected} spans: {spans:#?}",
        spans.len()
    );
    let trace = spans[0]["context"]["trace_id"].clone();
    assert!(
        spans.iter().all(|s| s["context"]["trace_id"] == trace),
        "one trace"
    );
    let by_id: HashMap<String, &Value> = spans
        .iter()
        .map(|s| (s["context"]["span_id"].as_str().unwrap().to_string(), s))
        .collect();
    let parent = |s: &Value| -> Option<String> {
        let id = s["parent_id"].as_str()?;
        by_id
            .get(id)
            .map(|p| p["name"].as_str().unwrap_or_default().to_string())
    };
    let count = |prefix: &str| {
        spans
            .iter()
            .filter(|s| s["name"].as_str().unwrap().starts_with(prefix))
            .count()
    };
    assert_eq!(count("invoke_workflow fanout"), 1);
    assert_eq!(count("stage "), 2);
    assert_eq!(count("invoke_agent worker"), 3);
    assert_eq!(
        count("chat scripted"),
        6 + if mcp.is_some() { 3 } else { 0 }
    );
    assert_eq!(count("execute_tool shout"), 3);
    for span in &spans {
        let name = span["name"].as_str().unwrap();
        let attributes = &span["attributes"];
        match name.split(' ').next().unwrap() {
            "invoke_workflow" => assert!(span["parent_id"].is_null()),
            "stage" => assert_eq!(parent(span).as_deref(), Some("invoke_workflow fanout")),
            "invoke_agent" => {
                assert!(
                    parent(span).is_some_and(|p| p.starts_with("stage ")),
                    "{span}"
                );
                assert_eq!(span["span_kind"], "AGENT");
            }
            "chat" => {
                assert_eq!(
                    parent(span).as_deref(),
                    Some("invoke_agent worker"),
                    "{span}"
                );
                assert_eq!(span["span_kind"], "LLM");
                assert!(
                    attributes["gen_ai.usage.input_tokens"].as_u64().unwrap() > 0,
                    "{span}"
                );
                assert!(
                    attributes["gen_ai.usage.output_tokens"].as_u64().unwrap() > 0,
                    "{span}"
                );
                assert_eq!(attributes["gen_ai.request.model"], "scripted");
            }
            "execute_tool" => {
                assert_eq!(
                    parent(span).as_deref(),
                    Some("invoke_agent worker"),
                    "{span}"
                );
                assert_eq!(span["span_kind"], "TOOL");
                assert!(attributes["gen_ai.tool.call.id"].is_string(), "{span}");
            }
            other => panic!("unexpected span {other}: {span}"),
        }
    }
    // The retried first call of each run carries its failed attempt as an event.
    let retried = spans
        .iter()
        .filter(|s| {
            s["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["name"] == "retry"))
        })
        .count();
    assert_eq!(retried, 3);
    if mcp.is_some() {
        let mcp_calls: Vec<_> = spans
            .iter()
            .filter(|s| s["attributes"]["mcp.method.name"] == "tools/call")
            .collect();
        assert_eq!(mcp_calls.len(), 3, "{spans:#?}");
        assert!(mcp_calls
            .iter()
            .all(|s| s["name"] == "execute_tool everything__get-sum"));
    }
}

/// A few hex digits that differ between runs of the suite (Phoenix keeps its projects).
fn fastrand_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{nanos:08x}")
}

/// A port free now on loopback.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the child and its group when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn prometheus_scrapes_an_orchestration_and_its_query_api_returns_the_batch_counters() {
    let test = "prometheus_scrapes_an_orchestration_and_its_query_api_returns_the_batch_counters";
    let Some(prometheus) = service(
        test,
        "DELTA_PROMETHEUS_BIN",
        "DELTA_SKIP_PROMETHEUS",
        "install Debian's prometheus package and export DELTA_PROMETHEUS_BIN",
    ) else {
        return;
    };
    let batch = Batch::new(None);
    // The last stage holds the batch open until the test has read the counters (a file it
    // writes), bounded by the tool's own loop.
    let release = batch.path().join("release");
    std::fs::write(
        batch.path().join("plan.yaml"),
        "name: scraped\nbudget: { tokens: 1000000 }\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c] }\n    message: \"item {{ item }}\"\n  - id: hold\n    needs: [work]\n    agent: ./agents/holder\n    message: hold\n",
    )
    .unwrap();
    write_agent(
        &batch.path().join("agents/holder"),
        "holder",
        &format!(
            "tools:\n  - name: wait_release\n    shell: \"for i in $(seq 1 900); do [ -f {} ] && exit 0; sleep 0.1; done; exit 1\"\n    timeout_ms: 120000\n",
            release.display()
        ),
    );
    std::fs::write(
        batch.path().join("script.yaml"),
        "rules:\n  - agent: holder\n    steps:\n      - tool: wait_release\n        args: {}\n      - answer: released\n  - steps:\n      - fail: 500\n        times: 1\n        then: { tool: shout, args: {} }\n      - answer: done\n",
    )
    .unwrap();
    let mut child = batch
        .command("ws", &[])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let delta = Killed(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("metrics: ") {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let metrics_url = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("delta printed its metrics address");
    let target = metrics_url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();

    let storage = tempfile::tempdir().unwrap();
    let config = storage.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: delta\n    static_configs:\n      - targets: ['{target}']\n"),
    )
    .unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let server = Command::new(&prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            storage.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Killed(server);
    let query = |q: &str| -> Option<f64> {
        let url = format!(
            "http://{web}/api/v1/query?query={}",
            q.replace('"', "%22")
                .replace('{', "%7B")
                .replace('}', "%7D")
                .replace('=', "%3D")
                .replace(',', "%2C")
        );
        let answer = std::panic::catch_unwind(|| get_json(&url)).ok()?;
        answer["data"]["result"][0]["value"][1]
            .as_str()?
            .parse()
            .ok()
    };
    let completed = "delta_orchestration_runs_total{stage=\"work\",status=\"COMPLETED\"}";
    let seen = wait_until(Duration::from_secs(60), || query(completed) == Some(3.0));
    assert!(
        seen,
        "Prometheus never reported {completed} = 3 (last: {:?})",
        query(completed)
    );
    assert_eq!(
        query("sum(delta_model_calls_total{outcome=\"ok\"})"),
        Some(6.0 + 1.0),
        "3 runs × 2 answered calls, and the holder's first"
    );
    assert_eq!(query("sum(delta_model_retries_total)"), Some(3.0));
    assert!(query("sum(delta_model_tokens_total{type=\"input\"})").is_some_and(|n| n > 0.0));
    assert_eq!(
        query("delta_tool_calls_total{tool=\"shout\",outcome=\"success\",exit_code=\"0\"}"),
        Some(3.0)
    );
    assert!(query("sum(delta_model_call_duration_seconds_count)").is_some_and(|n| n >= 6.0));
    // The plan's cap, less what the calls were billed.
    let left = query("delta_budget_remaining_tokens{scope=\"plan\"}");
    assert!(
        left.is_some_and(|n| n > 0.0 && n < 1_000_000.0),
        "what is left of the plan's budget: {left:?}"
    );
    std::fs::write(&release, "go").unwrap();
    let mut delta = delta;
    let status = wait_child(&mut delta.0, LIMIT);
    assert!(status.success(), "{status:?}");
}

/// A collector that accepts connections and never answers (reads nothing, writes nothing),
/// for as long as the test lives.
fn blackhole() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(64) {
            held.push(stream);
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_collector_that_is_down_or_never_answers_changes_neither_outcome_nor_duration() {
    let batch = Batch::new(None);
    let (baseline, baseline_time) = batch.run("ws-base", &[]);
    assert_eq!(baseline.code, 0, "{baseline:?}");
    let base: Value = serde_json::from_str(&baseline.stdout).unwrap();
    let down = format!("http://127.0.0.1:{}", free_port());
    for (name, collector) in [("down", down), ("blackhole", blackhole())] {
        let (outcome, elapsed) = batch.run(
            &format!("ws-{name}"),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.clone()),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000".into()),
            ],
        );
        assert_eq!(outcome.code, baseline.code, "{name}: {outcome:?}");
        let summary: Value = serde_json::from_str(&outcome.stdout).unwrap();
        assert_eq!(summary["status"], base["status"], "{name}");
        assert_eq!(summary["totals"], base["totals"], "{name}");
        // The batch itself is not slowed (its own duration), and the process waits at most
        // the exit deadline (2 s) for the collector, plus noise.
        let batch_ms = summary["duration_ms"].as_u64().unwrap();
        let base_ms = base["duration_ms"].as_u64().unwrap();
        assert!(
            batch_ms < base_ms + 1000,
            "{name}: the batch took {batch_ms} ms against {base_ms} ms"
        );
        assert!(
            elapsed < baseline_time + Duration::from_secs(4),
            "{name}: {elapsed:?} against {baseline_time:?}"
        );
        // What was lost is said once, naming the collector.
        let warnings: Vec<_> = outcome
            .stderr
            .lines()
            .filter(|l| l.contains("did not reach the collector"))
            .collect();
        assert_eq!(warnings.len(), 1, "{name}: {}", outcome.stderr);
        assert!(warnings[0].contains(&collector), "{name}: {}", warnings[0]);
    }
}

#[test]
fn bad_otel_variables_and_a_public_metrics_address_without_a_token_are_refused_up_front() {
    let batch = Batch::new(None);
    let (outcome, _) = batch.run(
        "ws",
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://127.0.0.1:4318".into(),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
        ],
    );
    assert_eq!(outcome.code, 126, "{outcome:?}");
    assert!(
        outcome.stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL")
            && outcome.stderr.contains("http/protobuf"),
        "{}",
        outcome.stderr
    );
    let child = batch
        .command("ws2", &[])
        .args(["--metrics-listen", "0.0.0.0:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let outcome = wait_output(child, LIMIT);
    assert_eq!(outcome.code, 2, "{outcome:?}");
    assert!(
        outcome.stderr.contains("not a loopback address"),
        "{}",
        outcome.stderr
    );
    let child = batch
        .command("ws3", &[("DELTA_METRICS_TOKEN", "short".into())])
        .args(["--metrics-listen", "0.0.0.0:0", "--metrics-public"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let outcome = wait_output(child, LIMIT);
    assert_eq!(outcome.code, 2, "{outcome:?}");
    assert!(
        outcome.stderr.contains("DELTA_METRICS_TOKEN"),
        "{}",
        outcome.stderr
    );
}
