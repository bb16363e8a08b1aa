//! [`SessionManager`]: the handle on shell sessions that embedders and the `delta-sessions`
//! CLI use. It owns a small actix System on its own thread (one `SessionActor` per session,
//! serialising that session's execs), so it can be called from any tokio runtime or (with a
//! runtime of your own) from sync code; no actix type crosses it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), delta_actors::session::SessionError> {
//! use delta_actors::api::SessionManager;
//! use delta_actors::session::shell::{ExecOptions, ShellConfig, StartOptions};
//! let manager = SessionManager::new(ShellConfig::new("/tmp/ws/.sessions"))?;
//! let session = manager.start_session(&StartOptions::from_current_process(None)?)?;
//! let out = manager.exec(&session.session_id, "cd /tmp && export A=1", ExecOptions::default()).await?;
//! let out = manager.exec(&session.session_id, "pwd; echo $A", ExecOptions::default()).await?;
//! manager.end(&session.session_id).await?;
//! # Ok(()) }
//! ```

use std::sync::mpsc;
use std::thread::JoinHandle;

use actix::prelude::*;
use dashmap::DashMap;

use crate::runtime::session::{EndSession, ExecCommand, SessionActor};
use crate::session::error::SessionError;
use crate::session::shell::{
    CleanupReport, ExecOptions, ExecOutcome, ShellConfig, ShellMetadata, ShellSessions,
    StartOptions,
};

/// The embedder handle for shell sessions of one sessions folder.
pub struct SessionManager {
    sessions: ShellSessions,
    arbiter: ArbiterHandle,
    system: System,
    thread: Option<JoinHandle<()>>,
    actors: DashMap<String, Addr<SessionActor>>,
}

impl SessionManager {
    /// Starts the session runtime (one thread) for `config.sessions_dir`.
    pub fn new(config: ShellConfig) -> Result<Self, SessionError> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("delta-sessions".into())
            .spawn(move || {
                let runner = System::new();
                runner.block_on(async {
                    let _ = tx.send((System::current(), Arbiter::current()));
                });
                let _ = runner.run();
            })
            .map_err(|e| runtime_gone("-", e.to_string()))?;
        let (system, arbiter) = rx.recv().map_err(|e| runtime_gone("-", e.to_string()))?;
        Ok(SessionManager {
            sessions: ShellSessions::new(config),
            arbiter,
            system,
            thread: Some(thread),
            actors: DashMap::new(),
        })
    }

    /// The folder-level operations (list, status, cleanup) without going through an actor.
    pub fn sessions(&self) -> &ShellSessions {
        &self.sessions
    }

    /// Creates a session; `StartOptions::from_current_process` fills cwd and environment.
    pub fn start_session(&self, options: &StartOptions) -> Result<ShellMetadata, SessionError> {
        self.sessions.start(options)
    }

    /// Runs `command` in session `id`; execs on one session never interleave.
    pub async fn exec(
        &self,
        id: &str,
        command: &str,
        options: ExecOptions,
    ) -> Result<ExecOutcome, SessionError> {
        let actor = self.actor(id)?;
        let message = ExecCommand {
            command: command.to_string(),
            options,
        };
        actor
            .send(message)
            .await
            .map_err(|e| runtime_gone(id, e.to_string()))?
    }

    /// Ends session `id` after any exec already queued for it.
    pub async fn end(&self, id: &str) -> Result<ShellMetadata, SessionError> {
        let actor = self.actor(id)?;
        let ended = actor
            .send(EndSession)
            .await
            .map_err(|e| runtime_gone(id, e.to_string()))?;
        self.actors.remove(id);
        ended
    }

    /// Every session of the folder.
    pub fn list(&self) -> Result<Vec<ShellMetadata>, SessionError> {
        self.sessions.list()
    }

    /// Metadata and whether an exec is running right now.
    pub fn status(&self, id: &str) -> Result<(ShellMetadata, bool), SessionError> {
        self.sessions.status(id)
    }

    /// Removes the folders of sessions that ended (or whose process is gone).
    pub fn cleanup(&self) -> Result<CleanupReport, SessionError> {
        self.sessions.cleanup()
    }

    fn actor(&self, id: &str) -> Result<Addr<SessionActor>, SessionError> {
        let cached = self.actors.get(id).map(|addr| addr.clone());
        if let Some(addr) = cached {
            if addr.connected() {
                return Ok(addr);
            }
            self.actors.remove(id);
        }
        let session = self.sessions.open(id)?;
        let addr = self
            .actors
            .entry(id.to_string())
            .or_insert_with(|| {
                SessionActor::start_in_arbiter(&self.arbiter, move |_| SessionActor::new(session))
            })
            .clone();
        Ok(addr)
    }
}

impl Drop for SessionManager {
    fn drop(&mut self) {
        self.actors.clear();
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn runtime_gone(id: &str, reason: String) -> SessionError {
    SessionError::RuntimeGone {
        id: id.to_string(),
        reason,
    }
}
