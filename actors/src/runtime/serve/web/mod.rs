//! The HTTP/WebSocket layer of `delta serve` (actix-web + actix-ws): routes, authentication
//! (see [`auth`]), JSON errors, and [`run_server`], which owns the actix System for the
//! server's life. Handlers only translate between HTTP and the `ServeManager` /
//! `WorkerActor` / `RunsWatcher` messages; the domain lives in `crate::serve`.
//!
//! # Routes
//! | route | what |
//! |---|---|
//! | `GET /` , `GET /assets/{file}` | the page (embedded; public, it holds no data) |
//! | `GET /api/identity`, `GET /api/identity/check` | the page's login and its check that this is still the server it logged in to ([`identity`]; the check is public) |
//! | `GET/POST /api/sessions`, `GET/DELETE /api/sessions/{id}`, `POST /api/sessions/{id}/restart` | sessions |
//! | `GET/POST /api/sessions/{id}/workers`, `DELETE .../workers/{wid}`, `POST .../workers/{wid}/restart`, `POST .../workers/{wid}/input` | workers |
//! | `GET /api/agents`, `GET /api/workspaces`, `GET /api/runs/{run}/timeline`, `POST /api/runs/{run}/answer` | agents, runs |
//! | `GET /api/orchestrations/{id}[/runs\|/timeline\|/phases]`, `GET /api/runs/{run}/trace\|calls/{n}\|tools/{id}` | the batch view and the run inspector ([`inspect`]) |
//! | `GET /ws/session/{sid}/worker/{wid}`, `GET /ws/dashboard` | WebSockets |
//! | `GET /metrics` | the watched batches as Prometheus metrics (`telemetry::serve_metrics`) |
//!
//! Every answer carries the headers of [`policy`] (no framing, no script but the page's own).

pub mod answer;
pub mod assets;
pub mod auth;
pub mod dashboard;
pub mod identity;
pub mod inspect;
pub mod policy;
pub mod rest;
pub mod runs;
pub mod ws;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use actix::prelude::*;
use actix_web::body::{BoxBody, EitherBody};
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpServer};
use futures_util::future::{ready, Either};

use self::auth::{judge, Verdict};
use self::rest::error_response;
use crate::runtime::serve::watcher::RunsWatcher;
use crate::runtime::serve::{ManagerConfig, ServeManager};
use crate::serve::agents::AgentCatalog;
use crate::serve::state_lock::StateLock;
use crate::serve::store::SessionStore;
use crate::serve::ServeError;
use crate::session::pty::{PtyConfig, PtySessions};

/// Largest JSON body.
pub const MAX_JSON_BODY: usize = 256 * 1024;
/// No linger after a response: actix otherwise keeps reading a connection whose request it
/// did not read to the end (every WebSocket: its request never ends) for up to this long
/// before closing it, and a WebSocket client waits for the server to close the TCP connection
/// after the closing handshake: every clean close took 0.5-1 s. A shorter non-zero linger
/// is not an option: actix measures it from a clock cached for up to 500 ms, and a deadline
/// already past when set is never woken (the connection then stayed open until the client
/// left). The cost: a request refused before its body was read (401, 403, 413) is answered
/// and the connection closed at once, so a client still sending a large body may see a reset.
const CLOSE_LINGER: std::time::Duration = std::time::Duration::ZERO;

/// Everything `delta serve` needs, resolved by the CLI.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The address to listen on (the CLI defaults to loopback).
    pub listen: SocketAddr,
    /// The token every API request (`Authorization: Bearer`) and WebSocket (that header, or
    /// the `delta.token.<hex>` subprotocol) must carry; see [`crate::api::serve::new_token`].
    pub token: String,
    /// `sessions.json`, the PTY holders' folders, pasted images.
    pub state_dir: PathBuf,
    /// The private socket folder of the holders.
    pub runtime_dir: PathBuf,
    /// The `delta-sessions-pty` binary (runs each worker's holder).
    pub holder_exe: PathBuf,
    /// The `delta` binary, which workers of the built-in delta agent run, and which carries a
    /// page's answer to a waiting run (`delta continue`).
    pub delta_exe: PathBuf,
    /// A `serve.yaml` whose `agents:` add to or replace the built-in agent definitions.
    pub agents_config: Option<PathBuf>,
    /// The user named `agents_config`: a missing file is then an error, not the default.
    pub agents_config_explicit: bool,
    /// Workspaces shown in the runs view besides the sessions' folders.
    pub workspaces: Vec<PathBuf>,
    /// The folders a new session's relative (the server's folder) or `~` (the user's home)
    /// `locationPath` is taken from.
    pub paths: crate::serve::session_path::PathContext,
    /// HTTP worker threads.
    pub http_workers: usize,
}

