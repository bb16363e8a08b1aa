//! Progress the engine streams to its subscribers: [`RunEvent`] per run,
//! [`OrchestrationEvent`] per plan. Lossy for slow subscribers; results never are.

use serde::{Deserialize, Serialize};

use super::status::{RunStatus, TokenUsage};
use super::trace::TraceSpan;

/// Progress, streamed to every subscriber. Lossy for slow subscribers; results never are.
///
/// Serialised with an `"event"` tag in snake_case (`{"event":"tool_started",...}`), the form
/// `delta run --format json` streams. Sensitive ask_human answers are already redacted in
/// every text field. Every variant names its `run_id`, so one subscriber can follow many runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run was taken (its files created, or reopened under its lock) and is about to
    /// iterate.
    RunStarted {
        /// The run this event belongs to.
        run_id: String,
        /// `name` from the agent's `agent.yaml`.
        agent_name: String,
        /// The workspace the run's tools start in (the run's files are under its `.delta/`).
        work_dir: String,
        /// `true` for a continuation of an existing run (`delta continue`, a retried or
        /// resumed plan run), `false` for a new one.
        resumed: bool,
        /// The span this start of the run is (`invoke_agent`), when the request carried a
        /// trace context ([`RunRequest::trace`](crate::RunRequest::trace)); its model calls'
        /// and tools' spans are derived from it (see [`TraceSpan::child`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<TraceSpan>,
        /// The span of the run's previous start, for a continuation whose earlier start was
        /// traced (kept in its metadata.json): the new span links to it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous_trace: Option<TraceSpan>,
    },
    /// One Think-Act-Observe iteration begins.
    IterationStarted {
        /// The run this event belongs to.
        run_id: String,
        /// The run's iteration number, 1-based and counted over the run's whole life: a
        /// continuation goes on from the last journaled iteration.
        iteration: u32,
        /// The cap on iterations for this start or continuation (the request's, else the
        /// agent's, else 30); a continued run may show `iteration` above it.
        max_iterations: u32,
    },
    /// The model replied with text (reasoning beside tool calls, or the final answer).
    /// Replies with tool calls only produce no `Thought`.
    Thought {
        /// The run this event belongs to.
        run_id: String,
        /// The iteration the reply belongs to.
        iteration: u32,
        /// The reply's text content, unabridged.
        text: String,
    },
    /// A tool process is about to start (after its `pre_tool_execution` hook; a call the
    /// hook skipped never starts and has no event).
    ToolStarted {
        /// The run this event belongs to.
        run_id: String,
        /// The iteration whose reply asked for the call.
        iteration: u32,
        /// The model's id for the call, which pairs this event with its `ToolFinished`.
        action_id: String,
        /// The tool's name as the agent defines it.
        tool_name: String,
        /// The command line, shell-quoted, cut to 120 characters (`...` marks a cut).
        summary: String,
        /// For a call answered by an MCP server: the server's name in agent.yaml.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mcp_server: Option<String>,
        /// For a call answered by an MCP server: the tool's name on that server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mcp_tool: Option<String>,
    },
    /// A tool call's result was journaled (calls of one reply finish in reply order).
    ToolFinished {
        /// The run this event belongs to.
        run_id: String,
        /// The iteration whose reply asked for the call.
        iteration: u32,
        /// The model's id for the call, as in its `ToolStarted`.
        action_id: String,
        /// The tool's name as the agent defines it.
        tool_name: String,
        /// Whether the program exited by itself with code 0 (a call a hook answered in its
        /// place counts as a success).
        success: bool,
        /// The process's exit code; `None` when it was killed (signal, timeout,
        /// cancellation) or never started.
        exit_code: Option<i32>,
        /// Wall time of the process, in milliseconds.
        duration_ms: u64,
        /// The first 200 characters of the observation the model will see.
        preview: String,
    },
    /// A model call is sent (after the context is built and `pre_llm_request` ran): a
    /// watcher can show that the model is working, which a call that is not streamed does
    /// not otherwise show for as long as it takes.
    ModelCallStarted {
        /// The run this event belongs to.
        run_id: String,
        /// The iteration the call belongs to.
        iteration: u32,
        /// The reply is asked for as a stream (text then comes as `ReplyText` events when
        /// they are asked for).
        streamed: bool,
        /// Each attempt's whole-request limit (`llm.request_timeout`), in milliseconds.
        request_timeout_ms: u64,
    },
    /// The endpoint taught delta how to write its requests (it refused a detail, its stream
    /// ended before the first chunk, it sent no usage in a stream) and later calls are
    /// written that way: sent once per lesson and process, by the run whose call learned it.
    ModelAdapted {
        /// The run this event belongs to.
        run_id: String,
        /// One line: the endpoint and model, what it did, what is sent from now on, and
        /// where the lesson is remembered.
        message: String,
    },
    /// A model call failed and is retried after `delay_ms` (5xx, 429, a timeout, a broken
    /// connection; the endpoint's retry policy decides). A refusal delta answers by writing
    /// the request another way is not one: it is sent again at once (see `ModelAdapted`).
    ModelRetry {
        /// The run this event belongs to.
        run_id: String,
        /// The attempt that failed, 1-based.
        attempt: u32,
        /// Why it failed, as text.
        error: String,
        /// How long the engine waits before the next attempt, in milliseconds.
        delay_ms: u64,
    },
    /// A model call ended: answered (after `attempts` attempts), failed for good, or
    /// abandoned because the run stopped. Sent after its `ModelRetry` events and before the
    /// reply's `Thought`.
    ModelCallFinished {
        /// The run this event belongs to.
        run_id: String,
        /// The iteration the call belongs to.
        iteration: u32,
        /// The model asked for (`llm.model`, or a `pre_llm_request` hook's).
        model: String,
        /// The model that answered, as the provider names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_model: Option<String>,
        /// The provider's completion id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
        /// Who answered, in OpenTelemetry's words (`gen_ai.provider.name`): `openai` for an
        /// OpenAI-compatible endpoint (its `server_address` tells which),
        /// `delta.scripted` for the scripted model, `delta.custom` for an embedder's backend.
        provider: String,
        /// The endpoint's host, for an HTTP endpoint.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_address: Option<String>,
        /// The endpoint's port (the scheme's default when the URL has none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server_port: Option<u16>,
        /// Attempts made, the last one included.
        attempts: u32,
        /// Wall time of the whole call (queue, attempts, backoff), in milliseconds.
        duration_ms: u64,
        /// Of which waiting: for an in-flight place, a rate-limit slot or Retry-After, and
        /// backing off between attempts, in milliseconds.
        waited_ms: u64,
        /// Time from the answering attempt's start to the first piece of its streamed
        /// reply, in milliseconds; `None` for a reply that was not streamed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        time_to_first_token_ms: Option<u64>,
        /// Tokens the provider reported for every attempt of the call (failed ones too: they
        /// are billed).
        usage: TokenUsage,
        /// Why the reply ended (`stop`, `tool_calls`, `length`...).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// What the call cost in US dollars; `None` while the price of the model is not
        /// known (prices are not part of this version: always `None`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// A short, fixed name for why the call failed (`timeout`, `http_429`, `http_500`,
        /// `transport`, `invalid_request`, `invalid_response`, `cancelled`...); `None` when
        /// it was answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_type: Option<String>,
        /// The failure's message, when it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The conversation sent and the reply, as OpenTelemetry's `gen_ai.input.messages`
        /// and `gen_ai.output.messages` JSON: only when the engine was asked to capture
        /// message content ([`SupervisorConfig::capture_message_content`](crate::SupervisorConfig::capture_message_content)),
        /// sensitive answers redacted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<ModelCallContent>,
    },
    /// The run waits for something another process holds: its workspace's creation lock
    /// (`.delta/.creating.lock`) while the run is being created. Sent once, when the wait
    /// has lasted a second; the run may not exist yet. A stop request ends the wait.
    Waiting {
        /// The run this event belongs to (not created yet while it waits for the lock).
        run_id: String,
        /// What it waits for, in words: the file, the process holding it (from
        /// `/proc/locks`), and how long the run waits at most.
        message: String,
    },
    /// A piece of a streamed reply, as it arrives (only when
    /// [`SupervisorConfig::reply_text_events`](crate::request::SupervisorConfig::reply_text_events)
    /// is set). The whole reply follows as a `Thought` once it is complete; these are for
    /// watching it grow.
    ReplyText {
        /// The run this event belongs to.
        run_id: String,
        /// The iteration the reply belongs to.
        iteration: u32,
        /// New reply text (may be empty).
        content: String,
        /// New reasoning text, from models that think aloud in a separate field (may be empty).
        reasoning: String,
    },
    /// The conversation was compacted to fit the context budget (a CONTEXT_COMPACTED event
    /// in the journal says what was changed).
    ContextCompacted {
        /// The run this event belongs to.
        run_id: String,
        /// The iteration whose request was compacted.
        iteration: u32,
        /// `mask`, `summarize` or `mask_then_summarize`.
        strategy: String,
        /// `budget` (the request did not fit) or `refusal` (the server refused it).
        reason: String,
        /// The request's estimated prompt tokens before the compaction.
        tokens_before: u64,
        /// And after.
        tokens_after: u64,
    },
    /// The run ended; its [`RunResult`](crate::protocol::RunResult) follows on the run's
    /// handle. Always the run's last event.
    RunFinished {
        /// The run this event belongs to.
        run_id: String,
        /// The final status, as recorded in metadata.json.
        status: RunStatus,
        /// Wall time of this start or continuation, in milliseconds.
        duration_ms: u64,
        /// The error message, with its details after `; ` when there are any; `None` when
        /// the run did not fail.
        error: Option<String>,
    },
}

