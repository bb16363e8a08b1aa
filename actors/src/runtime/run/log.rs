//! `engine.log`: the run's own diagnostic log, one timestamped line per engine decision
//! (start, iterations, retries, errors, end). Opened lazily in append mode; a log that cannot
//! be written is silently skipped — diagnostics must never fail a run.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use crate::workspace::now_rfc3339;

pub struct EngineLog {
    path: PathBuf,
    file: Option<File>,
}

impl EngineLog {
    pub fn new(path: PathBuf) -> Self {
        EngineLog { path, file: None }
    }

    pub fn line(&mut self, message: &str) {
        tracing::debug!(target: "delta::run", "{message}");
        if self.file.is_none() {
            self.file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .ok();
        }
        if let Some(file) = self.file.as_mut() {
            let _ = file.write_all(format!("[{}] {message}\n", now_rfc3339()).as_bytes());
        }
    }
}
