//! [`SpanAssembler`]: the engine's events turned into finished OpenTelemetry spans, following
//! the GenAI semantic conventions — `invoke_workflow <plan>` per orchestration, `stage <id>`
//! per stage, `invoke_agent <agent>` per run start, `chat <model>` per model call (its
//! failed attempts as `retry` events), `execute_tool <tool>` per tool call (MCP calls with
//! `mcp.*` attributes).
//!
//! A span's ids come with the events (a run's span is in its `RunStarted`, an orchestration's
//! in the observer's call) or are derived from them as the engine derived them
//! ([`TraceSpan::child`]): nothing is measured here that an event does not say. Spans of
//! unsampled traces are not built.
//!
//! Must not: do I/O or block (it runs inside the engine's observer; the exporter sends).

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use crate::protocol::{OrchestrationEvent, OrchestrationStatus, RunEvent, RunStatus, TraceSpan};
use crate::request::ObservedOrchestration;

/// A run start whose span is open.
struct OpenRun {
    span: TraceSpan,
    started: SystemTime,
    agent: String,
    resumed: bool,
    previous: Option<TraceSpan>,
    model: Option<(String, String)>,
    input_tokens: u64,
    output_tokens: u64,
    /// Failed attempts of the call in progress: (when, attempt, error, backoff).
    retries: Vec<(SystemTime, u32, String, u64)>,
    /// Tool calls started and not finished: action id → (start, MCP server and tool).
    tools: HashMap<String, (SystemTime, Option<String>, Option<String>, String)>,
}

/// An orchestration whose span is open, with its stages'.
struct OpenPlan {
    started: SystemTime,
    stages: HashMap<String, (SystemTime, usize)>,
}

/// Turns events into finished spans (see the module docs).
pub struct SpanAssembler {
    scope: InstrumentationScope,
    capture_content: bool,
    runs: HashMap<String, OpenRun>,
    plans: HashMap<[u8; 8], OpenPlan>,
}

impl SpanAssembler {
    /// An assembler with nothing open; `capture_content` puts message content and tool
    /// arguments and results on the spans.
    pub fn new(capture_content: bool) -> SpanAssembler {
        SpanAssembler {
            scope: InstrumentationScope::builder("delta")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            capture_content,
            runs: HashMap::new(),
            plans: HashMap::new(),
        }
    }

    /// Notes that the orchestration whose span is `span` started at `at` (its span starts
    /// there rather than at its first event).
    pub fn plan_started(&mut self, span: &TraceSpan, at: SystemTime) {
        self.plans.entry(span.span_id).or_insert(OpenPlan {
            started: at,
            stages: HashMap::new(),
        });
    }

