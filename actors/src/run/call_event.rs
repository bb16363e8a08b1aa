//! The [`RunEvent::ModelCallFinished`] of one model call — who answered, how long it took,
//! the tokens of every attempt, why it ended — and, when the engine captures message
//! content, the conversation in OpenTelemetry's `gen_ai.input.messages` /
//! `gen_ai.output.messages` form with sensitive answers redacted.
//!
//! Must not: measure anything the call's outcome does not already say (the event is what an
//! exporter builds the call's span from), or journal anything.

use std::time::Duration;

use serde_json::{json, Value};

use crate::llm::price::call_cost_usd;
use crate::llm::{ChatCompletion, ChatMessage, ChatRequest, LlmError, Usage};
use crate::protocol::{ModelCallContent, RunEvent, TokenUsage, TraceSpan};

use super::state::Run;

/// How a model call ended, as its event reports it.
pub(super) enum CallEnding<'a> {
    /// Answered (after `attempts` attempts).
    Answered(&'a ChatCompletion),
    /// Failed for good with `error`.
    Failed(&'a LlmError),
    /// Abandoned: the run was asked to stop.
    Cancelled,
}

/// The numbers of a call, whatever its ending.
pub(super) struct CallFigures {
    pub attempts: u32,
    pub duration: Duration,
    pub waited: Duration,
    pub first_token: Option<Duration>,
    /// Every attempt's tokens.
    pub usage: Usage,
    /// Some of `usage` is delta's estimate: a reply came without one.
    pub estimated: bool,
}

impl Run {
    /// The span of this iteration's model call: the run's span's child `("chat",
    /// <iteration>)`, the one an exporter builds from the call's event.
    pub(super) fn chat_span(&self) -> Option<TraceSpan> {
        self.lp
            .request
            .trace
            .as_ref()
            .map(|run| run.child("chat", &self.iteration.to_string()))
    }

    /// What `usage` (every attempt of one call to `model`, answered by `answered_by`) cost:
    /// dollars at the agent's `llm.price`, else at the catalogue's price of the model that
    /// answered or, failing that, of the one asked for; `Err(model)` when nothing prices it.
    /// A call that used no tokens costs nothing, priced or not.
    fn call_cost<'m>(
        &self,
        model: &'m str,
        answered_by: Option<&str>,
        usage: &Usage,
    ) -> Result<f64, &'m str> {
        if usage.prompt_tokens == 0 && usage.completion_tokens == 0 {
            return Ok(0.0);
        }
        let found = answered_by
            .and_then(|answered| self.prices.price_of(answered))
            .or_else(|| self.prices.price_of(model));
        match found {
            Some(price) => Ok(call_cost_usd(usage, &price)),
            None => Err(model),
        }
    }

    /// Sends the call's [`RunEvent::ModelCallFinished`], and adds its cost to the driving's.
    pub(super) fn report_model_call(
        &mut self,
        request: &ChatRequest,
        ending: CallEnding<'_>,
        figures: CallFigures,
    ) {
        let server = self
            .server
            .get_or_init(|| self.lp.request.llm.server_identity())
            .clone();
        let (response_model, response_id, finish_reason) = match &ending {
            CallEnding::Answered(completion) => (
                completion.model.clone(),
                completion.id.clone(),
                completion.finish_reason.clone(),
            ),
            _ => (None, None, None),
        };
        let (error_type, error) = match &ending {
            CallEnding::Answered(_) => (None, None),
            CallEnding::Failed(error) => (Some(error.error_type()), Some(error.to_string())),
            CallEnding::Cancelled => (
                Some("cancelled".to_string()),
                Some("the run was asked to stop".to_string()),
            ),
        };
        let content = self
            .lp
            .config
            .capture_message_content
            .then(|| self.captured_content(request, &ending));
        let cost = self.call_cost(&request.model, response_model.as_deref(), &figures.usage);
        self.cost.add_call(cost);
        self.charge_budgets(&figures.usage, cost.ok());
        self.emit(RunEvent::ModelCallFinished {
            run_id: self.lp.run_id.clone(),
            iteration: self.iteration,
            model: request.model.clone(),
            response_model,
            response_id,
            provider: server.provider.to_string(),
            server_address: server.address,
            server_port: server.port,
            attempts: figures.attempts,
            duration_ms: figures.duration.as_millis() as u64,
            waited_ms: figures.waited.as_millis() as u64,
            time_to_first_token_ms: figures.first_token.map(|d| d.as_millis() as u64),
            usage: TokenUsage {
                input_tokens: figures.usage.prompt_tokens,
                output_tokens: figures.usage.completion_tokens,
                total_tokens: figures.usage.total_tokens,
                estimated: figures.estimated,
            },
            finish_reason,
            cost_usd: cost.ok(),
            error_type,
            error,
            content,
        });
    }

    /// The conversation sent and the reply, redacted, as OpenTelemetry's message JSON.
    fn captured_content(&self, request: &ChatRequest, ending: &CallEnding<'_>) -> ModelCallContent {
        let secrets = self.secrets.snapshot();
        let mut input: Value = request.messages.iter().map(message_json).collect();
        let mut output = match ending {
            CallEnding::Answered(completion) => {
                let mut message = message_json(&completion.message);
                message["finish_reason"] = json!(completion.finish_reason);
                json!([message])
            }
            _ => json!([]),
        };
        secrets.redact_json(&mut input);
        secrets.redact_json(&mut output);
        ModelCallContent {
            input_messages: input.to_string(),
            output_messages: output.to_string(),
        }
    }
}

/// One message as `{role, parts: [...]}` (OpenTelemetry's GenAI message schema): its text,
/// its tool calls, or the tool result it carries.
fn message_json(message: &ChatMessage) -> Value {
    let mut parts = Vec::new();
    if let Some(call_id) = &message.tool_call_id {
        parts.push(json!({
            "type": "tool_call_response",
            "id": call_id,
            "response": message.content,
        }));
    } else if let Some(text) = &message.content {
        parts.push(json!({"type": "text", "content": text}));
    }
    for call in message.tool_calls() {
        let arguments = serde_json::from_str::<Value>(&call.function.arguments)
            .unwrap_or_else(|_| Value::String(call.function.arguments.clone()));
        parts.push(json!({
            "type": "tool_call",
            "id": call.id,
            "name": call.function.name,
            "arguments": arguments,
        }));
    }
    json!({"role": message.role.as_str(), "parts": parts})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    #[test]
    fn messages_become_role_and_parts() {
        let call = ToolCall::function("c1", "ls", r#"{"path":"."}"#);
        let assistant = ChatMessage::assistant(Some("looking".into()), vec![call]);
        assert_eq!(
            message_json(&assistant),
            json!({"role": "assistant", "parts": [
                {"type": "text", "content": "looking"},
                {"type": "tool_call", "id": "c1", "name": "ls", "arguments": {"path": "."}}
            ]})
        );
        assert_eq!(
            message_json(&ChatMessage::tool("c1", "a b")),
            json!({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "c1", "response": "a b"}
            ]})
        );
    }
}
