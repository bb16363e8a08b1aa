//! `RunsWatcher`: keeps the views of the workspaces `delta serve` shows (the `-w` folders and
//! every session's folder, each with its `workspaces/W001`... that hold runs), scanned once a
//! second, and publishes a `workspace` dashboard
//! event when a view changed. Keeps the last views for a new dashboard's full sync.
//!
//! Each workspace keeps its [`WorkspaceScan`] (which re-reads only what changed) and is
//! scanned on a detached thread of its own, given [`SCAN_DEADLINE`]: a workspace on a file
//! system that stops answering shows its last view with an error saying so, the others go
//! on, and it is not scanned again until that scan returns. Neither the watcher nor the
//! server's exit waits for a stuck scan.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::prelude::*;

use super::events::DashboardEvent;
use super::messages::ListSessions;
use super::ServeManager;
use crate::blocking::run_detached;
use crate::serve::runs_view::WorkspaceView;
use crate::serve::session_workspaces::with_agent_workspaces;
use crate::serve::workspace_scan::WorkspaceScan;

const POLL: Duration = Duration::from_secs(1);
/// How long one workspace's scan may take before its view says so.
pub const SCAN_DEADLINE: Duration = Duration::from_secs(5);
/// Most workspaces watched (sessions beyond it are not scanned).
pub const MAX_WORKSPACES: usize = 64;

/// One watched workspace: its scan, and whether a scan of it is still running.
#[derive(Clone)]
struct Watched {
    scan: Arc<Mutex<WorkspaceScan>>,
    busy: Arc<AtomicBool>,
}

impl Watched {
    fn new(path: &std::path::Path) -> Watched {
        Watched {
            scan: Arc::new(Mutex::new(WorkspaceScan::new(path))),
            busy: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The view now, or `None` when the scan did not end within [`SCAN_DEADLINE`] (or the
    /// previous one is still running).
    async fn view(self) -> Option<WorkspaceView> {
        if self.busy.swap(true, Ordering::AcqRel) {
            return None;
        }
        let busy = self.busy.clone();
        let scan = self.scan;
        run_detached(
            "delta-serve-scan",
            move || {
                let view = scan.lock().unwrap_or_else(PoisonError::into_inner).scan();
                busy.store(false, Ordering::Release);
                view
            },
            SCAN_DEADLINE,
        )
        .await
    }
}

/// The view shown for a workspace whose scan did not end in time: the last one seen, with
/// an error saying why it is not fresh.
fn late_view(path: PathBuf, last: Option<&WorkspaceView>) -> WorkspaceView {
    let mut view = last.cloned().unwrap_or_else(|| WorkspaceView::empty(&path));
    view.error = Some(format!(
        "reading this workspace took longer than {} s (a file system that does not answer?); \
         showing what was read before, and reading it again once that read ends",
        SCAN_DEADLINE.as_secs()
    ));
    view
}

pub struct RunsWatcher {
    /// Workspaces given on the command line, always watched. Set in `new`; read only.
    pub fixed: Vec<PathBuf>,
    /// The manager asked for the sessions' workspaces at each poll.
    pub manager: Addr<ServeManager>,
    /// Where changed workspace views are announced to the pages; only sent on.
    pub events: tokio::sync::broadcast::Sender<DashboardEvent>,
    /// The last scan of each watched workspace; replaced when a scan finishes.
    views: BTreeMap<PathBuf, WorkspaceView>,
    /// Workspaces being watched, with their scan state; pruned at each poll to the current set.
    watched: BTreeMap<PathBuf, Watched>,
    /// A poll is under way (set when one starts, cleared when it ends): polls never overlap.
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
            watched: BTreeMap::new(),
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
        let listing = async move {
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
            paths
        };
        ctx.spawn(
            listing
                .into_actor(self)
                .then(|paths, watcher, _| {
                    watcher.watched.retain(|path, _| paths.contains(path));
                    let scans: Vec<_> = paths
                        .into_iter()
                        .map(|path| {
                            let watched = watcher
                                .watched
                                .entry(path.clone())
                                .or_insert_with(|| Watched::new(&path))
                                .clone();
                            async move { (path, watched.view().await) }
                        })
                        .collect();
                    futures_util::future::join_all(scans).into_actor(watcher)
                })
                .map(|scanned, watcher, _| {
                    watcher.polling = false;
                    let mut fresh = BTreeMap::new();
                    for (path, view) in scanned {
                        let view = view
                            .unwrap_or_else(|| late_view(path.clone(), watcher.views.get(&path)));
                        if watcher.views.get(&view.path) != Some(&view) {
                            let _ = watcher.events.send(DashboardEvent::Workspace {
                                workspace: view.clone(),
                            });
                        }
                        fresh.insert(view.path.clone(), view);
                    }
                    watcher.views = fresh;
                }),
        );
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

/// The metrics of the workspaces as last seen (`GET /metrics`), written where the views
/// are, so a scrape copies none of them.
#[derive(Message)]
#[rtype(result = "String")]
pub struct MetricsText;

impl Handler<MetricsText> for RunsWatcher {
    type Result = String;
    fn handle(&mut self, _: MetricsText, _: &mut Self::Context) -> String {
        let views: Vec<&WorkspaceView> = self.views.values().collect();
        crate::telemetry::serve_metrics::serve_metrics_of(&views)
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
