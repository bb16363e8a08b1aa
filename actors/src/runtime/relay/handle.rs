//! [`Relay`] (exported as `api::Relay`): the handle of a running LLM relay (what it serves and why is in
//! [`crate::relay`]). It owns an actix System on its own thread, where `runtime::relay`
//! serves the routes; no actix type crosses it.
//!
//! Must not: outlive its thread (dropping it stops the relay and joins the thread).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::relay::usage::UsageCounters;
use crate::relay::{RelayConfig, RelayError, RelayUsage};

/// A running relay; stopped when dropped.
pub struct Relay {
    addr: SocketAddr,
    usage: Arc<UsageCounters>,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// Binds `config.listen` and serves until stopped.
    pub fn start(config: RelayConfig) -> Result<Relay, RelayError> {
        config.validate()?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let usage = Arc::new(UsageCounters::default());
        let counters = Arc::clone(&usage);
        let thread = std::thread::Builder::new()
            .name("delta-relay".into())
            .spawn(move || crate::runtime::relay::serve(config, counters, ready_tx, stop_rx))
            .map_err(|e| RelayError::Start(e.to_string()))?;
        let addr = ready_rx
            .recv()
            .map_err(|_| RelayError::Start("the relay thread exited early".into()))??;
        Ok(Relay {
            addr,
            usage,
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

    /// Requests served and tokens reported so far.
    pub fn usage(&self) -> RelayUsage {
        self.usage.snapshot()
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::llm::LlmTarget;
    use crate::relay::{token_digest, RelayRoute};

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
                tokens_per_minute: None,
                budget: None,
                request_timeout: Duration::from_secs(1),
                accepted_token_digests: vec![],
                limits: crate::relay::RelayLimits::default(),
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
            tokens_per_minute: None,
            budget: None,
            request_timeout: Duration::from_secs(5),
            accepted_token_digests: vec![token_digest("old-token-0123456789")],
            limits: crate::relay::RelayLimits::default(),
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

    /// An endpoint on loopback answering every chat request with one fixed completion and
    /// keeping each request's `traceparent` header.
    fn header_keeping_endpoint() -> (
        String,
        std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>,
    ) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(4) {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let (mut length, mut traceparent) = (0usize, None);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if lower.starts_with("traceparent:") {
                        traceparent = Some(line["traceparent:".len()..].trim().to_string());
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                kept.lock().unwrap().push(traceparent);
                let reply = r#"{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                    reply.len()
                );
            }
        });
        (url, seen)
    }

    /// Issue 33: the caller's trace context reaches the endpoint; `/metrics` counts the
    /// route's requests and tokens for a holder of the token only.
    #[test]
    fn the_trace_context_is_passed_on_and_metrics_are_served_to_the_token() {
        let (url, seen) = header_keeping_endpoint();
        let token = "relay-token-0123456789";
        let relay = Relay::start(RelayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            token: token.into(),
            routes: vec![RelayRoute {
                name: "a0".into(),
                target: LlmTarget::Http(crate::llm::Endpoint::new(url, Some("sk-up".into()))),
            }],
            max_in_flight: 4,
            requests_per_minute: None,
            tokens_per_minute: None,
            budget: None,
            request_timeout: Duration::from_secs(5),
            accepted_token_digests: vec![],
            limits: crate::relay::RelayLimits::default(),
        })
        .unwrap();
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (chat, metrics, refused) = rt.block_on(async {
            let client = reqwest::Client::new();
            let chat = client
                .post(format!("{}/r/a0/v1/chat/completions", relay.url()))
                .bearer_auth(token)
                .header("traceparent", traceparent)
                .header("tracestate", "congo=t61rcWkgMzE")
                .body(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            let metrics = client
                .get(format!("{}/metrics", relay.url()))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let refused = client
                .get(format!("{}/metrics", relay.url()))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
            (chat, metrics, refused)
        });
        relay.stop();
        assert_eq!(chat, 200);
        assert_eq!(*seen.lock().unwrap(), vec![Some(traceparent.to_string())]);
        assert!(
            metrics.contains("delta_relay_requests_total{route=\"a0\",status=\"200\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("delta_relay_tokens_total{route=\"a0\",type=\"input\"} 5"),
            "{metrics}"
        );
        assert!(metrics.ends_with("# EOF\n"), "{metrics}");
        assert_eq!(refused, 401);
    }
}
