//! The OpenAI-compatible chat protocol: wire types, the HTTP client with retry and backoff,
//! rate limiting, and the built-in scripted model (in-process and over HTTP).
//!
//! # Layout
//! - [`types`]: wire format ([`ChatMessage`], [`ChatRequest`], [`ChatCompletion`]) and
//!   [`parse_completion`].
//! - [`shared_list`]: a list of shared segments read as one, and the append-only log whose
//!   chunks it shares: a request's [`Messages`] and a run's [`MessageLog`].
//! - [`wire`]: a request's JSON as sent, and [`MessageJson`], which keeps each message's
//!   JSON text between a run's requests.
//! - [`endpoint`]: [`Endpoint`] (base URL + key, Debug hides the key), [`RequestMeta`],
//!   [`LlmError`] and the one-attempt [`ChatBackend`] trait.
//! - [`dialect`]: how requests are written for an endpoint ([`Dialect`], [`WireOptions`],
//!   [`dialect::Adjustment`]).
//! - [`refusal`]: which refusals teach a change, read from the field they name.
//! - [`learned`]: what an endpoint taught, per model, each detail once ([`Adaptation`]).
//! - [`memory`]: [`EndpointMemory`], the lessons kept across processes in the user's cache.
//! - [`usage`]: what a call cost: the provider's usage checked, or estimated from bytes.
//! - [`client`]: [`HttpBackend`], one attempt over HTTP with reqwest, streamed or not.
//! - `h2c` (crate-private): HTTP/2 or HTTP/1.1 for an `http://` endpoint whose transport
//!   is not set, asked once per endpoint and kept in the endpoint memory.
//! - [`stream`]: server-sent events and the assembly of `chat.completion.chunk`s into one
//!   completion.
//! - [`retry`]: [`RetryPolicy`], [`backoff_delay`], [`parse_retry_after`].
//! - [`timeouts`]: [`LlmTimeouts`] per attempt (whole request, idle) and their layered
//!   settings (`--llm-timeout` > plan `llm:` > agent.yaml `llm:` > default).
//! - `rate` (crate-private): the rate limiter, requests-per-minute spacing plus a
//!   Retry-After barrier.
//! - `call` (crate-private): one model call as a run sees it (cancellable, failed attempts
//!   kept), and its outcome or failure.
//! - [`gate`]: [`LlmGate`], one per endpoint: in-flight cap + rate limiter + Retry-After
//!   barrier + retries, as plain tokio code shared by every run of the endpoint.
//! - [`window`]: a model's context window, learned from the server's answers and refusals.
//! - [`catalogue`]: the model catalogue shipped with delta (windows and prices).
//! - [`scripted`]: the scripted model ([`Script`]), its in-process [`ScriptedBackend`], the
//!   strict history validator and the OpenAI-compatible HTTP server.
//!
//! This module never imports actix: the `RunSupervisor` in `runtime/` keeps an [`LlmGate`]
//! per endpoint (keyed by [`Endpoint::key`]) and each run calls it from its own arbiter.

pub(crate) mod call;
pub mod catalogue;
pub mod client;
pub mod dialect;
pub mod endpoint;
pub mod gate;
pub(crate) mod h2c;
pub mod learned;
pub mod memory;
pub mod price;
pub(crate) mod rate;
pub mod refusal;
pub mod retry;
pub mod scripted;
pub mod shared_list;
pub mod stream;
mod target;
pub mod timeouts;
pub mod types;
pub mod usage;
pub mod window;
pub mod wire;

#[cfg(test)]
mod h2c_tests;
#[cfg(test)]
mod learning_tests;
#[cfg(test)]
mod streaming_tests;

pub(crate) use call::{complete_call, CallFailure, CallOutcome, RetryObserver};
pub use client::{HttpBackend, DEFAULT_TIMEOUT};
pub use dialect::{Dialect, MaxTokensField, SystemRole, ToolCallContent, WireOptions};
pub use endpoint::{
    ChatBackend, CompletionFuture, Endpoint, FirstTokenClock, HttpTransport, LlmError, QueueEvent,
    QueueSink, RequestMeta, TextSink, MAX_CONNECTIONS_LIMIT,
};
pub use gate::{GateConfig, GateOutcome, GatePass, LlmGate};
pub use learned::Adaptation;
pub use memory::EndpointMemory;
pub use retry::{backoff_delay, parse_retry_after, RetryNotice, RetryPolicy};
pub use scripted::{
    validate_history, Script, ScriptError, ScriptServer, ScriptedBackend, ScriptedReply,
    ServerStats,
};
pub use target::{LlmTarget, ServerIdentity};
pub use timeouts::{
    parse_llm_timeout, LlmTimeoutSettings, LlmTimeouts, TimeoutPhase, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
};
pub use types::{
    parse_completion, ChatCompletion, ChatMessage, ChatRequest, FunctionCall, MessageLog, Messages,
    Role, ToolCall, ToolList, Usage,
};
pub use window::ContextWindow;
pub use wire::MessageJson;
