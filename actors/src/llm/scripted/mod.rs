//! The scripted model: a deterministic stand-in for an LLM, driven by a YAML/JSON script,
//! for tests, examples, benchmarks and offline use.
//!
//! # Layout
//! - `script.rs`: the loaded model ([`Script`], [`ScriptError`]).
//! - `load.rs`: loading ([`Script::load`]): the file format's serde shapes and validation.
//! - `variables.rs`: the variables templates may use ([`TEMPLATE_VARIABLES`]).
//! - `latency.rs`: latency and wait durations ([`parse_latency`]), bounded.
//! - `respond.rs`: rule matching, step selection, templating ([`ScriptedReply`]).
//! - `validate.rs`: strict history validation ([`validate_history`]).
//! - `server.rs`: the OpenAI-compatible HTTP endpoint ([`serve`], [`run_server_blocking`]).
//! - `sse.rs`: a reply as `chat.completion.chunk` events, for requests that stream.
//! - `stats.rs`: [`ServerStats`], counters shared by the server and [`ScriptedBackend`].
//!
//! [`ScriptedBackend`] plays a script in-process behind the same [`ChatBackend`] trait as
//! the HTTP client. Nothing here imports actix.

mod latency;
mod load;
mod respond;
mod script;
mod server;
mod sse;
mod stats;
mod validate;
mod variables;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

pub use latency::parse_latency;
pub use respond::{ScriptedReply, StreamPlan};
pub use script::{Latency, Script, ScriptError, DEFAULT_MODEL, EXHAUSTED_ANSWER};
pub use server::{run_server_blocking, run_server_until, serve, ScriptServer, ServeError};
pub use stats::{ServerStats, StatsSnapshot};
pub use validate::validate_history;
pub use variables::TEMPLATE_VARIABLES;

use super::endpoint::{ChatBackend, CompletionFuture, LlmError, RequestMeta};
use super::types::ChatRequest;

/// Plays a script in-process: sleeps the scripted latency, then returns the scripted
/// completion, or the scripted HTTP failure as [`LlmError::Http`]. Counts into the same
/// [`ServerStats`] as the HTTP server, so benchmarks can read in-flight maxima either way.
#[derive(Debug, Clone)]
pub struct ScriptedBackend {
    script: Arc<Script>,
    stats: Arc<ServerStats>,
}

impl ScriptedBackend {
    /// A backend playing `script`, with fresh counters.
    pub fn new(script: Arc<Script>) -> Self {
        ScriptedBackend {
            script,
            stats: Arc::new(ServerStats::new()),
        }
    }

    /// The script played.
    pub fn script(&self) -> &Arc<Script> {
        &self.script
    }

    /// The backend's counters.
    pub fn stats(&self) -> &Arc<ServerStats> {
        &self.stats
    }
}

impl ChatBackend for ScriptedBackend {
    fn complete(&self, req: ChatRequest, meta: RequestMeta) -> CompletionFuture {
        self.respond(&req, &meta)
    }

    fn complete_shared(&self, req: Arc<ChatRequest>, meta: RequestMeta) -> CompletionFuture {
        self.respond(&req, &meta)
    }
}

impl ScriptedBackend {
    /// One attempt: the reply is chosen now, its latency waited in the future.
    fn respond(&self, req: &ChatRequest, meta: &RequestMeta) -> CompletionFuture {
        let in_flight = self.stats.arrive();
        let reply = match self
            .script
            .strict()
            .then(|| validate_history(&req.messages))
        {
            Some(Err(problem)) => {
                self.stats.record_rejected();
                ScriptedReply::Failure {
                    status: 400,
                    message: format!("invalid chat history: {problem}"),
                    retry_after: None,
                    latency: Duration::ZERO,
                }
            }
            _ => self.script.respond_unchecked(req, meta),
        };
        let stats = Arc::clone(&self.stats);
        Box::pin(async move {
            let _in_flight = in_flight;
            let latency = reply.latency();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            match reply {
                ScriptedReply::Completion { completion, .. } => {
                    stats.record_completion();
                    Ok(completion)
                }
                ScriptedReply::Failure {
                    status,
                    message,
                    retry_after,
                    ..
                } => {
                    stats.record_failure();
                    Err(LlmError::Http {
                        status,
                        message,
                        retry_after,
                    })
                }
            }
        })
    }
}
