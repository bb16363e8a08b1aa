//! The run's outbound boundary for sensitive answers: every [`RunEvent`] sent to embedders
//! (progress bars, `delta orchestrate`, host programs) and the [`RunResult`] (printed by
//! `delta run`) pass through the run's [`Redactor`] here, once.
//!
//! Every event and result field is destructured by name, so a new text field does not
//! compile until it is listed. Must not: redact what goes to the model or to tools.

use tokio::sync::broadcast;

use crate::protocol::{InteractionInfo, RunErrorInfo, RunEvent, RunResult, RunResultMetadata};
use crate::redact::{Redactor, SecretSet};
use crate::request::ObserverHandle;

/// The run's event sender: redacts each event, then broadcasts it.
#[derive(Clone)]
pub(super) struct EventSink {
    tx: broadcast::Sender<RunEvent>,
    secrets: Redactor,
    /// Told each event, redacted, before the broadcast (trace and metric export).
    observer: Option<ObserverHandle>,
}

impl EventSink {
    pub(super) fn new(
        tx: broadcast::Sender<RunEvent>,
        secrets: Redactor,
        observer: Option<ObserverHandle>,
    ) -> EventSink {
        EventSink {
            tx,
            secrets,
            observer,
        }
    }

    /// Redacts `event`, tells the observer, broadcasts it (to nobody, when nobody listens).
    pub(super) fn send(&self, mut event: RunEvent) {
        let secrets = self.secrets.snapshot();
        if !secrets.is_empty() {
            redact_event(&mut event, &secrets);
        }
        if let Some(observer) = &self.observer {
            observer.run_event(&event);
        }
        // No subscriber is fine: events are progress, not results.
        let _ = self.tx.send(event);
    }
}

fn redact_event(event: &mut RunEvent, secrets: &SecretSet) {
    let text = |field: &mut String| secrets.redact_string(field);
    match event {
        RunEvent::RunStarted {
            run_id,
            agent_name,
            work_dir,
            resumed: _,
            trace: _,
            previous_trace: _,
        } => {
            text(run_id);
            text(agent_name);
            text(work_dir);
        }
        RunEvent::IterationStarted {
            run_id,
            iteration: _,
            max_iterations: _,
        } => text(run_id),
        RunEvent::Thought {
            run_id,
            iteration: _,
            text: thought,
        } => {
            text(run_id);
            text(thought);
        }
        RunEvent::ToolStarted {
            run_id,
            iteration: _,
            action_id,
            tool_name,
            summary,
            mcp_server,
            mcp_tool,
        } => {
            for field in [run_id, action_id, tool_name, summary] {
                text(field);
            }
            for field in [mcp_server, mcp_tool].into_iter().flatten() {
                text(field);
            }
        }
        RunEvent::ToolFinished {
            run_id,
            iteration: _,
            action_id,
            tool_name,
            success: _,
            exit_code: _,
            duration_ms: _,
            preview,
        } => {
            for field in [run_id, action_id, tool_name, preview] {
                text(field);
            }
        }
        RunEvent::ModelCallStarted {
            run_id,
            iteration: _,
            streamed: _,
            request_timeout_ms: _,
        } => text(run_id),
        RunEvent::ModelAdapted { run_id, message } => {
            text(run_id);
            text(message);
        }
        RunEvent::ModelRetry {
            run_id,
            attempt: _,
            error,
            delay_ms: _,
        } => {
            text(run_id);
            text(error);
        }
        RunEvent::ModelCallFinished {
            run_id,
            iteration: _,
            model,
            response_model,
            response_id,
            provider,
            server_address,
            server_port: _,
            attempts: _,
            duration_ms: _,
            waited_ms: _,
            time_to_first_token_ms: _,
            usage: _,
            finish_reason,
            cost_usd: _,
            error_type,
            error,
            content,
        } => {
            for field in [run_id, model, provider] {
                text(field);
            }
            let optional = [
                response_model,
                response_id,
                server_address,
                finish_reason,
                error_type,
                error,
            ];
            for field in optional.into_iter().flatten() {
                text(field);
            }
            if let Some(content) = content {
                // JSON text: a secret inside a string is replaced by a marker without quotes.
                text(&mut content.input_messages);
                text(&mut content.output_messages);
            }
        }
        RunEvent::Waiting { run_id, message } => {
            text(run_id);
            text(message);
        }
        RunEvent::ReplyText {
            run_id,
            iteration: _,
            content,
            reasoning,
        } => {
            // Pieces are redacted whole here; a secret split across two pieces is caught by
            // the stream redactor that cut them (`Run::reply_text_sink`).
            for field in [run_id, content, reasoning] {
                text(field);
            }
        }
        RunEvent::ContextCompacted {
            run_id,
            iteration: _,
            strategy: _,
            reason: _,
            tokens_before: _,
            tokens_after: _,
        } => text(run_id),
        RunEvent::RunFinished {
            run_id,
            status: _,
            duration_ms: _,
            error,
        } => {
            text(run_id);
            if let Some(error) = error {
                text(error);
            }
        }
    }
}

/// `result` with every sensitive answer replaced by its marker (the final answer, the error,
/// a pending question's prompt).
pub(super) fn redact_result(result: &mut RunResult, secrets: &SecretSet) {
    if secrets.is_empty() {
        return;
    }
    let text = |field: &mut String| secrets.redact_string(field);
    let RunResult {
        schema_version: _,
        run_id,
        status: _,
        result: answer,
        empty_answer: _,
        error,
        interaction,
        metrics: _,
        metadata:
            RunResultMetadata {
                agent_name,
                workspace_path,
                run_dir,
            },
    } = result;
    for field in [run_id, agent_name, workspace_path, run_dir] {
        text(field);
    }
    if let Some(answer) = answer {
        text(answer);
    }
    if let Some(RunErrorInfo {
        kind: _,
        message,
        details,
    }) = error
    {
        text(message);
        if let Some(details) = details {
            text(details);
        }
    }
    if let Some(InteractionInfo {
        prompt,
        input_type,
        sensitive: _,
    }) = interaction
    {
        text(prompt);
        text(input_type);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn events_are_redacted_before_they_are_broadcast() {
        let (tx, mut rx) = broadcast::channel(4);
        let secrets = Redactor::default();
        let sink = EventSink::new(tx, secrets.clone(), None);
        secrets.add("call_1", "canary-88");
        sink.send(RunEvent::Thought {
            run_id: "r".into(),
            iteration: 1,
            text: "it is canary-88".into(),
        });
        let RunEvent::Thought { text, .. } = rx.try_recv().unwrap() else {
            panic!("not a thought");
        };
        assert_eq!(text, format!("it is {}", crate::redact::marker("call_1")));
    }
}
