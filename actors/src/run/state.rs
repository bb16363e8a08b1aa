//! The state of a run being driven, shared by the files of the loop: the taken [`Run`] (its
//! files, counters and secrets), why the iterations may end early ([`Halt`]), how the run
//! ends ([`Ending`]), and the small value types the steps pass around. The steps themselves
//! (`drive.rs`, `model.rs`, `calls.rs`, `hooks.rs`, `end.rs`) add methods to [`Run`] and
//! import only from here, so no file of the loop imports another that imports it back.
//!
//! Must not: do anything (no I/O, no decisions): types only.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::{ContextBuilder, ContextFolders};
use crate::journal::PromptSize;
use crate::llm::{ContextWindow, MessageJson, ToolList};
use crate::metadata::{RunLock, RunMetadata};
use crate::protocol::CostTally;
use crate::protocol::{InteractionInfo, RunErrorInfo, RunErrorKind, RunStatus, TokenUsage};
use crate::redact::Redactor;
use crate::tool::call::Toolbox;
use crate::tool::process::ProgramCache;
use crate::workspace::{RunPaths, ToolRecordNames};

use super::recorder::Recorder;
use super::redaction::EventSink;
use super::RunLoop;

/// What the run knows of its context for this driving.
#[derive(Debug, Default)]
pub(super) struct ContextState {
    /// The builder and its cached conversation.
    pub builder: ContextBuilder,
    /// The model's window and where it came from (`None`: unknown).
    pub window: Option<ContextWindow>,
    /// Whether the window was looked for yet (agent.yaml, a refusal, the catalogue).
    pub resolved: bool,
    /// Whether the server was asked for the window yet (only once a request is large
    /// enough for any window to matter: [`PROBE_ABOVE_TOKENS`]).
    pub probed: bool,
    /// The request's budget in prompt tokens (`None`: no budget, nothing is compacted).
    pub budget: Option<u64>,
    /// The last request's size, for its THOUGHT.
    pub last_size: Option<PromptSize>,
    /// The server refused the last request as too long (what it said, the request's size,
    /// the run's error should nothing be left to compact, and how many times this
    /// iteration): the next build compacts.
    pub refused: Option<Refused>,
    /// Tokens the journal's compactions took out of each request (summed at each request).
    pub removed_per_request: u64,
    /// Prompt tokens this driving did not send thanks to compaction (estimated).
    pub tokens_saved: u64,
    /// Compactions made in this driving.
    pub compactions: u32,
}

/// A refusal of this iteration's request as longer than the model's window.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    /// The refused request's size, with the tokens the refusal said it had.
    pub size: PromptSize,
    /// The run's error, should nothing be left to compact.
    pub error: RunErrorInfo,
    /// Refusals of this iteration so far, this one included.
    pub count: u32,
}

/// Compactions tried after refusals, per iteration: the first as usual, the second leaving
/// out every iteration but the last `keep_last`, the third one more of those (a server whose
/// template counts what the estimate does not; see `context::compact::Request::refusals`).
pub(super) const MAX_REFUSALS_PER_ITERATION: u32 = 3;

/// A request smaller than this many tokens fits any model's window: the server is asked for
/// its window only once a request grows past it (a short run never asks).
pub(super) const PROBE_ABOVE_TOKENS: u64 = 1024;

/// Why the iterations ended before an answer, a pause or the cap.
pub(super) enum Halt {
    /// A stop was requested (Ctrl-C, a cancel, the run's time limit).
    Stopped,
    /// The run cannot go on.
    Failed(RunErrorInfo),
}

/// The error record of a failed run.
pub(super) fn error_info(kind: RunErrorKind, message: String) -> RunErrorInfo {
    RunErrorInfo::new(kind, message)
}

/// Where this driving's wall time went (for RunMetrics and benchmarks).
#[derive(Default)]
pub(super) struct Timings {
    /// Time spent waiting on model replies, queueing excluded (added by `model.rs` per call).
    pub model: Duration,
    /// Time spent queued at the LLM gate before a call was sent (added by `model.rs`).
    pub queue: Duration,
    /// Time spent running tool calls (added by `calls.rs` per batch).
    pub tools: Duration,
}

