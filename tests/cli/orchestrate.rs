//! CLI tests of `delta orchestrate`: `--dry-run` on good and bad plans, the JSON summary,
//! exit codes 0 / 1 / 126 / 130 (SIGINT while runs sleep), `--var`, `--resume ID -w DIR`
//! without the plan path, and both example plans run offline.
//!
//! Also owns the small plan-fixture helpers the crash test shares.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const CONTEXT: &str = "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: conversation_history\n";

/// Writes `agents/<name>/` under `root` with the given `tools:` list items.
pub fn write_agent(root: &Path, name: &str, tools_yaml: &str) {
    let dir = root.join("agents").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let tools = if tools_yaml.is_empty() {
        "tools: []\n".to_string()
    } else {
        format!("tools:\n{tools_yaml}")
    };
    std::fs::write(
        dir.join("agent.yaml"),
        format!("name: {name}\nllm:\n  model: scripted\n{tools}"),
    )
    .unwrap();
    std::fs::write(dir.join("system_prompt.md"), "You are a test agent.\n").unwrap();
    std::fs::write(dir.join("context.yaml"), CONTEXT).unwrap();
}

/// `delta` from the build, in `dir`, without inherited logging or stdin.
pub fn delta_in(dir: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("delta"));
    cmd.current_dir(dir)
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .stdin(Stdio::null());
    cmd
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

fn run(dir: &Path, args: &[&str]) -> Outcome {
    let output = delta_in(dir).args(args).output().unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `delta orchestrate` of a [`plan_dir`] into `ws` with its script, summary as JSON.
const ORCHESTRATE_JSON: [&str; 8] = [
    "orchestrate",
    "plan.yaml",
    "-w",
    "ws",
    "--llm-script",
    "script.yaml",
    "--format",
    "json",
];

/// [`ORCHESTRATE_JSON`] followed by `extra` arguments.
fn orchestrate_json(dir: &Path, extra: &[&str]) -> Outcome {
    run(dir, &[&ORCHESTRATE_JSON[..], extra].concat())
}

/// A temporary plan directory with one `worker` agent, `plan.yaml` and `script.yaml`.
fn plan_dir(plan: &str, script: &str, tools_yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_agent(dir.path(), "worker", tools_yaml);
    std::fs::write(dir.path().join("plan.yaml"), plan).unwrap();
    std::fs::write(dir.path().join("script.yaml"), script).unwrap();
    dir
}

fn stage<'a>(summary: &'a Value, id: &str) -> &'a Value {
    summary["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no stage {id}: {summary:#}"))
}

#[test]
fn dry_run_prints_the_stage_layers_and_runs_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let plan = repo_root().join("examples/plans/map-reduce/plan.yaml");
    let out = run(
        ws.path(),
        &["orchestrate", plan.to_str().unwrap(), "--dry-run"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let layer1 = out.stdout.find("layer 1").expect(&out.stdout);
    let layer2 = out.stdout.find("layer 2").expect(&out.stdout);
    let map = out.stdout.find("map: agent processor").expect(&out.stdout);
    let reduce = out
        .stdout
        .find("reduce: agent aggregator")
        .expect(&out.stdout);
    assert!(
        layer1 < map && map < layer2 && layer2 < reduce,
        "{}",
        out.stdout
    );
    assert!(
        !out.stderr.contains("orchestration "),
        "nothing was started"
    );
    assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0);
}

#[test]
fn an_invalid_plan_exits_126_naming_the_file_and_key() {
    let fixtures = repo_root().join("tests/fixtures/bad-plans");
    for (file, key) in [
        ("unknown-var.yaml", "stages.work.message"),
        ("cycle.yaml", "stages.a.needs"),
        ("unknown-key.yaml", "stages.work.mesage"),
    ] {
        let plan = fixtures.join(file);
        for extra in [&["--dry-run"][..], &[][..]] {
            let mut args = vec!["orchestrate", plan.to_str().unwrap()];
            args.extend_from_slice(extra);
            let out = run(&fixtures, &args);
            assert_eq!(out.code, 126, "{file} {extra:?}: {}", out.stderr);
            assert!(out.stderr.contains(file), "{file}: {}", out.stderr);
            assert!(out.stderr.contains(key), "{file}: {}", out.stderr);
            assert!(out.stdout.is_empty(), "{file}: {}", out.stdout);
        }
    }
}

