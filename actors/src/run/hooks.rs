//! The run loop's side of lifecycle hooks: firing a configured hook, journaling its
//! `HOOK_EXECUTED`, and WARNING events for what the engine ignored.
//!
//! A hook never stops a run: whatever its outcome, the loop goes on. Once a stop was
//! requested no further hook starts except the end hooks, which get their own token (the
//! run's is cancelled by then) and a short timeout.
//! Must not: run processes itself (that is `crate::hooks::run_hook`) or interpret hook output
//! beyond passing the outcome on.

use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::HookName;
use crate::hooks::{run_hook, HookContext, HookOutcome};
use crate::journal::Event;

use super::state::{AuditKind, Halt, HookVars, Run};

/// Upper bound on the end hooks' timeout (`on_error` and `on_run_end` run before the RunResult
/// is sent, so they must not hold a batch up for long).
pub const END_HOOK_MAX_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound when the run is being stopped (Ctrl-C, run timeout): exit promptly.
pub const END_HOOK_MAX_TIMEOUT_WHEN_STOPPING: Duration = Duration::from_secs(2);

impl Run {
    /// Whether a hook is configured for `name`.
    pub(super) fn has_hook(&self, name: HookName) -> bool {
        self.lp.request.agent.hooks.get(name).is_some()
    }

    /// A hook between two steps of an iteration: a stop requested before or while it runs
    /// ends the iterations here. `None` when no hook is configured.
    pub(super) async fn hook(
        &self,
        name: HookName,
        payload: impl FnOnce() -> Value,
        vars: HookVars,
    ) -> Result<Option<HookOutcome>, Halt> {
        self.checkpoint()?;
        let outcome = self.fire(name, payload, vars).await?;
        self.checkpoint()?;
        Ok(outcome)
    }

    /// Runs the hook `name` if it is configured and the run is not stopping, and journals
    /// what it did. Used inside the tool phase, where a stop does not end the phase.
    pub(super) async fn fire(
        &self,
        name: HookName,
        payload: impl FnOnce() -> Value,
        vars: HookVars,
    ) -> Result<Option<HookOutcome>, Halt> {
        let Some(spec) = self.lp.request.agent.hooks.get(name) else {
            return Ok(None);
        };
        if self.lp.control.is_stopping() {
            return Ok(None);
        }
        let context = self.hook_context(vars, None);
        let cancel = self.lp.control.token().child_token();
        let outcome = run_hook(name, spec, &payload(), &context, cancel).await;
        self.record_hook(&outcome)?;
        Ok(Some(outcome))
    }

    /// A hook that runs while the run ends (`on_error`, `on_run_end`): its own token
    /// (cancelled by a stop that arrives now) and a capped timeout. Best effort.
    pub(super) async fn fire_end_hook(
        &self,
        name: HookName,
        payload: impl FnOnce() -> Value,
        vars: HookVars,
    ) {
        let Some(spec) = self.lp.request.agent.hooks.get(name) else {
            return;
        };
        let cap = if self.lp.control.stop_request().is_some() {
            END_HOOK_MAX_TIMEOUT_WHEN_STOPPING
        } else {
            END_HOOK_MAX_TIMEOUT
        };
        let context = self.hook_context(vars, Some(cap));
        let cancel: CancellationToken = self.lp.control.end_hooks.clone();
        let outcome = run_hook(name, spec, &payload(), &context, cancel).await;
        let _ = self.record_hook(&outcome);
    }

    fn hook_context(&self, vars: HookVars, max_timeout: Option<Duration>) -> HookContext {
        let mut context = HookContext::new(
            self.paths.clone(),
            &self.lp.run_id,
            &self.lp.request.agent.home,
            &self.lp.request.work_dir,
            self.child_env.clone(),
        );
        context.iteration = self.iteration;
        context.tool_name = vars.tool_name;
        context.tool_result = vars.tool_result;
        context.error_message = vars.error_message;
        context.max_timeout = max_timeout;
        context.secrets = self.secrets.snapshot();
        context
    }

    /// Journals `HOOK_EXECUTED` and logs the outcome.
    fn record_hook(&self, outcome: &HookOutcome) -> Result<(), Halt> {
        self.log(&format!(
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
            self.audit_write_failed(AuditKind::Hook, problem.clone())?;
        }
        self.append(Event::HookExecuted {
            hook_name: outcome.name.as_str().to_string(),
            status: outcome.status.as_str().to_string(),
            reason: outcome.reason.clone(),
            io_path_ref: outcome.io_path_ref.clone(),
        })
    }

    /// An io/ audit record could not be written. The first failure of each kind in a run
    /// becomes a WARNING naming the path and the OS error (a full or read-only disk would
    /// otherwise fail every call in silence, or flood the journal).
    pub(super) fn audit_write_failed(&self, kind: AuditKind, problem: String) -> Result<(), Halt> {
        self.log(&format!(
            "warning: {} not written: {problem}",
            kind.records()
        ));
        if !self.audit_warned.borrow_mut().insert(kind) {
            return Ok(());
        }
        self.warn(format!(
            "{} are not being written: {problem} (further failures of this kind in this run are not reported again)",
            kind.records()
        ))
    }

    /// Journals a WARNING (something ignored that the user should know about).
    pub(super) fn warn(&self, message: String) -> Result<(), Halt> {
        self.log(&format!("warning: {message}"));
        self.append(Event::Warning { message })
    }
}
