//! Dashboard events: the server-wide feed behind `GET /ws/dashboard` (session and worker
//! lifecycle, activity, runs and orchestrations). A tokio broadcast channel carries them; a
//! subscriber that falls behind gets a full sync instead of the missed events.

use serde::Serialize;

use crate::serve::activity::{ActivitySource, ActivityState};
use crate::serve::model::{Session, Worker};
use crate::serve::runs_view::WorkspaceView;

/// Bumped when a dashboard message changes incompatibly.
pub const DASHBOARD_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum DashboardEvent {
    #[serde(rename_all = "camelCase")]
    SessionCreated { session: Session },
    #[serde(rename_all = "camelCase")]
    SessionDeleted { session_id: String },
    #[serde(rename_all = "camelCase")]
    WorkerCreated { session_id: String, worker: Worker },
    #[serde(rename_all = "camelCase")]
    WorkerRestarted { session_id: String, worker: Worker },
    #[serde(rename_all = "camelCase")]
    WorkerDeleted {
        session_id: String,
        worker_id: String,
    },
    #[serde(rename_all = "camelCase")]
    WorkerExited {
        session_id: String,
        worker_id: String,
        exit_code: Option<i32>,
    },
    #[serde(rename_all = "camelCase")]
    WorkerActivity {
        session_id: String,
        worker_id: String,
        state: ActivityState,
        source: ActivitySource,
    },
    /// The runs and orchestrations of one workspace changed.
    Workspace { workspace: WorkspaceView },
}

/// The first dashboard frame, and the one a lagging subscriber gets again.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DashboardSync {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub schema_version: u32,
    pub sessions: Vec<Session>,
    pub workspaces: Vec<WorkspaceView>,
}

impl DashboardSync {
    pub fn new(sessions: Vec<Session>, workspaces: Vec<WorkspaceView>) -> Self {
        DashboardSync {
            kind: "sync",
            schema_version: DASHBOARD_SCHEMA_VERSION,
            sessions,
            workspaces,
        }
    }
}