#[test]
fn a_failed_stage_exits_1_and_the_json_summary_says_why() {
    let dir = plan_dir(
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [good, bad] }\n    message: \"item {{ item }}\"\n  - id: after\n    needs: [work]\n    message: never\n",
        "rules:\n  - task_contains: bad\n    steps: [{ fail: 400 }]\n  - steps: [{ answer: \"{{ task }}\" }]\n",
        "",
    );
    let out = orchestrate_json(dir.path(), &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let summary = out.json();
    assert_eq!(summary["status"], "FAILED");
    let work = stage(&summary, "work");
    assert_eq!(work["status"], "FAILED");
    assert_eq!(work["completed"], 1);
    assert_eq!(work["failed"], 1);
    let bad = &work["runs"][1];
    assert_eq!(bad["status"], "FAILED");
    assert!(bad["error"].as_str().unwrap().contains("400"), "{bad:#}");
    assert_eq!(stage(&summary, "after")["status"], "SKIPPED");
    let id = summary["orchestration_id"].as_str().unwrap();
    let saved = dir
        .path()
        .join("ws/.delta/orchestrations")
        .join(id)
        .join("summary.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
    assert_eq!(saved, summary, "summary.json is what was printed");
}

#[test]
fn var_overrides_reach_the_messages() {
    let dir = plan_dir(
        "vars: { who: world }\ndefaults: { agent: ./agents/worker }\nstages:\n  - { id: greet, message: \"hello {{ vars.who }}\" }\n",
        "steps: [{ answer: \"{{ task }}\" }]\n",
        "",
    );
    let out = orchestrate_json(dir.path(), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        stage(&out.json(), "greet")["runs"][0]["result"],
        "hello world"
    );
    let out = orchestrate_json(dir.path(), &["--var", "who=delta"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        stage(&out.json(), "greet")["runs"][0]["result"],
        "hello delta"
    );
    let out = run(
        dir.path(),
        &[&ORCHESTRATE_JSON[..2], &["--var", "no-equals-sign"]].concat(),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("KEY=VALUE"), "{}", out.stderr);
}

/// Waits (bounded) until `path` exists.
fn wait_for_file(path: &Path, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        assert!(child.try_wait().unwrap().is_none(), "delta exited early");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Live processes running `sleep <duration>` (by their command line).
fn sleepers(duration: &str) -> usize {
    let wanted = format!("sleep\0{duration}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|cmdline| cmdline == wanted.as_bytes())
        .count()
}

#[test]
fn sigint_interrupts_with_130_and_resume_without_the_plan_path_finishes() {
    // The first attempt of each item sleeps; once interrupted, its call is answered with
    // an interruption note and the continued run answers at once.
    let dir = plan_dir(
        "max_parallel: 4\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n",
        "steps:\n  - tool: nap\n    args: { name: \"{{ task | replace('item ', '') }}\" }\n  - answer: \"done {{ task }}\"\n",
        "  - name: nap\n    shell: \"touch started-${name} && sleep 29.517\"\n",
    );
    let root = dir.path();
    let mut child = delta_in(root)
        .args(["orchestrate", "plan.yaml", "-w", "ws", "--llm-script"])
        .args(["script.yaml", "--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let stderr_lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    wait_for_file(&root.join("ws/started-a"), &mut child);
    wait_for_file(&root.join("ws/started-b"), &mut child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleepers("29.517") < 2 {
        assert!(
            Instant::now() < deadline,
            "the tools never started sleeping"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let began = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "the sleeps were not killed"
    );
    let stderr = stderr_lines.join().unwrap().join("\n");
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert_eq!(
        sleepers("29.517"),
        0,
        "the tools' process groups were left running"
    );
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["status"], "INTERRUPTED");
    let work = stage(&summary, "work");
    assert_eq!(work["interrupted"], 2, "{work:#}");
    let id = summary["orchestration_id"].as_str().unwrap().to_string();
    assert!(stderr.contains(&format!("orchestration {id}")), "{stderr}");
    let saved = root
        .join("ws/.delta/orchestrations")
        .join(&id)
        .join("summary.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
    assert_eq!(saved["status"], "INTERRUPTED");

    let resumed_from = tempfile::tempdir().unwrap();
    let ws = root.join("ws");
    let out = run(
        resumed_from.path(),
        &[
            "orchestrate",
            "--resume",
            &id,
            "-w",
            ws.to_str().unwrap(),
            "--llm-script",
            root.join("script.yaml").to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let summary = out.json();
    assert_eq!(summary["status"], "COMPLETED");
    assert_eq!(summary["orchestration_id"], id.as_str());
    let runs = stage(&summary, "work")["runs"].as_array().unwrap().clone();
    let results: Vec<&str> = runs.iter().map(|r| r["result"].as_str().unwrap()).collect();
    assert_eq!(results, ["done item a", "done item b"]);
}

#[test]
fn the_example_plans_run_offline() {
    let examples = repo_root().join("examples/plans");
    for (example, product) in [("map-reduce", "report.md"), ("plan-execute", "document.md")] {
        let ws = tempfile::tempdir().unwrap();
        let dir = examples.join(example);
        let out = run(
            &dir,
            &[
                "orchestrate",
                "plan.yaml",
                "-w",
                ws.path().to_str().unwrap(),
                "--llm-script",
                "llm-script.yaml",
                "--format",
                "json",
            ],
        );
        assert_eq!(out.code, 0, "{example}: {}", out.stderr);
        let summary = out.json();
        assert_eq!(summary["status"], "COMPLETED", "{example}: {summary:#}");
        let totals = &summary["totals"];
        assert_eq!(totals["completed"], totals["total"], "{example}");
        assert!(totals["total"].as_u64().unwrap() >= 3, "{example}");
        let written = std::fs::read_to_string(ws.path().join(product))
            .unwrap_or_else(|e| panic!("{example}: no {product}: {e}"));
        assert!(!written.trim().is_empty(), "{example}: empty {product}");
    }
    let ws = tempfile::tempdir().unwrap();
    let out = run(
        &examples.join("map-reduce"),
        &[
            "orchestrate",
            "plan.yaml",
            "-w",
            ws.path().to_str().unwrap(),
            "--llm-script",
            "llm-script.yaml",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("COMPLETED"), "{}", out.stdout);
    let report = std::fs::read_to_string(ws.path().join("report.md")).unwrap();
    assert!(report.contains("item-20.txt"), "{report}");
}

#[test]
fn an_unknown_resume_id_exits_126_with_a_hint() {
    let dir = plan_dir(
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: one, message: go }\n",
        "steps: [{ answer: done }]\n",
        "",
    );
    for with_plan in [true, false] {
        let mut args = vec!["orchestrate"];
        if with_plan {
            args.push("plan.yaml");
        }
        args.extend([
            "--resume",
            "no-such-id",
            "-w",
            "ws",
            "--llm-script",
            "script.yaml",
        ]);
        let out = run(dir.path(), &args);
        assert_eq!(out.code, 126, "{}", out.stderr);
        assert!(out.stderr.contains("no-such-id"), "{}", out.stderr);
        assert!(out.stderr.contains("-w"), "{}", out.stderr);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
}

#[test]
fn without_w_runs_go_to_the_next_plan_workspace_and_resume_finds_it() {
    let dir = plan_dir(
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: first, message: go }\n  - { id: second, message: again }\n",
        "rules:\n  - task_contains: again\n    steps: [{ fail: 400 }]\n  - steps: [{ answer: ok }]\n",
        "",
    );
    let root = dir.path();
    let args = ["orchestrate", "plan.yaml", "--llm-script", "script.yaml"];
    let json = ["--format", "json"];
    let out = run(root, &[&args[..], &json].concat());
    assert_eq!(out.code, 1, "{}", out.stderr);
    let summary = out.json();
    let workspace = root.join("workspaces/W001").canonicalize().unwrap();
    assert_eq!(summary["workspace"], workspace.to_str().unwrap());
    let id = summary["orchestration_id"].as_str().unwrap().to_string();

    // A second plain start takes the next workspace; --resume finds the first one.
    let out = run(root, &args);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(root.join("workspaces/W002").is_dir());
    let out = run(root, &[&args[..], &json, &["--resume", &id]].concat());
    assert_eq!(out.code, 1, "{}", out.stderr);
    let resumed = out.json();
    assert_eq!(resumed["orchestration_id"], id.as_str());
    assert_eq!(resumed["workspace"], workspace.to_str().unwrap());
    let first = &stage(&resumed, "first")["runs"][0];
    assert_eq!(first["reused"], true, "{first:#}");
    assert!(!root.join("workspaces/W003").exists());
}

#[test]
fn max_parallel_flag_overrides_the_plan() {
    let dir = plan_dir(
        "max_parallel: 8\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c] }\n    message: \"item {{ item }}\"\n",
        "default_latency: 100\nsteps: [{ answer: \"{{ task }}\" }]\n",
        "",
    );
    let out = orchestrate_json(dir.path(), &["--max-parallel", "1"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let summary = out.json();
    let ws = dir.path().join("ws");
    // (ENGINE_START, ENGINE_END) timestamps per run, in item order.
    let mut intervals: Vec<(String, String)> = stage(&summary, "work")["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let run_id = r["run_id"].as_str().unwrap();
            let journal = ws.join(".delta").join(run_id).join("journal.jsonl");
            let events = delta_actors::journal::read_journal(&journal).unwrap();
            (
                events.first().unwrap().timestamp.clone(),
                events.last().unwrap().timestamp.clone(),
            )
        })
        .collect();
    intervals.sort();
    for pair in intervals.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "runs overlapped: {intervals:?}");
    }
}

#[test]
fn dry_run_loads_every_agent_and_names_a_broken_one() {
    let dir = plan_dir(
        "stages:\n  - { id: good, agent: ./agents/worker, message: go }\n  - { id: bad, agent: ./agents/broken, message: go }\n",
        "steps: [{ answer: done }]\n",
        "",
    );
    write_agent(dir.path(), "broken", "");
    let broken = dir.path().join("agents/broken/agent.yaml");
    let text = std::fs::read_to_string(&broken).unwrap();
    std::fs::write(&broken, format!("{text}max_iterations: lots\n")).unwrap();
    let out = run(dir.path(), &["orchestrate", "plan.yaml", "--dry-run"]);
    assert_eq!(out.code, 126, "{}", out.stderr);
    for needle in ["plan.yaml", "stage `bad`", "agent.yaml", "max_iterations"] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
    assert!(out.stdout.is_empty(), "{}", out.stdout);
}

#[test]
fn dry_run_puts_stages_without_needs_in_one_layer_and_says_so() {
    let dir = plan_dir(
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: one, message: a }\n  - { id: two, message: b }\n  - { id: three, needs: previous, message: c }\n",
        "steps: [{ answer: done }]\n",
        "",
    );
    let out = run(dir.path(), &["orchestrate", "plan.yaml", "--dry-run"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for needle in [
        "a stage without `needs` starts at once",
        "layer 1 (runs in parallel): one, two",
        "one: agent worker — one run; no needs: starts at once",
        "layer 2 (runs in parallel): three",
        "three: agent worker — one run; needs [two]",
    ] {
        assert!(out.stdout.contains(needle), "{needle}:\n{}", out.stdout);
    }
}

/// Issue 11 item 4: a `--max-parallel` the open-files limit cannot serve is said up front
/// (the limit, the need, a parallelism that fits), not met later as EMFILE; the batch still
/// runs.
#[test]
fn a_max_parallel_beyond_the_open_files_limit_is_warned_about_with_a_fit() {
    let dir = plan_dir(
        "name: fds\nstages:\n  - id: only\n    agent: agents/worker\n    message: go\n",
        "steps:\n  - answer: done\n",
        "",
    );
    let args = [&ORCHESTRATE_JSON[..], &["--max-parallel", "5000"]].concat();
    let output = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 200 && exec \"$0\" \"$@\"")
        .arg(assert_cmd::cargo::cargo_bin("delta"))
        .args(&args)
        .current_dir(dir.path())
        .env_remove("DELTA_LOG")
        .env_remove("DELTA_LLM_SCRIPT")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("but the limit is 200")
            && stderr.contains("Lower --max-parallel to about 20"),
        "{stderr}"
    );
}

/// Issue 11 item 17: `--dry-run` says how many runs a `foreach` makes when that is known, and
/// warns (stderr) about agents that could not reach a model.
#[test]
fn dry_run_counts_the_items_it_can_and_warns_when_no_model_is_configured() {
    let ws = tempfile::tempdir().unwrap();
    let plan = repo_root().join("examples/plans/map-reduce/plan.yaml");
    let script = repo_root().join("examples/plans/map-reduce/llm-script.yaml");
    let mut bare = delta_in(ws.path());
    bare.env_remove("DELTA_API_KEY")
        .env_remove("DELTA_BASE_URL")
        .args(["orchestrate", plan.to_str().unwrap(), "--dry-run"]);
    let out = bare.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("*.txt (20 now)"), "{stdout}");
    assert!(
        stderr.contains("warning: agent processor has no model configured")
            && stderr.contains("--llm-script"),
        "{stderr}"
    );
    let scripted = run(
        ws.path(),
        &[
            "orchestrate",
            plan.to_str().unwrap(),
            "--dry-run",
            "--llm-script",
            script.to_str().unwrap(),
        ],
    );
    assert_eq!(scripted.code, 0, "{}", scripted.stderr);
    assert!(
        !scripted.stderr.contains("no model configured"),
        "{}",
        scripted.stderr
    );

    let later = plan_dir(
        "name: later\nstages:\n  - id: plan\n    agent: agents/worker\n    message: plan\n    output: json\n  - id: work\n    agent: agents/worker\n    needs: plan\n    foreach: \"{{ stages.plan.output.steps }}\"\n    message: \"{{ item }}\"\n",
        "steps:\n  - answer: done\n",
        "",
    );
    let out = run(
        later.path(),
        &[
            "orchestrate",
            "plan.yaml",
            "--dry-run",
            "--llm-script",
            "script.yaml",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("(known when its needs finish)"),
        "{}",
        out.stdout
    );
}

/// Regression: a model call retried in a batch left no line on stderr (`delta run` printed
/// `↻`, orchestrate nothing), so a user watching a slow batch could not tell retries from a
/// slow model.
#[test]
fn model_call_retries_in_a_batch_are_shown() {
    let dir = plan_dir(
        "name: retried\nstages:\n  - id: only\n    agent: ./agents/worker\n    foreach: { items: [a, b] }\n    message: \"do {{ item }}\"\n",
        "steps:\n  - fail: 503\n    times: 1\n    message: upstream overloaded\n    then: { answer: done }\n",
        "",
    );
    let mock = crate::harness::MockLlm::start(&dir.path().join("script.yaml"));
    let output = delta_in(dir.path())
        .args(["orchestrate", "plan.yaml", "-w", "ws", "--format", "json"])
        .env("DELTA_BASE_URL", &mock.base_url)
        .env("DELTA_RETRY_BASE_MS", "5")
        .env_remove("DELTA_API_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let retries: Vec<&str> = stderr.lines().filter(|l| l.starts_with('↻')).collect();
    assert_eq!(retries.len(), 2, "{stderr}");
    for line in retries {
        assert!(
            line.contains("model call attempt 1 failed") && line.contains("upstream overloaded"),
            "{line}"
        );
        assert!(line.contains("retried-"), "the run is named: {line}");
    }
}
