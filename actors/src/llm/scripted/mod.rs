//! The scripted model: a deterministic stand-in for an LLM, driven by a YAML/JSON script,
//! for tests, examples, benchmarks and offline use.
//!
//! # Layout
//! - `script.rs`: the loaded model ([`Script`], [`ScriptError`]) and its entry points.
//! - `load.rs`: the file format's serde shapes and validation ([`parse_latency`]).
//! - `respond.rs`: rule matching, step selection, templating ([`ScriptedReply`]).
//! - `validate.rs`: strict history validation ([`validate_history`]).
//! - `server.rs`: the OpenAI-compatible HTTP endpoint ([`serve`], [`run_server_blocking`]).
//!
//! [`ScriptedBackend`] plays a script in-process behind the same [`ChatBackend`] trait as
//! the HTTP client. Nothing here imports actix.

mod load;
mod respond;
mod script;
mod server;
mod validate;

#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use load::parse_latency;
pub use respond::{ScriptedReply, TEMPLATE_VARIABLES};
pub use script::{Latency, Script, ScriptError, DEFAULT_MODEL, EXHAUSTED_ANSWER};
pub use server::{
    run_server_blocking, serve, ScriptServer, ServeError, ServerStats, StatsSnapshot,
};
pub use validate::validate_history;

use super::endpoint::{ChatBackend, CompletionFuture, LlmError, RequestMeta};
use super::types::ChatRequest;

/// Plays a script in-process: sleeps the scripted latency, then returns the scripted
/// completion, or the scripted HTTP failure as [`LlmError::Http`].
#[derive(Debug, Clone)]
pub struct ScriptedBackend {
    script: Arc<Script>,
}

impl ScriptedBackend {
    pub fn new(script: Arc<Script>) -> Self {
        ScriptedBackend { script }
    }

    pub fn script(&self) -> &Arc<Script> {
        &self.script
    }
}

impl ChatBackend for ScriptedBackend {
    fn complete(&self, req: ChatRequest, meta: RequestMeta) -> CompletionFuture {
        let reply = self.script.respond(&req, &meta);
        Box::pin(async move {
            let latency = reply.latency();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            match reply {
                ScriptedReply::Completion { completion, .. } => Ok(completion),
                ScriptedReply::Failure {
                    status,
                    message,
                    retry_after,
                    ..
                } => Err(LlmError::Http {
                    status,
                    message,
                    retry_after,
                }),
            }
        })
    }
}
