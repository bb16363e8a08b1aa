//! What a worker sends: the server → viewer WebSocket messages (JSON, `type`-tagged, the
//! spec's names plus offsets and epochs), and the notices a worker gives its manager.

use actix::Message;
use serde::Serialize;

use crate::serve::activity::{ActivitySource, ActivityState};
use crate::serve::screen::SnapshotKind;

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ServerMessage<'a> {
    /// The snapshot every attach starts with; `offset` is where the next `output` starts.
    History {
        data: &'a str,
        offset: u64,
        epoch: u32,
        kind: SnapshotKind,
    },
    /// Bytes `[offset, end)` of the epoch's log.
    Output {
        data: &'a str,
        offset: u64,
        end: u64,
        epoch: u32,
    },
    #[serde(rename_all = "camelCase")]
    Exit {
        exit_code: Option<i32>,
        signal: Option<&'a str>,
        epoch: u32,
    },
    Activity {
        state: ActivityState,
        source: ActivitySource,
    },
    /// A client message was refused.
    Error { error: &'a str, code: &'a str },
}

#[derive(Debug, Clone)]
pub enum WorkerNoticeKind {
    Activity {
        state: ActivityState,
        source: ActivitySource,
    },
    Exited {
        exit_code: Option<i32>,
    },
    /// The holder does not answer: it was killed or the machine rebooted.
    HolderLost,
}

#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct WorkerNotice {
    pub session_id: String,
    pub worker_id: String,
    pub epoch: u32,
    pub kind: WorkerNoticeKind,
}
