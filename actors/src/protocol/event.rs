//! Progress the engine streams to its subscribers: [`RunEvent`] per run,
//! [`OrchestrationEvent`] per plan. Lossy for slow subscribers; results never are.

use serde::{Deserialize, Serialize};

use super::status::RunStatus;

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
    /// A model call failed and is retried after `delay_ms` (5xx, 429, a timeout, a broken
    /// connection; the endpoint's retry policy decides).
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
            | RunEvent::ModelRetry { run_id, .. }
            | RunEvent::ReplyText { run_id, .. }
            | RunEvent::ContextCompacted { run_id, .. }
            | RunEvent::RunFinished { run_id, .. } => run_id,
        }
    }
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
    /// The plan ended; its summary follows on the orchestration's handle. Always the last
    /// event.
    Finished {
        /// The plan's final status.
        status: super::summary::OrchestrationStatus,
    },
}
