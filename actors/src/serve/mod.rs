//! The session/worker server's domain (`delta serve`): sessions and workers ([`model`]), their
//! persistence and the migration of the old `sessions.json` ([`store`]), agent definitions
//! ([`agents`]), a worker's output log tail and terminal screen ([`screen`]), activity
//! detection ([`activity`]), the runs/orchestrations views ([`runs_view`], kept between
//! scans by [`workspace_scan`]; one orchestration's batch view [`batch_view`]; a run's trace
//! [`inspector`] and its calls [`calls`], read through [`bounded_file`]; which folders are
//! scanned [`session_workspaces`]) and the lock that keeps one server per state folder
//! ([`state_lock`]).
//!
//! Must not: import actix or actix-web, open sockets, spawn processes, print. The actors and
//! the HTTP/WebSocket layer live in `runtime::serve`; the entry point is `api::serve`.

pub mod activity;
pub mod agents;
pub mod batch_view;
pub mod bounded_file;
pub mod calls;
pub mod error;
pub mod inspector;
pub mod model;
pub mod revival;
pub mod runs_view;
pub mod screen;
pub mod session_path;
pub mod session_workspaces;
pub mod state_lock;
pub mod store;
pub mod workspace_scan;

pub use error::{ErrorClass, ServeError};
