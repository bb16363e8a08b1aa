//! `JanitorActor`: runs the janitor's sweep (see `crate::janitor`) over a set of workspaces
//! periodically inside long-lived supervisors, off the arbiter thread, and reports what it
//! changed through the engine's tracing log.

use std::path::PathBuf;
use std::time::Duration;

use actix::prelude::*;

use crate::janitor::{sweep_workspace, JanitorAction};

/// Sweep now; replies with what was done.
#[derive(Message)]
#[rtype(result = "Vec<JanitorAction>")]
pub struct Sweep;

/// Stop sweeping (the owner is done with the workspaces).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopJanitor;

pub struct JanitorActor {
    workspaces: Vec<PathBuf>,
    every: Option<Duration>,
}

impl JanitorActor {
    pub fn new(workspaces: Vec<PathBuf>, every: Option<Duration>) -> Self {
        JanitorActor { workspaces, every }
    }
}

impl Actor for JanitorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(every) = self.every {
            ctx.run_interval(every, |act, _ctx| {
                let workspaces = act.workspaces.clone();
                actix::spawn(async move {
                    let _ = tokio::task::spawn_blocking(move || sweep_all(&workspaces)).await;
                });
            });
        }
    }
}

impl Handler<Sweep> for JanitorActor {
    type Result = ResponseFuture<Vec<JanitorAction>>;

    fn handle(&mut self, _msg: Sweep, _ctx: &mut Self::Context) -> Self::Result {
        let workspaces = self.workspaces.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || sweep_all(&workspaces))
                .await
                .unwrap_or_default()
        })
    }
}

fn sweep_all(workspaces: &[PathBuf]) -> Vec<JanitorAction> {
    let mut all = Vec::new();
    for w in workspaces {
        for action in sweep_workspace(w, false) {
            tracing::info!(target: "delta::janitor", ?action, "janitor");
            all.push(action);
        }
    }
    all
}

impl Handler<StopJanitor> for JanitorActor {
    type Result = ();

    fn handle(&mut self, _msg: StopJanitor, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
