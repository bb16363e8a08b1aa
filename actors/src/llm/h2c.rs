//! HTTP/2 for `http://` endpoints by themselves (`llm.http2` and `DELTA_LLM_HTTP2` unset):
//! [`AutoH2c`] decides once per endpoint and process whether calls speak HTTP/2 without
//! negotiation (h2c, prior knowledge) or HTTP/1.1, and keeps the answer in the endpoint
//! memory (`memory.rs`, [`EndpointMemory::http2`]) so the next process does not ask again.
//!
//! How it asks: one TCP connection to the endpoint that sends the HTTP/2 connection preface
//! and an empty SETTINGS frame and reads the server's first bytes. An HTTP/2 server answers
//! with its own SETTINGS frame at once (before any request, without the model's help); an
//! HTTP/1.1-only server (uvicorn under llama.cpp's Python server, vLLM, Ollama, LM Studio)
//! answers `HTTP/1.1 400` or closes the connection. Asking apart from a model call keeps the
//! call itself simple: it is sent once, with the version decided, and nothing of the probe
//! shows as a failed attempt. The probe is bounded: [`connect_limit`] to connect and
//! [`answer_limit`] for the first bytes, both within the attempt's own limits; a server that
//! says nothing in that time is spoken to over HTTP/1.1 for the rest of the process (not
//! remembered: it said nothing either way).
//!
//! Calls that start together (a batch of 1,000) share one probe: the first takes the lock
//! and asks, the others wait for its answer. A probe that cannot reach the server decides
//! nothing: the calls that waited for it go out over HTTP/1.1 (and fail to connect as any
//! call would), and the next call asks again.
//!
//! A remembered "HTTP/2" is checked by the calls themselves: when a call over HTTP/2 fails
//! before any answer (the endpoint was replaced by an HTTP/1.1-only server, which closes or
//! resets the connection in ways hyper words differently each time), the endpoint is asked
//! again ([`AutoH2c::recheck`], one probe for every call failing meanwhile); if it speaks
//! HTTP/1.1 now, the failed calls are sent again over it at once and the memory says so.
//! An answer this process probed is final: later failures are ordinary ones.
//!
//! Must not: send a model request, decide for an `https://` endpoint (TLS negotiates the
//! version, ALPN) or for a transport the agent or `DELTA_LLM_HTTP2` set, or go through a
//! proxy (an endpoint reached through one is spoken to over HTTP/1.1, unasked).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::memory::EndpointMemory;
use super::timeouts::LlmTimeouts;

/// The client connection preface (RFC 9113 §3.4) followed by an empty SETTINGS frame.
const PREFACE_AND_SETTINGS: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
/// The frame type of SETTINGS: what an HTTP/2 server sends first.
const SETTINGS_FRAME: u8 = 0x04;
/// Longest wait for the server's first bytes: an HTTP/2 server sends its SETTINGS as soon
/// as the connection is up, with no model work before it.
pub const MAX_ANSWER_WAIT: Duration = Duration::from_secs(3);

/// The HTTP version a call is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speak {
    /// HTTP/2 with prior knowledge (h2c).
    Http2,
    /// HTTP/1.1.
    Http1,
}

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// The server answered with an HTTP/2 SETTINGS frame.
    Http2,
    /// The server answered something else (`HTTP/1.1 400 ...`) or closed the connection.
    Http1,
    /// Connected, and nothing came back within the limit.
    Silent,
    /// Could not connect (refused, unreachable, too slow): nothing learned.
    Unreachable(String),
}

/// Where the decision stands (an [`AtomicU8`]).
const UNDECIDED: u8 = 0;
/// HTTP/2, as the endpoint memory says: a refusal switches to HTTP/1.1.
const HTTP2_REMEMBERED: u8 = 1;
/// HTTP/2, as this process's probe found: final.
const HTTP2: u8 = 2;
/// HTTP/1.1 for the rest of the process.
const HTTP1: u8 = 3;

/// The once-per-endpoint choice between h2c and HTTP/1.1 (see the module header).
#[derive(Debug)]
pub struct AutoH2c {
    /// The endpoint's base URL (for the memory and the log).
    base_url: String,
    /// The host as a name or an address (an IPv6 one without its brackets).
    host: String,
    port: u16,
    memory: Option<EndpointMemory>,
    state: AtomicU8,
    /// The memory's answer was refused by the endpoint: probe, do not recall it again.
    memory_doubted: std::sync::atomic::AtomicBool,
    /// Held while the memory is read and the probe runs.
    probing: tokio::sync::Mutex<()>,
    /// Probes finished: a caller that waited through one does not start another.
    probes_done: AtomicU64,
    /// The client's own connect limit.
    connect_timeout: Duration,
}

