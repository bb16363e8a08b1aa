//! `engine.log`: the run's own diagnostic log, one timestamped line per engine decision
//! (start, iterations, retries, errors, end). A log that cannot be written is silently
//! skipped — diagnostics must never fail a run.
//!
//! Each line opens, appends and closes: a run writes only a handful of lines, while a
//! descriptor held for the run's whole life would be copied and closed by every tool spawn
//! of every other run in the process (spawn cost grows with the engine's open descriptors).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;

use crate::workspace::now_rfc3339;

pub struct EngineLog {
    path: PathBuf,
}

impl EngineLog {
    pub fn new(path: PathBuf) -> Self {
        EngineLog { path }
    }

    pub fn line(&mut self, message: &str) {
        tracing::debug!(target: "delta::run", "{message}");
        if let Ok(mut file) = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            let _ = file.write_all(format!("[{}] {message}\n", now_rfc3339()).as_bytes());
        }
    }
}
