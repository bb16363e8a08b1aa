//! The whole life of one run, read top to bottom: take it (new, or continued under its
//! lock), iterate, end.
//!
//! One iteration: iteration cap → `on_iteration_start` → the context builder →
//! `pre_llm_request` (may override the request) → the model call (its io/invocations
//! record) → `post_llm_response` → THOUGHT → either the final answer (`on_iteration_end`,
//! COMPLETED) or the reply's calls (`calls.rs`: ACTION_REQUESTs, the tool phase, results in
//! reply order), `on_iteration_end`, and the next iteration — or a pause for a human.
//!
//! Every `?` is an early end: [`Halt::Stopped`] when a stop was requested (checked at each
//! await point), [`Halt::Failed`] when the run cannot go on (journal, context, model).
//! Must not: touch actix, or write run files except through the recorder and `end.rs`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::agent::{EmptyAnswerPolicy, HookName};
use crate::clock::now_rfc3339;
use crate::context::{ContextBuilder, ContextFolders};
use crate::journal::{recorded_final_answer, PendingQuestion, TRUNCATED_FINISH_REASON};
use crate::journal::{Event, ToolCallRecord};
use crate::llm::{ChatCompletion, MessageJson, ToolList};
use crate::metadata::write_metadata_redacted;
use crate::protocol::CostTally;
use crate::protocol::TokenUsage;
use crate::protocol::{InteractionInfo, RunErrorInfo, RunErrorKind, RunEvent, RunResult};
use crate::redact::Redactor;
use crate::request::RunStart;
use crate::tool::call::Toolbox;
use crate::tool::kind::registry::{
    local_toolbox, open_confined_toolbox, server_environment, OpenContext,
};
use crate::tool::process::ProgramCache;
use crate::workspace::{validate_run_id, LockWait};

use super::env::tool_environment;
use super::recorder::Recorder;
use super::redaction::{redact_result, EventSink};
use super::state::{error_info, ContextState, Ending, Halt, HookVars, Run, Timings};
use super::take::{take_run, SetupError, TakenRun};
use super::unstarted::{setup_failure, unstarted_interrupted};
use super::{RunLoop, DEFAULT_MAX_ITERATIONS};

/// The result of a call in a reply cut at the output limit in the middle of a call.
const CUT_CALL_OBSERVATION: &str = "Error: not run: your reply was cut off at its output limit (finish_reason: length) before this call was complete.";

/// The first call of a reply whose arguments are not complete JSON (an empty text is a call
/// without arguments, not a cut one).
fn first_cut_call(calls: &[ToolCallRecord]) -> Option<String> {
    calls
        .iter()
        .find(|c| {
            let args = c.arguments.trim();
            !args.is_empty() && serde_json::from_str::<serde::de::IgnoredAny>(args).is_err()
        })
        .map(|c| c.name.clone())
}

/// How often a live run's metadata.json shows its progress.
const PROGRESS_WRITE_INTERVAL: Duration = Duration::from_secs(2);

