//! The run loop driven on a plain tokio runtime with fake ports: no actix System, no model
//! endpoint, no tool processes. What the journal shows is what the loop decided.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::LocalBoxFuture;
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use super::{ModelPort, RunControl, RunLoop, ToolPort};
use crate::agent::load_agent;
use crate::journal::{read_journal, ActionStatus, Event};
use crate::llm::LlmTarget;
use crate::llm::{
    CallFailure, CallOutcome, ChatCompletion, ChatMessage, ChatRequest, LlmError, RequestMeta,
    RetryObserver, ToolCall, Usage,
};
use crate::protocol::RunResult;
use crate::protocol::RunStatus;
use crate::request::{RunRequest, RunStart, SupervisorConfig};
use crate::tool::job::{ToolExecution, ToolJob};

/// Answers each model call with the next scripted reply; records what it was sent.
pub(super) struct FakeModel {
    replies: RefCell<VecDeque<Result<ChatMessage, String>>>,
    requests: Rc<RefCell<Vec<ChatRequest>>>,
    /// The serialized request each call came with (`RequestMeta::wire_body`).
    wire_bodies: RefCell<Vec<Option<bytes::Bytes>>>,
    /// Usage reported by each successful reply, and by the failed attempts of every call.
    usage: Option<Usage>,
    failed_attempts_usage: Usage,
    /// The finish reason of every reply (`stop` unless a test cuts them: `length`).
    finish_reason: &'static str,
    /// The window the endpoint says, and how many times it was asked.
    window: Option<crate::llm::ContextWindow>,
    probes: std::cell::Cell<u32>,
}

impl FakeModel {
    pub(super) fn new(replies: Vec<Result<ChatMessage, String>>) -> Rc<FakeModel> {
        Rc::new(FakeModel {
            replies: RefCell::new(replies.into()),
            requests: Rc::default(),
            wire_bodies: RefCell::default(),
            usage: None,
            failed_attempts_usage: Usage::default(),
            finish_reason: "stop",
            window: None,
            probes: Default::default(),
        })
    }

    fn saying_its_window(replies: Vec<Result<ChatMessage, String>>, tokens: u64) -> Rc<FakeModel> {
        Rc::new(FakeModel {
            replies: RefCell::new(replies.into()),
            requests: Rc::default(),
            wire_bodies: RefCell::default(),
            usage: None,
            failed_attempts_usage: Usage::default(),
            finish_reason: "stop",
            window: Some(crate::llm::ContextWindow::new(
                tokens,
                "server",
                Some("GET /models max_model_len".into()),
            )),
            probes: Default::default(),
        })
    }

    /// Every reply cut at the output limit (`finish_reason: length`).
    pub(super) fn cut(replies: Vec<Result<ChatMessage, String>>) -> Rc<FakeModel> {
        Rc::new(FakeModel {
            replies: RefCell::new(replies.into()),
            requests: Rc::default(),
            wire_bodies: RefCell::default(),
            usage: None,
            failed_attempts_usage: Usage::default(),
            finish_reason: "length",
            window: None,
            probes: Default::default(),
        })
    }

    pub(super) fn with_usage(
        replies: Vec<Result<ChatMessage, String>>,
        usage: Usage,
        failed_attempts_usage: Usage,
    ) -> Rc<FakeModel> {
        Rc::new(FakeModel {
            replies: RefCell::new(replies.into()),
            requests: Rc::default(),
            wire_bodies: RefCell::default(),
            usage: Some(usage),
            failed_attempts_usage,
            finish_reason: "stop",
            window: None,
            probes: Default::default(),
        })
    }
}

