//! Budgets (issue 33 item 2), as a user meets them against the scripted model, which
//! reports usage, with `llm.price` set: a fan-out plan whose budget runs out mid-way stops
//! starting runs, its runs stop INTERRUPTED `budget_exhausted` before the call that would
//! pass it, the summary and `list-orchestrations` say "budget exhausted (spent $X of $Y)";
//! resumed with a bigger budget it ends exactly as an uninterrupted run with enough budget
//! (every answer, every status, every token billed). The overshoot with N runs in flight is
//! at most N times the dearest call; `delta run --budget-tokens` stops a single run; a dollar
//! budget over a model nothing prices is refused before anything starts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{read_journal, wait_output, Outcome};
use crate::orchestrate::delta_in;

/// Dollars per million tokens of the worker, input and output alike: $0.001 a token.
const PRICE_PER_MTOK: f64 = 1000.0;
const LIMIT: Duration = Duration::from_secs(120);

/// Two model calls per run (a tool call, then the answer); each run's answer names its item.
const SCRIPT: &str = "steps:\n  - tool: greet\n    args: { name: \"{{ task }}\" }\n  - answer: \"done {{ task }}\"\n";

/// Words that make each map run's prompt long: then its billed tokens, not the tool list
/// the estimate also counts, are most of each call's estimate.
const PADDING: &str = "Read this carefully and take your time with the item please. ";

pub fn plan(max_parallel: usize, items: usize) -> String {
    let padding = PADDING.repeat(60);
    let items: Vec<String> = (0..items).map(|i| format!("i{i}")).collect();
    format!(
        "name: spend\nmax_parallel: {max_parallel}\ndefaults: {{ agent: ./agents/worker }}\nstages:\n  - id: map\n    foreach: {{ items: [{}] }}\n    message: \"item {{{{ item }}}} {PADDING}\"\n  - id: reduce\n    needs: [map]\n    message: \"combine {{{{ stages.map.results | length }}}} results\"\n",
        items.join(", "),
        PADDING = padding
    )
}

/// A plan folder: the priced worker (`price` under `llm:`, empty for none), the script and
/// `plan.yaml`.
pub fn fixture(plan_text: &str, price: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agents/worker");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("agent.yaml"),
        format!("name: worker\nllm:\n  model: scripted\n  max_tokens: 16\n{price}tools:\n  - name: greet\n    description: Greets someone\n    exec: \"echo hi ${{name}}\"\n    parameters:\n      - name: name\n        description: who\n"),
    )
    .unwrap();
    std::fs::write(agent.join("system_prompt.md"), "You are a test agent.\n").unwrap();
    std::fs::write(agent.join("context.yaml"), crate::harness::CONTEXT_YAML).unwrap();
    std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
    std::fs::write(dir.path().join("plan.yaml"), plan_text).unwrap();
    dir
}

fn priced() -> String {
    format!("  price: {{ input_per_mtok: {PRICE_PER_MTOK}, output_per_mtok: {PRICE_PER_MTOK} }}\n")
}

fn delta(dir: &Path, args: &[impl AsRef<std::ffi::OsStr>]) -> Outcome {
    let child = delta_in(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, LIMIT)
}

fn orchestrate(dir: &Path, ws: &str, extra: &[&str]) -> Outcome {
    let mut args = vec![
        "orchestrate",
        "plan.yaml",
        "-w",
        ws,
        "--llm-script",
        "script.yaml",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    delta(dir, &args)
}

fn json(out: &Outcome) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", out.stdout, out.stderr))
}

/// Every run's (stage, index) → (status, answer, input tokens, output tokens).
fn rows(summary: &Value) -> Vec<(String, u64, String, Value, u64, u64)> {
    let mut rows = Vec::new();
    for stage in summary["stages"].as_array().unwrap() {
        for row in stage["runs"].as_array().unwrap() {
            rows.push((
                stage["id"].as_str().unwrap().to_string(),
                row["index"].as_u64().unwrap(),
                row["status"].as_str().unwrap().to_string(),
                row["result"].clone(),
                row["usage"]["input_tokens"].as_u64().unwrap(),
                row["usage"]["output_tokens"].as_u64().unwrap(),
            ));
        }
    }
    rows.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    rows
}

/// The first run of the first stage that ended INTERRUPTED (the one a cap stopped).
pub fn interrupted_run(summary: &Value) -> &Value {
    summary["stages"][0]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "INTERRUPTED")
        .unwrap_or_else(|| panic!("no INTERRUPTED run: {summary:#}"))
}