impl RunLoop {
    /// Drives the run to a final status and returns its RunResult (for every status).
    pub async fn drive(self) -> RunResult {
        let max_iterations = self
            .request
            .max_iterations
            .or(self.request.agent.max_iterations)
            .unwrap_or(DEFAULT_MAX_ITERATIONS)
            .max(1);
        // A continuation redacts the answers of earlier starts from its first write on.
        let continuing = matches!(self.request.start, RunStart::Continue { .. });
        let secrets = if continuing && validate_run_id(&self.run_id).is_ok() {
            Redactor::load(
                &crate::workspace::RunPaths::new(&self.request.work_dir, &self.run_id).secrets_dir,
            )
        } else {
            Redactor::default()
        };
        // Creating or reopening the run's files (and their fsyncs) is blocking file work: it
        // runs on the blocking pool, so a slow disk delays this run, not every run sharing
        // its arbiter. The request's parts are shared (`Arc`), so the copy is cheap.
        let (run_id, request, config, taking_secrets) = (
            self.run_id.clone(),
            self.request.clone(),
            Arc::clone(&self.config),
            secrets.clone(),
        );
        let mut lock_wait = self.creation_lock_wait();
        let taken = crate::blocking::run_to_end(move || {
            let mut taken = take_run(
                &run_id,
                &request,
                max_iterations,
                (config.fsync_every_event, config.journal_fsync),
                &taking_secrets,
                &mut lock_wait,
            );
            if let (true, Ok(taken)) = (config.journal_fsync, taken.as_mut()) {
                let _ = taken.journal.sync();
            }
            if let Ok(taken) = taken.as_mut() {
                // On this trip rather than one of its own at the first context build.
                taken.context_folders =
                    ContextFolders::resolved(&request.agent.home, &request.work_dir);
            }
            taken
        })
        .await
        .unwrap_or_else(|e| Err(SetupError::Io(format!("taking the run failed: {e}"))));
        let taken = match taken {
            Ok(taken) => taken,
            // A stop ended a wait before anything of the run was made.
            Err(SetupError::Stopped(message)) => return self.stopped_before_creation(&message),
            // Nothing of the run was touched: answer without writing anything.
            Err(e) => {
                let mut result = setup_failure(&self.request, &self.run_id, &e.to_string());
                if let (SetupError::Io(_), Some(error)) = (&e, result.error.as_mut()) {
                    // Not a refusal: the files could not be written (a full disk...).
                    error.kind = RunErrorKind::SetupIoError;
                }
                redact_result(&mut result, &secrets.snapshot());
                return result;
            }
        };
        // The sandbox of the run's tools (docs/sandbox.md): one this kernel cannot enforce
        // fails the run before any tool starts.
        let (sandbox, mut warnings, refused) = match self.confine_tools() {
            Ok(Some(confined)) => (Some(confined.sandbox), confined.warnings, None),
            Ok(None) => (None, Vec::new(), None),
            Err(reason) => (None, Vec::new(), Some(reason)),
        };
        let (toolbox, unavailable) = match refused {
            Some(_) => (local_toolbox(&self.request.agent), Vec::new()),
            None => self.open_tools(sandbox.as_ref()).await,
        };
        warnings.extend(unavailable);
        let mut run = Run::start(self, taken, max_iterations, secrets, toolbox);
        let warned = warnings.into_iter().try_for_each(|message| {
            run.log(&format!("warning: {message}"));
            run.append(Event::Warning { message })
        });
        let ending = match (refused, warned) {
            (Some(reason), _) => Ending::failed(error_info(RunErrorKind::SetupError, reason)),
            (None, Err(Halt::Failed(error))) => Ending::failed(error),
            (None, Err(Halt::Stopped)) => run.interrupted(),
            (None, Ok(())) => match run.iterate().await {
                Ok(ending) => ending,
                Err(Halt::Failed(error)) => Ending::failed(error),
                Err(Halt::Stopped) => run.interrupted(),
            },
        };
        run.end(ending).await
    }

    /// How this run waits for its workspace's creation lock: at most the engine's
    /// `creation_lock_wait`, a [`RunEvent::Waiting`] once it is slow, ended by a stop request.
    fn creation_lock_wait(&self) -> LockWait {
        let (events, run_id, control) = (
            self.events.clone(),
            self.run_id.clone(),
            Arc::clone(&self.control),
        );
        LockWait::up_to(self.config.creation_lock_wait)
            .telling(move |message| {
                let _ = events.send(RunEvent::Waiting {
                    run_id: run_id.clone(),
                    message: message.to_string(),
                });
            })
            .stopped_by(move || control.is_stopping())
    }

    /// The result of a run stopped while it waited to be created: INTERRUPTED (or FAILED
    /// with `timeout` when its own time limit stopped it), with nothing written.
    fn stopped_before_creation(&self, waited: &str) -> RunResult {
        let stop = self.control.stop_request();
        let reason = stop
            .as_ref()
            .map(|s| format!("{}: {waited}", s.reason))
            .unwrap_or_else(|| waited.to_string());
        if stop.is_some_and(|s| s.timeout) {
            let mut result = setup_failure(&self.request, &self.run_id, &reason);
            if let Some(error) = result.error.as_mut() {
                error.kind = RunErrorKind::Timeout;
            }
            return result;
        }
        unstarted_interrupted(&self.request, &self.run_id, &reason)
    }