impl ModelPort for FakeModel {
    fn context_window(
        &self,
        _model: &str,
    ) -> LocalBoxFuture<'static, Option<crate::llm::ContextWindow>> {
        self.probes.set(self.probes.get() + 1);
        let window = self.window.clone();
        Box::pin(async move { window })
    }

    fn complete(
        &self,
        request: Arc<ChatRequest>,
        meta: RequestMeta,
        _cancel: CancellationToken,
        _on_retry: RetryObserver,
    ) -> LocalBoxFuture<'static, Result<CallOutcome, CallFailure>> {
        self.requests.borrow_mut().push((*request).clone());
        self.wire_bodies.borrow_mut().push(meta.wire_body);
        let reply = self
            .replies
            .borrow_mut()
            .pop_front()
            .unwrap_or_else(|| Err("no more scripted replies".into()));
        let (usage, failed_attempts_usage) = (self.usage, self.failed_attempts_usage);
        let finish_reason = self.finish_reason;
        Box::pin(async move {
            match reply {
                Ok(message) => Ok(CallOutcome {
                    completion: ChatCompletion {
                        id: None,
                        model: Some("fake".into()),
                        message,
                        finish_reason: Some(finish_reason.into()),
                        usage,
                        raw: serde_json::Value::Null,
                    },
                    attempts: 1,
                    duration: Duration::ZERO,
                    waited: Duration::ZERO,
                    failed_attempts: Vec::new(),
                    failed_attempts_usage,
                    wire: Default::default(),
                }),
                Err(message) => Err(CallFailure {
                    error: LlmError::Transport(message),
                    attempts: 1,
                    failed_attempts: Vec::new(),
                    failed_attempts_usage,
                    cancelled: false,
                }),
            }
        })
    }
}

/// What a fake tool does when it is run.
#[derive(Clone)]
enum Behaviour {
    /// Succeeds at once, printing its name.
    Succeed,
    /// Waits until the named tool has finished, then succeeds.
    WaitFor(&'static str),
    /// Asks the run to stop, then waits for its cancellation (as a killed process would).
    StopTheRun(Arc<RunControl>),
}

#[derive(Default)]
pub(super) struct FakeTools {
    behaviours: BTreeMap<&'static str, Behaviour>,
    finished: Rc<RefCell<BTreeMap<String, Rc<Notify>>>>,
    pub(super) started: Rc<RefCell<Vec<String>>>,
}

impl FakeTools {
    fn with(mut self, tool: &'static str, behaviour: Behaviour) -> Self {
        self.behaviours.insert(tool, behaviour);
        self
    }

    fn notify_for(&self, tool: &str) -> Rc<Notify> {
        self.finished
            .borrow_mut()
            .entry(tool.to_string())
            .or_insert_with(|| Rc::new(Notify::new()))
            .clone()
    }
}

impl ToolPort for FakeTools {
    fn execute(
        &self,
        job: ToolJob,
        cancel: CancellationToken,
    ) -> LocalBoxFuture<'static, Option<ToolExecution>> {
        self.started.borrow_mut().push(job.tool_name.clone());
        let behaviour = self
            .behaviours
            .get(job.tool_name.as_str())
            .cloned()
            .unwrap_or(Behaviour::Succeed);
        let done = self.notify_for(&job.tool_name);
        let waited_on = match &behaviour {
            Behaviour::WaitFor(other) => Some(self.notify_for(other)),
            _ => None,
        };
        Box::pin(async move {
            let mut cancelled = false;
            match behaviour {
                Behaviour::Succeed => {}
                Behaviour::WaitFor(_) => {
                    if let Some(other) = waited_on {
                        other.notified().await;
                    }
                }
                Behaviour::StopTheRun(control) => {
                    control.request_stop("test stop".into(), false);
                    cancel.cancelled().await;
                    cancelled = true;
                }
            }
            done.notify_one();
            Some(ToolExecution {
                observation: format!("output of {}", job.tool_name),
                success: !cancelled,
                exit_code: if cancelled { None } else { Some(0) },
                duration: Duration::ZERO,
                cancelled,
                record_path: job.record.record_path(),
                record_error: None,
            })
        })
    }
}

pub(super) fn calls(names: &[&str]) -> ChatMessage {
    let calls = names
        .iter()
        .enumerate()
        .map(|(i, name)| ToolCall::function(format!("call_{i}"), *name, "{}"))
        .collect();
    ChatMessage::assistant(None, calls)
}

pub(super) fn answer(text: &str) -> ChatMessage {
    ChatMessage::assistant(Some(text.to_string()), Vec::new())
}

