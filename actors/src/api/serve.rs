//! The `delta serve` entry point for the CLI and embedders: [`run`] starts the session/worker
//! server (REST, WebSocket, the page) with resolved [`ServeOptions`] and blocks until it is
//! stopped; its PTY workers live in holder processes that outlive it. No actix type crosses
//! this module.

pub use crate::runtime::serve::web::{run_server as run, ServeOptions, ServeReady};
pub use crate::serve::session_path::PathContext;
pub use crate::serve::ServeError;

/// A fresh random bearer token for the server (when the user gives none).
pub fn new_token() -> String {
    crate::token::new_token()
}