    /// The sandbox of the run's tools, with its journal WARNINGs; `Ok(None)`: unconfined.
    fn confine_tools(&self) -> Result<Option<crate::sandbox::Confinement>, String> {
        let place = crate::sandbox::RunPlace {
            work_dir: &self.request.work_dir,
            agent_home: &self.request.agent.home,
            env: &self.request.env,
        };
        crate::sandbox::for_run(
            self.request.agent.sandbox.as_ref(),
            &place,
            self.config.sandbox_support,
        )
    }

    /// The run's toolbox (its agent's MCP servers started or joined, when it lists any; all
    /// confined by `sandbox`) and a WARNING text for each server that did not start. A stop
    /// request while servers start gives up on them: the run stops at its first checkpoint.
    async fn open_tools(
        &self,
        sandbox: Option<&Arc<crate::sandbox::RunSandbox>>,
    ) -> (Toolbox, Vec<String>) {
        let agent = &self.request.agent;
        if agent.mcp.is_empty() {
            return (local_toolbox(agent).confined(sandbox.cloned()), Vec::new());
        }
        let mut server_env = server_environment(
            agent,
            &self.request.env,
            self.config.tool_path_dir.as_deref(),
        );
        // A server this run starts is traced under it (servers are shared: the first
        // run's span is the one it keeps).
        if let Some(trace) = &self.request.trace {
            super::env::set_trace_context(&mut server_env, trace);
        }
        let ctx = OpenContext {
            agent,
            work_dir: &self.request.work_dir,
            server_env: &server_env,
        };
        tokio::select! {
            opened = open_confined_toolbox(&self.services, &ctx, sandbox) => opened,
            () = self.control.token().cancelled() => (local_toolbox(agent), Vec::new()),
        }
    }
}

impl Run {
    fn start(
        lp: RunLoop,
        taken: TakenRun,
        max_iterations: u32,
        secrets: Redactor,
        toolbox: Toolbox,
    ) -> Run {
        let TakenRun {
            paths,
            journal,
            events,
            meta,
            lock,
            resumed,
            previous_trace,
            context_folders,
        } = taken;
        let child_env = tool_environment(&lp.run_id, &lp.request, &lp.config, &paths);
        let usage_before = meta.usage_so_far();
        let cost_before = meta.cost_so_far();
        let iteration = events
            .iter()
            .filter(|e| matches!(e.event, Event::Thought { .. }))
            .count() as u32;
        let mut rec = Recorder::new(journal, events, paths.engine_log.clone(), secrets.clone());
        rec.log(&format!(
            "run {} {} (agent {}, max {} iterations)",
            lp.run_id,
            if resumed { "resumed" } else { "started" },
            lp.request.agent.name,
            max_iterations
        ));
        let tool_schemas = ToolList::new(toolbox.schemas());
        let tools_bytes = serde_json::to_vec(&tool_schemas).map_or(0, |json| json.len() as u64);
        let run = Run {
            context: ContextState {
                builder: ContextBuilder::new(tools_bytes),
                ..ContextState::default()
            },
            tool_schemas,
            toolbox,
            message_json: MessageJson::new(),
            paths,
            rec: RefCell::new(rec),
            meta,
            lock: Some(lock),
            resumed,
            events: EventSink::new(
                lp.events.clone(),
                secrets.clone(),
                lp.config.observer.clone(),
            ),
            secrets,
            child_env: Arc::new(child_env),
            programs: ProgramCache::new(),
            context_folders,
            generator_env: std::cell::OnceCell::new(),
            max_iterations,
            iteration,
            iterations_this_start: 0,
            started_at: Instant::now(),
            start_time: now_rfc3339(),
            usage: TokenUsage::default(),
            usage_before,
            cost: CostTally::default(),
            cost_before,
            prices: crate::llm::price::PriceMemo::new(
                lp.request.agent.llm.price,
                lp.request.llm.base_url(),
            ),
            server: Default::default(),
            model_usage: BTreeMap::new(),
            timings: Timings::default(),
            last_progress_write: Instant::now(),
            metadata_failure: None,
            audit_warned: RefCell::default(),
            tool_records: RefCell::default(),
            lp,
        };
        run.emit(RunEvent::RunStarted {
            run_id: run.lp.run_id.clone(),
            agent_name: run.lp.request.agent.name.clone(),
            work_dir: run.lp.request.work_dir.to_string_lossy().into_owned(),
            resumed,
            trace: run.lp.request.trace.clone(),
            previous_trace,
        });
        run
    }