pub(super) struct Fixture {
    agent_dir: tempfile::TempDir,
    pub(super) work_dir: tempfile::TempDir,
}

impl Fixture {
    pub(super) fn new(parallel: bool) -> Fixture {
        let agent_dir = tempfile::tempdir().unwrap();
        let tools: String = ["first", "second", "third"]
            .iter()
            .map(|t| format!("  - name: {t}\n    exec: \"true\"\n"))
            .collect();
        std::fs::write(
            agent_dir.path().join("agent.yaml"),
            format!("name: looptest\nllm:\n  model: fake\nparallel_tool_calls: {parallel}\ntools:\n{tools}"),
        )
        .unwrap();
        std::fs::write(agent_dir.path().join("system_prompt.md"), "Test agent.\n").unwrap();
        std::fs::write(
            agent_dir.path().join("context.yaml"),
            "sources:\n  - type: file\n    id: system_prompt\n    path: '${AGENT_HOME}/system_prompt.md'\n  - type: journal\n    id: history\n",
        )
        .unwrap();
        Fixture {
            agent_dir,
            work_dir: tempfile::tempdir().unwrap(),
        }
    }

    fn request(&self) -> RunRequest {
        self.request_for("do it")
    }

    fn request_for(&self, task: &str) -> RunRequest {
        RunRequest {
            agent: Arc::new(load_agent(self.agent_dir.path()).unwrap()),
            work_dir: self.work_dir.path().to_path_buf(),
            run_id: Some("looptest".into()),
            start: RunStart::New {
                task: task.to_string(),
            },
            max_iterations: None,
            // The loop reaches the model only through its port; the target is for the gateway.
            llm: LlmTarget::Scripted(Arc::new(
                crate::llm::Script::from_yaml_str(
                    "rules:\n  - steps: [{answer: unused}]\n",
                    "unused.yaml",
                )
                .unwrap(),
            )),
            env: Arc::new(BTreeMap::new()),
            timeout: None,
            prompter: None,
            workspace_id: None,
            orchestration_id: None,
            trace: None,
            budgets: Vec::new(),
        }
    }

    pub(super) async fn drive(
        &self,
        model: Rc<FakeModel>,
        tools: Rc<FakeTools>,
        control: Arc<RunControl>,
    ) -> RunResult {
        self.drive_request(self.request(), model, tools, control)
            .await
    }

    async fn drive_request(
        &self,
        request: RunRequest,
        model: Rc<FakeModel>,
        tools: Rc<FakeTools>,
        control: Arc<RunControl>,
    ) -> RunResult {
        let config = SupervisorConfig {
            journal_fsync: false,
            ..SupervisorConfig::default()
        };
        let (events, _) = broadcast::channel(64);
        let run = RunLoop::new(
            "looptest".into(),
            request,
            Arc::new(config),
            model,
            tools,
            control,
            events,
        );
        run.drive().await
    }

    pub(super) fn journal(&self) -> Vec<Event> {
        let path: PathBuf = self.work_dir.path().join(".delta/looptest/journal.jsonl");
        read_journal(&path)
            .unwrap()
            .into_iter()
            .map(|e| e.event)
            .collect()
    }

    fn results(&self) -> Vec<(String, ActionStatus, String)> {
        self.journal()
            .into_iter()
            .filter_map(|e| match e {
                Event::ActionResult {
                    action_id,
                    status,
                    observation_content,
                    ..
                } => Some((action_id, status, observation_content)),
                _ => None,
            })
            .collect()
    }
}

#[tokio::test]
async fn results_are_journaled_in_reply_order_when_a_later_call_finishes_first() {
    let fixture = Fixture::new(true);
    let model = FakeModel::new(vec![Ok(calls(&["first", "second"])), Ok(answer("done"))]);
    let tools = Rc::new(FakeTools::default().with("first", Behaviour::WaitFor("second")));
    let result = fixture.drive(model, tools.clone(), RunControl::new()).await;
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    assert_eq!(result.result.as_deref(), Some("done"));
    // Both started before either finished (parallel), and "second" finished first...
    assert_eq!(*tools.started.borrow(), vec!["first", "second"]);
    // ...yet the journal answers the calls in the order the model made them.
    let ids: Vec<String> = fixture.results().into_iter().map(|r| r.0).collect();
    assert_eq!(ids, vec!["call_0", "call_1"]);
}

