//! The LLM relay: an OpenAI-compatible endpoint (`/v1/chat/completions`, `/v1/models`)
//! that lets runs on other machines share one budget and never see the provider key.
//! `delta orchestrate --executor slurm` serves it for its jobs; `delta relay` serves it on
//! its own for scripts that run `delta run` on cluster nodes.
//!
//! Every request must carry the relay's token (`Authorization: Bearer <token>`); it then
//! goes through the route's [`LlmGate`](crate::llm::LlmGate) — the plan's `llm:` limits
//! (requests in flight, requests per minute, the Retry-After barrier) for every caller
//! together — to the route's real endpoint with the real key. Routes: `/r/<name>/v1/...`
//! per agent endpoint, and `/v1/...` for the first route. The relay makes one attempt per
//! request and answers the endpoint's errors (with their Retry-After) to the caller, whose
//! own engine retries.
//!
//! This module holds the relay's values (its config, errors and token digests);
//! [`Relay`](crate::api::Relay) is the handle: it owns an actix System on its own thread (the
//! routes are in `runtime::relay`); no actix type crosses it.
//!
//! Must not: write the key anywhere, log request bodies, or accept a request without the
//! token.

use std::net::SocketAddr;
use std::time::Duration;

use crate::protocol::LlmTarget;

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
    /// The longest one forwarded attempt may take.
    pub request_timeout: Duration,
    /// SHA-256 digests (hex) of earlier tokens still accepted: jobs of an orchestration
    /// resumed after a kill keep the token they were started with.
    pub accepted_token_digests: Vec<String>,
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

/// A fresh random token.
pub fn new_relay_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
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
