//! HTTP/2 by itself for `http://` endpoints whose transport is unset, end to end through
//! delta's HTTP client and an endpoint's gate, against servers on 127.0.0.1 that show what
//! they were sent: an HTTP/1.1-only server (hyper's HTTP/1.1 server, answering the HTTP/2
//! preface as uvicorn does, by closing, or not at all), an h2c server (hyper's HTTP/2
//! server), and the endpoint memory between two backends ("processes").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::tests::{completion_json, hello, limits};
use super::{
    Endpoint, EndpointMemory, GateConfig, HttpBackend, HttpTransport, LlmGate, RequestMeta,
    RetryPolicy, DEFAULT_TIMEOUT,
};

/// What an HTTP/1.1-only server does with the HTTP/2 preface.
#[derive(Debug, Clone, Copy)]
enum PrefaceAnswer {
    /// uvicorn (llama.cpp's Python server, vLLM): `HTTP/1.1 400`, then it closes.
    Status400,
    /// Closes the connection without a word.
    Close,
    /// Says nothing and keeps the connection open.
    Silence,
}

/// What a test server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    prefaces: AtomicUsize,
    /// The HTTP version of every chat request it answered.
    versions: Mutex<Vec<Version>>,
}

impl Seen {
    fn prefaces(&self) -> usize {
        self.prefaces.load(Ordering::SeqCst)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn versions(&self) -> Vec<Version> {
        self.versions.lock().unwrap().clone()
    }
}

const PREFACE_START: &[u8] = b"PRI * HTTP/2.0";
/// Most connections a test server accepts: every loop bounded.
const MAX_CONNECTIONS: usize = 512;

fn answer(seen: &Arc<Seen>, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    seen.versions.lock().unwrap().push(req.version());
    let body = completion_json("hello").to_string();
    Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// A loopback server that speaks HTTP/1.1 only (hyper's HTTP/1.1 server) and answers the
/// HTTP/2 preface as `on_preface` says. Counts the prefaces it was sent.
async fn http1_only_server(on_preface: PrefaceAnswer) -> (String, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let counts = Arc::clone(&seen);
    tokio::spawn(async move {
        for _ in 0..MAX_CONNECTIONS {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            counts.connections.fetch_add(1, Ordering::SeqCst);
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                let mut start = [0u8; PREFACE_START.len()];
                let mut peeked = 0;
                while peeked < start.len() {
                    match stream.peek(&mut start).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) if n == peeked => tokio::task::yield_now().await,
                        Ok(n) => peeked = n,
                    }
                }
                if start == PREFACE_START {
                    counts.prefaces.fetch_add(1, Ordering::SeqCst);
                    // Read what was sent, as a server does before it answers (closing on
                    // unread bytes would reset the connection instead).
                    let mut preface = [0u8; 1024];
                    let _ = stream.read(&mut preface).await;
                    match on_preface {
                        PrefaceAnswer::Status400 => {
                            let _ = stream
                                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: 28\r\n\r\nInvalid HTTP request received")
                                .await;
                        }
                        PrefaceAnswer::Close => {}
                        PrefaceAnswer::Silence => {
                            // Until the client gives up and closes.
                            let mut sink = [0u8; 1024];
                            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                        }
                    }
                    return;
                }
                let seen = Arc::clone(&counts);
                let service = hyper::service::service_fn(move |req| {
                    let reply = answer(&seen, &req);
                    async move { Ok::<_, Infallible>(reply) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (base_url, seen)
}

/// A loopback server that speaks HTTP/2 only, without negotiation (hyper's HTTP/2 server).
async fn h2c_server() -> (String, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let counts = Arc::clone(&seen);
    tokio::spawn(async move {
        for _ in 0..MAX_CONNECTIONS {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            counts.connections.fetch_add(1, Ordering::SeqCst);
            let seen = Arc::clone(&counts);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let reply = answer(&seen, &req);
                    async move { Ok::<_, Infallible>(reply) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (base_url, seen)
}

fn backend(base_url: &str, http2: Option<bool>, memory: Option<EndpointMemory>) -> HttpBackend {
    let endpoint = Endpoint::new(base_url, None).with_transport(HttpTransport {
        http2,
        max_connections: None,
    });
    HttpBackend::with_memory(endpoint, DEFAULT_TIMEOUT, memory).unwrap()
}

/// The endpoint's gate with the default number of attempts, short backoff.
fn gate(backend: &HttpBackend) -> LlmGate {
    LlmGate::new(
        Arc::new(backend.clone()),
        GateConfig {
            max_in_flight: 10_000,
            retry: RetryPolicy {
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(10),
                ..RetryPolicy::default()
            },
            ..GateConfig::default()
        },
    )
}

fn meta() -> RequestMeta {
    limits(10_000, 5_000)
}

/// One call through the gate: answered, in one attempt, no retry announced.
async fn call_once(gate: &LlmGate) {
    let outcome = gate
        .complete(hello(), meta(), |n| panic!("no retry: {n:?}"))
        .await
        .unwrap();
    assert_eq!(outcome.attempts, 1);
    assert_eq!(outcome.completion.message.content.as_deref(), Some("hello"));
}

/// `n` first calls through `gate` at once (a batch starting), each answered in one attempt.
async fn call_at_once(gate: LlmGate, n: usize) {
    let gate = Arc::new(gate);
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { call_once(&gate).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
}

fn memory_in(dir: &tempfile::TempDir) -> EndpointMemory {
    EndpointMemory::new(dir.path().join("delta/endpoints.json"))
}

/// The usual local server (uvicorn answers the preface with a 400): the first call is
/// answered in one attempt over HTTP/1.1, and the memory says HTTP/1.1; a second backend
/// with that memory (the next process) sends no preface at all.
#[tokio::test]
async fn an_http1_only_server_is_answered_over_http1_and_remembered() {
    let (url, seen) = http1_only_server(PrefaceAnswer::Status400).await;
    let dir = tempfile::tempdir().unwrap();
    let first = backend(&url, None, Some(memory_in(&dir)));
    call_once(&gate(&first)).await;
    call_once(&gate(&first)).await;
    assert_eq!(seen.prefaces(), 1, "asked once");
    assert_eq!(seen.versions(), vec![Version::HTTP_11; 2]);
    assert_eq!(memory_in(&dir).http2(&url), Some(false));

    let next = backend(&url, None, Some(memory_in(&dir)));
    call_once(&gate(&next)).await;
    assert_eq!(seen.prefaces(), 1, "the next process did not ask again");
    assert_eq!(seen.versions().len(), 3);
}

/// A server that closes the connection on the preface is spoken to over HTTP/1.1 too.
#[tokio::test]
async fn a_server_that_closes_on_the_preface_is_answered_over_http1() {
    let (url, seen) = http1_only_server(PrefaceAnswer::Close).await;
    let dir = tempfile::tempdir().unwrap();
    call_once(&gate(&backend(&url, None, Some(memory_in(&dir))))).await;
    assert_eq!(seen.prefaces(), 1);
    assert_eq!(seen.versions(), vec![Version::HTTP_11]);
    assert_eq!(memory_in(&dir).http2(&url), Some(false));
}

/// A server that says nothing to the preface costs the call at most the probe's limit
/// (here the idle limit, 300 ms), then the call goes over HTTP/1.1; nothing is remembered
/// (it said nothing either way), and the process does not ask again.
#[tokio::test]
async fn a_server_silent_to_the_preface_falls_back_within_the_first_byte_limit() {
    let (url, seen) = http1_only_server(PrefaceAnswer::Silence).await;
    let dir = tempfile::tempdir().unwrap();
    let backend = backend(&url, None, Some(memory_in(&dir)));
    let started = std::time::Instant::now();
    let reply = backend.send(&hello(), &limits(10_000, 300)).await.unwrap();
    assert_eq!(reply.message.content.as_deref(), Some("hello"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    backend.send(&hello(), &limits(10_000, 300)).await.unwrap();
    assert_eq!(seen.prefaces(), 1);
    assert_eq!(seen.versions(), vec![Version::HTTP_11; 2]);
    assert_eq!(memory_in(&dir).http2(&url), None);
}

/// An h2c server is spoken to over HTTP/2 (the version the server saw), that is remembered,
/// and the next process goes straight to it (one connection: no probe).
#[tokio::test]
async fn an_h2c_server_is_spoken_to_over_http2_and_remembered() {
    let (url, seen) = h2c_server().await;
    let dir = tempfile::tempdir().unwrap();
    let first = backend(&url, None, Some(memory_in(&dir)));
    call_once(&gate(&first)).await;
    call_once(&gate(&first)).await;
    assert_eq!(seen.versions(), vec![Version::HTTP_2; 2]);
    assert_eq!(memory_in(&dir).http2(&url), Some(true));
    assert_eq!(seen.connections(), 2, "the probe and the calls' connection");

    let next = backend(&url, None, Some(memory_in(&dir)));
    call_once(&gate(&next)).await;
    assert_eq!(seen.versions(), vec![Version::HTTP_2; 3]);
    assert_eq!(seen.connections(), 3, "no probe the second time");
}

/// 300 first calls at once (a batch starting) against an HTTP/1.1-only server: one probe
/// for all of them, every call answered in one attempt over HTTP/1.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_first_calls_at_once_share_one_probe_and_all_succeed() {
    let (url, seen) = http1_only_server(PrefaceAnswer::Status400).await;
    call_at_once(gate(&backend(&url, None, None)), 300).await;
    assert_eq!(seen.prefaces(), 1);
    assert_eq!(seen.versions(), vec![Version::HTTP_11; 300]);
}

/// A remembered "HTTP/2" the endpoint no longer speaks (an h2c server replaced by an
/// HTTP/1.1-only one on the same address): calls in flight at the switch are all sent again
/// over HTTP/1.1 within their one attempt, and the memory says HTTP/1.1 from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remembered_http2_the_server_refuses_now_falls_back_for_every_call() {
    let (url, seen) = http1_only_server(PrefaceAnswer::Status400).await;
    let dir = tempfile::tempdir().unwrap();
    memory_in(&dir).remember_http2(&url, true).unwrap();
    call_at_once(gate(&backend(&url, None, Some(memory_in(&dir)))), 50).await;
    assert!(seen.prefaces() >= 1);
    assert_eq!(seen.versions(), vec![Version::HTTP_11; 50]);
    assert_eq!(memory_in(&dir).http2(&url), Some(false));
}

/// `llm.http2: false` (or DELTA_LLM_HTTP2=0) never sends the preface and remembers nothing.
#[tokio::test]
async fn http2_false_never_sends_the_preface() {
    let (url, seen) = http1_only_server(PrefaceAnswer::Status400).await;
    let dir = tempfile::tempdir().unwrap();
    let off = backend(&url, Some(false), Some(memory_in(&dir)));
    call_once(&gate(&off)).await;
    call_once(&gate(&off)).await;
    assert_eq!(seen.prefaces(), 0);
    assert_eq!(seen.versions(), vec![Version::HTTP_11; 2]);
    assert_eq!(memory_in(&dir).http2(&url), None);
}

/// `llm.http2: true` keeps its meaning: no probe, and an HTTP/1.1-only server's refusal
/// fails the call instead of falling back (the named error itself:
/// `client::tests::http2_without_negotiation_to_an_http1_server_names_the_setting`), even
/// with a memory that says otherwise.
#[tokio::test]
async fn http2_true_is_not_probed_and_never_falls_back() {
    let (url, seen) = h2c_server().await;
    let dir = tempfile::tempdir().unwrap();
    memory_in(&dir).remember_http2(&url, false).unwrap();
    call_once(&gate(&backend(&url, Some(true), Some(memory_in(&dir))))).await;
    assert_eq!(seen.connections(), 1, "no probe");
    assert_eq!(seen.versions(), vec![Version::HTTP_2]);

    let (url, seen) = http1_only_server(PrefaceAnswer::Status400).await;
    memory_in(&dir).remember_http2(&url, true).unwrap();
    let result = backend(&url, Some(true), Some(memory_in(&dir)))
        .send(&hello(), &meta())
        .await;
    assert!(result.is_err(), "{result:?}");
    assert!(seen.versions().is_empty(), "no HTTP/1.1 request");
    assert_eq!(memory_in(&dir).http2(&url), Some(true), "nothing learned");
}
