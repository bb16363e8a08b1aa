//! `SessionActor`: one actor per file-backed shell session. Its mailbox serialises execs of
//! that session inside this process (each exec is an `AtomicResponse`, so the next message
//! waits until the running exec finished); execs on different sessions are different actors
//! and run concurrently. The domain (`crate::session::shell`) does the work, including the
//! advisory lock that serialises separate processes.
//!
//! The embedder handle around these actors is [`crate::api::SessionManager`].
//!
//! Must not block an arbiter: process waits are async and the lock is taken on a blocking
//! thread by the domain.

use actix::prelude::*;

use crate::session::error::SessionError;
use crate::session::shell::{ExecOptions, ExecOutcome, ShellMetadata, ShellSession};

/// Owns one shell session.
pub struct SessionActor {
    session: ShellSession,
}

impl SessionActor {
    pub fn new(session: ShellSession) -> Self {
        SessionActor { session }
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;
}

/// Run one command in the session.
#[derive(Message)]
#[rtype(result = "Result<ExecOutcome, SessionError>")]
pub struct ExecCommand {
    pub command: String,
    pub options: ExecOptions,
}

impl Handler<ExecCommand> for SessionActor {
    type Result = AtomicResponse<Self, Result<ExecOutcome, SessionError>>;

    fn handle(&mut self, msg: ExecCommand, _ctx: &mut Context<Self>) -> Self::Result {
        let session = self.session.clone();
        let exec = async move { session.exec(&msg.command, msg.options).await };
        AtomicResponse::new(Box::pin(exec.into_actor(self)))
    }
}

/// Mark the session terminated once queued execs are done.
#[derive(Message)]
#[rtype(result = "Result<ShellMetadata, SessionError>")]
pub struct EndSession;

impl Handler<EndSession> for SessionActor {
    type Result = AtomicResponse<Self, Result<ShellMetadata, SessionError>>;

    fn handle(&mut self, _msg: EndSession, _ctx: &mut Context<Self>) -> Self::Result {
        let session = self.session.clone();
        let end = async move { session.end().await };
        AtomicResponse::new(Box::pin(end.into_actor(self)))
    }
}
