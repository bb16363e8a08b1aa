//! [`MetricsEndpoint`]: `GET /metrics` on an address of its own, for a process that has no
//! web server (`delta orchestrate --metrics-listen ADDR`): a small HTTP/1.1 server (hyper) on
//! a thread of its own, answering what its `render` function writes.
//!
//! Loopback by default: another address is refused unless the caller allows it, and then
//! only with a bearer token of at least [`MIN_TOKEN_LEN`] characters, which every request
//! must send (`Authorization: Bearer <token>`; a token set for a loopback address is asked
//! for too). Requests are bounded: a slow client gets [`HEADER_DEADLINE`] to send its
//! headers, and at most [`MAX_CONNECTIONS`] are served at once.
//!
//! Must not: serve anything but `/metrics`, or hold the engine up (it runs beside it).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::openmetrics::CONTENT_TYPE as OPENMETRICS;
use crate::token::same_token;

/// Shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;
/// Time a client has to send its request's headers.
pub const HEADER_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once; more wait in the listen queue.
pub const MAX_CONNECTIONS: usize = 32;

/// Who may read the metrics.
#[derive(Clone, Default)]
pub struct MetricsAccess {
    /// A non-loopback address is allowed (needs `token`).
    pub allow_remote: bool,
    /// Every request must send it as a bearer token.
    pub token: Option<String>,
}

impl std::fmt::Debug for MetricsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAccess")
            .field("allow_remote", &self.allow_remote)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Why the endpoint does not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsEndpointError {
    /// Not a loopback address, and remote reading was not allowed.
    #[error("{addr} is not a loopback address: the metrics would be readable from other hosts (hint: listen on 127.0.0.1:PORT and scrape from this host, or allow it with --metrics-public and a token in DELTA_METRICS_TOKEN)")]
    NotLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// Remote reading allowed without a (long enough) token.
    #[error("reading metrics from other hosts needs a token of at least {MIN_TOKEN_LEN} characters in DELTA_METRICS_TOKEN (hint: DELTA_METRICS_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'), and give Prometheus the same as its bearer token)")]
    WeakToken,
    /// The address could not be bound.
    #[error(
        "cannot listen on {addr}: {source} (hint: is the port in use? port 0 picks a free one)"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The server's thread or runtime could not start.
    #[error("cannot start the metrics endpoint: {0}")]
    Start(String),
}

/// Whether `access` allows listening on `addr`.
pub fn check_access(addr: SocketAddr, access: &MetricsAccess) -> Result<(), MetricsEndpointError> {
    let strong = access
        .token
        .as_deref()
        .is_some_and(|t| t.chars().count() >= MIN_TOKEN_LEN);
    if access.token.is_some() && !strong {
        return Err(MetricsEndpointError::WeakToken);
    }
    if !addr.ip().is_loopback() {
        if !access.allow_remote {
            return Err(MetricsEndpointError::NotLoopback { addr });
        }
        if !strong {
            return Err(MetricsEndpointError::WeakToken);
        }
    }
    Ok(())
}

/// What the endpoint answers with.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// A running `/metrics` server; dropping it (or [`MetricsEndpoint::stop`]) stops it.
pub struct MetricsEndpoint {
    /// The address bound (the real port when port 0 was asked for).
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsEndpoint")
            .field("addr", &self.addr)
            .finish()
    }
}

impl MetricsEndpoint {
    /// Checks `access` for `addr`, binds it and serves `render`'s text at `/metrics`.
    pub fn start(
        addr: SocketAddr,
        access: MetricsAccess,
        render: Render,
    ) -> Result<MetricsEndpoint, MetricsEndpointError> {
        check_access(addr, &access)?;
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|source| MetricsEndpointError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| MetricsEndpointError::Bind { addr, source })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| MetricsEndpointError::Start(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| MetricsEndpointError::Start(e.to_string()))?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let token = access.token.map(Arc::new);
        let thread = std::thread::Builder::new()
            .name("delta-metrics".into())
            .spawn(move || runtime.block_on(serve(listener, token, render, stopped)))
            .map_err(|e| MetricsEndpointError::Start(e.to_string()))?;
        Ok(MetricsEndpoint {
            addr: local,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops serving and waits for the server's thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.halt();
    }
}

async fn serve(
    listener: std::net::TcpListener,
    token: Option<Arc<String>>,
    render: Render,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let places = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let place = tokio::select! {
            _ = &mut stopped => return,
            place = Arc::clone(&places).acquire_owned() => match place {
                Ok(place) => place,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let (token, render) = (token.clone(), Arc::clone(&render));
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let answer = answer(&request, token.as_deref().map(String::as_str), &render);
                async move { Ok::<_, Infallible>(answer) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_DEADLINE)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(place);
        });
    }
}

/// The answer to one request.
fn answer<B>(request: &Request<B>, token: Option<&str>, render: &Render) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "only /metrics is served here\n");
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "use GET /metrics\n");
    }
    if let Some(token) = token {
        let given = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|given| same_token(given, token)) {
            let mut response = plain(
                StatusCode::UNAUTHORIZED,
                "missing or wrong token: send Authorization: Bearer <DELTA_METRICS_TOKEN>\n",
            );
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    let mut response = Response::new(Full::new(Bytes::from(render())));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> String {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        let auth = token
            .map(|t| format!("authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn only_loopback_unless_allowed_and_then_only_with_a_strong_token() {
        let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let remote: SocketAddr = "0.0.0.0:9464".parse().unwrap();
        let open = MetricsAccess::default();
        assert!(check_access(local, &open).is_ok());
        let refused = check_access(remote, &open).unwrap_err().to_string();
        assert!(
            refused.contains("not a loopback address") && refused.contains("--metrics-public"),
            "{refused}"
        );
        let allowed = MetricsAccess {
            allow_remote: true,
            token: None,
        };
        assert!(matches!(
            check_access(remote, &allowed),
            Err(MetricsEndpointError::WeakToken)
        ));
        let weak = MetricsAccess {
            allow_remote: true,
            token: Some("short".into()),
        };
        assert!(matches!(
            check_access(remote, &weak),
            Err(MetricsEndpointError::WeakToken)
        ));
        let strong = MetricsAccess {
            allow_remote: true,
            token: Some("0123456789abcdef".into()),
        };
        assert!(check_access(remote, &strong).is_ok());
    }

    #[test]
    fn metrics_are_served_with_the_token_and_refused_without() {
        let render: Render = Arc::new(|| "delta_x 1\n# EOF\n".to_string());
        let access = MetricsAccess {
            allow_remote: false,
            token: Some("0123456789abcdef".into()),
        };
        let endpoint =
            MetricsEndpoint::start("127.0.0.1:0".parse().unwrap(), access, render).unwrap();
        let ok = get(endpoint.addr, "/metrics", Some("0123456789abcdef"));
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains("application/openmetrics-text") && ok.ends_with("delta_x 1\n# EOF\n"),
            "{ok}"
        );
        assert!(get(endpoint.addr, "/metrics", None).starts_with("HTTP/1.1 401"));
        assert!(
            get(endpoint.addr, "/metrics", Some("0123456789abcdeX")).starts_with("HTTP/1.1 401")
        );
        assert!(get(endpoint.addr, "/other", Some("0123456789abcdef")).starts_with("HTTP/1.1 404"));
        endpoint.stop();
    }
}
