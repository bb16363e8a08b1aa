//! `RunsWatcher`: polls the workspaces `delta serve` shows (the `-w` folders and every
//! session's folder, each with its `workspaces/W001`... that hold runs) once a second, off the arbiter, and publishes a `workspace` dashboard
//! event when a view changed. Keeps the last views for a new dashboard's full sync.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use actix::prelude::*;

use super::events::DashboardEvent;
use super::messages::ListSessions;
use super::ServeManager;
use crate::serve::runs_view::{workspace_view, WorkspaceView};
use crate::serve::session_workspaces::with_agent_workspaces;

const POLL: Duration = Duration::from_secs(1);
/// Most workspaces watched (sessions beyond it are not scanned).
pub const MAX_WORKSPACES: usize = 64;

pub struct RunsWatcher {
    pub fixed: Vec<PathBuf>,
    pub manager: Addr<ServeManager>,
    pub events: tokio::sync::broadcast::Sender<DashboardEvent>,
    views: BTreeMap<PathBuf, WorkspaceView>,
    polling: bool,
}

impl RunsWatcher {
    pub fn new(
        fixed: Vec<PathBuf>,
        manager: Addr<ServeManager>,
        events: tokio::sync::broadcast::Sender<DashboardEvent>,
    ) -> Self {
        RunsWatcher {
            fixed,
            manager,
            events,
            views: BTreeMap::new(),
            polling: false,
        }
    }

    fn poll(&mut self, ctx: &mut Context<Self>) {
        if self.polling {
            return;
        }
        self.polling = true;
        let manager = self.manager.clone();
        let fixed = self.fixed.clone();
        let scanning = async move {
            let mut paths = fixed;
            if let Ok(sessions) = manager.send(ListSessions).await {
                for session in sessions {
                    if !paths.contains(&session.location_path) {
                        paths.push(session.location_path);
                    }
                }
            }
            // An agent folder's runs are in its workspaces/W001...: listed without -w.
            let mut paths = tokio::task::spawn_blocking(move || with_agent_workspaces(paths))
                .await
                .unwrap_or_default();
            paths.truncate(MAX_WORKSPACES);
            tokio::task::spawn_blocking(move || {
                paths.iter().map(|p| workspace_view(p)).collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default()
        };
        ctx.spawn(scanning.into_actor(self).map(|views, watcher, _| {
            watcher.polling = false;
            let mut fresh = BTreeMap::new();
            for view in views {
                if watcher.views.get(&view.path) != Some(&view) {
                    let _ = watcher.events.send(DashboardEvent::Workspace {
                        workspace: view.clone(),
                    });
                }
                fresh.insert(view.path.clone(), view);
            }
            watcher.views = fresh;
        }));
    }
}

impl Actor for RunsWatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.poll(ctx);
        ctx.run_interval(POLL, |watcher, ctx| watcher.poll(ctx));
    }
}

/// The workspaces as last seen.
#[derive(Message)]
#[rtype(result = "Vec<WorkspaceView>")]
pub struct Views;

impl Handler<Views> for RunsWatcher {
    type Result = MessageResult<Views>;
    fn handle(&mut self, _: Views, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.views.values().cloned().collect())
    }
}

/// Whether `path` is one of the workspaces the page may read.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct IsWatched(pub PathBuf);

impl Handler<IsWatched> for RunsWatcher {
    type Result = bool;
    fn handle(&mut self, IsWatched(path): IsWatched, _: &mut Self::Context) -> bool {
        self.fixed.contains(&path) || self.views.contains_key(&path)
    }
}
