//! Playing a script: pick the first matching rule, take the step numbered by the assistant
//! turns already in the conversation (so continue/resume lands on the right step), count
//! `times:` failures per conversation, render templates, and build the reply.
//!
//! Pure apart from the per-conversation failure counters; never sleeps (callers sleep the
//! returned latency) and never touches the network.

use std::time::Duration;

use serde_json::Value;

use super::script::{Action, ArgTree, Args, CallSpec, Latency, Rule, Script, Step, Text};
use super::validate::validate_history;
use super::variables::TemplateContext;
use crate::llm::endpoint::RequestMeta;
use crate::llm::types::{
    ChatCompletion, ChatMessage, ChatRequest, Messages, Role, ToolCall, Usage,
};
use crate::template_bounds::{explain, render_bounded};

/// What the scripted model answers to one request.
// Made and consumed once per request, never kept in bulk: boxing the completion would cost
// an allocation per reply for no memory saved.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedReply {
    /// A chat completion: an answer or tool calls.
    Completion {
        /// The reply.
        completion: ChatCompletion,
        /// How long to wait before delivering it (drawn from the step's or rule's latency);
        /// streamed, the chunks are spread over it.
        latency: Duration,
        /// How it is cut into chunks when streamed.
        stream: StreamPlan,
    },
    /// An HTTP failure: a scripted `fail:` step, an unmatched request (400), or an invalid
    /// history in strict mode (400).
    Failure {
        /// The HTTP status.
        status: u16,
        /// The error message, in the OpenAI error body.
        message: String,
        /// Sent as `Retry-After` (a 429 always has one over HTTP).
        retry_after: Option<Duration>,
        /// How long to wait before delivering it.
        latency: Duration,
    },
}

impl ScriptedReply {
    /// How long to wait before delivering this reply.
    pub fn latency(&self) -> Duration {
        match self {
            ScriptedReply::Completion { latency, .. } | ScriptedReply::Failure { latency, .. } => {
                *latency
            }
        }
    }

    fn failure(status: u16, message: String) -> Self {
        ScriptedReply::Failure {
            status,
            message,
            retry_after: None,
            latency: Duration::ZERO,
        }
    }
}

/// How a streamed reply is delivered (see docs/llm-script.md, "Streaming").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamPlan {
    /// Pieces the reply text is cut into; `None`: one per word, at most 64.
    pub chunks: Option<usize>,
    /// Silence after the first chunk (zero: none).
    pub stall: Duration,
}

/// What a step resolves to: a step to render, or a ready reply (a scripted failure).
enum Play<'s> {
    Step(&'s Step),
    Reply(Box<ScriptedReply>),
}

impl Script {
    /// Answers one request. In strict mode an invalid history is answered with HTTP 400
    /// naming the problem; see [`Script::respond_unchecked`] for the rest.
    pub fn respond(&self, req: &ChatRequest, meta: &RequestMeta) -> ScriptedReply {
        if self.strict {
            if let Err(problem) = validate_history(&req.messages) {
                return ScriptedReply::failure(400, format!("invalid chat history: {problem}"));
            }
        }
        self.respond_unchecked(req, meta)
    }

    /// Answers without validating the history: first rule whose `agent` equals the agent
    /// name, whose `task_contains` is a substring of the first user message and whose `model`
    /// equals the requested model (absent conditions match anything); the step index is the
    /// number of assistant messages in the request.
    pub fn respond_unchecked(&self, req: &ChatRequest, meta: &RequestMeta) -> ScriptedReply {
        let task = first_content(&req.messages, Role::User);
        let Some((rule_index, rule)) = self.matching_rule(task, req, meta) else {
            return ScriptedReply::failure(
                400,
                format!(
                    "no rule in LLM script {} matches agent {:?}, model {:?} and task {:?} \
                     (hint: add a last rule without `agent`/`task_contains` as a fallback)",
                    self.origin,
                    meta.agent_name,
                    req.model,
                    task.chars().take(80).collect::<String>()
                ),
            );
        };
        let step_index = req
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let ctx = TemplateContext {
            task,
            last_observation: last_content(&req.messages, Role::Tool),
            last_user: last_content(&req.messages, Role::User),
            step: step_index,
            agent: &meta.agent_name,
            run_id: &meta.run_id,
            model: &req.model,
        };
        let Some(step) = rule.steps.get(step_index) else {
            let answer = ChatMessage::assistant(Some(self.exhausted_answer.clone()), vec![]);
            let latency = self.latency_for(rule, None);
            return self.completion(req, answer, latency, None, StreamPlan::default());
        };
        let played = match self.failure_or_recovery(step, rule, (rule_index, step_index), &ctx) {
            Play::Step(next) => next,
            Play::Reply(failure) => return *failure,
        };
        match self.build_message(played, &ctx) {
            Ok(message) => {
                // A `then:` step's own latency wins over the failing step's.
                let timed = if played.latency.is_some() {
                    played
                } else {
                    step
                };
                let latency = self.latency_for(rule, Some(timed));
                let stream = self.stream_plan(played, (rule_index, step_index), &ctx);
                self.completion(
                    req,
                    message,
                    latency,
                    played.finish_reason.as_deref(),
                    stream,
                )
            }
            Err(e) => ScriptedReply::failure(400, e),
        }
    }