#[tokio::test]
async fn the_model_sees_every_result_of_the_previous_reply() {
    let fixture = Fixture::new(false);
    let model = FakeModel::new(vec![Ok(calls(&["first", "second"])), Ok(answer("done"))]);
    let requests = model.requests.clone();
    let result = fixture
        .drive(model, Rc::new(FakeTools::default()), RunControl::new())
        .await;
    assert_eq!(result.status, RunStatus::Completed);
    let second = &requests.borrow()[1];
    let tool_results: Vec<&str> = second
        .messages
        .iter()
        .filter(|m| m.tool_call_id.is_some())
        .filter_map(|m| m.content.as_deref())
        .collect();
    assert_eq!(tool_results, vec!["output of first", "output of second"]);
}

#[tokio::test]
async fn a_stop_during_a_tool_records_its_result_skips_the_rest_and_ends_interrupted() {
    let fixture = Fixture::new(false);
    let control = RunControl::new();
    let model = FakeModel::new(vec![Ok(calls(&["first", "second", "third"]))]);
    let tools =
        Rc::new(FakeTools::default().with("second", Behaviour::StopTheRun(control.clone())));
    let result = fixture.drive(model, tools.clone(), control).await;
    assert_eq!(result.status, RunStatus::Interrupted, "{result:?}");
    assert_eq!(
        result.error.as_ref().map(|e| e.kind.as_str()),
        Some("interrupted")
    );
    assert_eq!(*tools.started.borrow(), vec!["first", "second"]);
    let results = fixture.results();
    assert_eq!(
        results.len(),
        3,
        "every call has exactly one result: {results:?}"
    );
    assert_eq!(results[0].1, ActionStatus::Success);
    assert!(
        results[1].2.contains("interrupted while this tool ran"),
        "{results:?}"
    );
    assert!(results[2].2.contains("not run"), "{results:?}");
    let journal = fixture.journal();
    assert!(journal
        .iter()
        .any(|e| matches!(e, Event::Interrupted { reason } if reason == "test stop")));
    assert!(matches!(
        journal.last(),
        Some(Event::EngineEnd {
            status: RunStatus::Interrupted,
            ..
        })
    ));
}

#[tokio::test]
async fn a_stop_requested_before_the_first_model_call_ends_interrupted_without_one() {
    let fixture = Fixture::new(false);
    let control = RunControl::new();
    control.request_stop("stopped early".into(), true);
    let model = FakeModel::new(vec![Ok(answer("never"))]);
    let requests = model.requests.clone();
    let result = fixture
        .drive(model, Rc::new(FakeTools::default()), control)
        .await;
    assert_eq!(result.status, RunStatus::Interrupted);
    assert_eq!(
        result.error.as_ref().map(|e| e.kind.as_str()),
        Some("timeout")
    );
    assert!(requests.borrow().is_empty());
}