    /// The iterations, until a final answer, a pause, the cap, a stop or a failure.
    async fn iterate(&mut self) -> Result<Ending, Halt> {
        if self.resumed {
            let recorded = recorded_final_answer(self.rec.borrow().events());
            if let Some(answer) = recorded {
                self.log("the final answer was already journaled; completing without a model call");
                return self.final_answer(answer);
            }
        }
        loop {
            self.checkpoint()?;
            if self.iterations_this_start >= self.max_iterations {
                return Ok(Ending::failed(self.iteration_cap_error()));
            }
            self.iteration += 1;
            self.iterations_this_start += 1;
            // Not a line of engine.log: the journal's THOUGHT carries the iteration, and a
            // line costs an open, a write and a close on every iteration of every run.
            tracing::debug!(target: "delta::run", run_id = %self.lp.run_id, "iteration {}", self.iteration);
            self.emit(RunEvent::IterationStarted {
                run_id: self.lp.run_id.clone(),
                iteration: self.iteration,
                max_iterations: self.max_iterations,
            });
            let (iteration, max_iterations) = (self.iteration, self.max_iterations);
            self.hook(
                HookName::OnIterationStart,
                || json!({"iteration": iteration, "max_iterations": max_iterations}),
                HookVars::default(),
            )
            .await?;

            // A request the server refuses as too long is compacted and sent again (at most
            // twice per iteration: `context_step.rs`).
            let mut refusals = 0;
            let (completion, record_ref, usage) = loop {
                let mut request = self.build_request().await?;
                let outcome = self
                    .hook(
                        HookName::PreLlmRequest,
                        || serde_json::to_value(&request).unwrap_or(Value::Null),
                        HookVars::default(),
                    )
                    .await?;
                if let Some(outcome) = outcome {
                    self.apply_override(&mut request, &outcome)?;
                    self.remeasure(&request);
                }
                if let Some(stopped) = self.check_budgets(&request)? {
                    return Ok(stopped);
                }
                match self.call_model(request).await {
                    Err(Halt::Failed(error)) if self.context_refusal(&error, refusals) => {
                        refusals += 1;
                    }
                    Err(Halt::Failed(error)) if error.kind == RunErrorKind::BudgetExhausted => {
                        return self.budget_refused(error);
                    }
                    called => break called?,
                }
            };
            self.hook(
                HookName::PostLlmResponse,
                || self.completion_payload(iteration, &completion),
                HookVars::default(),
            )
            .await?;

            let completion_text = completion.message.content.clone();
            let text = completion_text.clone().filter(|t| !t.is_empty());
            let cut = completion.finish_reason.as_deref() == Some(TRUNCATED_FINISH_REASON);
            let calls = self.record_thought(completion, text.clone(), record_ref, usage)?;
            if calls.is_empty() && cut {
                let message = self.truncation_message(text.is_some(), None);
                self.log(&message);
                return Ok(Ending::failed(error_info(RunErrorKind::Truncated, message)));
            }
            if let Some(cut_call) = cut.then(|| first_cut_call(&calls)).flatten() {
                // Not invalid JSON the model should "call again": the output limit cut it.
                let message = self.truncation_message(false, Some(&cut_call));
                self.log(&message);
                self.answer_cut_calls(&calls)?;
                return Ok(Ending::failed(error_info(RunErrorKind::Truncated, message)));
            }
            if calls.is_empty() {
                // The final answer ends the iteration, and the run.
                self.hook(
                    HookName::OnIterationEnd,
                    || self.iteration_end_payload(true),
                    HookVars::default(),
                )
                .await?;
                let answer = completion_text.unwrap_or_default();
                return self.final_answer(answer);
            }

            let planned = self.plan_calls(calls)?;
            let pause = self.act(planned).await?;
            // Built only when the hook is configured: it walks the whole journal.
            self.hook(
                HookName::OnIterationEnd,
                || self.iteration_end_payload(false),
                HookVars::default(),
            )
            .await?;
            if let Some((question, info)) = pause {
                return self.pause_for_human(question, info);
            }
        }
    }

