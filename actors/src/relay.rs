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
//! [`Relay`] is the handle: it owns an actix System on its own thread (the routes are in
//! `runtime::relay`); no actix type crosses it.
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
    /// The address to bind; port 0 picks a free one (see [`Relay::addr`]).
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

/// A running relay; stopped when dropped.
pub struct Relay {
    addr: SocketAddr,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// Binds `config.listen` and serves until stopped.
    pub fn start(config: RelayConfig) -> Result<Relay, RelayError> {
        if config.routes.is_empty() {
            return Err(RelayError::NoRoute);
        }
        for route in &config.routes {
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
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("delta-relay".into())
            .spawn(move || crate::runtime::relay::serve(config, ready_tx, stop_rx))
            .map_err(|e| RelayError::Start(e.to_string()))?;
        let addr = ready_rx
            .recv()
            .map_err(|_| RelayError::Start("the relay thread exited early".into()))??;
        Ok(Relay {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on (the port chosen when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://HOST:PORT`: callers use `<url>/v1` or `<url>/r/<route>/v1` as base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and joins the relay's thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shutdown();
    }
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

    #[test]
    fn route_names_that_are_not_path_words_are_refused() {
        let script = std::sync::Arc::new(
            crate::llm::Script::from_yaml_str("steps: [{answer: x}]", "s.yaml").unwrap(),
        );
        for name in ["", "a/b", "../x", "a b"] {
            let config = RelayConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                token: "t".repeat(32),
                routes: vec![RelayRoute {
                    name: name.into(),
                    target: LlmTarget::Scripted(script.clone()),
                }],
                max_in_flight: 1,
                requests_per_minute: None,
                request_timeout: Duration::from_secs(1),
                accepted_token_digests: vec![],
            };
            assert!(
                matches!(Relay::start(config), Err(RelayError::Route { .. })),
                "{name:?}"
            );
        }
    }

    /// A token accepted only by its digest (a resumed orchestration's earlier jobs).
    #[test]
    fn an_earlier_token_is_accepted_by_its_digest() {
        let script = std::sync::Arc::new(
            crate::llm::Script::from_yaml_str("steps: [{answer: x}]", "s.yaml").unwrap(),
        );
        let relay = Relay::start(RelayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            token: "new-token-0123456789".into(),
            routes: vec![RelayRoute {
                name: "a0".into(),
                target: LlmTarget::Scripted(script),
            }],
            max_in_flight: 4,
            requests_per_minute: None,
            request_timeout: Duration::from_secs(5),
            accepted_token_digests: vec![token_digest("old-token-0123456789")],
        })
        .unwrap();
        let status = |token: &str| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                reqwest::Client::new()
                    .get(format!("{}/r/a0/v1/models", relay.url()))
                    .bearer_auth(token)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        };
        assert_eq!(status("new-token-0123456789"), 200);
        assert_eq!(status("old-token-0123456789"), 200);
        assert_eq!(status("another-token-0123456"), 401);
        relay.stop();
    }
}
