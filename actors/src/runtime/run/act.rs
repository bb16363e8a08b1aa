//! Running the planned calls of a reply: `pump` starts what may start (one at a time, or all
//! at once with `parallel_tool_calls`), each process call wrapped in its tool hooks
//! (`pre_tool_execution` may skip it; `post_tool_execution` sees its result), in its own
//! `ToolActor`; `flush_results` journals results strictly in reply order; `end_iteration`
//! fires `on_iteration_end` and loops (or pauses for a human, or stops).
//!
//! Invariant: results are journaled in reply order even when calls run concurrently; an
//! async ask_human pauses the run only after the reply's other calls have run.
//! Must not: talk to the model (that is `think.rs`).

use actix::prelude::*;
use serde_json::json;

use crate::agent::HookName;
use crate::api::RunEvent;
use crate::hooks::{parse_tool_control, HookOutcome, ToolControl};
use crate::journal::{ActionStatus, Event};
use crate::runtime::tool::{Execute, ToolActor, ToolExecution, ToolJob};

use super::calls::{error_result, summarize_argv, Planned, Recorded, Slot};
use super::hooks::{AuditKind, HookVars};
use super::RunActor;

const NOT_RUN_INTERRUPTED: &str =
    "Error: not run: the run was interrupted before this call started.";

