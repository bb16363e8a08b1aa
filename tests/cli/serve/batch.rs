//! The batch view and the run inspector over REST, on real orchestrations and runs made with
//! the scripted model over HTTP (so replies stream): a finished 150-run batch with failures,
//! a retried model call and a tool with stdout and stderr; a run whose sensitive answer was
//! given with `delta continue`; a batch still running whose replies stream word by word.
//! Also what a run folder planted with a FIFO or a link does to the server (nothing).
//! The same fixture drives the browser tests (`batch_browser.rs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::{eventually, runtime, Root, Server, LIMIT};
use crate::harness::{Case, COMMAND_TIMEOUT};

/// The agent every run uses: one tool that writes to stdout and stderr.
const AGENT_BODY: &str = "tools:\n  - name: shout\n    description: says something\n    shell: \"echo shouting from the tool; echo a warning >&2\"\n";

/// Words of the slow, streamed answer.
pub const SLOW_WORDS: usize = 60;

/// The secret a person answers the sensitive question with; no page or answer may show it.
pub const SECRET: &str = "hunter2-correct-horse";

pub fn script() -> Value {
    let slow_answer: Vec<String> = (0..SLOW_WORDS).map(|i| format!("word{i}")).collect();
    json!({"rules": [
        {"task_contains": "item 3.", "steps": [{"fail": 400, "message": "the scripted model refuses item 3"}]},
        {"task_contains": "item 7.", "steps": [{"fail": 400, "message": "the scripted model refuses item 7"}]},
        {"task_contains": "item 5.", "steps": [
            {"fail": 500, "times": 1, "then": {"tool": "shout"}},
            {"answer": "done after a retry"}
        ]},
        {"task_contains": "password", "steps": [
            {"tool": "ask_human", "args": {"prompt": "Your password?", "sensitive": true}},
            {"answer": "thanks, stored"}
        ]},
        {"task_contains": "slow", "steps": [{"answer": slow_answer.join(" "), "latency": "40s"}]},
        {"steps": [{"tool": "shout"}, {"answer": "done: {{ task }}"}]}
    ]})
}

/// A workspace with a finished batch and a run answered with a sensitive answer.
pub struct Batch {
    pub case: Case,
    /// The workspace, canonical (as the server names it).
    pub workspace: PathBuf,
    /// The finished orchestration: `map` (150 runs; items 3 and 7 fail) then `combine`.
    pub watch: String,
}

/// `delta orchestrate PLAN --format json` in the case's environment; its orchestration id.
fn orchestrate(case: &Case, plan: &Path, workspace: &Path, expected_code: i32) -> String {
    let output = case
        .cmd()
        .arg("orchestrate")
        .arg(plan)
        .arg("-w")
        .arg(workspace)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(expected_code),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    summary["orchestration_id"].as_str().unwrap().to_string()
}

pub fn plan(name: &str, items: &[String], combine: bool) -> String {
    let mut text = format!(
        "name: {name}\nmax_parallel: 8\nstages:\n  - id: map\n    agent: ./agent\n    foreach: {{ items: {} }}\n    message: \"{{{{ item }}}}\"\n    on_failure: continue\n",
        serde_json::to_string(items).unwrap()
    );
    if combine {
        text.push_str("  - id: combine\n    needs: [map]\n    agent: ./agent\n    message: \"combine {{ stages.map.results | length }} results\"\n");
    }
    text
}