impl AutoH2c {
    /// The choice for the endpoint at `url` (an `http://` URL), remembered in `memory`;
    /// `None` for a URL that is not plain HTTP or is reached through a proxy.
    pub fn for_endpoint(
        base_url: &str,
        url: &reqwest::Url,
        memory: Option<EndpointMemory>,
        connect_timeout: Duration,
    ) -> Option<AutoH2c> {
        if url.scheme() != "http" || through_proxy(url, |name| std::env::var(name).ok()) {
            return None;
        }
        Some(AutoH2c {
            base_url: base_url.to_owned(),
            host: url
                .host_str()?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: url.port_or_known_default()?,
            memory,
            state: AtomicU8::new(UNDECIDED),
            memory_doubted: std::sync::atomic::AtomicBool::new(false),
            probing: tokio::sync::Mutex::new(()),
            probes_done: AtomicU64::new(0),
            connect_timeout,
        })
    }

    /// The version the next call is sent with: decided, remembered, or asked now (once,
    /// shared by every call that starts meanwhile), within `limits`.
    pub async fn speak(&self, limits: &LlmTimeouts) -> Speak {
        if let Some(decided) = self.decided() {
            return decided;
        }
        let seen = self.probes_done.load(Ordering::Acquire);
        let _probing = self.probing.lock().await;
        if let Some(decided) = self.decided() {
            return decided;
        }
        if self.probes_done.load(Ordering::Acquire) != seen {
            // A probe ran while this call waited and could not reach the server: this call
            // does not ask again (1,000 calls would each wait for a probe in turn).
            return Speak::Http1;
        }
        let recalled = match &self.memory {
            Some(memory) if !self.memory_doubted.load(Ordering::Acquire) => {
                memory.http2(&self.base_url)
            }
            _ => None,
        };
        if let Some(remembered) = recalled {
            let state = if remembered { HTTP2_REMEMBERED } else { HTTP1 };
            self.state.store(state, Ordering::Release);
            return self.decided().unwrap_or(Speak::Http1);
        }
        let answer = probe(
            &self.host,
            self.port,
            connect_limit(self.connect_timeout, limits),
            answer_limit(limits),
        )
        .await;
        self.probes_done.fetch_add(1, Ordering::AcqRel);
        let (state, remember) = match &answer {
            ProbeAnswer::Http2 => (HTTP2, Some(true)),
            ProbeAnswer::Http1 => (HTTP1, Some(false)),
            ProbeAnswer::Silent => (HTTP1, None),
            ProbeAnswer::Unreachable(why) => {
                tracing::debug!(endpoint = %self.base_url, "h2c probe: cannot connect: {why}");
                return Speak::Http1;
            }
        };
        tracing::debug!(endpoint = %self.base_url, ?answer, "h2c probe");
        self.state.store(state, Ordering::Release);
        if let Some(speaks_h2c) = remember {
            self.remember(speaks_h2c);
        }
        self.decided().unwrap_or(Speak::Http1)
    }

    /// A call sent over HTTP/2 failed before any answer while HTTP/2 was only remembered
    /// (see [`AutoH2c::may_fall_back`]): the endpoint is asked again (once for every call
    /// failing meanwhile). `true`: it speaks HTTP/1.1 now, and the call is to be sent again
    /// over it; `false`: it does speak HTTP/2, and the failure is an ordinary one.
    pub async fn recheck(&self, limits: &LlmTimeouts) -> bool {
        self.memory_doubted.store(true, Ordering::Release);
        if self
            .state
            .compare_exchange(
                HTTP2_REMEMBERED,
                UNDECIDED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            tracing::debug!(endpoint = %self.base_url, "a call over HTTP/2, as remembered, failed: asking the endpoint again");
        }
        self.speak(limits).await == Speak::Http1
    }

    /// A call over HTTP/2 that fails before any answer may mean the endpoint no longer
    /// speaks it: true unless this process's own probe found HTTP/2.
    pub fn may_fall_back(&self) -> bool {
        self.state.load(Ordering::Acquire) != HTTP2
    }

    fn decided(&self) -> Option<Speak> {
        match self.state.load(Ordering::Acquire) {
            HTTP2_REMEMBERED | HTTP2 => Some(Speak::Http2),
            HTTP1 => Some(Speak::Http1),
            _ => None,
        }
    }

    fn remember(&self, speaks_h2c: bool) {
        let Some(memory) = &self.memory else { return };
        if let Err(e) = memory.remember_http2(&self.base_url, speaks_h2c) {
            tracing::warn!(
                "cannot write the endpoint memory {}: {e} (the HTTP version is kept for this process only)",
                memory.path().display()
            );
        }
    }
}

/// The probe's connect limit: the client's, and at most half of the attempt's whole
/// limit (the call itself needs the rest).
pub fn connect_limit(client_connect: Duration, limits: &LlmTimeouts) -> Duration {
    client_connect.min(limits.request / 2)
}

/// The probe's wait for the server's first bytes: the attempt's first-byte limit
/// (`llm.idle_timeout`), at most half of its whole limit, at most [`MAX_ANSWER_WAIT`].
pub fn answer_limit(limits: &LlmTimeouts) -> Duration {
    limits.idle.min(limits.request / 2).min(MAX_ANSWER_WAIT)
}