/// What the CLI prints once the server listens.
#[derive(Debug, Clone)]
pub struct ServeReady {
    /// The address actually bound (the port is real even when `listen` asked for 0).
    pub address: SocketAddr,
    /// Where an old-format `sessions.json` was kept when it was migrated at this start.
    pub migrated_backup: Option<PathBuf>,
    /// Sessions loaded from the state folder.
    pub sessions: usize,
}

pub struct WebState {
    pub manager: Addr<ServeManager>,
    pub watcher: Addr<RunsWatcher>,
    pub agents: AgentCatalog,
    pub images_dir: PathBuf,
    /// The orchestrations the batch view indexed.
    pub batches: Arc<crate::serve::batch_cache::BatchCache>,
    /// This start's identity, which the page checks before its token goes out again.
    pub identity: identity::ServerIdentity,
}

/// Runs the server until it is stopped (Ctrl-C / SIGTERM). Holders and their programs are
/// left running: the next start re-attaches to them.
pub fn run_server(
    options: ServeOptions,
    on_ready: impl FnOnce(ServeReady) + Send + 'static,
) -> Result<(), ServeError> {
    let agents = AgentCatalog::load(
        options.agents_config.as_deref(),
        options.agents_config_explicit,
    )?;
    let store = SessionStore::open(&options.state_dir)?;
    // Before reading anything: a second server on this folder would revive the first one's
    // deleted workers and overwrite its sessions.
    let mut state_lock = StateLock::acquire(&options.state_dir)?;
    let loaded = store.load()?;
    let pty = PtySessions::new(PtyConfig {
        sessions_dir: options.state_dir.join("pty"),
        runtime_dir: options.runtime_dir.clone(),
        holder_exe: options.holder_exe.clone(),
    });
    let system = actix::System::new();
    system.block_on(async move {
        let arbiters: Vec<ArbiterHandle> = (0..2).map(|_| Arbiter::new().handle()).collect();
        let ready = ServeReady {
            address: options.listen,
            migrated_backup: loaded.migrated_backup.clone(),
            sessions: loaded.sessions.len(),
        };
        let config = ManagerConfig {
            store,
            pty,
            agents: agents.clone(),
            delta_exe: options.delta_exe.clone(),
            paths: options.paths.clone(),
        };
        let manager_actor = ServeManager::new(config, loaded.sessions, arbiters.clone());
        let events = manager_actor.events();
        let manager = manager_actor.start();
        let watcher = RunsWatcher::new(options.workspaces.clone(), manager.clone(), events).start();
        let state = web::Data::new(WebState {
            manager,
            watcher,
            agents,
            images_dir: options.state_dir.join("images"),
            batches: inspect::batch_cache(),
            identity: identity::ServerIdentity::new(!options.workspaces.is_empty()),
        });
        let token: Arc<str> = Arc::from(options.token.as_str());
        let server = HttpServer::new(move || app(state.clone(), token.clone()))
            .workers(options.http_workers.max(1))
            // Keystrokes and their echoes are tiny frames: never hold them back for an ACK.
            .tcp_nodelay(true)
            .disable_signals()
            .shutdown_timeout(1)
            .client_disconnect_timeout(CLOSE_LINGER)
            .bind(options.listen)
            .map_err(|e| ServeError::io("cannot listen on", options.listen.to_string(), e))?;
        let address = server.addrs().first().copied().unwrap_or(options.listen);
        let server = server.run();
        // Caught here, before the address is announced: whoever reads it may stop the
        // server at once, and it must stop cleanly, not die of the signal's default action
        // (a handler registered inside the spawned task would come only when it first ran).
        use tokio::signal::unix::{signal, SignalKind};
        for kind in [SignalKind::interrupt(), SignalKind::terminate()] {
            let mut caught =
                signal(kind).map_err(|e| ServeError::io("cannot catch", "SIGINT/SIGTERM", e))?;
            let handle = server.handle();
            actix_web::rt::spawn(async move {
                caught.recv().await;
                handle.stop(true).await;
            });
        }
        if let Err(e) = state_lock.record_address(&address.to_string()) {
            tracing::warn!("{e}");
        }
        on_ready(ServeReady { address, ..ready });
        let result = server
            .await
            .map_err(|e| ServeError::io("serving on", address.to_string(), e));
        for arbiter in arbiters {
            arbiter.stop();
        }
        drop(state_lock);
        result
    })
}

fn json_error(message: String, status: StatusCode, code: &str) -> actix_web::Error {
    let response = error_response(status, &message, code);
    actix_web::error::InternalError::from_response(message, response).into()
}

