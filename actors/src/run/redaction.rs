//! The run's outbound boundary for sensitive answers: every [`RunEvent`] sent to embedders
//! (progress bars, `delta orchestrate`, host programs) and the [`RunResult`] (printed by
//! `delta run`) pass through the run's [`Redactor`] here, once.
//!
//! Every event and result field is destructured by name, so a new text field does not
//! compile until it is listed. Must not: redact what goes to the model or to tools.

use tokio::sync::broadcast;

use crate::protocol::{InteractionInfo, RunErrorInfo, RunEvent, RunResult, RunResultMetadata};
use crate::redact::{Redactor, SecretSet};

/// The run's event sender: redacts each event, then broadcasts it.
#[derive(Clone)]
pub(super) struct EventSink {
    tx: broadcast::Sender<RunEvent>,
    secrets: Redactor,
}

impl EventSink {
    pub(super) fn new(tx: broadcast::Sender<RunEvent>, secrets: Redactor) -> EventSink {
        EventSink { tx, secrets }
    }

    /// Like [`broadcast::Sender::send`] (no subscriber is an error the caller may ignore).
    pub(super) fn send(
        &self,
        mut event: RunEvent,
    ) -> Result<usize, broadcast::error::SendError<RunEvent>> {
        let secrets = self.secrets.snapshot();
        if !secrets.is_empty() {
            redact_event(&mut event, &secrets);
        }
        self.tx.send(event)
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
        } => {
            for field in [run_id, action_id, tool_name, summary] {
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
        RunEvent::ModelRetry {
            run_id,
            attempt: _,
            error,
            delay_ms: _,
        } => {
            text(run_id);
            text(error);
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
        let sink = EventSink::new(tx, secrets.clone());
        secrets.add("call_1", "canary-88");
        sink.send(RunEvent::Thought {
            run_id: "r".into(),
            iteration: 1,
            text: "it is canary-88".into(),
        })
        .unwrap();
        let RunEvent::Thought { text, .. } = rx.try_recv().unwrap() else {
            panic!("not a thought");
        };
        assert_eq!(text, format!("it is {}", crate::redact::marker("call_1")));
    }
}