/// Asks `host:port` whether it speaks HTTP/2 without negotiation (see the module header).
pub async fn probe(
    host: &str,
    port: u16,
    connect_limit: Duration,
    answer_limit: Duration,
) -> ProbeAnswer {
    // An address is taken as it is; a name is resolved (within the same limit).
    let connecting =
        tokio::time::timeout(connect_limit, tokio::net::TcpStream::connect((host, port))).await;
    let mut stream = match connecting {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return ProbeAnswer::Unreachable(e.to_string()),
        Err(_) => {
            return ProbeAnswer::Unreachable(format!(
                "no connection within {} ms",
                connect_limit.as_millis()
            ))
        }
    };
    let _ = stream.set_nodelay(true);
    let exchange = async {
        if stream.write_all(PREFACE_AND_SETTINGS).await.is_err() {
            // Closed on us as we wrote: refused.
            return ProbeAnswer::Http1;
        }
        let mut head = [0u8; 9];
        let mut read = 0;
        while read < head.len() {
            match stream.read(&mut head[read..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
        classify(&head[..read])
    };
    match tokio::time::timeout(answer_limit, exchange).await {
        Ok(answer) => answer,
        Err(_) => ProbeAnswer::Silent,
    }
}

/// The server's first bytes: a SETTINGS frame header on stream 0 is HTTP/2; anything else
/// (an HTTP/1.1 status line, nothing before the close) is not.
pub fn classify(first_bytes: &[u8]) -> ProbeAnswer {
    match first_bytes {
        [_, _, _, kind, _, 0, 0, 0, 0, ..] if *kind == SETTINGS_FRAME => ProbeAnswer::Http2,
        _ => ProbeAnswer::Http1,
    }
}

/// reqwest sends a plain-HTTP request through `HTTP_PROXY` / `ALL_PROXY` (either case)
/// unless `NO_PROXY` names the host: then the probe, which connects directly, would ask
/// the wrong server.
pub fn through_proxy(url: &reqwest::Url, var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let proxied = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
        .iter()
        .any(|name| set(name).is_some());
    if !proxied {
        return false;
    }
    let Some(host) = url.host_str() else {
        return true;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let excluded = set("NO_PROXY")
        .or_else(|| set("no_proxy"))
        .is_some_and(|list| {
            list.split(',')
                .map(|entry| entry.trim().to_ascii_lowercase())
                .any(|entry| {
                    let domain = entry.trim_start_matches('.');
                    entry == "*"
                        || (!domain.is_empty()
                            && (host == domain || host.ends_with(&format!(".{domain}"))))
                })
        });
    !excluded
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_settings_frame_is_http2_and_anything_else_is_not() {
        assert_eq!(classify(&[0, 0, 6, 4, 0, 0, 0, 0, 0]), ProbeAnswer::Http2);
        assert_eq!(classify(&[0, 0, 0, 4, 1, 0, 0, 0, 0]), ProbeAnswer::Http2);
        assert_eq!(classify(b"HTTP/1.1 400 Bad Request"), ProbeAnswer::Http1);
        assert_eq!(classify(b""), ProbeAnswer::Http1);
        // A SETTINGS type byte on a stream other than 0 is not a server preface.
        assert_eq!(classify(&[0, 0, 0, 4, 0, 0, 0, 0, 1]), ProbeAnswer::Http1);
    }

    #[test]
    fn the_probe_takes_at_most_half_of_an_attempt() {
        let limits = |request_ms, idle_ms| LlmTimeouts {
            request: Duration::from_millis(request_ms),
            idle: Duration::from_millis(idle_ms),
        };
        assert_eq!(
            answer_limit(&limits(300, 60_000)),
            Duration::from_millis(150)
        );
        assert_eq!(
            answer_limit(&limits(600_000, 200)),
            Duration::from_millis(200)
        );
        assert_eq!(answer_limit(&LlmTimeouts::default()), MAX_ANSWER_WAIT);
        assert_eq!(
            connect_limit(Duration::from_secs(30), &limits(300, 60_000)),
            Duration::from_millis(150)
        );
    }

    #[test]
    fn an_endpoint_behind_a_proxy_is_not_probed() {
        let url = reqwest::Url::parse("http://127.0.0.1:8080/v1").unwrap();
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert!(!through_proxy(&url, env(&[])));
        assert!(through_proxy(
            &url,
            env(&[("http_proxy", "http://proxy:3128")])
        ));
        assert!(!through_proxy(
            &url,
            env(&[
                ("HTTP_PROXY", "http://proxy:3128"),
                ("NO_PROXY", "localhost, 127.0.0.1")
            ])
        ));
        assert!(!through_proxy(
            &url,
            env(&[("ALL_PROXY", "socks5://p:1080"), ("no_proxy", "*")])
        ));
        let named = reqwest::Url::parse("http://llm.lab.example/v1").unwrap();
        assert!(!through_proxy(
            &named,
            env(&[
                ("HTTP_PROXY", "http://p:3128"),
                ("NO_PROXY", ".lab.example")
            ])
        ));
        assert!(through_proxy(
            &named,
            env(&[
                ("HTTP_PROXY", "http://p:3128"),
                ("NO_PROXY", "other.example")
            ])
        ));
    }
}