    /// Ends the iterations here when a stop was requested.
    pub(super) fn checkpoint(&self) -> Result<(), Halt> {
        if self.lp.control.is_stopping() {
            Err(Halt::Stopped)
        } else {
            Ok(())
        }
    }

    /// The run's end on a final answer. An empty (or blank) one is not silently a success:
    /// COMPLETED with a WARNING and the RunResult flagged (`empty_answer: warn`, the
    /// default), or FAILED (`empty_answer: fail`).
    fn final_answer(&self, answer: String) -> Result<Ending, Halt> {
        if !answer.trim().is_empty() {
            return Ok(Ending::completed(answer));
        }
        let continue_hint = format!(
            "`delta continue --run-id {} -w {} -m \"...\"`",
            self.lp.run_id,
            self.lp.request.work_dir.display()
        );
        match self.lp.request.agent.empty_answer {
            EmptyAnswerPolicy::Warn => {
                let message = format!(
                    "the model's final answer is empty (no text and no tool call): the run completes with an empty result; hint: set `empty_answer: fail` in agent.yaml to fail such runs (a plan then retries them), or ask again with {continue_hint}"
                );
                self.log(&message);
                self.append(Event::Warning { message })?;
                let mut ending = Ending::completed(answer);
                ending.empty_answer = true;
                Ok(ending)
            }
            EmptyAnswerPolicy::Fail => {
                let message = format!(
                    "the model's final answer is empty (no text and no tool call) and agent.yaml says `empty_answer: fail`; hint: ask again with {continue_hint}"
                );
                self.log(&message);
                Ok(Ending::failed(error_info(
                    RunErrorKind::EmptyAnswer,
                    message,
                )))
            }
        }
    }

    /// A reply cut at the output limit with no tool call is not an answer: presenting it as
    /// COMPLETED (possibly empty) would hide the cut; nor is a tool call cut in the middle of
    /// its arguments (`cut_call` names it) an invalid call to make again. The run fails with
    /// a way forward.
    fn truncation_message(&self, partial: bool, cut_call: Option<&str>) -> String {
        let limit = match self.lp.request.agent.llm.max_tokens {
            Some(n) => format!("raise `llm.max_tokens` in agent.yaml (now {n})"),
            None => "set `llm.max_tokens` in agent.yaml (the provider's default limit applied)"
                .to_string(),
        };
        let what = match cut_call {
            Some(name) => format!(
                " in the middle of its call of `{name}` (the call's arguments are not complete JSON; the cut call is in the journal, answered as not run)"
            ),
            None => format!(
                " before it gave an answer or a tool call{}",
                if partial { " (the partial reply is in the journal)" } else { "" }
            ),
        };
        format!(
            "the model's reply was cut off at its output limit (finish_reason: length){what}; hint: {limit}, then continue the run with `delta continue --run-id {} -w {} -m \"...\"`",
            self.lp.run_id,
            self.lp.request.work_dir.display()
        )
    }

    /// Every call of a reply cut in the middle of a call gets an ERROR result (none is run:
    /// the reply is incomplete), so the conversation stays valid for `delta continue`.
    fn answer_cut_calls(&self, calls: &[ToolCallRecord]) -> Result<(), Halt> {
        for call in calls {
            self.append(Event::ActionResult {
                iteration: self.iteration,
                action_id: call.id.clone(),
                tool_name: call.name.clone(),
                status: crate::journal::ActionStatus::Error,
                observation_content: CUT_CALL_OBSERVATION.to_string(),
                exit_code: None,
                execution_ref: None,
            })?;
        }
        Ok(())
    }

