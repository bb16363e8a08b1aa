//! The RunActor side of lifecycle hooks: firing a configured hook as a future on the actor
//! (the actor never blocks on it), journaling `HOOK_EXECUTED` and WARNING events (including
//! the once-per-kind warning when io/ audit records cannot be written), applying a
//! `pre_llm_request` hook's request override, and the bounded variant used while the run
//! ends (`on_error`, `on_run_end`).
//!
//! A hook never stops the run: whatever its outcome, the continuation runs. Once a stop was
//! requested no further hook starts except the end hooks, which get a fresh token (the run's
//! own token is cancelled by then) and a short timeout.
//! Must not: run processes itself (that is `crate::hooks::run_hook`) or interpret hook output
//! beyond passing the outcome on.

use std::time::Duration;

use actix::prelude::*;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::HookName;
use crate::hooks::{apply_request_override, run_hook, HookContext, HookOutcome};
use crate::journal::Event;
use crate::llm::ChatRequest;

use super::RunActor;

/// Upper bound on the end hooks' timeout (`on_error` and `on_run_end` run before the RunResult
/// is sent, so they must not hold a batch up for long).
pub const END_HOOK_MAX_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound when the run is being stopped (Ctrl-C, run timeout): exit promptly.
pub const END_HOOK_MAX_TIMEOUT_WHEN_STOPPING: Duration = Duration::from_secs(2);

/// Hook-specific variables of one invocation.
#[derive(Default)]
pub(super) struct HookVars {
    pub tool_name: Option<String>,
    pub tool_result: Option<String>,
    pub error_message: Option<String>,
}

type Then = Box<dyn FnOnce(&mut RunActor, Option<HookOutcome>, &mut Context<RunActor>)>;

/// The kinds of io/ audit records, each warned about once per run when it cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum AuditKind {
    Invocation,
    ToolExecution,
    Hook,
}

impl AuditKind {
    fn records(self) -> &'static str {
        match self {
            AuditKind::Invocation => "model call records (io/invocations)",
            AuditKind::ToolExecution => "tool execution records (io/tool_executions)",
            AuditKind::Hook => "hook records (io/hooks)",
        }
    }
}

impl RunActor {
    /// Whether a hook is configured for `name`.
    pub(super) fn has_hook(&self, name: HookName) -> bool {
        self.request.agent.hooks.get(name).is_some()
    }