    /// The step to play for `step`: itself unless it is a `fail:` step, which answers with
    /// its failure while its `times` last, then plays its `then:` step.
    fn failure_or_recovery<'s>(
        &'s self,
        step: &'s Step,
        rule: &Rule,
        (rule_index, step_index): (usize, usize),
        ctx: &TemplateContext<'_>,
    ) -> Play<'s> {
        let Action::Fail {
            status,
            times,
            retry_after,
            message,
            then,
        } = &step.action
        else {
            return Play::Step(step);
        };
        if let (Some(limit), Some(next)) = (times, then) {
            let mut served = self
                .attempts
                .entry((conversation_key(ctx), rule_index, step_index))
                .or_insert(0);
            if *served >= *limit {
                return Play::Step(next);
            }
            *served += 1;
        }
        let message = match message.as_ref().map(|text| self.render(text, ctx)) {
            Some(Ok(text)) => text,
            Some(Err(e)) => return Play::Reply(Box::new(ScriptedReply::failure(400, e))),
            None => format!("scripted failure (HTTP {status})"),
        };
        Play::Reply(Box::new(ScriptedReply::Failure {
            status: *status,
            message,
            // 429 always tells the client when to come back.
            retry_after: retry_after.or((*status == 429).then_some(Duration::ZERO)),
            latency: self.latency_for(rule, Some(step)),
        }))
    }

    /// The step's stream shape for this attempt: a `stall` lasts its `stall_times` attempts
    /// per conversation (all of them without `stall_times`).
    fn stream_plan(
        &self,
        step: &Step,
        (rule_index, step_index): (usize, usize),
        ctx: &TemplateContext<'_>,
    ) -> StreamPlan {
        let shape = step.stream;
        let stall = match (shape.stall, shape.stall_times) {
            (None, _) => Duration::ZERO,
            (Some(stall), None) => stall,
            (Some(stall), Some(limit)) => {
                let mut served = self
                    .stalls
                    .entry((conversation_key(ctx), rule_index, step_index))
                    .or_insert(0);
                if *served >= limit {
                    Duration::ZERO
                } else {
                    *served += 1;
                    stall
                }
            }
        };
        StreamPlan {
            chunks: shape.chunks.map(|n| n as usize),
            stall,
        }
    }

    fn matching_rule(
        &self,
        task: &str,
        req: &ChatRequest,
        meta: &RequestMeta,
    ) -> Option<(usize, &Rule)> {
        self.rules.iter().enumerate().find(|(_, rule)| {
            let agent_ok = !matches!(rule.agent.as_deref(), Some(a) if a != meta.agent_name);
            let task_ok = !matches!(rule.task_contains.as_deref(), Some(t) if !task.contains(t));
            let last_user = last_content(&req.messages, Role::User);
            let last_user_ok = !matches!(
                rule.last_user_contains.as_deref(),
                Some(t) if !last_user.contains(t)
            );
            let model_ok = !matches!(rule.model.as_deref(), Some(m) if m != req.model);
            agent_ok && task_ok && last_user_ok && model_ok
        })
    }

    fn latency_for(&self, rule: &Rule, step: Option<&Step>) -> Duration {
        let latency: Latency = step
            .and_then(|s| s.latency)
            .or(rule.latency)
            .unwrap_or(self.default_latency);
        latency.sample()
    }

    fn build_message(&self, step: &Step, ctx: &TemplateContext<'_>) -> Result<ChatMessage, String> {
        match &step.action {
            Action::Answer(text) => Ok(ChatMessage::assistant(
                Some(self.render(text, ctx)?),
                vec![],
            )),
            Action::Calls { content, calls } => {
                let content = content.as_ref().map(|t| self.render(t, ctx)).transpose()?;
                let tool_calls = calls
                    .iter()
                    .enumerate()
                    .map(|(k, call)| self.tool_call(call, k, ctx))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(ChatMessage::assistant(content, tool_calls))
            }
            // `then` is never a failure (checked at load time).
            Action::Fail { .. } => Err("a `then:` step cannot be a failure".to_owned()),
        }
    }

    fn tool_call(
        &self,
        call: &CallSpec,
        k: usize,
        ctx: &TemplateContext<'_>,
    ) -> Result<ToolCall, String> {
        let arguments = match &call.args {
            Args::Raw(text) => self.render(text, ctx)?,
            Args::Json(tree) => self.render_tree(tree, ctx)?.to_string(),
        };
        Ok(ToolCall::function(
            format!("call_{}_{k}", ctx.step),
            call.tool.clone(),
            arguments,
        ))
    }

    fn render_tree(&self, tree: &ArgTree, ctx: &TemplateContext<'_>) -> Result<Value, String> {
        Ok(match tree {
            ArgTree::Text(text) => Value::String(self.render(text, ctx)?),
            ArgTree::Scalar(v) => v.clone(),
            ArgTree::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| self.render_tree(i, ctx))
                    .collect::<Result<_, _>>()?,
            ),
            ArgTree::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.render_tree(v, ctx)?)))
                    .collect::<Result<_, String>>()?,
            ),
        })
    }

    fn render(&self, text: &Text, ctx: &TemplateContext<'_>) -> Result<String, String> {
        match text {
            Text::Literal(s) => Ok(s.clone()),
            Text::Template(name) => self
                .templates
                .get_template(name)
                .and_then(|t| render_bounded(&t, ctx))
                .map_err(|e| {
                    let reason = explain(&e).unwrap_or_else(|| e.to_string());
                    format!("template `{name}` in {} failed: {reason}", self.origin)
                }),
        }
    }

    fn completion(
        &self,
        req: &ChatRequest,
        message: ChatMessage,
        latency: Duration,
        finish_reason: Option<&str>,
        stream: StreamPlan,
    ) -> ScriptedReply {
        let finish_reason = finish_reason.unwrap_or(if message.tool_calls().is_empty() {
            "stop"
        } else {
            "tool_calls"
        });
        let prompt_chars: usize = req.messages.iter().map(message_chars).sum();
        let prompt_tokens = estimate_tokens(prompt_chars);
        let completion_tokens = estimate_tokens(message_chars(&message));
        let mut completion = ChatCompletion {
            id: Some(format!(
                "chatcmpl-scripted-{}",
                uuid::Uuid::new_v4().simple()
            )),
            model: Some(self.model.clone()),
            message,
            finish_reason: Some(finish_reason.to_owned()),
            usage: Some(Usage {
                cached_prompt_tokens: 0,
                prompt_tokens,
                completion_tokens,
                total_tokens: prompt_tokens + completion_tokens,
            }),
            raw: Value::Null,
        };
        completion.raw = completion.to_openai_json(chrono::Utc::now().timestamp());
        ScriptedReply::Completion {
            completion,
            latency,
            stream,
        }
    }
}

/// Which conversation a request belongs to, for `times:` counters: its run, else its task.
fn conversation_key(ctx: &TemplateContext<'_>) -> String {
    if ctx.run_id.is_empty() {
        format!("task:{}", ctx.task)
    } else {
        format!("run:{}", ctx.run_id)
    }
}

fn message_chars(m: &ChatMessage) -> usize {
    m.content.as_deref().map_or(0, str::len)
        + m.tool_calls()
            .iter()
            .map(|c| c.function.name.len() + c.function.arguments.len())
            .sum::<usize>()
}

/// Roughly four characters per token, at least one.
fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

fn first_content(messages: &Messages, role: Role) -> &str {
    messages
        .iter()
        .find(|m| m.role == role)
        .and_then(|m| m.content.as_deref())
        .unwrap_or("")
}

fn last_content(messages: &Messages, role: Role) -> &str {
    messages
        .iter()
        .rev()
        .find(|m| m.role == role)
        .and_then(|m| m.content.as_deref())
        .unwrap_or("")
}