fn app(
    state: web::Data<WebState>,
    token: Arc<str>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = ServiceResponse<EitherBody<BoxBody>>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let json = web::JsonConfig::default()
        .limit(MAX_JSON_BODY)
        .error_handler(|error, _| {
            let (status, code) = match &error {
                actix_web::error::JsonPayloadError::OverflowKnownLength { .. }
                | actix_web::error::JsonPayloadError::Overflow { .. } => {
                    (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
                }
                actix_web::error::JsonPayloadError::ContentType => {
                    (StatusCode::UNSUPPORTED_MEDIA_TYPE, "bad_content_type")
                }
                _ => (StatusCode::BAD_REQUEST, "bad_json"),
            };
            json_error(format!("invalid JSON body: {error}"), status, code)
        });
    let path = web::PathConfig::default().error_handler(|error, _| {
        json_error(
            format!("invalid path: {error}"),
            StatusCode::BAD_REQUEST,
            "bad_path",
        )
    });
    let query = web::QueryConfig::default().error_handler(|error, _| {
        json_error(
            format!("invalid query: {error}"),
            StatusCode::BAD_REQUEST,
            "bad_query",
        )
    });
    App::new()
        .app_data(state)
        .app_data(json)
        .app_data(path)
        .app_data(query)
        .app_data(web::PayloadConfig::new(MAX_JSON_BODY))
        .wrap_fn(move |request, service| {
            match judge(request.request(), &token) {
                Verdict::Allowed => Either::Left({
                    let call = service.call(request);
                    async move { call.await.map(ServiceResponse::map_into_left_body) }
                }),
                verdict => {
                    let response = match verdict {
                        Verdict::ForeignOrigin => error_response(StatusCode::FORBIDDEN, "requests from another site are refused", "foreign_origin"),
                        _ => error_response(
                            StatusCode::UNAUTHORIZED,
                            "missing or wrong token: open the URL `delta serve` printed (it ends with /#token=...), or send `Authorization: Bearer <token>`",
                            "unauthorized",
                        ),
                    };
                    Either::Right(ready(Ok(request.into_response(response).map_into_right_body())))
                }
            }
        })
        // Outermost: the refusals above get the headers too.
        .wrap(policy::security_headers())
        .route("/", web::get().to(assets::index))
        .route("/assets/{file:.*}", web::get().to(assets::asset))
        .route("/api/identity", web::get().to(identity::identity))
        .route(identity::CHECK_PATH, web::get().to(identity::check))
        .route("/api/agents", web::get().to(rest::list_agents))
        .route("/api/workspaces", web::get().to(runs::workspaces))
        .route("/metrics", web::get().to(runs::metrics))
        .route("/api/runs/{run_id}/timeline", web::get().to(runs::run_timeline))
        .route("/api/runs/{run_id}/answer", web::post().to(answer::answer_run))
        .route("/api/runs/{run_id}/trace", web::get().to(inspect::trace))
        .route("/api/runs/{run_id}/calls/{iteration}", web::get().to(inspect::model_call))
        .route("/api/runs/{run_id}/tools/{action_id}", web::get().to(inspect::tool_call))
        .route("/api/orchestrations/{id}", web::get().to(inspect::orchestration))
        .route("/api/orchestrations/{id}/runs", web::get().to(inspect::orchestration_runs))
        .route("/api/orchestrations/{id}/timeline", web::get().to(inspect::orchestration_timeline))
        .route("/api/orchestrations/{id}/phases", web::get().to(inspect::orchestration_phases))
        .route("/api/sessions", web::get().to(rest::list_sessions))
        .route("/api/sessions", web::post().to(rest::create_session))
        .route("/api/sessions/{id}", web::get().to(rest::get_session))
        .route("/api/sessions/{id}", web::delete().to(rest::delete_session))
        .route("/api/sessions/{id}/restart", web::post().to(rest::restart_session))
        .route("/api/sessions/{id}/workers", web::get().to(rest::list_workers))
        .route("/api/sessions/{id}/workers", web::post().to(rest::create_worker))
        .route("/api/sessions/{id}/workers/{wid}", web::delete().to(rest::delete_worker))
        .route("/api/sessions/{id}/workers/{wid}/restart", web::post().to(rest::restart_worker))
        .route("/api/sessions/{id}/workers/{wid}/input", web::post().to(rest::worker_input))
        .route("/ws/session/{id}/worker/{wid}", web::get().to(ws::worker_socket))
        .route("/ws/dashboard", web::get().to(dashboard::dashboard_socket))
        .default_service(web::to(rest::not_found))
}