impl RunActor {
    /// Starts whatever may start now, then journals whatever is ready in order.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        let parallel = self.request.agent.parallel_tool_calls;
        let stopping = self.stop.is_some();
        let pre_hook = self.has_hook(HookName::PreToolExecution);
        loop {
            let Some(acting) = self.acting.as_mut() else {
                return;
            };
            if acting.next_start >= acting.planned.len() || (!parallel && acting.in_flight > 0) {
                break;
            }
            let i = acting.next_start;
            acting.next_start += 1;
            let plan = std::mem::replace(&mut acting.planned[i], Planned::Taken);
            if stopping {
                acting.slots[i] = Slot::Done(error_result(NOT_RUN_INTERRUPTED));
                continue;
            }
            match plan {
                Planned::Taken => {}
                Planned::Immediate { observation } => {
                    acting.slots[i] = Slot::Done(error_result(&observation))
                }
                Planned::Process(job) => {
                    // The call counts as in flight from its pre hook to its post hook.
                    acting.slots[i] = Slot::InFlight;
                    acting.in_flight += 1;
                    acting.processes_in_flight += 1;
                    if pre_hook {
                        self.run_pre_tool_hook(i, job, ctx);
                    } else {
                        self.start_process(i, *job, ctx);
                    }
                }
                Planned::Ask {
                    prompt,
                    input_type,
                    sensitive,
                } => self.start_question(i, prompt, input_type, sensitive, ctx),
            }
        }
        self.flush_results(ctx);
    }

    fn run_pre_tool_hook(&mut self, i: usize, job: Box<ToolJob>, ctx: &mut Context<Self>) {
        let Some(acting) = self.acting.as_ref() else {
            return;
        };
        let call = &acting.calls[i];
        let payload = json!({
            "iteration": acting.iteration,
            "action_id": call.action_id,
            "tool_name": call.tool_name,
            "tool_args": call.tool_args,
            "resolved_command": call.resolved_command,
            "argv": job.argv,
        });
        let vars = HookVars {
            tool_name: Some(call.tool_name.clone()),
            ..HookVars::default()
        };
        self.fire_hook(
            HookName::PreToolExecution,
            move |_| payload,
            vars,
            ctx,
            move |act, outcome, ctx| act.after_pre_tool_hook(i, job, outcome, ctx),
        );
    }

    fn after_pre_tool_hook(
        &mut self,
        i: usize,
        job: Box<ToolJob>,
        outcome: Option<HookOutcome>,
        ctx: &mut Context<Self>,
    ) {
        if self.finished {
            return;
        }
        if self.stop.is_some() {
            self.settle_call(i, error_result(NOT_RUN_INTERRUPTED), ctx);
            return;
        }
        let control = match outcome.filter(HookOutcome::succeeded) {
            None => ToolControl::Run,
            Some(outcome) => match parse_tool_control(&outcome.stdout) {
                Ok(control) => control,
                Err(problem) => {
                    self.warn(
                        format!(
                            "pre_tool_execution hook output ignored, the tool runs: {problem} (hint: print nothing, or {{\"action\":\"skip\",\"observation\":\"...\"}}; see {})",
                            outcome.io_path_ref
                        ),
                        ctx,
                    );
                    ToolControl::Run
                }
            },
        };
        if self.finished {
            return;
        }
        match control {
            ToolControl::Run => self.start_process(i, *job, ctx),
            ToolControl::Skip { observation } => {
                self.log.line(&format!(
                    "pre_tool_execution hook skipped call {i} ({})",
                    job.tool_name
                ));
                let skipped = Recorded {
                    observation,
                    status: ActionStatus::Success,
                    exit_code: None,
                    duration_ms: 0,
                    execution_ref: None,
                };
                self.settle_call(i, skipped, ctx);
            }
        }
    }

    fn start_process(&mut self, i: usize, job: ToolJob, ctx: &mut Context<Self>) {
        let Some(acting) = self.acting.as_ref() else {
            return;
        };
        self.emit(RunEvent::ToolStarted {
            run_id: self.run_id.clone(),
            iteration: acting.iteration,
            action_id: acting.calls[i].action_id.clone(),
            tool_name: acting.calls[i].tool_name.clone(),
            summary: summarize_argv(&job.argv),
        });
        let tool = ToolActor.start();
        let cancel = self.cancel.child_token();
        tool.send(Execute { job, cancel })
            .into_actor(self)
            .map(move |res, act, ctx| act.on_tool_done(i, res.ok(), ctx))
            .spawn(ctx);
    }

    fn on_tool_done(
        &mut self,
        i: usize,
        execution: Option<ToolExecution>,
        ctx: &mut Context<Self>,
    ) {
        if self.finished {
            return;
        }
        if let Some(problem) = execution.as_ref().and_then(|e| e.record_error.clone()) {
            self.audit_write_failed(AuditKind::ToolExecution, problem, ctx);
        }
        let recorded = match execution {
            Some(e) => Recorded {
                observation: if e.cancelled {
                    format!("{}\n(The run was interrupted while this tool ran; its process group was killed.)", e.observation)
                } else {
                    e.observation
                },
                status: if e.success {
                    ActionStatus::Success
                } else {
                    ActionStatus::Failed
                },
                exit_code: e.exit_code,
                duration_ms: e.duration.as_millis() as u64,
                execution_ref: e
                    .record_path
                    .file_name()
                    .map(|n| format!("io/tool_executions/{}", n.to_string_lossy())),
            },
            None => error_result("Error: the tool's actor stopped before reporting a result."),
        };
        let Some(acting) = self.acting.as_ref() else {
            return;
        };
        let call = &acting.calls[i];
        let payload = json!({
            "iteration": acting.iteration,
            "action_id": call.action_id,
            "tool_name": call.tool_name,
            "tool_args": call.tool_args,
            "status": recorded.status,
            "exit_code": recorded.exit_code,
            "duration_ms": recorded.duration_ms,
            "observation": recorded.observation,
            "execution_ref": recorded.execution_ref,
        });
        let vars = HookVars {
            tool_name: Some(call.tool_name.clone()),
            tool_result: Some(recorded.observation.clone()),
            ..HookVars::default()
        };
        self.fire_hook(
            HookName::PostToolExecution,
            move |_| payload,
            vars,
            ctx,
            move |act, _, ctx| act.settle_call(i, recorded, ctx),
        );
    }

    /// The call's result is final: it may be journaled (in reply order).
    fn settle_call(&mut self, i: usize, recorded: Recorded, ctx: &mut Context<Self>) {
        if self.finished {
            return;
        }
        let Some(acting) = self.acting.as_mut() else {
            return;
        };
        acting.slots[i] = Slot::Done(recorded);
        acting.in_flight -= 1;
        acting.processes_in_flight -= 1;
        self.pump(ctx);
    }

    pub(super) fn flush_results(&mut self, ctx: &mut Context<Self>) {
        loop {
            let Some(acting) = self.acting.as_mut() else {
                return;
            };
            if acting.next_record >= acting.slots.len() {
                break;
            }
            let i = acting.next_record;
            match std::mem::replace(&mut acting.slots[i], Slot::Recorded) {
                Slot::Done(r) => {
                    acting.next_record += 1;
                    let iteration = acting.iteration;
                    let action_id = acting.calls[i].action_id.clone();
                    let tool_name = acting.calls[i].tool_name.clone();
                    let preview: String = r.observation.chars().take(200).collect();
                    let success = r.status == ActionStatus::Success;
                    let event = Event::ActionResult {
                        iteration,
                        action_id: action_id.clone(),
                        tool_name: tool_name.clone(),
                        status: r.status,
                        observation_content: r.observation,
                        exit_code: r.exit_code,
                        execution_ref: r.execution_ref,
                    };
                    if !self.append(event, ctx) {
                        return;
                    }
                    self.emit(RunEvent::ToolFinished {
                        run_id: self.run_id.clone(),
                        iteration,
                        action_id,
                        tool_name,
                        success,
                        exit_code: r.exit_code,
                        duration_ms: r.duration_ms,
                        preview,
                    });
                }
                Slot::Deferred | Slot::Recorded => acting.next_record += 1,
                other @ (Slot::Pending | Slot::InFlight) => {
                    acting.slots[i] = other;
                    break;
                }
            }
        }
        let done = self
            .acting
            .as_ref()
            .is_some_and(|a| a.next_record >= a.slots.len() && a.in_flight == 0);
        if done {
            self.end_iteration(ctx);
        }
    }

    fn end_iteration(&mut self, ctx: &mut Context<Self>) {
        let Some(acting) = self.acting.take() else {
            return;
        };
        self.timings.tools += acting.started.elapsed();
        self.save_progress();
        if self.stop.is_some() {
            self.interrupt_now(ctx);
            return;
        }
        self.fire_hook(
            HookName::OnIterationEnd,
            |act| act.iteration_end_payload(false),
            HookVars::default(),
            ctx,
            move |act, _, ctx| {
                if act.halted(ctx) {
                    return;
                }
                if let Some((question, info)) = acting.pause {
                    act.pause_for_human(question, info, ctx);
                    return;
                }
                act.think(ctx);
            },
        );
    }
}