    /// The spans `event` (a run's, at `now`) finishes.
    pub fn run_event(&mut self, event: &RunEvent, now: SystemTime) -> Vec<SpanData> {
        match event {
            RunEvent::RunStarted {
                run_id,
                agent_name,
                resumed,
                trace: Some(span),
                previous_trace,
                ..
            } if span.sampled => {
                self.runs.insert(
                    run_id.clone(),
                    OpenRun {
                        span: span.clone(),
                        started: now,
                        agent: agent_name.clone(),
                        resumed: *resumed,
                        previous: previous_trace.clone(),
                        model: None,
                        input_tokens: 0,
                        output_tokens: 0,
                        retries: Vec::new(),
                        tools: HashMap::new(),
                    },
                );
                Vec::new()
            }
            RunEvent::ModelRetry {
                run_id,
                attempt,
                error,
                delay_ms,
            } => {
                if let Some(run) = self.runs.get_mut(run_id) {
                    run.retries.push((now, *attempt, error.clone(), *delay_ms));
                }
                Vec::new()
            }
            RunEvent::ModelCallFinished { run_id, .. } => {
                let Some(run) = self.runs.get_mut(run_id) else {
                    return Vec::new();
                };
                let span = chat_span(&self.scope, self.capture_content, run, event, now);
                span.into_iter().collect()
            }
            RunEvent::ToolStarted {
                run_id,
                action_id,
                mcp_server,
                mcp_tool,
                summary,
                ..
            } => {
                if let Some(run) = self.runs.get_mut(run_id) {
                    run.tools.insert(
                        action_id.clone(),
                        (now, mcp_server.clone(), mcp_tool.clone(), summary.clone()),
                    );
                }
                Vec::new()
            }
            RunEvent::ToolFinished {
                run_id,
                action_id,
                tool_name,
                success,
                exit_code,
                duration_ms,
                preview,
                ..
            } => {
                let Some(run) = self.runs.get_mut(run_id) else {
                    return Vec::new();
                };
                let Some((started, server, mcp_tool, summary)) = run.tools.remove(action_id) else {
                    return Vec::new();
                };
                let span = run.span.child("tool", action_id);
                let mut attributes = vec![
                    kv("gen_ai.operation.name", "execute_tool"),
                    kv("gen_ai.tool.name", tool_name.clone()),
                    kv("gen_ai.tool.call.id", action_id.clone()),
                    kv(
                        "gen_ai.tool.type",
                        if server.is_some() {
                            "extension"
                        } else {
                            "function"
                        },
                    ),
                ];
                if let Some(code) = exit_code {
                    attributes.push(KeyValue::new("process.exit.code", i64::from(*code)));
                }
                if let Some(server) = server {
                    attributes.push(kv("mcp.method.name", "tools/call"));
                    attributes.push(kv("delta.mcp.server", server));
                    if let Some(tool) = mcp_tool {
                        attributes.push(kv("delta.mcp.tool", tool));
                    }
                }
                if self.capture_content {
                    attributes.push(kv("gen_ai.tool.call.arguments", summary));
                    attributes.push(kv("gen_ai.tool.call.result", preview.clone()));
                }
                let status = if *success {
                    Status::Unset
                } else {
                    let kind = if exit_code.is_some() {
                        "exit_code"
                    } else {
                        "no_exit"
                    };
                    attributes.push(kv("error.type", kind));
                    Status::error(format!(
                        "the tool failed ({})",
                        exit_code.map_or_else(
                            || "no exit code".to_string(),
                            |c| format!("exit code {c}")
                        )
                    ))
                };
                let end = started + Duration::from_millis(*duration_ms);
                vec![self.span(
                    &span,
                    format!("execute_tool {tool_name}"),
                    SpanKind::Internal,
                    (started, end),
                    attributes,
                    status,
                    Vec::new(),
                    Vec::new(),
                )]
            }
            RunEvent::RunFinished {
                run_id,
                status,
                error,
                ..
            } => {
                let Some(run) = self.runs.remove(run_id) else {
                    return Vec::new();
                };
                let mut attributes = vec![
                    kv("gen_ai.operation.name", "invoke_agent"),
                    kv("gen_ai.agent.name", run.agent.clone()),
                    kv("gen_ai.conversation.id", run_id.clone()),
                    kv("delta.run.id", run_id.clone()),
                    kv("delta.run.status", status.to_string()),
                    KeyValue::new("delta.run.resumed", run.resumed),
                    KeyValue::new("gen_ai.usage.input_tokens", run.input_tokens as i64),
                    KeyValue::new("gen_ai.usage.output_tokens", run.output_tokens as i64),
                ];
                if let Some((model, provider)) = &run.model {
                    attributes.push(kv("gen_ai.request.model", model.clone()));
                    attributes.push(kv("gen_ai.provider.name", provider.clone()));
                }
                let status = match (status, error) {
                    (RunStatus::Completed | RunStatus::WaitingForInput, _) => Status::Ok,
                    (other, message) => {
                        attributes.push(kv("error.type", other.to_string()));
                        Status::error(message.clone().unwrap_or_else(|| other.to_string()))
                    }
                };
                let links = run
                    .previous
                    .iter()
                    .map(|previous| {
                        Link::new(
                            context(previous),
                            vec![kv("delta.link", "previous_start")],
                            0,
                        )
                    })
                    .collect();
                vec![self.span(
                    &run.span,
                    format!("invoke_agent {}", run.agent),
                    SpanKind::Internal,
                    (run.started, now),
                    attributes,
                    status,
                    Vec::new(),
                    links,
                )]
            }
            _ => Vec::new(),
        }
    }

