//! The LLM relay: an OpenAI-compatible endpoint (`/v1/chat/completions`, `/v1/models`)
//! that lets runs on other machines share one budget and never see the provider key.
//! `delta orchestrate --executor slurm` serves it for its jobs; `delta relay` serves it on
//! its own for scripts that run `delta run` on cluster nodes.
//!
//! Every request must carry the relay's token (`Authorization: Bearer <token>`), checked
//! before a byte of its body is read; the body is then read within [`RelayLimits`] (a size
//! cap per request, and a cap on the bytes of all bodies held at once). It goes through the
//! route's [`LlmGate`](crate::llm::LlmGate) — the plan's `llm:` limits (requests in flight,
//! requests per minute, the Retry-After barrier) for every caller together — to the route's
//! real endpoint with the real key. Routes: `/r/<name>/v1/...` per agent endpoint, and
//! `/v1/...` for the first route. The relay makes one attempt per request.
//!
//! Toward an HTTP endpoint the relay is a pass-through ([`forward`]): the request's bytes go
//! as they came (a `stream: true` request included), the answer comes back as the endpoint
//! sent it — a streamed (SSE) answer event by event as it arrives, an error with its status,
//! Retry-After and JSON error object (`code`, `type`, `param`) unchanged — except that the
//! key and the base URL's user-info and query values are replaced by [`REDACTED`]
//! ([`secrets`]). A caller that disconnects is forgotten: its queued call never goes out,
//! and its call in progress is cancelled upstream (the connection to the endpoint closes).
//! The scripted model (`--llm-script`) answers in-process, streamed as SSE ([`sse`]) when
//! asked.
//!
//! This module holds the relay's values (its config, limits, errors and token digests);
//! [`Relay`](crate::api::Relay) is the handle: it owns an actix System on its own thread (the
//! routes are in `runtime::relay`); no actix type crosses it.
//!
//! Must not: write the key anywhere, log request bodies, or accept a request (or read its
//! body) without the token.

pub mod budget;
pub mod forward;
pub mod secrets;
pub mod sse;
pub mod tpm;
pub mod usage;

use std::net::SocketAddr;
use std::time::Duration;

use crate::llm::LlmTarget;

pub use secrets::REDACTED;
pub use usage::RelayUsage;

/// The default [`RelayLimits::max_body`]: 8 MiB. A request carries a whole conversation;
/// the largest context windows offered today (about a million tokens, some 4 MB of text)
/// fit with room for JSON escaping, while a delta run's requests are tens of kilobytes.
pub const DEFAULT_MAX_BODY: usize = 8 * 1024 * 1024;
/// The default [`RelayLimits::max_body_memory`]: 64 MiB, eight bodies of the largest size,
/// or hundreds of ordinary ones, queued or on their way at once.
pub const DEFAULT_MAX_BODY_MEMORY: usize = 64 * 1024 * 1024;
/// The smallest [`RelayLimits::max_body`] accepted.
pub const MIN_MAX_BODY: usize = 1024;
/// The largest [`RelayLimits::max_body_memory`] accepted.
pub const MAX_MAX_BODY_MEMORY: usize = 1 << 40;

/// How much request body the relay holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayLimits {
    /// The largest request body accepted; larger ones are answered 413 without being read.
    pub max_body: usize,
    /// Bytes of request bodies held in memory at once, all callers together (being read,
    /// queued for the endpoint, or being sent). A caller past it waits, its body unread,
    /// until others are done.
    pub max_body_memory: usize,
}

impl Default for RelayLimits {
    fn default() -> Self {
        RelayLimits {
            max_body: DEFAULT_MAX_BODY,
            max_body_memory: DEFAULT_MAX_BODY_MEMORY,
        }
    }
}

/// One upstream: callers reach it at `/r/<name>/v1`.
#[derive(Debug, Clone)]
pub struct RelayRoute {
    /// `[A-Za-z0-9_-]+`.
    pub name: String,
    /// The real endpoint (with its key) or script that the route's requests go to.
    pub target: LlmTarget,
}

/// What the relay serves.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The address to bind; port 0 picks a free one (see [`Relay::addr`](crate::api::Relay::addr)).
    pub listen: SocketAddr,
    /// Callers must send it as `Authorization: Bearer <token>`.
    pub token: String,
    /// The first is also served at `/v1`.
    pub routes: Vec<RelayRoute>,
    /// Requests in flight per upstream, all callers together (0 = unlimited).
    pub max_in_flight: usize,
    /// Requests per minute per upstream, all callers together.
    pub requests_per_minute: Option<u32>,
    /// Tokens (prompt + completion, as answers report them) per minute per upstream, all
    /// callers together (`delta relay --tpm`; see [`tpm`]).
    pub tokens_per_minute: Option<u64>,
    /// One spending cap across every caller (a Slurm batch's jobs; see [`budget`]).
    pub budget: Option<std::sync::Arc<budget::RelayBudget>>,
    /// The longest one forwarded attempt may take.
    pub request_timeout: Duration,
    /// SHA-256 digests (hex) of earlier tokens still accepted: jobs of an orchestration
    /// resumed after a kill keep the token they were started with.
    pub accepted_token_digests: Vec<String>,
    /// Request body limits.
    pub limits: RelayLimits,
}

impl RelayConfig {
    /// Checks what can be checked before binding: at least one route, and route names
    /// that are path words.
    pub fn validate(&self) -> Result<(), RelayError> {
        if self.routes.is_empty() {
            return Err(RelayError::NoRoute);
        }
        for route in &self.routes {
            let valid = !route.name.is_empty()
                && route.name.len() <= 64
                && route
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(RelayError::Route {
                    name: route.name.clone(),
                });
            }
        }
        let RelayLimits {
            max_body,
            max_body_memory,
        } = self.limits;
        if max_body < MIN_MAX_BODY
            || max_body > max_body_memory
            || max_body_memory > MAX_MAX_BODY_MEMORY
        {
            return Err(RelayError::Limits {
                max_body,
                max_body_memory,
            });
        }
        Ok(())
    }
}

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The listen address could not be bound.
    #[error(
        "cannot listen on {addr}: {message} (hint: is the port in use? port 0 picks a free one)"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        message: String,
    },
    /// A route's name is not 1-64 characters from `[A-Za-z0-9_-]`.
    #[error("invalid relay route {name:?}: a route name is 1-64 characters from [A-Za-z0-9_-]")]
    Route {
        /// The name as given.
        name: String,
    },
    /// The body limits do not fit together.
    #[error(
        "invalid relay body limits: --max-body {max_body} bytes and --max-body-memory \
         {max_body_memory} bytes (hint: --max-body is at least 1 KiB and at most \
         --max-body-memory, which is at most 1 TiB)"
    )]
    Limits {
        /// The largest body asked for.
        max_body: usize,
        /// The memory for bodies asked for.
        max_body_memory: usize,
    },
    /// The config has no route.
    #[error("the relay needs at least one route (an LLM endpoint or --llm-script)")]
    NoRoute,
    /// The relay's thread or an upstream's HTTP client could not be started; the text
    /// says why.
    #[error("cannot start the relay: {0}")]
    Start(String),
}

/// The hex SHA-256 of a token: what may be written down to accept it again later.
pub fn token_digest(token: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fresh random token (the same kind `delta serve` makes: `crate::token::new_token`).
pub fn new_relay_token() -> String {
    crate::token::new_token()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn token_digest_is_sha256_hex() {
        assert_eq!(
            token_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
