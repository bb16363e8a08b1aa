//! runtime::serve — every actor of `delta serve`, in one place. The domain they call (the
//! session/worker model, `sessions.json`, the runs and batch views, the inspector) is
//! `crate::serve`; the entry point an embedder or the binary calls is `api::serve`. This is
//! the same split as a run's: `run/` (the loop), `runtime/run` (its actor), `api`.
//!
//! - [`manager`]: `ServeManager`, the one owner of sessions and workers, and the requests it
//!   takes ([`manager::messages`]); starting and stopping a worker's holder process
//!   ([`manager::process`]); the dashboard feed ([`manager::events`]).
//! - [`worker`]: `WorkerActor`, one per worker and epoch: the holder's output, the screen,
//!   the viewers, and the link to the holder (`session::pty::protocol` frames).
//! - [`watcher`]: `RunsWatcher`, the views of the workspaces the server shows.
//! - [`web`]: the actix-web routes and WebSockets, which only translate between HTTP and the
//!   messages of the three actors above, and [`web::run_server`], which owns the System.
//!
//! Must not: be imported by anything outside `runtime::serve` but `api::serve` (the relay
//! shares only `crate::token` with it).

pub mod manager;
pub mod watcher;
pub mod web;
pub mod worker;

pub use manager::{events, messages, ManagerConfig, ServeManager};