fn total_cost(summary: &Value) -> f64 {
    summary["totals"]["total_cost_usd"]
        .as_f64()
        .unwrap_or_else(|| panic!("no total cost: {summary:#}"))
}

/// Issue 33 acceptance: a budget that runs out mid-way, then a resume with a bigger one,
/// ends exactly as an uninterrupted orchestration with enough budget.
#[test]
fn a_budget_stops_the_batch_and_a_resume_with_a_bigger_one_ends_as_if_uninterrupted() {
    let dir = fixture(&plan(1, 6), &priced());
    let root = dir.path();
    let full = orchestrate(root, "ws-a", &["--budget-usd", "100"]);
    assert_eq!(full.code, 0, "{}", full.stderr);
    let full = json(&full);
    let whole_cost = total_cost(&full);
    assert!(whole_cost > 0.0, "{full:#}");

    // Half of what the batch costs: it runs out in the middle of the fan-out.
    let cap = whole_cost / 2.0;
    let cap_text = format!("{cap}");
    let stopped = orchestrate(root, "ws-b", &["--budget-usd", &cap_text]);
    assert_eq!(stopped.code, 130, "{}\n{}", stopped.stdout, stopped.stderr);
    assert!(
        stopped
            .stderr
            .contains("warning: 80% of the plan's budget spent"),
        "{}",
        stopped.stderr
    );
    let summary = json(&stopped);
    assert_eq!(summary["status"], "INTERRUPTED", "{summary:#}");
    let note = summary["error"].as_str().unwrap();
    assert!(
        note.starts_with("budget exhausted (spent $") && note.contains(&format!("of ${cap:.2}")),
        "{note}"
    );
    // Nothing past the cap with one run at a time: each call was checked with its estimate.
    assert!(total_cost(&summary) <= cap, "{summary:#}");
    let done = rows(&summary);
    let interrupted: Vec<_> = done.iter().filter(|r| r.2 == "INTERRUPTED").collect();
    assert_eq!(interrupted.len(), 1, "one run in flight stopped: {done:#?}");
    assert!(
        done.iter().filter(|r| r.2 == "COMPLETED").count() < 6,
        "the fan-out stopped mid-way: {done:#?}"
    );
    // The stopped run's journal says why, and nothing after it was made.
    let orchestration_id = summary["orchestration_id"].as_str().unwrap().to_string();
    let stopped_row = interrupted_run(&summary);
    assert!(
        stopped_row["error"]
            .as_str()
            .unwrap()
            .starts_with("budget_exhausted: budget exhausted (spent $"),
        "{stopped_row:#}"
    );
    let run_id = stopped_row["run_id"].as_str().unwrap();
    let journal = read_journal(&root.join("ws-b/.delta").join(run_id).join("journal.jsonl"));
    let last = journal.last().unwrap();
    assert_eq!(last["type"], "ENGINE_END", "{journal:#?}");
    assert!(
        journal.iter().any(|e| e["type"] == "INTERRUPTED"
            && e["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("budget_exhausted: "))),
        "{journal:#?}"
    );

    let listed = delta(root, &["list-orchestrations", "-w", "ws-b"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed.stdout.contains("budget exhausted (spent $")
            && listed.stdout.contains("--budget-usd"),
        "{}",
        listed.stdout
    );

    let resumed = orchestrate(
        root,
        "ws-b",
        &["--resume", &orchestration_id, "--budget-usd", "100"],
    );
    assert_eq!(resumed.code, 0, "{}\n{}", resumed.stdout, resumed.stderr);
    let resumed = json(&resumed);
    assert_eq!(resumed["status"], full["status"]);
    assert_eq!(rows(&resumed), rows(&full));
    for key in ["input_tokens", "output_tokens"] {
        assert_eq!(resumed["totals"][key], full["totals"][key], "{key}");
    }
    assert!((total_cost(&resumed) - whole_cost).abs() < 1e-9);
}

/// With N runs in flight, each checks the spending before its call without counting the
/// others' calls in flight: the budget is overshot by at most N times the dearest call.
#[test]
fn the_overshoot_is_at_most_the_calls_in_flight() {
    const IN_FLIGHT: usize = 4;
    let dir = fixture(&plan(IN_FLIGHT, 16), &priced());
    let root = dir.path();
    // About four runs' worth of the sixteen (a run costs about $5.5 here).
    let cap = 20.0;
    let out = orchestrate(root, "ws", &["--budget-usd", "20"]);
    assert_eq!(out.code, 130, "{}\n{}", out.stdout, out.stderr);
    let summary = json(&out);
    let spent = total_cost(&summary);
    // The dearest single call, from what was billed: each call's tokens (its THOUGHT's
    // usage, every attempt) at the price.
    let mut dearest: f64 = 0.0;
    for stage in summary["stages"].as_array().unwrap() {
        for row in stage["runs"].as_array().unwrap() {
            let run_id = row["run_id"].as_str().unwrap();
            for event in read_journal(&root.join("ws/.delta").join(run_id).join("journal.jsonl")) {
                if event["type"] == "THOUGHT" {
                    let usage = &event["usage"];
                    let tokens = usage["input_tokens"].as_u64().unwrap()
                        + usage["output_tokens"].as_u64().unwrap();
                    dearest = dearest.max(tokens as f64 * PRICE_PER_MTOK / 1e6);
                }
            }
        }
    }
    let completed = rows(&summary).iter().filter(|r| r.2 == "COMPLETED").count();
    assert!(
        spent > 0.0 && completed > 0 && completed < 16,
        "{summary:#}"
    );
    let overshoot = (spent - cap).max(0.0);
    eprintln!(
        "budget ${cap}: spent ${spent:.6}, overshoot ${overshoot:.6} with {IN_FLIGHT} in flight (dearest call ${dearest:.6})"
    );
    assert!(
        overshoot <= IN_FLIGHT as f64 * dearest,
        "overshoot {overshoot} > {IN_FLIGHT} x {dearest}"
    );
    assert!(summary["error"]
        .as_str()
        .unwrap()
        .starts_with("budget exhausted"));
}

/// `delta run --budget-tokens`: the run stops before the call that would pass the cap,
/// INTERRUPTED `budget_exhausted` (exit 130), and `delta continue` goes on later.
#[test]
fn a_run_stops_at_its_token_budget_and_continues_later() {
    let dir = fixture(&plan(1, 1), "");
    let root = dir.path();
    let args = |run_id: &'static str, extra: &[&str]| {
        let mut args: Vec<String> = [
            "run",
            "--agent",
            "agents/worker",
            "-m",
            "greet ann",
            "-w",
            "ws",
            "--run-id",
            run_id,
            "--llm-script",
            "script.yaml",
            "--format",
            "json",
        ]
        .map(str::to_string)
        .to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    // A cap below the first call's estimate: the run stops before any call, and says what
    // the call was estimated at.
    let first = delta(root, &args("r0", &["--budget-tokens", "1"]));
    assert_eq!(first.code, 130, "{}\n{}", first.stdout, first.stderr);
    let message = json(&first)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    let estimate: u64 = message
        .split(", ")
        .find_map(|part| {
            part.strip_suffix(" tokens) was not made: continue the run with a bigger budget")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no estimate in {message}"));
    let journal = read_journal(&root.join("ws/.delta/r0/journal.jsonl"));
    assert!(
        !journal.iter().any(|e| e["type"] == "THOUGHT"),
        "{journal:#?}"
    );

    // Exactly the first call's estimate: the first call is made; the second, whose prompt
    // holds the first's, would pass the cap.
    let cap = estimate.to_string();
    let out = delta(root, &args("r1", &["--budget-tokens", &cap]));
    assert_eq!(out.code, 130, "{}\n{}", out.stdout, out.stderr);
    let result = json(&out);
    assert_eq!(result["status"], "INTERRUPTED", "{result:#}");
    assert_eq!(result["error"]["type"], "budget_exhausted", "{result:#}");
    let usage = &result["metrics"]["usage"];
    let billed = usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap();
    assert!(billed > 0 && billed <= estimate, "{usage}");
    let journal = read_journal(&root.join("ws/.delta/r1/journal.jsonl"));
    let thoughts = journal.iter().filter(|e| e["type"] == "THOUGHT").count();
    assert_eq!(thoughts, 1, "one call made: {journal:#?}");

    let continued = delta(
        root,
        &[
            "continue",
            "-w",
            "ws",
            "--run-id",
            "r1",
            "--llm-script",
            "script.yaml",
            "--format",
            "json",
        ],
    );
    assert_eq!(
        continued.code, 0,
        "{}\n{}",
        continued.stdout, continued.stderr
    );
    assert_eq!(json(&continued)["result"], "done greet ann");
}

/// A dollar budget over a model nothing prices cannot be enforced: refused before anything
/// starts (exit 126), naming the model and `llm.price`; a token budget needs no price.
#[test]
fn a_dollar_budget_over_an_unpriced_model_is_refused_up_front() {
    let dir = fixture(&plan(1, 2), "");
    let root = dir.path();
    let out = orchestrate(root, "ws", &["--budget-usd", "5"]);
    assert_eq!(out.code, 126, "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    for needle in ["model scripted", "llm.price", "plan.yaml", "stage map"] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
    assert!(!root.join("ws/.delta").exists(), "nothing started");
    let run = delta(
        root,
        &[
            "run",
            "--agent",
            "agents/worker",
            "-m",
            "hi",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
            "--budget-usd",
            "5",
        ],
    );
    assert_eq!(run.code, 126, "{}", run.stderr);
    assert!(run.stderr.contains("llm.price"), "{}", run.stderr);
    // Out of range on the command line: a usage error.
    let bad = orchestrate(root, "ws", &["--budget-usd", "-3"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    let tokens_only = orchestrate(root, "ws", &["--budget-tokens", "1000000"]);
    assert_eq!(tokens_only.code, 0, "{}", tokens_only.stderr);
}

/// Issue 33 item 2: one spending cap across every caller of a relay (what a Slurm batch's
/// jobs share). Runs through `delta relay --budget-tokens` complete until the relay's
/// ledger would pass the cap; then the relay answers 402 `budget_exhausted`, which the run
/// records as INTERRUPTED `budget_exhausted` (exit 130, not a retried failure).
#[test]
fn the_relays_one_budget_stops_every_caller() {
    use std::io::{BufRead, BufReader};
    const CAP: u64 = 1500;
    let dir = fixture(&plan(1, 1), "");
    let root = dir.path();
    let mut relay = delta_in(root)
        .args([
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--llm-script",
            "script.yaml",
            "--budget-tokens",
            &CAP.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(relay.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    let token = lines.next().unwrap().unwrap();
    let mut billed = 0;
    let mut refused = None;
    // Bounded: each run bills about 60 tokens, so the cap is reached well before 50 runs.
    for index in 0..50 {
        let run_id = format!("r{index}");
        let child = delta_in(root)
            .env("DELTA_BASE_URL", &url)
            .env("DELTA_API_KEY", &token)
            .args([
                "run",
                "--agent",
                "agents/worker",
                "-m",
                "greet ann",
                "-w",
                "ws",
                "--run-id",
                &run_id,
                "--format",
                "json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait_output(child, LIMIT);
        let result = json(&out);
        let usage = &result["metrics"]["usage"];
        billed +=
            usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap();
        if out.code != 0 {
            refused = Some((out.code, result));
            break;
        }
    }
    let _ = relay.kill();
    let _ = relay.wait();
    let (code, result) = refused.expect("the relay never refused");
    assert_eq!(code, 130, "{result:#}");
    assert_eq!(result["status"], "INTERRUPTED", "{result:#}");
    assert_eq!(result["error"]["type"], "budget_exhausted", "{result:#}");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("budget exhausted (spent "),
        "{result:#}"
    );
    assert!(billed <= CAP, "billed {billed} of {CAP}");
}

/// A stage's own `budget:` caps that stage's runs together (no price needed for tokens);
/// the run whose check first sees 80 % of it journals a WARNING.
#[test]
fn a_stage_budget_stops_its_stage_and_warns_at_80_percent() {
    let text = plan(1, 6).replace(
        "    message: \"item",
        "    budget: { tokens: 15000 }\n    message: \"item",
    );
    let dir = fixture(&text, "");
    let root = dir.path();
    let out = orchestrate(root, "ws", &[]);
    assert_eq!(out.code, 130, "{}\n{}", out.stdout, out.stderr);
    let summary = json(&out);
    let note = summary["error"].as_str().unwrap();
    assert!(
        note.starts_with("stage map: budget exhausted (spent "),
        "{note}"
    );
    assert!(note.ends_with(" of 15000 tokens)"), "{note}");
    let billed = summary["totals"]["input_tokens"].as_u64().unwrap()
        + summary["totals"]["output_tokens"].as_u64().unwrap();
    assert!(billed <= 15000, "{billed}");
    let warned = summary["stages"][0]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|row| {
            let run_id = row["run_id"].as_str().unwrap();
            read_journal(&root.join("ws/.delta").join(run_id).join("journal.jsonl"))
                .iter()
                .any(|e| {
                    e["type"] == "WARNING"
                        && e["message"]
                            .as_str()
                            .is_some_and(|m| m.starts_with("80% of stage map's budget spent"))
                })
        });
    assert!(warned, "no run journaled the 80% warning");
}