    fn iteration_cap_error(&self) -> RunErrorInfo {
        error_info(
            RunErrorKind::MaxIterations,
            format!(
                "the run reached its iteration cap ({}) without a final answer; continue it with `delta continue --run-id {} -w {} -m \"...\"` or raise --max-iterations",
                self.max_iterations,
                self.lp.run_id,
                self.lp.request.work_dir.display()
            ),
        )
    }

    /// Journals the THOUGHT and returns its calls (ids made safe and unique in the run).
    fn record_thought(
        &self,
        completion: ChatCompletion,
        text: Option<String>,
        record_ref: Option<String>,
        usage: TokenUsage,
    ) -> Result<Vec<ToolCallRecord>, Halt> {
        let calls = self.normalize_calls(completion.message.tool_calls.unwrap_or_default());
        self.append(Event::Thought {
            iteration: self.iteration,
            content: text.clone(),
            tool_calls: calls.clone(),
            llm_invocation_ref: record_ref,
            finish_reason: completion.finish_reason,
            usage: (!usage.is_zero()).then_some(usage),
            prompt: self.prompt_size(completion.usage),
        })?;
        if let Some(text) = text {
            self.emit(RunEvent::Thought {
                run_id: self.lp.run_id.clone(),
                iteration: self.iteration,
                text,
            });
        }
        Ok(calls)
    }

    /// `on_iteration_end` payload: the iteration and the results journaled in it.
    fn iteration_end_payload(&self, final_answer: bool) -> Value {
        let rec = self.rec.borrow();
        let results: Vec<Value> = rec
            .events()
            .iter()
            .filter_map(|e| match &e.event {
                Event::ActionResult {
                    iteration,
                    action_id,
                    tool_name,
                    status,
                    exit_code,
                    ..
                } if *iteration == self.iteration => Some(json!({
                    "action_id": action_id,
                    "tool_name": tool_name,
                    "status": status,
                    "exit_code": exit_code,
                })),
                _ => None,
            })
            .collect();
        json!({
            "iteration": self.iteration,
            "final_answer": final_answer,
            "results": results,
        })
    }

    /// An async ask_human (no prompter): the question file, HUMAN_INPUT_REQUEST, and the run
    /// ends WAITING_FOR_INPUT.
    fn pause_for_human(
        &self,
        question: PendingQuestion,
        info: InteractionInfo,
    ) -> Result<Ending, Halt> {
        let request_id = uuid::Uuid::new_v4().to_string();
        let written = super::human::write_request(
            &self.paths,
            &request_id,
            &info.prompt,
            &info.input_type,
            info.sensitive,
            &self.secrets.snapshot(),
        );
        if let Err(e) = written {
            return Err(Halt::Failed(error_info(
                RunErrorKind::SetupError,
                format!("cannot write interaction/request.json: {e}"),
            )));
        }
        self.append(Event::HumanInputRequest {
            iteration: question.iteration,
            action_id: question.action_id,
            prompt: info.prompt.clone(),
            input_type: info.input_type.clone(),
            sensitive: info.sensitive,
        })?;
        Ok(Ending::waiting(info))
    }

    /// The ending of a run that was asked to stop: INTERRUPTED, with the stop's reason.
    fn interrupted(&self) -> Ending {
        let stop = self.lp.control.stop_request();
        let (reason, timeout) = stop
            .map(|s| (s.reason, s.timeout))
            .unwrap_or_else(|| ("interrupted".into(), false));
        if let Err(Halt::Failed(error)) = self.append(Event::Interrupted {
            reason: reason.clone(),
        }) {
            return Ending::failed(error);
        }
        let kind = if timeout {
            RunErrorKind::Timeout
        } else {
            RunErrorKind::Interrupted
        };
        Ending::interrupted(error_info(kind, reason))
    }