impl Batch {
    pub fn new() -> Batch {
        let case = Case::new("worker", AGENT_BODY, &script());
        let items: Vec<String> = (0..150).map(|i| format!("item {i}.")).collect();
        let plan_path = case.path().join("watch.yaml");
        std::fs::write(&plan_path, plan("watch", &items, true)).unwrap();
        let workspace = case.work_dir().canonicalize().unwrap();
        // Two runs fail: the stage goes on (`on_failure: continue`), the batch exits 1.
        let watch = orchestrate(&case, &plan_path, &workspace, 1);
        case.run("asker", "need the password", &[]).assert_code(101);
        let answered = case
            .cmd()
            .args(case.continue_args("asker"))
            .args(["-m", SECRET, "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(answered.status.code(), Some(0), "{answered:?}");
        Batch {
            case,
            workspace,
            watch,
        }
    }

    pub fn ws(&self) -> String {
        self.workspace.display().to_string()
    }

    /// The run id of item `index` of the finished batch's `map` stage.
    pub fn map_run(&self, index: usize) -> String {
        format!("{}-map-{index:03}", self.watch)
    }

    pub fn server(&self, root: &Root) -> Server {
        Server::start_env(root, &["-w", &self.ws()], &self.case.env())
    }

    /// A batch that runs now: `map` (two runs whose answers stream over 40 s) then
    /// `combine`, which waits. Interrupt it with [`RunningBatch::interrupt`].
    pub fn start_slow(&self) -> RunningBatch {
        let plan_path = self.case.path().join("slow.yaml");
        let items = ["slow one".to_string(), "slow two".to_string()];
        std::fs::write(&plan_path, plan("slow", &items, true)).unwrap();
        let child = self
            .case
            .spawn_cmd()
            .arg("orchestrate")
            .arg(&plan_path)
            .arg("-w")
            .arg(&self.workspace)
            .args(["--format", "json"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let root = self.workspace.join(".delta/orchestrations");
        let mut id = String::new();
        assert!(
            crate::harness::wait_until(LIMIT, || {
                id = std::fs::read_dir(&root)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .find(|name| name.starts_with("slow-"))
                    .unwrap_or_default();
                !id.is_empty()
            }),
            "the slow batch did not start"
        );
        // Started (under load, a debug build may take a while): its first run has a record.
        let first = self
            .workspace
            .join(".delta")
            .join(format!("{id}-map-0"))
            .join("metadata.json");
        assert!(
            crate::harness::wait_until(COMMAND_TIMEOUT * 2, || first.is_file()),
            "the slow batch's first run did not start"
        );
        RunningBatch { child, id }
    }
}

/// A `delta orchestrate` the test started; interrupted (SIGINT) on drop.
pub struct RunningBatch {
    pub child: Child,
    pub id: String,
}

impl RunningBatch {
    pub fn run(&self, index: usize) -> String {
        format!("{}-map-{index}", self.id)
    }

    /// Ctrl-C, and its exit (130).
    pub fn interrupt(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        );
        let deadline = std::time::Instant::now() + COMMAND_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert_eq!(status.code(), Some(130));
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the batch did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RunningBatch {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn q(value: &str) -> String {
    url_encode(value)
}

pub fn url_encode(value: &str) -> String {
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

#[test]
fn serve_batch_api_pages_filters_and_sorts_the_runs_of_an_orchestration() {
    let batch = Batch::new();
    let root = Root::new();
    let server = batch.server(&root);
    let ws = q(&batch.ws());
    let base = format!("/api/orchestrations/{}", batch.watch);
    runtime().block_on(async {
        eventually("the workspace is watched", || async {
            server.get(&format!("{base}?workspace={ws}")).await.0 == 200
        })
        .await;
        let (_, detail) = server.get(&format!("{base}?workspace={ws}")).await;
        // Two runs failed: the batch did not complete (its stages went on).
        assert_eq!(detail["status"], "FAILED", "{detail}");
        let stages: Vec<(Value, Value)> = detail["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].clone(), s["needs"].clone()))
            .collect();
        assert_eq!(
            stages,
            [
                (json!("map"), json!([])),
                (json!("combine"), json!(["map"]))
            ]
        );
        let map = &detail["stages"][0];
        assert_eq!(
            (
                map["counts"]["planned"].clone(),
                map["counts"]["completed"].clone(),
                map["counts"]["failed"].clone()
            ),
            (json!(150), json!(148), json!(2))
        );
        assert!(map["tokens"]["total_tokens"].as_u64().unwrap() > 0, "{map}");
        assert!(map["durationMs"].as_u64().is_some(), "{map}");
        assert_eq!(
            detail["errorKinds"],
            json!([{"kind": "llm_error", "count": 2}])
        );

        let server = &server;
        let runs = |query: &str| {
            let url = format!("{base}/runs?workspace={ws}&{query}");
            async move { server.get(&url).await }
        };
        let (_, first) = runs("").await;
        assert_eq!(
            (first["total"].clone(), first["matched"].clone()),
            (json!(151), json!(151))
        );
        assert_eq!(first["rows"].as_array().unwrap().len(), 100, "a page");
        assert_eq!(first["rows"][0]["runId"], batch.map_run(0));
        let (_, second) = runs("offset=100&limit=100").await;
        assert_eq!(second["rows"].as_array().unwrap().len(), 51);
        let (_, failed) = runs("status=failed").await;
        let failed_ids: Vec<&str> = failed["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["runId"].as_str().unwrap())
            .collect();
        assert_eq!(failed_ids, [batch.map_run(3), batch.map_run(7)]);
        assert_eq!(failed["rows"][0]["errorKind"], "llm_error");
        assert!(
            failed["rows"][0]["error"]
                .as_str()
                .unwrap()
                .contains("refuses item 3"),
            "{failed}"
        );
        let (_, by_status) = runs("sort=status&limit=3").await;
        assert_eq!(by_status["rows"][0]["status"], "FAILED", "failed first");
        let (_, combine) = runs("stage=combine").await;
        assert_eq!(combine["total"], 1);
        let (_, found) = runs("q=item%207").await;
        assert_eq!(found["matched"], 1, "the error names item 7");
        let (_, retried) = runs(&format!("q={}", batch.map_run(5))).await;
        assert_eq!(retried["rows"][0]["status"], "COMPLETED");

        let (_, timeline) = server
            .get(&format!("{base}/timeline?workspace={ws}&stage=map"))
            .await;
        assert_eq!(timeline["bars"].as_array().unwrap().len(), 150);
        let bar = &timeline["bars"][0];
        assert!(
            bar[3].as_i64().unwrap() <= bar[4].as_i64().unwrap()
                && bar[4].as_i64().unwrap() <= bar[5].as_i64().unwrap(),
            "queued <= started <= ended: {bar}"
        );
        let (_, phases) = server
            .get(&format!(
                "{base}/phases?workspace={ws}&runs={}",
                batch.map_run(11)
            ))
            .await;
        let kinds: Vec<&str> = phases[batch.map_run(11)]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["model", "tool", "model"]);

        // An unknown order (issue 31 item 19: it was taken as ascending) is refused too, the
        // message naming the parameter and what it accepts.
        for (query, named) in [
            ("sort=age", "index, status, duration, tokens"),
            ("status=done", "failed, running"),
            ("order=sideways", "asc, desc"),
        ] {
            let (status, body) = runs(query).await;
            assert_eq!(
                (status, body["code"].clone()),
                (400, json!("invalid_id")),
                "{query}"
            );
            let error = body["error"].as_str().unwrap();
            let parameter = query.split('=').next().unwrap();
            assert!(
                error.contains(parameter) && error.contains(named),
                "{error}"
            );
        }
        let (status, body) = server
            .get(&format!("/api/orchestrations/nope?workspace={ws}"))
            .await;
        assert_eq!((status, body["code"].clone()), (404, json!("not_found")));
        let (status, body) = server
            .get(&format!("/api/orchestrations/..%2Fx?workspace={ws}"))
            .await;
        assert_eq!(status, 400, "{body}");
        let elsewhere = q(&root.path().display().to_string());
        let (status, body) = server.get(&format!("{base}?workspace={elsewhere}")).await;
        assert_eq!(
            (status, body["code"].clone()),
            (404, json!("unknown_workspace"))
        );
    });
}

#[test]
fn serve_inspector_api_traces_a_run_with_its_model_calls_and_tool_calls() {
    let batch = Batch::new();
    let root = Root::new();
    let server = batch.server(&root);
    let ws = q(&batch.ws());
    let run = batch.map_run(5);
    runtime().block_on(async {
        let trace_url = format!("/api/runs/{run}/trace?workspace={ws}");
        eventually("the workspace is watched", || async {
            server.get(&trace_url).await.0 == 200
        })
        .await;
        let (_, trace) = server.get(&trace_url).await;
        let kinds: Vec<&str> = trace["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["start", "reply", "tool", "reply", "end"], "{trace}");
        assert_eq!(trace["orchestrationId"], batch.watch);
        let spans: Vec<&str> = trace["spans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["kind"].as_str().unwrap())
            .collect();
        assert_eq!(spans, ["model", "tool", "model"]);
        let size = trace["journalBytes"].as_u64().unwrap();
        let (_, same) = server.get(&format!("{trace_url}&known={size}")).await;
        assert_eq!(same["unchanged"], true, "{same}");

        let (status, call) = server
            .get(&format!("/api/runs/{run}/calls/1?workspace={ws}"))
            .await;
        assert_eq!(status, 200, "{call}");
        let roles: Vec<&str> = call["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user"]);
        assert_eq!(call["messages"][0]["collapsed"], true, "context folded");
        assert_eq!(call["messages"][0]["source"], "system_prompt");
        assert_eq!(call["messages"][1]["content"], "item 5.");
        assert_eq!(call["replyToolCalls"], json!(["shout({})"]));
        assert_eq!(call["attempts"], 2);
        let failed = call["failedAttempts"].as_array().unwrap();
        assert_eq!(failed.len(), 1, "{call}");
        assert!(
            failed[0]["error"].as_str().unwrap().contains("500"),
            "{call}"
        );
        let (_, answer) = server
            .get(&format!("/api/runs/{run}/calls/2?workspace={ws}"))
            .await;
        assert_eq!(answer["reply"], "done after a retry");
        assert_eq!(answer["messages"].as_array().unwrap().len(), 4);

        let action = trace["spans"][1]["actionId"].as_str().unwrap().to_string();
        let (status, tool) = server
            .get(&format!(
                "/api/runs/{run}/tools/{}?workspace={ws}",
                q(&action)
            ))
            .await;
        assert_eq!(status, 200, "{tool}");
        assert!(
            tool["argv"]
                .to_string()
                .contains("echo shouting from the tool"),
            "{tool}"
        );
        assert_eq!(tool["exitCode"], 0);
        assert_eq!(tool["stdout"]["head"], "shouting from the tool\n");
        assert_eq!(tool["stderr"]["head"], "a warning\n");
        assert!(tool["durationMs"].as_u64().is_some());

        for (path, code) in [
            (format!("/api/runs/{run}/calls/9?workspace={ws}"), 404),
            (format!("/api/runs/{run}/tools/nope?workspace={ws}"), 404),
            (format!("/api/runs/..%2Fx/trace?workspace={ws}"), 400),
        ] {
            assert_eq!(server.get(&path).await.0, code, "{path}");
        }
    });
}

/// The inspector shows a sensitive answer as the journal stores it (redacted), and nothing
/// the server sends contains the answer itself.
#[test]
fn serve_inspector_shows_a_sensitive_answer_redacted_as_stored() {
    let batch = Batch::new();
    let root = Root::new();
    let server = batch.server(&root);
    let ws = q(&batch.ws());
    runtime().block_on(async {
        let trace_url = format!("/api/runs/asker/trace?workspace={ws}");
        eventually("the workspace is watched", || async {
            server.get(&trace_url).await.0 == 200
        })
        .await;
        let (_, trace) = server.get(&trace_url).await;
        let question = trace["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "question")
            .unwrap()
            .clone();
        assert_eq!(question["text"], "Your password?");
        assert_eq!(question["redacted"], true);
        assert!(
            question["answer"]
                .as_str()
                .unwrap()
                .starts_with("[REDACTED"),
            "{question}"
        );
        let mut everything = trace.to_string();
        for iteration in 1..=2 {
            let (status, call) = server
                .get(&format!("/api/runs/asker/calls/{iteration}?workspace={ws}"))
                .await;
            assert_eq!(status, 200, "{call}");
            everything.push_str(&call.to_string());
        }
        let (_, views) = server.get("/api/workspaces").await;
        everything.push_str(&views.to_string());
        assert!(!everything.contains(SECRET), "the secret reached the page");
        assert!(everything.contains("[REDACTED"));
    });
}

/// A tool of a run can replace the run's files: a FIFO as a tool's output or as the
/// journal, a link as a model call's record. The server answers at once, says what is
/// wrong, reads nothing through the link, and goes on serving.
#[test]
fn serve_inspector_a_fifo_or_a_link_planted_in_a_run_folder_neither_hangs_nor_leaks() {
    let batch = Batch::new();
    let root = Root::new();
    let server = batch.server(&root);
    let ws = q(&batch.ws());
    let run = batch.map_run(11);
    let dir = batch.workspace.join(".delta").join(&run);
    let tool_record = std::fs::read_dir(dir.join("io/tool_executions"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "stdout"))
        .unwrap();
    std::fs::remove_file(&tool_record).unwrap();
    nix::unistd::mkfifo(&tool_record, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let invocation = std::fs::read_dir(dir.join("io/invocations"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("_2.json"))
        .unwrap();
    std::fs::remove_file(&invocation).unwrap();
    let outside = root.path().join("outside.json");
    std::fs::write(
        &outside,
        r#"{"request":{"messages":[{"role":"user","content":"OUTSIDE-SECRET"}]}}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, &invocation).unwrap();
    runtime().block_on(async {
        let trace_url = format!("/api/runs/{run}/trace?workspace={ws}");
        eventually("the workspace is watched", || async {
            server.get(&trace_url).await.0 == 200
        })
        .await;
        let (_, trace) = server.get(&trace_url).await;
        let action = trace["spans"][1]["actionId"].as_str().unwrap().to_string();
        let started = std::time::Instant::now();
        let (status, tool) = server
            .get(&format!(
                "/api/runs/{run}/tools/{}?workspace={ws}",
                q(&action)
            ))
            .await;
        assert_eq!(
            (status, tool["code"].clone()),
            (422, json!("unreadable")),
            "{tool}"
        );
        assert!(tool["error"].as_str().unwrap().contains("FIFO"), "{tool}");
        let (status, call) = server
            .get(&format!("/api/runs/{run}/calls/2?workspace={ws}"))
            .await;
        assert_eq!(status, 422, "{call}");
        assert!(
            call["error"].as_str().unwrap().contains("symbolic link"),
            "{call}"
        );
        assert!(!call.to_string().contains("OUTSIDE-SECRET"));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "answered at once"
        );

        std::fs::remove_file(dir.join("journal.jsonl")).unwrap();
        nix::unistd::mkfifo(&dir.join("journal.jsonl"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (status, body) = server.get(&trace_url).await;
        assert_eq!(status, 422, "{body}");
        // The run's timeline said the same as a 500 `io` (issue 31 item 19).
        let (status, body) = server
            .get(&format!("/api/runs/{run}/timeline?workspace={ws}"))
            .await;
        assert_eq!(
            (status, body["code"].clone()),
            (422, json!("unreadable")),
            "{body}"
        );
        assert!(body["error"].as_str().unwrap().contains("FIFO"), "{body}");
        let (status, _) = server.get("/api/workspaces").await;
        assert_eq!(status, 200, "the server goes on");
    });
}

/// Regression (issue 27): the engine wrote a streamed reply nowhere a separate process could
/// see it. A running batch's replies now grow in `io/reply.partial` (0600), which the
/// inspector shows, and are marked complete once whole; the graph shows `combine`, which
/// has not started, as pending.
#[test]
fn serve_inspector_shows_the_reply_streaming_into_a_running_run() {
    let batch = Batch::new();
    let root = Root::new();
    let server = batch.server(&root);
    let ws = q(&batch.ws());
    let mut slow = batch.start_slow();
    let run = slow.run(0);
    runtime().block_on(async {
        let trace_url = format!("/api/runs/{run}/trace?workspace={ws}");
        let partial = || async {
            let (status, trace) = server.get(&trace_url).await;
            if status != 200 {
                return String::new();
            }
            trace["partial"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        eventually("a partial reply", || async { !partial().await.is_empty() }).await;
        let first = partial().await;
        assert!(first.starts_with("word0"), "{first}");
        eventually("the reply growing", || async {
            partial().await.len() > first.len()
        })
        .await;
        let (_, trace) = server.get(&trace_url).await;
        assert_eq!(trace["status"], "RUNNING");
        let open = trace["spans"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            (open["kind"].clone(), open["end"].clone()),
            (json!("model"), Value::Null)
        );

        let (_, detail) = server
            .get(&format!("/api/orchestrations/{}?workspace={ws}", slow.id))
            .await;
        assert_eq!(detail["status"], "RUNNING");
        assert_eq!(detail["stages"][1]["id"], "combine");
        assert_eq!(detail["stages"][1]["status"], "PENDING", "{detail}");
        assert_eq!(detail["stages"][0]["counts"]["running"], 2, "{detail}");
    });
    let file = batch
        .workspace
        .join(".delta")
        .join(&run)
        .join("io/reply.partial");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    slow.interrupt();
    let stored: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        stored["complete"], true,
        "marked complete when the call ended: {stored}"
    );
}

/// `delta orchestrate --no-live-reply` writes no io/reply.partial, even for streamed text.
#[test]
fn orchestrate_no_live_reply_writes_no_partial_reply() {
    let case = Case::new("worker", AGENT_BODY, &script());
    let plan_path = case.path().join("one.yaml");
    let mut text = plan("one", &["slow one".to_string()], false);
    text = text.replace("max_parallel: 8", "max_parallel: 1");
    std::fs::write(&plan_path, text).unwrap();
    // A shorter answer stream is enough: no file may appear at all.
    let script_path = case.path().join("script.json");
    let mut fast = script();
    fast["rules"][4]["steps"][0]["latency"] = json!("1s");
    std::fs::write(&script_path, fast.to_string()).unwrap();
    let mock = crate::harness::MockLlm::start(&script_path);
    let workspace = case.work_dir();
    let output = case
        .cmd()
        .env("DELTA_BASE_URL", &mock.base_url)
        .arg("orchestrate")
        .arg(&plan_path)
        .arg("-w")
        .arg(&workspace)
        .args(["--no-live-reply", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    let run = summary["stages"][0]["runs"][0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let io = workspace.join(".delta").join(&run).join("io");
    assert!(io.is_dir());
    assert!(!io.join("reply.partial").exists());
    // The same batch without the flag keeps the streamed answer (1 s, so it is written).
    let again = case
        .cmd()
        .env("DELTA_BASE_URL", &mock.base_url)
        .arg("orchestrate")
        .arg(&plan_path)
        .arg("-w")
        .arg(&workspace)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    let summary: Value = serde_json::from_slice(&again.stdout).unwrap();
    let run = summary["stages"][0]["runs"][0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let stored: Value = serde_json::from_slice(
        &std::fs::read(workspace.join(".delta").join(&run).join("io/reply.partial")).unwrap(),
    )
    .unwrap();
    assert_eq!(stored["complete"], true);
    assert!(
        stored["content"].as_str().unwrap().ends_with("word59"),
        "{stored}"
    );
}
