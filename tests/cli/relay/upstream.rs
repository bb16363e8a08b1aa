//! A loopback OpenAI-compatible endpoint for the relay's tests that does what each test says
//! per request: answer a fixed response, stream SSE events (pausing on a latch the test opens),
//! or hold the request without answering and report when the relay closes the connection.
//! Each request and each close is reported on a channel. Threads only; every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long the endpoint waits for anything before giving up on a connection.
const PATIENCE: Duration = Duration::from_secs(60);

/// What the endpoint does with a request.
pub enum Behaviour {
    /// Writes these bytes (a whole HTTP response) and closes.
    Respond(Vec<u8>),
    /// Writes an SSE head and `events`; before event `pause_before`, waits for `latch`, or
    /// reports [`Seen::Closed`] if the relay closes the connection meanwhile.
    Stream {
        events: Vec<String>,
        pause_before: usize,
        latch: Latch,
    },
    /// Never answers; reports [`Seen::Closed`] when the relay closes the connection.
    Hold,
}

/// What the endpoint saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A request: its headers (lowercase) and body.
    Request { head: String, body: String },
    /// The relay closed a held (or paused streaming) request's connection; its body.
    Closed { body: String },
}

/// A one-shot gate a streaming answer waits on.
#[derive(Clone, Default)]
pub struct Latch(Arc<(Mutex<bool>, Condvar)>);

impl Latch {
    pub fn open(&self) {
        let (open, signal) = &*self.0;
        *open.lock().unwrap() = true;
        signal.notify_all();
    }

    fn wait(&self, limit: Duration) -> bool {
        let (open, signal) = &*self.0;
        let guard = open.lock().unwrap();
        let (guard, _) = signal
            .wait_timeout_while(guard, limit, |open| !*open)
            .unwrap();
        *guard
    }
}

/// Waits for `latch`; false when the relay closes the connection first (or after
/// [`PATIENCE`]).
fn wait_unless_closed(stream: &mut TcpStream, latch: &Latch) -> bool {
    let started = std::time::Instant::now();
    let _ = stream.set_read_timeout(Some(Duration::from_millis(20)));
    let mut byte = [0u8; 1];
    while started.elapsed() < PATIENCE {
        if latch.wait(Duration::from_millis(20)) {
            return true;
        }
        match stream.read(&mut byte) {
            Ok(0) => return false,
            Err(e)
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            _ => {}
        }
    }
    false
}

/// A running endpoint.
pub struct Upstream {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    /// Everything seen, in order.
    pub seen: Receiver<Seen>,
}

impl Upstream {
    /// Serves until the test ends; `decide` picks each request's behaviour from its body.
    pub fn start(decide: impl Fn(&str) -> Behaviour + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        let decide = Arc::new(decide);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let tx = tx.clone();
                let decide = Arc::clone(&decide);
                std::thread::spawn(move || serve(stream, &*decide, &tx));
            }
        });
        Upstream {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            seen: rx,
        }
    }

    /// The next thing seen, within `limit`.
    pub fn next(&self, limit: Duration) -> Option<Seen> {
        self.seen.recv_timeout(limit).ok()
    }
}

fn serve(mut stream: TcpStream, decide: &(dyn Fn(&str) -> Behaviour + Sync), tx: &Sender<Seen>) {
    let _ = stream.set_read_timeout(Some(PATIENCE));
    let Some((head, body)) = read_request(&mut stream) else {
        return;
    };
    let _ = tx.send(Seen::Request {
        head: head.clone(),
        body: body.clone(),
    });
    match decide(&body) {
        Behaviour::Respond(bytes) => {
            let _ = stream.write_all(&bytes);
        }
        Behaviour::Stream {
            events,
            pause_before,
            latch,
        } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
            if stream.write_all(head.as_bytes()).is_err() {
                return;
            }
            for (i, event) in events.iter().enumerate() {
                if i == pause_before && !wait_unless_closed(&mut stream, &latch) {
                    let _ = tx.send(Seen::Closed { body });
                    return;
                }
                if stream.write_all(event.as_bytes()).is_err() {
                    return;
                }
                let _ = stream.flush();
            }
        }
        Behaviour::Hold => {
            let mut byte = [0u8; 1];
            // Returns 0 (or fails) when the relay closes its end.
            let closed = matches!(stream.read(&mut byte), Ok(0) | Err(_));
            if closed {
                let _ = tx.send(Seen::Closed { body });
            }
        }
    }
}

/// The request's head (lowercased) and body (by Content-Length).
fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let split = loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break split;
        }
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = raw[split + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some((head, String::from_utf8_lossy(&body).into_owned()))
}

/// A whole HTTP response with a JSON body.
pub fn json_response(status: u16, extra_headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra_headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One `chat.completion.chunk` event carrying `text`.
pub fn chunk_event(text: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({
            "id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]
        })
    )
}

/// The final usage event of a stream asked with `include_usage`.
pub fn usage_event(prompt: u64, completion: u64) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({
            "id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        })
    )
}
