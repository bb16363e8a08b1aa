//! `ToolActor`: one actor per tool call. It runs the call's job ([`crate::tool::job::execute`]:
//! own process group, timeout, output caps, killed as a group on cancel, the audit record) and
//! answers with the result the run records; it stops after answering.
//!
//! Must not: touch the journal (the run records results in reply order).

use actix::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::tool::job::{execute, ToolExecution, ToolJob};

/// Run the job; the actor stops after answering.
#[derive(Message)]
#[rtype(result = "ToolExecution")]
pub struct Execute {
    pub job: ToolJob,
    pub cancel: CancellationToken,
}

#[derive(Default)]
pub struct ToolActor;

impl Actor for ToolActor {
    type Context = Context<Self>;
}

impl Handler<Execute> for ToolActor {
    type Result = ResponseActFuture<Self, ToolExecution>;

    fn handle(&mut self, msg: Execute, _ctx: &mut Self::Context) -> Self::Result {
        Box::pin(
            execute(msg.job, msg.cancel)
                .into_actor(self)
                .map(|execution, _act, ctx| {
                    ctx.stop();
                    execution
                }),
        )
    }
}