/// A taken run being driven: everything a run needs once its files are open.
pub(super) struct Run {
    /// The loop's inputs: request, config, model and tool ports, control. Set at take; read only.
    pub lp: RunLoop,
    /// The run's folder and its files (journal, metadata.json, io/). Set at take; read only.
    pub paths: RunPaths,
    /// The journal and log writer; every event of the run goes through it (`drive`, `calls`, `end`).
    pub rec: RefCell<Recorder>,
    /// metadata.json as last written; `drive.rs` refreshes its counters before each write, `end.rs` sets the final status.
    pub meta: RunMetadata,
    /// The run folder's lock, held while driving; `end.rs` drops it (sets `None`) once the record is final.
    pub lock: Option<RunLock>,
    /// Whether this driving continues an earlier start (from `take.rs`); read only afterwards.
    pub resumed: bool,
    /// Sensitive answers of the run (loaded from `secrets/` on continue, grown by ask_human).
    pub secrets: Redactor,
    /// The run's progress events, redacted on the way out.
    pub events: EventSink,
    /// The environment given to tool programs (provider keys removed). Built at take; read only.
    pub child_env: Arc<Vec<(String, String)>>,
    /// Where the run's tool programs were found on `child_env`'s `PATH`.
    pub programs: ProgramCache,
    /// The agent folder and workspace as the context builder resolved them.
    pub context_folders: ContextFolders,
    /// The model's window, the request's budget, the context builder and what compaction
    /// saved (`context_step.rs`).
    pub context: ContextState,
    /// The environment given to context generators (and read by `env_set` conditions):
    /// built at the first context build of a recipe that reads it, never for one that
    /// does not (`Run::generator_env`).
    pub generator_env: std::cell::OnceCell<BTreeMap<String, String>>,
    /// The tools the run offers, by kind; every call is planned through it.
    pub toolbox: Toolbox,
    /// The tool schemas sent to the model with each request. Built at take; read only.
    pub tool_schemas: ToolList,
    /// The JSON of the last request's messages: a request repeats the whole history, and
    /// only the messages new since the last one are serialized again.
    pub message_json: MessageJson,
    /// The iteration cap for this driving (from the request or agent). Set at take; read only.
    pub max_iterations: u32,
    /// Iteration number across the run's whole life (THOUGHTs so far).
    pub iteration: u32,
    /// Iterations driven by this start or continuation (the cap applies to these).
    pub iterations_this_start: u32,
    /// When this driving began (monotonic), for durations. Set at take.
    pub started_at: Instant,
    /// When this driving began (RFC 3339), as recorded in metadata. Set at take.
    pub start_time: String,
    /// Tokens of this driving's model calls.
    pub usage: TokenUsage,
    /// Tokens of the run's earlier starts and continuations, as its record had them.
    pub usage_before: TokenUsage,
    /// Dollars of this driving's model calls (unknown once a call had no price);
    /// `call_event.rs` adds each call's.
    pub cost: CostTally,
    /// Dollars of the run's earlier starts and continuations, as its record had them.
    pub cost_before: CostTally,
    /// The prices of the models this run called (`call_event.rs`, `budget_step.rs`).
    pub prices: crate::llm::price::PriceMemo,
    /// Who answers the run's model calls, as each call's event names it (parsed once).
    pub server: std::cell::OnceCell<crate::llm::ServerIdentity>,
    /// Tokens of this driving by model name; `model.rs` adds each call's usage.
    pub model_usage: BTreeMap<String, TokenUsage>,
    /// Where this driving's time went; `model.rs` and `calls.rs` add to it.
    pub timings: Timings,
    /// When metadata.json was last written for progress; `drive.rs` throttles writes by it.
    pub last_progress_write: Instant,
    /// The first failure to write metadata.json in this driving, with its path and cause.
    pub metadata_failure: Option<String>,
    /// Audit record kinds already warned about (one WARNING per kind per run).
    pub audit_warned: RefCell<HashSet<AuditKind>>,
    /// The names given to this driving's tool records.
    pub tool_records: RefCell<ToolRecordNames>,
}

/// How a run ends.
pub(super) struct Ending {
    pub status: RunStatus,
    pub result: Option<String>,
    /// COMPLETED with an empty final answer (flagged in the RunResult).
    pub empty_answer: bool,
    pub error: Option<RunErrorInfo>,
    pub interaction: Option<InteractionInfo>,
}

impl Ending {
    pub(super) fn completed(answer: String) -> Ending {
        Ending {
            status: RunStatus::Completed,
            result: Some(answer),
            empty_answer: false,
            error: None,
            interaction: None,
        }
    }

    pub(super) fn failed(error: RunErrorInfo) -> Ending {
        Ending {
            status: RunStatus::Failed,
            result: None,
            empty_answer: false,
            error: Some(error),
            interaction: None,
        }
    }

    pub(super) fn interrupted(error: RunErrorInfo) -> Ending {
        Ending {
            status: RunStatus::Interrupted,
            result: None,
            empty_answer: false,
            error: Some(error),
            interaction: None,
        }
    }

    pub(super) fn waiting(interaction: InteractionInfo) -> Ending {
        Ending {
            status: RunStatus::WaitingForInput,
            result: None,
            empty_answer: false,
            error: None,
            interaction: Some(interaction),
        }
    }
}

/// The kinds of io/ audit records, each warned about once per run when it cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum AuditKind {
    Invocation,
    ToolExecution,
    Hook,
}

impl AuditKind {
    pub(super) fn records(self) -> &'static str {
        match self {
            AuditKind::Invocation => "model call records (io/invocations)",
            AuditKind::ToolExecution => "tool execution records (io/tool_executions)",
            AuditKind::Hook => "hook records (io/hooks)",
        }
    }
}

/// Hook-specific variables of one invocation.
#[derive(Default)]
pub(super) struct HookVars {
    pub tool_name: Option<String>,
    pub tool_result: Option<String>,
    pub error_message: Option<String>,
}