    /// The spans `event` (of `plan`, at `now`) finishes.
    pub fn orchestration_event(
        &mut self,
        plan: ObservedOrchestration<'_>,
        event: &OrchestrationEvent,
        now: SystemTime,
    ) -> Vec<SpanData> {
        let Some(root) = plan.trace.filter(|t| t.sampled) else {
            return Vec::new();
        };
        let open = self.plans.entry(root.span_id).or_insert(OpenPlan {
            started: now,
            stages: HashMap::new(),
        });
        match event {
            OrchestrationEvent::StageStarted { stage, runs, .. } => {
                open.stages.insert(stage.clone(), (now, *runs));
                Vec::new()
            }
            OrchestrationEvent::StageFinished {
                stage,
                status,
                counts,
            } => {
                let (started, runs) = open.stages.remove(stage).unwrap_or((now, 0));
                let status_text = serde_json::to_value(status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                let mut attributes = vec![
                    kv("delta.stage.id", stage.clone()),
                    kv("delta.stage.status", status_text.clone()),
                    KeyValue::new("delta.stage.runs", runs as i64),
                    KeyValue::new("delta.stage.completed", counts.completed as i64),
                    KeyValue::new("delta.stage.failed", counts.failed as i64),
                ];
                let failed = matches!(status, crate::protocol::StageStatus::Failed);
                let status = if failed {
                    attributes.push(kv("error.type", status_text.clone()));
                    Status::error(format!("stage {stage} {status_text}"))
                } else {
                    Status::Unset
                };
                let span = root.child("stage", stage);
                vec![self.span(
                    &span,
                    format!("stage {stage}"),
                    SpanKind::Internal,
                    (started, now),
                    attributes,
                    status,
                    Vec::new(),
                    Vec::new(),
                )]
            }
            OrchestrationEvent::Finished { status } => {
                let started = self.plans.remove(&root.span_id).map_or(now, |p| p.started);
                let status_text = serde_json::to_value(status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                let mut attributes = vec![
                    kv("gen_ai.operation.name", "invoke_workflow"),
                    kv("gen_ai.workflow.name", plan.plan_name.to_string()),
                    kv("delta.orchestration.id", plan.id.to_string()),
                    kv("delta.orchestration.status", status_text.clone()),
                ];
                let status = if matches!(status, OrchestrationStatus::Completed) {
                    Status::Ok
                } else {
                    attributes.push(kv("error.type", status_text.clone()));
                    Status::error(format!("the orchestration ended {status_text}"))
                };
                vec![self.span(
                    root,
                    format!("invoke_workflow {}", plan.plan_name),
                    SpanKind::Internal,
                    (started, now),
                    attributes,
                    status,
                    Vec::new(),
                    Vec::new(),
                )]
            }
            _ => Vec::new(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        span: &TraceSpan,
        name: String,
        kind: SpanKind,
        (start, end): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        status: Status,
        events: Vec<Event>,
        links: Vec<Link>,
    ) -> SpanData {
        make_span(
            &self.scope,
            span,
            name,
            kind,
            (start, end),
            attributes,
            status,
            events,
            links,
        )
    }
}

/// A `chat <model>` span from a run's `ModelCallFinished` (its retries as events), adding
/// the call's tokens and model to the run's span.
fn chat_span(
    scope: &InstrumentationScope,
    capture: bool,
    run: &mut OpenRun,
    event: &RunEvent,
    now: SystemTime,
) -> Option<SpanData> {
    let RunEvent::ModelCallFinished {
        iteration,
        model,
        response_model,
        response_id,
        provider,
        server_address,
        server_port,
        attempts,
        duration_ms,
        time_to_first_token_ms,
        usage,
        finish_reason,
        cost_usd,
        error_type,
        error,
        content,
        ..
    } = event
    else {
        return None;
    };
    // A hostile endpoint's counts must not wrap (or panic in a debug build).
    run.input_tokens = run.input_tokens.saturating_add(usage.input_tokens);
    run.output_tokens = run.output_tokens.saturating_add(usage.output_tokens);
    run.model
        .get_or_insert_with(|| (model.clone(), provider.clone()));
    let mut attributes = vec![
        kv("gen_ai.operation.name", "chat"),
        kv("gen_ai.provider.name", provider.clone()),
        kv("gen_ai.request.model", model.clone()),
        KeyValue::new("gen_ai.usage.input_tokens", usage.input_tokens as i64),
        KeyValue::new("gen_ai.usage.output_tokens", usage.output_tokens as i64),
        KeyValue::new("delta.model.attempts", i64::from(*attempts)),
    ];
    let optional = [
        ("gen_ai.response.model", response_model),
        ("gen_ai.response.id", response_id),
        ("server.address", server_address),
        ("error.type", error_type),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            attributes.push(kv(key, value.clone()));
        }
    }
    if let Some(port) = server_port {
        attributes.push(KeyValue::new("server.port", i64::from(*port)));
    }
    if let Some(reason) = finish_reason {
        attributes.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(vec![opentelemetry::StringValue::from(reason.clone())].into()),
        ));
    }
    if let Some(ms) = time_to_first_token_ms {
        attributes.push(KeyValue::new("delta.time_to_first_token_ms", *ms as i64));
    }
    // The hook for prices: set once the model catalogue knows them.
    if let Some(cost) = cost_usd {
        attributes.push(KeyValue::new("delta.cost.usd", *cost));
    }
    if let (true, Some(content)) = (capture, content) {
        attributes.push(kv("gen_ai.input.messages", content.input_messages.clone()));
        attributes.push(kv(
            "gen_ai.output.messages",
            content.output_messages.clone(),
        ));
    }
    let events = run
        .retries
        .drain(..)
        .map(|(at, attempt, error, delay_ms)| {
            Event::new(
                "retry",
                at,
                vec![
                    KeyValue::new("delta.attempt", i64::from(attempt)),
                    kv("exception.message", error),
                    KeyValue::new("delta.retry.delay_ms", delay_ms as i64),
                ],
                0,
            )
        })
        .collect();
    let status = match error {
        Some(message) => Status::error(message.clone()),
        None => Status::Unset,
    };
    let start = now
        .checked_sub(Duration::from_millis(*duration_ms))
        .unwrap_or(now);
    let span = run.span.child("chat", &iteration.to_string());
    Some(make_span(
        scope,
        &span,
        format!("chat {model}"),
        SpanKind::Client,
        (start, now),
        attributes,
        status,
        events,
        Vec::new(),
    ))
}

#[allow(clippy::too_many_arguments)]
fn make_span(
    scope: &InstrumentationScope,
    span: &TraceSpan,
    name: String,
    kind: SpanKind,
    (start, end): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    status: Status,
    events: Vec<Event>,
    links: Vec<Link>,
) -> SpanData {
    let mut span_events = SpanEvents::default();
    span_events.events = events;
    let mut span_links = SpanLinks::default();
    span_links.links = links;
    SpanData {
        span_context: context(span),
        parent_span_id: span
            .parent_span_id
            .map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: false,
        span_kind: kind,
        name: Cow::Owned(name),
        start_time: start,
        end_time: end.max(start),
        attributes,
        dropped_attributes_count: 0,
        events: span_events,
        links: span_links,
        status,
        instrumentation_scope: scope.clone(),
    }
}

fn context(span: &TraceSpan) -> SpanContext {
    let state = span
        .trace_state
        .as_deref()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    SpanContext::new(
        TraceId::from_bytes(span.trace_id),
        SpanId::from_bytes(span.span_id),
        if span.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        },
        false,
        state,
    )
}

fn kv(key: &'static str, value: impl Into<Value>) -> KeyValue {
    KeyValue::new(key, value)
}
