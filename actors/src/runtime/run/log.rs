//! `engine.log`: the run's own diagnostic log, one timestamped line per engine decision
//! (start, iterations, retries, errors, end), with sensitive answers redacted (also in the
//! `tracing` copy). A log that cannot be written is silently skipped — diagnostics must
//! never fail a run.
//!
//! Each line opens, appends and closes: a run writes only a handful of lines, while a
//! descriptor held for the run's whole life would be copied and closed by every tool spawn
//! of every other run in the process (spawn cost grows with the engine's open descriptors).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;

use crate::redact::Redactor;
use crate::workspace::now_rfc3339;

pub struct EngineLog {
    path: PathBuf,
    secrets: Redactor,
}

impl EngineLog {
    pub fn new(path: PathBuf, secrets: Redactor) -> Self {
        EngineLog { path, secrets }
    }

    pub fn line(&mut self, message: &str) {
        let secrets = self.secrets.snapshot();
        let message = secrets.redact(message);
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
