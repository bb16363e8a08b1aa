//! What a run cost (issue 33 item 1), as a user sees it against `delta mock-llm`: the
//! RunResult's `total_cost_usd` (this driving and the run's whole life), metadata.json and
//! the text summary, priced by agent.yaml's `llm.price` or by the model catalogue, and
//! `null` with "cost unknown (no price for model X: set llm.price)" when nothing prices the
//! model — never a made-up 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};

use crate::harness::Case;

const GREETER: &str = "tools:\n  - name: greet\n    description: Greets someone\n    exec: \"echo hi ${name}\"\n    parameters:\n      - name: name\n        description: who\n";

/// Two model calls: a tool call, then the answer.
fn two_calls() -> Value {
    json!({"steps": [{"tool": "greet", "args": {"name": "ann"}}, {"answer": "done"}]})
}

/// Dollars of `usage`'s tokens at `input`/`output` dollars per million tokens.
fn dollars(usage: &Value, input: f64, output: f64) -> f64 {
    let tokens = |key: &str| usage[key].as_u64().unwrap() as f64;
    (tokens("input_tokens") * input + tokens("output_tokens") * output) / 1e6
}

fn assert_close(actual: &Value, expected: f64, what: &str) {
    let actual = actual
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {actual}"));
    assert!(expected > 0.0, "{what}: the run used no tokens");
    assert!(
        (actual - expected).abs() <= expected * 1e-9,
        "{what}: {actual} != {expected}"
    );
}

#[test]
fn a_run_costs_its_tokens_at_the_agents_price() {
    let (input, output) = (3.0, 15.0);
    let body =
        format!("  price:\n    input_per_mtok: {input}\n    output_per_mtok: {output}\n{GREETER}");
    let case = Case::new("priced", &body, &two_calls());
    let run = case.run("r1", "greet ann", &[]);
    run.assert_code(0);
    let result = run.json();
    let usage = &result["metrics"]["usage"];
    let expected = dollars(usage, input, output);
    assert_close(&usage["total_cost_usd"], expected, "usage.total_cost_usd");
    assert!(usage.get("cost_note").is_none(), "{usage}");
    assert_close(
        &result["metrics"]["cumulative_cost_usd"],
        dollars(&result["metrics"]["cumulative_usage"], input, output),
        "cumulative_cost_usd",
    );
    let meta = case.metadata("r1");
    assert_close(&meta["cost"]["total_cost_usd"], expected, "metadata cost");
    assert_close(
        &meta["cumulative_cost"]["total_cost_usd"],
        expected,
        "metadata cumulative_cost",
    );

    // A continuation adds its own calls to the run's total.
    let script_answer = case.continue_run("r1", &["-m", "once more"]);
    script_answer.assert_code(0);
    let again = script_answer.json();
    let this_driving = dollars(&again["metrics"]["usage"], input, output);
    assert_close(
        &again["metrics"]["usage"]["total_cost_usd"],
        this_driving,
        "continuation",
    );
    assert_close(
        &again["metrics"]["cumulative_cost_usd"],
        expected + this_driving,
        "cumulative after the continuation",
    );

    let text = case.delta(&[
        "run",
        "--agent",
        case.agent_dir().to_str().unwrap(),
        "-w",
        case.work_dir().to_str().unwrap(),
        "--run-id",
        "r2",
        "-m",
        "greet ann",
    ]);
    text.assert_code(0);
    assert!(
        text.stdout.contains("  • Cost:       $0.0"),
        "{}",
        text.stdout
    );

    let listed = case.delta(&[
        "list-runs",
        "-w",
        case.work_dir().to_str().unwrap(),
        "--format",
        "json",
    ]);
    listed.assert_code(0);
    let rows = listed.json();
    let r1 = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == "r1")
        .unwrap();
    assert_close(
        &r1["total_cost_usd"],
        dollars(&r1["usage"], input, output),
        "list-runs r1",
    );
    assert_close(
        &r1["total_cost_usd"],
        expected + this_driving,
        "list-runs total",
    );
}