impl RunEvent {
    /// The run the event belongs to, whatever its variant.
    pub fn run_id(&self) -> &str {
        match self {
            RunEvent::RunStarted { run_id, .. }
            | RunEvent::IterationStarted { run_id, .. }
            | RunEvent::Thought { run_id, .. }
            | RunEvent::ToolStarted { run_id, .. }
            | RunEvent::ToolFinished { run_id, .. }
            | RunEvent::ModelCallStarted { run_id, .. }
            | RunEvent::ModelAdapted { run_id, .. }
            | RunEvent::ModelRetry { run_id, .. }
            | RunEvent::ModelCallFinished { run_id, .. }
            | RunEvent::Waiting { run_id, .. }
            | RunEvent::ReplyText { run_id, .. }
            | RunEvent::ContextCompacted { run_id, .. }
            | RunEvent::RunFinished { run_id, .. } => run_id,
        }
    }
}

/// A model call's messages, captured on request (see [`RunEvent::ModelCallFinished`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCallContent {
    /// The messages sent, as a JSON array of `{role, parts: [...]}`.
    pub input_messages: String,
    /// The reply, as a JSON array of one `{role, parts, finish_reason}`; empty when the
    /// call failed.
    pub output_messages: String,
}

/// Progress of an orchestration. Lossy for slow subscribers; the summary never is.
///
/// Serialised like [`RunEvent`] (an `"event"` tag in snake_case). A stage's runs are named
/// by their `index` in the stage's fan-out (0-based) and their deterministic `run_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum OrchestrationEvent {
    /// A stage expanded into `runs` runs, of which `already_done` finished before this
    /// invocation (a resume) and are not started again.
    StageStarted {
        /// The stage's `id` in plan.yaml.
        stage: String,
        /// How many runs the stage expanded into (one per `foreach` item, else one).
        runs: usize,
        /// The outcomes of the runs finished by an earlier invocation.
        #[serde(default)]
        already_done: super::summary::RunCounts,
    },
    /// A run of a stage was submitted: a first attempt, a retry, or a continuation on resume.
    RunStarted {
        /// The stage's `id` in plan.yaml.
        stage: String,
        /// The run's position in the stage's fan-out, 0-based.
        index: usize,
        /// The run's deterministic id (the same on every invocation of the plan).
        run_id: String,
        /// 1-based, counted over every invocation of the plan (a resume goes on counting).
        attempt: u32,
    },
    /// A run of a stage ended (a failed run may still be retried: a `RunStarted` with the
    /// next `attempt` follows).
    RunFinished {
        /// The stage's `id` in plan.yaml.
        stage: String,
        /// The run's position in the stage's fan-out, 0-based.
        index: usize,
        /// The run's deterministic id.
        run_id: String,
        /// The run's final status for this attempt.
        status: RunStatus,
        /// Wall time of the attempt, in milliseconds.
        duration_ms: u64,
        /// The run's error message, when it did not complete.
        error: Option<String>,
        /// The attempt failed and the run is retried (a `RunStarted` with the next
        /// `attempt` follows): this is not the run's final outcome, and a count of finished
        /// runs leaves it out.
        #[serde(default)]
        retried: bool,
    },
    /// Every run of a stage has its final outcome.
    StageFinished {
        /// The stage's `id` in plan.yaml.
        stage: String,
        /// The stage's outcome (its `on_failure` decides between failed and completed with
        /// failures).
        status: super::summary::StageStatus,
        /// The outcomes of all the stage's runs, this invocation's and earlier ones'.
        counts: super::summary::RunCounts,
    },
    /// Totals over the whole plan, sent after every run's end.
    Progress {
        /// Runs known so far (stages not yet expanded are not counted).
        total: usize,
        /// Runs with a final outcome (whatever it is).
        done: usize,
        /// Runs submitted and not yet finished.
        running: usize,
        /// Finished runs that did not complete (failed, interrupted or waiting for input).
        failed: usize,
    },
    /// A spending cap is 80 % spent (`exhausted: false`, once), or ran out (`exhausted:
    /// true`: no run starts any more; those in flight stop at their next model call).
    Budget {
        /// "80% of the plan's budget spent (...)" / "budget exhausted (spent $X of $Y)".
        message: String,
        /// The cap ran out.
        exhausted: bool,
    },
    /// The plan ended; its summary follows on the orchestration's handle. Always the last
    /// event.
    Finished {
        /// The plan's final status.
        status: super::summary::OrchestrationStatus,
    },
}
