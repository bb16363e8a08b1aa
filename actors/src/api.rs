//! The public handle: `Supervisor` owns the actix System and admits runs.

use serde::{Deserialize, Serialize};

/// A request to start or continue one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRequest {}

/// The outcome of one run (RunResult schema 2.0).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {}

/// Handle on the engine.
pub struct Supervisor {}