#[test]
fn a_model_nobody_prices_costs_null_and_says_so() {
    let case = Case::new("unpriced", GREETER, &two_calls());
    let run = case.run("r1", "greet ann", &[]);
    run.assert_code(0);
    let result = run.json();
    let usage = &result["metrics"]["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(usage["total_cost_usd"], Value::Null, "{usage}");
    assert_eq!(result["metrics"]["cumulative_cost_usd"], Value::Null);
    let note = "cost unknown (no price for model scripted: set llm.price)";
    assert_eq!(usage["cost_note"], note);
    let meta = case.metadata("r1");
    assert_eq!(meta["cost"]["unpriced_model"], "scripted");
    assert_eq!(meta["cost"]["total_cost_usd"], Value::Null, "{meta}");
    assert_eq!(
        meta["cumulative_cost"]["total_cost_usd"],
        Value::Null,
        "{meta}"
    );

    let text = case.delta(&[
        "run",
        "--agent",
        case.agent_dir().to_str().unwrap(),
        "-w",
        case.work_dir().to_str().unwrap(),
        "--run-id",
        "r2",
        "-m",
        "greet ann",
    ]);
    text.assert_code(0);
    assert!(text.stdout.contains(note), "{}", text.stdout);
    assert!(!text.stdout.contains("$0.00"), "{}", text.stdout);

    let listed = case.delta(&["list-runs", "-w", case.work_dir().to_str().unwrap()]);
    listed.assert_code(0);
    let header = listed.stdout.lines().next().unwrap();
    assert!(
        header.contains("TOKENS") && header.contains("COST"),
        "{}",
        listed.stdout
    );
    for line in listed.stdout.lines().skip(1) {
        assert!(
            line.contains('—'),
            "unknown cost shown as `—`: {}",
            listed.stdout
        );
    }
}

/// The scripted server answers as `gpt-4o-mini`: the catalogue's price applies.
#[test]
fn a_catalogue_model_is_priced_from_the_catalogue() {
    let mut script = two_calls();
    script["model"] = json!("gpt-4o-mini");
    let case = Case::new("catalogued", GREETER, &script);
    let row = delta_actors::llm::catalogue::catalogue()
        .lookup("gpt-4o-mini", None)
        .unwrap();
    let (input, output) = (row.input_per_mtok.unwrap(), row.output_per_mtok.unwrap());
    let run = case.run("r1", "greet ann", &[]);
    run.assert_code(0);
    let usage = &run.json()["metrics"]["usage"];
    assert_close(
        &usage["total_cost_usd"],
        dollars(usage, input, output),
        "catalogue price",
    );
}

/// Writes `agents/<name>/` under `root`: the scripted model, `llm_extra` under `llm:`.
fn write_plan_agent(root: &std::path::Path, name: &str, llm_extra: &str) {
    let dir = root.join("agents").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        format!("name: {name}\nllm:\n  model: scripted\n{llm_extra}tools: []\n"),
    )
    .unwrap();
    std::fs::write(dir.join("system_prompt.md"), "You are a test agent.\n").unwrap();
    std::fs::write(dir.join("context.yaml"), crate::harness::CONTEXT_YAML).unwrap();
}

fn orchestrate(dir: &std::path::Path, plan: &str) -> Value {
    let out = assert_cmd::Command::cargo_bin("delta")
        .unwrap()
        .current_dir(dir)
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .timeout(crate::harness::COMMAND_TIMEOUT)
        .args([
            "orchestrate",
            plan,
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ])
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

fn stage<'a>(summary: &'a Value, id: &str) -> &'a Value {
    summary["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no stage {id}: {summary:#}"))
}