    /// Runs the hook `name` if it is configured and the run is not stopping, then `then` with
    /// its outcome. Without a hook `then` runs at once (synchronously) with `None`.
    pub(super) fn fire_hook(
        &mut self,
        name: HookName,
        payload: impl FnOnce(&RunActor) -> Value,
        vars: HookVars,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut RunActor, Option<HookOutcome>, &mut Context<RunActor>) + 'static,
    ) {
        if !self.has_hook(name) || self.stop.is_some() || self.finished {
            then(self, None, ctx);
            return;
        }
        let payload = payload(self);
        let hook_ctx = self.hook_context(vars, None);
        let cancel = self.cancel.child_token();
        self.spawn_hook(name, payload, hook_ctx, cancel, Box::new(then), ctx);
    }

    /// Like [`RunActor::fire_hook`], for the hooks that run while the run ends: a fresh token
    /// (cancelled by a later `CancelRunActor`) and a capped timeout.
    pub(super) fn fire_end_hook(
        &mut self,
        name: HookName,
        payload: impl FnOnce(&RunActor) -> Value,
        vars: HookVars,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut RunActor, Option<HookOutcome>, &mut Context<RunActor>) + 'static,
    ) {
        if !self.has_hook(name) {
            then(self, None, ctx);
            return;
        }
        let cap = if self.stop.is_some() {
            END_HOOK_MAX_TIMEOUT_WHEN_STOPPING
        } else {
            END_HOOK_MAX_TIMEOUT
        };
        let payload = payload(self);
        let hook_ctx = self.hook_context(vars, Some(cap));
        let cancel = self.end_hooks_cancel.clone();
        self.spawn_hook(name, payload, hook_ctx, cancel, Box::new(then), ctx);
    }

    fn spawn_hook(
        &mut self,
        name: HookName,
        payload: Value,
        hook_ctx: HookContext,
        cancel: CancellationToken,
        then: Then,
        ctx: &mut Context<Self>,
    ) {
        let Some(spec) = self.request.agent.hooks.get(name).cloned() else {
            then(self, None, ctx);
            return;
        };
        self.hooks_running += 1;
        let fut = async move { run_hook(name, &spec, &payload, &hook_ctx, cancel).await };
        fut.into_actor(self)
            .map(move |outcome, act, ctx| {
                act.hooks_running = act.hooks_running.saturating_sub(1);
                act.record_hook(&outcome, ctx);
                then(act, Some(outcome), ctx);
            })
            .spawn(ctx);
    }

    fn hook_context(&self, vars: HookVars, max_timeout: Option<Duration>) -> HookContext {
        let mut hook_ctx = HookContext::new(
            self.paths.clone(),
            &self.run_id,
            &self.request.agent.home,
            &self.request.work_dir,
            self.child_env.clone(),
        );
        hook_ctx.iteration = self.iteration;
        hook_ctx.tool_name = vars.tool_name;
        hook_ctx.tool_result = vars.tool_result;
        hook_ctx.error_message = vars.error_message;
        hook_ctx.max_timeout = max_timeout;
        hook_ctx.redact = std::sync::Arc::new(self.secrets.values().cloned().collect());
        hook_ctx
    }

    /// A successful `pre_llm_request` hook's stdout may replace parts of the request.
    pub(super) fn apply_override(
        &mut self,
        request: &mut ChatRequest,
        outcome: &HookOutcome,
        ctx: &mut Context<Self>,
    ) {
        if !outcome.succeeded() {
            return;
        }
        if !outcome.stdout_complete {
            self.warn(
                format!(
                    "pre_llm_request hook output ignored: it printed more than {} bytes ({})",
                    crate::hooks::HOOK_OUTPUT_HEAD_BYTES,
                    outcome.io_path_ref
                ),
                ctx,
            );
            return;
        }
        match apply_request_override(request, &outcome.stdout) {
            Ok(report) => {
                if !report.changed.is_empty() {
                    self.log.line(&format!(
                        "pre_llm_request hook replaced: {}",
                        report.changed.join(", ")
                    ));
                }
                if !report.ignored_keys.is_empty() {
                    self.warn(
                        format!(
                            "pre_llm_request hook: ignored key(s) {} (only messages, model, temperature and max_tokens can be replaced)",
                            report.ignored_keys.join(", ")
                        ),
                        ctx,
                    );
                }
            }
            Err(problem) => self.warn(
                format!(
                    "pre_llm_request hook output ignored, the request is sent unchanged: {problem} (hint: print nothing, or one JSON object with messages, model, temperature and/or max_tokens; see {})",
                    outcome.io_path_ref
                ),
                ctx,
            ),
        }
    }

    /// Journals `HOOK_EXECUTED` (best effort once the run has ended).
    fn record_hook(&mut self, outcome: &HookOutcome, ctx: &mut Context<Self>) {
        self.log.line(&format!(
            "hook {}: {}{} ({} ms, {})",
            outcome.name.as_str(),
            outcome.status.as_str(),
            outcome
                .reason
                .as_ref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default(),
            outcome.duration.as_millis(),
            outcome.io_path_ref
        ));
        if let Some(problem) = &outcome.record_error {
            self.audit_write_failed(AuditKind::Hook, problem.clone(), ctx);
        }
        let event = Event::HookExecuted {
            hook_name: outcome.name.as_str().to_string(),
            status: outcome.status.as_str().to_string(),
            reason: outcome.reason.clone(),
            io_path_ref: outcome.io_path_ref.clone(),
        };
        self.append_best_effort(event, ctx);
    }

    /// An io/ audit record could not be written. The first failure of each kind in a run
    /// becomes a WARNING naming the path and the OS error (a full or read-only disk would
    /// otherwise fail every call in silence, or flood the journal).
    pub(super) fn audit_write_failed(
        &mut self,
        kind: AuditKind,
        problem: String,
        ctx: &mut Context<Self>,
    ) {
        self.log.line(&format!(
            "warning: {} not written: {problem}",
            kind.records()
        ));
        if !self.audit_warned.insert(kind) {
            return;
        }
        self.warn(
            format!(
                "{} are not being written: {problem} (further failures of this kind in this run are not reported again)",
                kind.records()
            ),
            ctx,
        );
    }

    /// Journals a WARNING (something ignored that the user should know about).
    pub(super) fn warn(&mut self, message: String, ctx: &mut Context<Self>) {
        self.log.line(&format!("warning: {message}"));
        self.append_best_effort(Event::Warning { message }, ctx);
    }

    /// Appends while running (a failed write ends the run) or after the end (ignored).
    fn append_best_effort(&mut self, event: Event, ctx: &mut Context<Self>) {
        if self.finished {
            if let Some(journal) = self.journal.as_mut() {
                let _ = journal.append(event);
            }
        } else {
            let _ = self.append(event, ctx);
        }
    }

    /// True when the continuation must not go on: the run ended, or a stop was requested (the
    /// run is then finished INTERRUPTED here).
    pub(super) fn halted(&mut self, ctx: &mut Context<Self>) -> bool {
        if self.finished {
            return true;
        }
        if self.stop.is_some() {
            self.interrupt_now(ctx);
            return true;
        }
        false
    }
}
