//! The session/worker server's domain (`delta serve`): sessions and workers ([`model`]), their
//! persistence and the migration of the old `sessions.json` ([`store`]), agent definitions
//! ([`agents`]), a worker's output log tail and terminal screen ([`screen`]), activity
//! detection ([`activity`]), the runs/orchestrations views ([`runs_view`], kept between
//! scans by [`workspace_scan`]; one orchestration's batch view: its index [`batch_view`], the
//! page's answers from its rows [`batch_rows`], the indexes kept [`batch_cache`]; a run's
//! trace [`inspector`], made by [`trace_builder`] of [`trace`] items, and its calls
//! [`calls`]; a run's files read through [`run_files`] and [`bounded_file`]; which folders are
//! scanned [`session_workspaces`]), answering a waiting run ([`answer`]) and the lock that
//! keeps one server per state folder ([`state_lock`]).
//!
//! Runs are read through the engine's typed readers: journals as
//! [`crate::journal::JournalEvent`]s ([`crate::journal::read_journal_tail`],
//! [`crate::journal::JournalLines`]), records as [`crate::metadata::RunMetadata`]
//! ([`crate::metadata::read_metadata_lenient`]); no view describes either format again.
//!
//! Must not: import actix or actix-web, open sockets, spawn processes, print. The actors and
//! the HTTP/WebSocket layer live in `runtime::serve`; the entry point is `api::serve`.

pub mod activity;
pub mod agents;
pub mod answer;
pub mod batch_cache;
pub mod batch_rows;
pub mod batch_view;
pub mod bounded_file;
pub mod calls;
pub mod error;
pub mod inspector;
pub mod model;
pub mod revival;
pub mod run_files;
pub mod runs_view;
pub mod screen;
pub mod session_path;
pub mod session_workspaces;
pub mod state_lock;
pub mod store;
pub mod trace;
mod trace_builder;
mod trace_compaction;
pub mod workspace_scan;

pub use error::{ErrorClass, ServeError};
