//! The loaded, validated form of a scripted-model script: [`Script`] and the rule / step /
//! template model that `respond.rs` plays, plus [`ScriptError`].
//!
//! Owns the in-memory model and its accessors only: loading (`Script::load`) and validation
//! live in `load.rs`, choosing and rendering a reply in `respond.rs`.
//! The file format is documented in `docs/llm-script.md`.

use std::time::Duration;

use dashmap::DashMap;
use minijinja::Environment;
use serde_json::Value;

/// Final answer given when a conversation has more assistant turns than the rule has steps.
pub const EXHAUSTED_ANSWER: &str = "script exhausted";
/// Model id reported by `/v1/models` and in completions unless the script sets `model:`.
pub const DEFAULT_MODEL: &str = "delta-scripted";

/// Why a script could not be loaded. Every message names the file and, when known, the key.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read (missing, unreadable, not a regular file, too big).
    #[error("cannot read LLM script {path}: {source} (hint: check the --llm-script / DELTA_LLM_SCRIPT path)")]
    Read {
        /// The file.
        path: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not YAML/JSON of the script's shape.
    #[error("LLM script {origin} is not valid YAML/JSON for the script format: {message} (hint: see docs/llm-script.md)")]
    Parse {
        /// The file, or `inline` for a script given as text.
        origin: String,
        /// The parser's complaint.
        message: String,
    },
    /// A key has a value the format does not accept (a bad template, a latency out of
    /// range, a step without an action...).
    #[error("LLM script {origin}, key `{key}`: {message}")]
    Invalid {
        /// The file, or `inline`.
        origin: String,
        /// The dotted key path, e.g. `rules[0].steps[2].latency`.
        key: String,
        /// What is wrong and what to write.
        message: String,
    },
}

/// A loaded script. Shared behind an `Arc`; `times:` counters are interior state.
#[derive(Debug)]
pub struct Script {
    pub(super) origin: String,
    pub(super) model: String,
    pub(super) strict: bool,
    /// HTTP only: another server's ways, imitated (`quirks:`).
    pub(super) quirks: Quirks,
    /// HTTP only: the bearer token every request must carry.
    pub(super) require_api_key: Option<String>,
    pub(super) exhausted_answer: String,
    pub(super) default_latency: Latency,
    pub(super) rules: Vec<Rule>,
    pub(super) templates: Environment<'static>,
    /// Failures already served per (conversation key, rule index, step index).
    pub(super) attempts: DashMap<(String, usize, usize), u32>,
    /// Stalled streams already served per (conversation key, rule index, step index).
    pub(super) stalls: DashMap<(String, usize, usize), u32>,
}

/// `quirks:` — ways of other OpenAI-compatible servers the HTTP endpoint imitates, so that
/// delta's handling of them is tested against a server on 127.0.0.1. All three together are
/// llama-cpp-python's server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quirks {
    /// `refuse_null_tool_content`: an assistant turn with tool calls and `content: null` (or
    /// none) is refused with HTTP 500 and pydantic's validation text.
    pub refuse_null_tool_content: bool,
    /// `no_stream_usage`: streams carry no usage, whatever `stream_options` asks.
    pub no_stream_usage: bool,
    /// `no_streamed_tools`: a streamed request that offers tools (with `tool_choice` auto or
    /// unset) is answered with an event stream closed before its first chunk.
    pub no_streamed_tools: bool,
}

impl Quirks {
    /// Every quirk's name, as written in a script.
    pub const NAMES: [&'static str; 3] = [
        "refuse_null_tool_content",
        "no_stream_usage",
        "no_streamed_tools",
    ];

    /// Turns on the quirk `name`; `false` for an unknown name.
    pub(super) fn set(&mut self, name: &str) -> bool {
        let flag = match name {
            "refuse_null_tool_content" => &mut self.refuse_null_tool_content,
            "no_stream_usage" => &mut self.no_stream_usage,
            "no_streamed_tools" => &mut self.no_streamed_tools,
            _ => return false,
        };
        *flag = true;
        true
    }
}

/// Most chunks a step's streamed reply may be cut into.
pub(super) const MAX_CHUNKS: u32 = 10_000;

/// How a step's reply is streamed (when the request asks for `stream: true`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct StreamShape {
    /// Pieces the reply text is cut into; default: one per word, at most 64.
    pub(super) chunks: Option<u32>,
    /// Silence after the first chunk.
    pub(super) stall: Option<Duration>,
    /// Stall only the first this many attempts of the step (per conversation); default all.
    pub(super) stall_times: Option<u32>,
}

/// A uniformly drawn delay in `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Latency {
    /// The shortest delay.
    pub min: Duration,
    /// The longest delay (equal to `min` for a fixed delay).
    pub max: Duration,
}

impl Latency {
    /// Draws one delay.
    pub fn sample(&self) -> Duration {
        if self.max <= self.min {
            return self.min;
        }
        let span = (self.max - self.min).as_micros() as u64;
        self.min + Duration::from_micros(fastrand::u64(0..=span))
    }
}

#[derive(Debug)]
pub(super) struct Rule {
    pub(super) agent: Option<String>,
    pub(super) task_contains: Option<String>,
    /// A substring of the last user message (a `continue -m` message, say).
    pub(super) last_user_contains: Option<String>,
    pub(super) model: Option<String>,
    pub(super) latency: Option<Latency>,
    pub(super) steps: Vec<Step>,
}

#[derive(Debug)]
pub(super) struct Step {
    pub(super) action: Action,
    pub(super) latency: Option<Latency>,
    /// Reported instead of `stop` / `tool_calls` (e.g. `length`: a reply cut at max_tokens).
    pub(super) finish_reason: Option<String>,
    /// How the reply is streamed.
    pub(super) stream: StreamShape,
}

#[derive(Debug)]
pub(super) enum Action {
    Calls {
        content: Option<Text>,
        calls: Vec<CallSpec>,
    },
    Answer(Text),
    Fail {
        status: u16,
        /// `None`: fail on every attempt.
        times: Option<u32>,
        retry_after: Option<Duration>,
        message: Option<Text>,
        then: Option<Box<Step>>,
    },
}

#[derive(Debug)]
pub(super) struct CallSpec {
    pub(super) tool: String,
    pub(super) args: Args,
}

#[derive(Debug)]
pub(super) enum Args {
    Json(ArgTree),
    /// Sent verbatim (after templating), even when it is not JSON.
    Raw(Text),
}

/// A JSON value whose strings may be templates.
#[derive(Debug)]
pub(super) enum ArgTree {
    Text(Text),
    Scalar(Value),
    Array(Vec<ArgTree>),
    Object(Vec<(String, ArgTree)>),
}

/// A string that is either used as is or rendered as the named template.
#[derive(Debug, Clone)]
pub(super) enum Text {
    Literal(String),
    Template(String),
}

impl Script {
    /// The API key the HTTP endpoint demands (`require_api_key:`), if any.
    pub fn required_api_key(&self) -> Option<&str> {
        self.require_api_key.as_deref()
    }

    /// Whether invalid histories are rejected with HTTP 400 (`strict:`, default true).
    pub fn strict(&self) -> bool {
        self.strict
    }

    /// The other servers' ways the HTTP endpoint imitates (`quirks:`).
    pub fn quirks(&self) -> Quirks {
        self.quirks
    }

    /// The model id reported to clients.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Where the script came from (for messages).
    pub fn origin(&self) -> &str {
        &self.origin
    }
}
