//! Sensitive answers and journal events: every text of an event redacted before its line is
//! written, and restored when a journal is read back for the model (see [`crate::redact`]).
//!
//! Every variant is destructured field by field, so a new event or field does not compile
//! until it is listed here: nothing reaches the journal unredacted by omission.
//! Must not: decide what is secret (the run's [`SecretSet`] does).

use serde_json::Value;

use super::event::{Event, ToolCallRecord};
use crate::redact::SecretSet;

/// Replaces every secret in every text of `event` by its marker.
pub fn redact_event(event: &mut Event, secrets: &SecretSet) {
    if secrets.is_empty() {
        return;
    }
    visit(
        event,
        &mut |text| secrets.redact_string(text),
        &mut |value| secrets.redact_json(value),
    );
}

/// Puts the secrets back where `event` holds their markers.
pub fn restore_event(event: &mut Event, secrets: &SecretSet) {
    if secrets.is_empty() {
        return;
    }
    visit(
        event,
        &mut |text| secrets.restore_string(text),
        &mut |value| secrets.restore_json(value),
    );
}

fn visit(event: &mut Event, text: &mut dyn FnMut(&mut String), json: &mut dyn FnMut(&mut Value)) {
    match event {
        Event::EngineStart {
            run_id,
            agent_home,
            work_dir,
            agent_name,
            task,
        } => {
            for field in [run_id, agent_home, work_dir, agent_name, task] {
                text(field);
            }
        }
        Event::UserMessage { content } => text(content),
        Event::Thought {
            iteration: _,
            content,
            tool_calls,
            llm_invocation_ref,
            finish_reason,
            usage: _,
            prompt: _,
        } => {
            if let Some(v) = content {
                text(v);
            }
            if let Some(v) = llm_invocation_ref {
                text(v);
            }
            if let Some(v) = finish_reason {
                text(v);
            }
            for ToolCallRecord {
                id,
                name,
                arguments,
            } in tool_calls
            {
                text(id);
                text(name);
                text(arguments);
            }
        }
        Event::ActionRequest {
            iteration: _,
            action_id,
            tool_name,
            tool_args,
            resolved_command,
        } => {
            text(action_id);
            text(tool_name);
            json(tool_args);
            text(resolved_command);
        }
        Event::ActionResult {
            iteration: _,
            action_id,
            tool_name,
            status: _,
            observation_content,
            exit_code: _,
            execution_ref,
        } => {
            text(action_id);
            text(tool_name);
            text(observation_content);
            if let Some(v) = execution_ref {
                text(v);
            }
        }
        Event::Error {
            error_type,
            error_message,
            error_details,
        } => {
            text(error_type);
            text(error_message);
            if let Some(details) = error_details {
                json(details);
            }
        }
        Event::EngineEnd {
            run_id,
            status: _,
            final_iteration: _,
            result,
            error,
        } => {
            text(run_id);
            if let Some(v) = result {
                text(v);
            }
            if let Some(v) = error {
                text(v);
            }
        }
        Event::HumanInputRequest {
            iteration: _,
            action_id,
            prompt,
            input_type,
            sensitive: _,
        } => {
            text(action_id);
            text(prompt);
            text(input_type);
        }
        Event::HumanInputReceived {
            iteration: _,
            action_id,
            response,
            redacted: _,
        } => {
            text(action_id);
            text(response);
        }
        Event::HookExecuted {
            hook_name,
            status,
            reason,
            io_path_ref,
        } => {
            text(hook_name);
            text(status);
            if let Some(v) = reason {
                text(v);
            }
            text(io_path_ref);
        }
        Event::Warning { message } => text(message),
        Event::Interrupted { reason } => text(reason),
        Event::ContextCompacted {
            iteration: _,
            strategy,
            reason,
            masked,
            cut,
            dropped_through: _,
            summary,
            tokens_before: _,
            tokens_after: _,
            budget: _,
            window,
            refused: _,
        } => {
            text(strategy);
            text(reason);
            masked.iter_mut().for_each(&mut *text);
            for c in cut {
                text(&mut c.action_id);
            }
            if let Some(v) = summary {
                text(v);
            }
            if let Some(window) = window {
                text(&mut window.source);
                if let Some(v) = &mut window.detail {
                    text(v);
                }
            }
        }
        Event::ContextCache {
            source,
            hit: _,
            key,
        } => {
            text(source);
            text(key);
        }
    }
}