    /// Progress (iterations, usage) for people watching a live run, at most every
    /// [`PROGRESS_WRITE_INTERVAL`]; status changes are written at once by `end.rs`, so
    /// nothing a resume needs waits here.
    pub(super) fn save_progress(&mut self) {
        if self.last_progress_write.elapsed() >= PROGRESS_WRITE_INTERVAL {
            self.last_progress_write = Instant::now();
            let _ = self.save_metadata(false);
        }
    }

    /// Writes the run's record; false when it could not be written (the first such failure
    /// of the run is kept in `metadata_failure`: it is the cause the user needs to read).
    /// `durable` at status changes (when `journal_fsync`); progress updates between them are
    /// atomic but not fsynced, so a crash loses at most the last iteration count.
    pub(super) fn save_metadata(&mut self, durable: bool) -> bool {
        self.refresh_metadata();
        let secrets = self.secrets.snapshot();
        let written = write_metadata_redacted(&self.paths.run_dir, &self.meta, durable, &secrets);
        self.metadata_written(written)
    }

    /// [`save_metadata`](Self::save_metadata) at a status change: with `journal_fsync`, the
    /// journal and the record are made durable on the blocking pool (three fsyncs that would
    /// otherwise hold up every run sharing this arbiter), and the run waits for them.
    pub(super) async fn save_status_change(&mut self) -> bool {
        if !self.lp.config.journal_fsync {
            return self.save_metadata(false);
        }
        self.refresh_metadata();
        let journal = self.rec.borrow().journal_file();
        let (run_dir, meta, secrets) = (
            self.paths.run_dir.clone(),
            self.meta.clone(),
            self.secrets.snapshot(),
        );
        let written = crate::blocking::run_to_end(move || {
            // Journal first: a durable record never claims more than the journal holds.
            if let Some(journal) = journal {
                let _ = journal.sync_data();
            }
            write_metadata_redacted(&run_dir, &meta, true, &secrets)
        })
        .await
        .unwrap_or_else(|e| {
            let error = std::io::Error::other(e);
            Err(crate::metadata::MetadataError::io(
                "write",
                &self.paths.metadata,
                error,
            ))
        });
        self.metadata_written(written)
    }

    fn refresh_metadata(&mut self) {
        self.meta.updated_at = now_rfc3339();
        self.meta.iterations = self.iteration;
        self.meta.usage = self.usage;
        self.meta.cumulative_usage = self.cumulative_usage();
        self.meta.cost = Some(self.cost.clone());
        self.meta.cumulative_cost = Some(self.cumulative_cost());
        self.meta.duration_ms = Some(self.started_at.elapsed().as_millis() as u64);
    }

    /// Dollars over the run's whole life: earlier starts and this one.
    pub(super) fn cumulative_cost(&self) -> CostTally {
        let mut total = self.cost_before.clone();
        total.add(&self.cost);
        total
    }

    /// Tokens over the run's whole life: earlier starts and this one.
    pub(super) fn cumulative_usage(&self) -> TokenUsage {
        let mut total = self.usage_before;
        total.add(self.usage);
        total
    }

    /// False when the record could not be written (the first such failure of the run is kept
    /// in `metadata_failure`: it is the cause the user needs to read).
    fn metadata_written(&mut self, written: Result<(), crate::metadata::MetadataError>) -> bool {
        match written {
            Ok(()) => true,
            Err(e) => {
                self.log(&format!("warning: cannot write metadata.json: {e}"));
                self.metadata_failure.get_or_insert_with(|| e.to_string());
                false
            }
        }
    }

    pub(super) fn emit(&self, event: RunEvent) {
        self.events.send(event);
    }

    pub(super) fn log(&self, line: &str) {
        self.rec.borrow_mut().log(line);
    }

    /// Appends to the journal; a journal that cannot be written ends the run.
    pub(super) fn append(&self, event: Event) -> Result<(), Halt> {
        self.rec
            .borrow_mut()
            .append(event)
            .map_err(|e| Halt::Failed(error_info(RunErrorKind::JournalError, e)))
    }
}