#[tokio::test]
async fn a_failed_model_call_ends_failed_with_the_cause() {
    let fixture = Fixture::new(false);
    let model = FakeModel::new(vec![Err("endpoint unreachable".into())]);
    let result = fixture
        .drive(model, Rc::new(FakeTools::default()), RunControl::new())
        .await;
    assert_eq!(result.status, RunStatus::Failed);
    let error = result.error.unwrap();
    assert_eq!(error.kind, "llm_error");
    assert!(
        error.message.contains("endpoint unreachable"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn the_iteration_cap_ends_failed_after_that_many_model_calls() {
    let fixture = Fixture::new(false);
    let replies = (0..40).map(|_| Ok(calls(&["first"]))).collect();
    let model = FakeModel::new(replies);
    let requests = model.requests.clone();
    let result = fixture
        .drive(model, Rc::new(FakeTools::default()), RunControl::new())
        .await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(result.error.unwrap().kind, "max_iterations");
    assert_eq!(
        requests.borrow().len(),
        super::DEFAULT_MAX_ITERATIONS as usize
    );
}

/// The conversation is serialized once per call: the bytes handed to the model port are the
/// request as sent (`for_wire`), and the io/invocations record shows those very bytes.
#[tokio::test]
async fn the_invocation_record_holds_the_request_bytes_handed_to_the_model() {
    let fixture = Fixture::new(false);
    let model = FakeModel::new(vec![Ok(calls(&["first"])), Ok(answer("done"))]);
    let result = fixture
        .drive(
            model.clone(),
            Rc::new(FakeTools::default()),
            RunControl::new(),
        )
        .await;
    assert_eq!(result.status, RunStatus::Completed, "{result:?}");
    let bodies = model.wire_bodies.borrow();
    let requests = model.requests.borrow();
    assert_eq!(bodies.len(), 2);
    let dir = fixture
        .work_dir
        .path()
        .join(".delta/looptest/io/invocations");
    for (i, (body, request)) in bodies.iter().zip(requests.iter()).enumerate() {
        let body = body
            .as_ref()
            .expect("every call carries its serialized request");
        let sent: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(sent, serde_json::to_value(&*request.for_wire()).unwrap());
        let iteration = i + 1;
        let record = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(&format!("_{iteration}.json")))
            .unwrap();
        let text = std::fs::read_to_string(&record).unwrap();
        let record: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(record["request"], sent, "iteration {iteration}");
        // The very bytes, not a re-serialization of the request.
        assert!(
            text.contains(std::str::from_utf8(body).unwrap()),
            "iteration {iteration}"
        );
    }
}

/// engine.log gets no line per iteration (the journal's THOUGHT carries the iteration): a
/// line costs an open, a write and a close on every iteration of every run.
#[tokio::test]
async fn engine_log_does_not_grow_with_iterations() {
    let lines_after = |replies: Vec<Result<ChatMessage, String>>| async move {
        let fixture = Fixture::new(false);
        let result = fixture
            .drive(
                FakeModel::new(replies),
                Rc::new(FakeTools::default()),
                RunControl::new(),
            )
            .await;
        assert_eq!(result.status, RunStatus::Completed, "{result:?}");
        let log = fixture.work_dir.path().join(".delta/looptest/engine.log");
        std::fs::read_to_string(log).unwrap().lines().count()
    };
    let one = lines_after(vec![Ok(answer("done"))]).await;
    let five = lines_after(vec![
        Ok(calls(&["first"])),
        Ok(calls(&["second"])),
        Ok(calls(&["third"])),
        Ok(calls(&["first"])),
        Ok(answer("done")),
    ])
    .await;
    assert!(one > 0);
    assert_eq!(one, five);
}

pub(super) fn usage(prompt_tokens: u64, completion_tokens: u64) -> Usage {
    Usage {
        cached_prompt_tokens: 0,
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}

/// Issue 25 item 5: tokens the provider billed for failed attempts of a call (and for a
/// call that failed for good) were not counted.
#[tokio::test]
async fn tokens_of_failed_attempts_are_counted_in_the_run_usage() {
    let fixture = Fixture::new(false);
    // Two calls that succeed after a failed attempt each, then one that fails for good.
    let model = FakeModel::with_usage(
        vec![
            Ok(calls(&["first"])),
            Ok(calls(&["second"])),
            Err("server gone".into()),
        ],
        usage(100, 10),
        usage(7, 3),
    );
    let result = fixture
        .drive(model, Rc::new(FakeTools::default()), RunControl::new())
        .await;
    assert_eq!(result.status, RunStatus::Failed, "{result:?}");
    let expected = (2 * 100 + 3 * 7, 2 * 10 + 3 * 3);
    let usage = &result.metrics.usage;
    assert_eq!((usage.input_tokens, usage.output_tokens), expected);
    let cumulative = result.metrics.cumulative_usage;
    assert_eq!(
        (cumulative.input_tokens, cumulative.output_tokens),
        expected
    );
    assert_eq!(usage.model_usage["fake"].input_tokens, expected.0);
    let meta =
        crate::metadata::read_metadata(&fixture.work_dir.path().join(".delta/looptest")).unwrap();
    assert_eq!(meta.usage, cumulative);
    assert_eq!(meta.cumulative_usage, cumulative);
    // Issue 33: `fake` has no price: the cost is unknown, never a made-up 0.
    assert_eq!(usage.total_cost_usd, None);
    assert_eq!(result.metrics.cumulative_cost_usd, None);
    assert_eq!(
        usage.cost_note.as_deref(),
        Some("cost unknown (no price for model fake: set llm.price)")
    );
}

/// Issue 33: a run's cost is every attempt's tokens (failed ones too, and the call that
/// failed for good) at the agent's `llm.price`.
#[tokio::test]
async fn every_attempt_is_priced_at_the_agents_price() {
    let fixture = Fixture::new(false);
    let model = FakeModel::with_usage(
        vec![
            Ok(calls(&["first"])),
            Ok(calls(&["second"])),
            Err("server gone".into()),
        ],
        usage(100, 10),
        usage(7, 3),
    );
    let mut request = fixture.request();
    let mut agent = (*request.agent).clone();
    let price = crate::llm::price::Price {
        input_per_mtok: 2.0,
        output_per_mtok: 8.0,
        cached_input_per_mtok: None,
    };
    agent.llm.price = Some(price);
    request.agent = Arc::new(agent);
    let result = fixture
        .drive_request(
            request,
            model,
            Rc::new(FakeTools::default()),
            RunControl::new(),
        )
        .await;
    let (input, output) = ((2 * 100 + 3 * 7) as f64, (2 * 10 + 3 * 3) as f64);
    let expected = (input * 2.0 + output * 8.0) / 1e6;
    let cost = result.metrics.usage.total_cost_usd.unwrap();
    assert!((cost - expected).abs() < 1e-15, "{cost} != {expected}");
    assert_eq!(result.metrics.cumulative_cost_usd, Some(cost));
    assert_eq!(result.metrics.usage.cost_note, None);
    let meta =
        crate::metadata::read_metadata(&fixture.work_dir.path().join(".delta/looptest")).unwrap();
    assert_eq!(meta.cost.and_then(|c| c.total_usd()), Some(cost));
}

/// Issue 32: the endpoint is asked for the model's window only once a request is large
/// enough for a window to matter; a short run never asks. Its answer is the run's window,
/// recorded with its source in metadata.json.
#[tokio::test]
async fn the_server_is_asked_for_the_window_only_when_a_request_grows_large() {
    let fixture = Fixture::new(false);
    let model = FakeModel::saying_its_window(vec![Ok(answer("done"))], 8192);
    let result = fixture
        .drive(
            model.clone(),
            Rc::new(FakeTools::default()),
            RunControl::new(),
        )
        .await;
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(model.probes.get(), 0, "a short run never asks");
    let meta =
        crate::metadata::read_metadata(&fixture.work_dir.path().join(".delta/looptest")).unwrap();
    assert_eq!(meta.context_window, None, "`fake` is not in the catalogue");

    let fixture = Fixture::new(false);
    let model = FakeModel::saying_its_window(vec![Ok(answer("done"))], 8192);
    let long_task = "Read this carefully. ".repeat(400);
    let request = fixture.request_for(&long_task);
    let result = fixture
        .drive_request(
            request,
            model.clone(),
            Rc::new(FakeTools::default()),
            RunControl::new(),
        )
        .await;
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(model.probes.get(), 1);
    let meta =
        crate::metadata::read_metadata(&fixture.work_dir.path().join(".delta/looptest")).unwrap();
    let window = meta.context_window.unwrap();
    assert_eq!((window.tokens, window.source.as_str()), (8192, "server"));
    // The THOUGHT records what its request held (a budget is known now).
    let prompt = fixture.journal().into_iter().find_map(|e| match e {
        Event::Thought { prompt, .. } => prompt,
        _ => None,
    });
    assert!(prompt.is_some_and(|p| p.bytes > 8000), "{prompt:?}");
}