/// The orchestration summary prices each run at its agent's price, sums the runs of a
/// stage and the stages of the plan; one unpriced stage makes the plan's total unknown.
#[test]
fn the_orchestration_summary_totals_cost_per_stage_and_plan() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_plan_agent(
        root,
        "cheap",
        "  price: { input_per_mtok: 1.5, output_per_mtok: 2 }\n",
    );
    write_plan_agent(
        root,
        "dear",
        "  price: { input_per_mtok: 40, output_per_mtok: 120 }\n",
    );
    write_plan_agent(root, "unpriced", "");
    std::fs::write(
        root.join("script.yaml"),
        "steps: [{ answer: \"done with {{ task }}\" }]\n",
    )
    .unwrap();
    std::fs::write(
        root.join("plan.yaml"),
        "stages:\n  - id: map\n    agent: ./agents/cheap\n    foreach: { items: [a, bb, ccc] }\n    message: \"item {{ item }}\"\n  - id: reduce\n    agent: ./agents/dear\n    needs: [map]\n    message: combine\n",
    )
    .unwrap();
    let summary = orchestrate(root, "plan.yaml");
    let mut plan_total = 0.0;
    for (id, input, output, runs) in [("map", 1.5, 2.0, 3), ("reduce", 40.0, 120.0, 1)] {
        let stage = stage(&summary, id);
        let rows = stage["runs"].as_array().unwrap();
        assert_eq!(rows.len(), runs, "{stage:#}");
        let mut stage_total = 0.0;
        for row in rows {
            let expected = dollars(&row["usage"], input, output);
            assert_close(&row["total_cost_usd"], expected, "a run's cost");
            stage_total += expected;
        }
        assert_close(&stage["total_cost_usd"], stage_total, id);
        plan_total += stage_total;
    }
    assert_close(&summary["totals"]["total_cost_usd"], plan_total, "totals");

    std::fs::write(
        root.join("unpriced.yaml"),
        "stages:\n  - { id: priced, agent: ./agents/cheap, message: go }\n  - { id: free, agent: ./agents/unpriced, message: go }\n",
    )
    .unwrap();
    let summary = orchestrate(root, "unpriced.yaml");
    assert!(
        stage(&summary, "priced")["total_cost_usd"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let free = stage(&summary, "free");
    assert_eq!(free["total_cost_usd"], Value::Null, "{free:#}");
    assert_eq!(free["unpriced_model"], "scripted", "{free:#}");
    assert_eq!(
        summary["totals"]["total_cost_usd"],
        Value::Null,
        "{summary:#}"
    );

    // `list-orchestrations`: the first plan's total, and `—` for the unpriced one.
    let listed = list(
        root,
        &["list-orchestrations", "-w", "ws", "--format", "json"],
    );
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{listed:#}");
    let priced = rows
        .iter()
        .find(|r| !r["total_cost_usd"].is_null())
        .unwrap();
    assert_close(&priced["total_cost_usd"], plan_total, "list-orchestrations");
    assert!(
        rows.iter().any(|r| r["total_cost_usd"].is_null()),
        "{listed:#}"
    );
    let text = list(root, &["list-orchestrations", "-w", "ws"]);
    let header = text.lines().next().unwrap();
    assert!(
        header.contains("TOKENS") && header.contains("COST"),
        "{text}"
    );
    assert!(text.contains('—'), "{text}");
    assert!(text.contains("$0.0"), "{text}");
}

/// stdout of a `delta` listing command in `dir`, which must succeed.
fn list(dir: &std::path::Path, args: &[&str]) -> String {
    let out = assert_cmd::Command::cargo_bin("delta")
        .unwrap()
        .current_dir(dir)
        .env_remove("DELTA_LOG")
        .timeout(crate::harness::COMMAND_TIMEOUT)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A plan's `llm.price` prices the agents without one of their own; an agent's own wins.
#[test]
fn a_plans_price_prices_agents_without_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_plan_agent(
        root,
        "own",
        "  price: { input_per_mtok: 40, output_per_mtok: 120 }\n",
    );
    write_plan_agent(root, "bare", "");
    std::fs::write(root.join("script.yaml"), "steps: [{ answer: done }]\n").unwrap();
    std::fs::write(
        root.join("plan.yaml"),
        "llm: { price: { input_per_mtok: 0.5, output_per_mtok: 1.5 } }\nstages:\n  - { id: own, agent: ./agents/own, message: go }\n  - { id: bare, agent: ./agents/bare, message: go }\n",
    )
    .unwrap();
    let summary = orchestrate(root, "plan.yaml");
    for (id, input, output) in [("own", 40.0, 120.0), ("bare", 0.5, 1.5)] {
        let row = &stage(&summary, id)["runs"][0];
        assert_close(
            &row["total_cost_usd"],
            dollars(&row["usage"], input, output),
            id,
        );
    }
}
