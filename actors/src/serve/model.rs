//! Sessions and workers as the API shows them and `sessions.json` stores them (camelCase, the
//! spec's field names), plus id rules. A session is a working folder holding workers; a worker
//! is a program in a PTY (an agent CLI or a plain terminal). No I/O here.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::activity::ActivityState;
use super::error::ServeError;

/// Longest session or worker id.
pub const MAX_ID_LEN: usize = 64;
/// Longest worker name.
pub const MAX_NAME_LEN: usize = 100;
/// Longest `repositoryId` / `worktreeId`, in characters (a worktree id may be a path).
pub const MAX_REFERENCE_LEN: usize = 256;
/// Most sessions a server keeps.
pub const MAX_SESSIONS: usize = 256;
/// Most workers in one session.
pub const MAX_WORKERS_PER_SESSION: usize = 64;

/// Ids become path segments and holder names: 1-64 of `[A-Za-z0-9_-]`, not starting with `-`.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub fn check_id(what: &'static str, id: &str) -> Result<(), ServeError> {
    if is_valid_id(id) {
        Ok(())
    } else {
        Err(ServeError::InvalidId {
            what,
            value: id.chars().take(80).collect(),
            hint: "ids are 1-64 letters, digits, `-` or `_`",
        })
    }
}

/// A fresh id: `prefix` and 12 hex digits.
pub fn new_id(prefix: &str) -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &hex[..12])
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SessionType {
    /// Tied only to a folder.
    Quick,
    /// Tied to a registered repository and one of its worktrees.
    Worktree {
        #[serde(rename = "repositoryId")]
        repository_id: String,
        #[serde(rename = "worktreeId")]
        worktree_id: String,
    },
}

impl SessionType {
    /// Refuses what a request may not name: an empty or overlong repository or worktree id
    /// (each is stored in `sessions.json` and sent to every dashboard).
    pub fn check(&self) -> Result<(), ServeError> {
        let SessionType::Worktree {
            repository_id,
            worktree_id,
        } = self
        else {
            return Ok(());
        };
        for (key, value) in [("repositoryId", repository_id), ("worktreeId", worktree_id)] {
            if value.is_empty() {
                return Err(ServeError::BadRequest(format!("{key} must not be empty")));
            }
            if value.chars().count() > MAX_REFERENCE_LEN {
                return Err(ServeError::BadRequest(format!(
                    "{key} is longer than {MAX_REFERENCE_LEN} characters"
                )));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// At least one worker's program is running.
    Active,
    Inactive,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: String,
    #[serde(flatten)]
    pub kind: SessionType,
    pub location_path: PathBuf,
    pub status: SessionStatus,
    pub created_at: String,
    /// The server process that last owned the session (for humans; liveness is the holder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_pid: Option<u32>,
    pub workers: Vec<Worker>,
}

impl Session {
    pub fn worker(&self, id: &str) -> Option<&Worker> {
        self.workers.iter().find(|w| w.id == id)
    }

    pub fn worker_mut(&mut self, id: &str) -> Option<&mut Worker> {
        self.workers.iter_mut().find(|w| w.id == id)
    }
}

/// What a worker runs. New kinds (diff, markdown, ...) are new variants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
#[non_exhaustive]
pub enum WorkerKind {
    Agent {
        #[serde(rename = "agentId")]
        agent_id: String,
    },
    Terminal,
}

/// Where a worker's PTY lives: the `delta-sessions-pty` holder that survives the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HolderRef {
    /// The PTY session id (`sess_<hex>`) under the server's `pty/` folder.
    pub pty_session_id: String,
    pub holder_pid: u32,
    /// The socket the holder listens on.
    pub socket: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Worker {
    pub id: String,
    pub name: String,
    pub created_at: String,
    #[serde(flatten)]
    pub kind: WorkerKind,
    /// Incarnation: 1 for the first program, +1 each time it is restarted or revived. Output
    /// offsets count from 0 within an epoch.
    #[serde(default)]
    pub epoch: u32,
    /// The program's pid, which is also its process group (it leads its own session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderRef>,
    /// Set once the program has exited (a finished worker is not revived on start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub activity: ActivityState,
}

impl Worker {
    pub fn new(id: String, name: String, kind: WorkerKind) -> Worker {
        Worker {
            id,
            name,
            created_at: crate::clock::now_rfc3339(),
            kind,
            epoch: 0,
            pid: None,
            holder: None,
            exit_code: None,
            activity: ActivityState::Unknown,
        }
    }

    pub fn agent_id(&self) -> Option<&str> {
        match &self.kind {
            WorkerKind::Agent { agent_id } => Some(agent_id),
            _ => None,
        }
    }

    pub fn is_running(&self) -> bool {
        self.holder.is_some() && self.exit_code.is_none()
    }
}

/// `POST /api/sessions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionRequest {
    #[serde(flatten)]
    pub kind: SessionType,
    pub location_path: PathBuf,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub continue_conversation: bool,
    /// Open a session on a folder that has one already (otherwise refused, 409).
    #[serde(default)]
    pub allow_duplicate: bool,
}

/// `POST /api/sessions/:id/workers`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateWorkerRequest {
    #[serde(flatten)]
    pub kind: WorkerKind,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub continue_conversation: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_become_paths_outside_their_folder_are_refused() {
        for bad in ["", "..", "a/b", "../x", "-rf", "a b", "é", &"x".repeat(65)] {
            assert!(!is_valid_id(bad), "{bad}");
        }
        for good in ["s-0123456789ab", "session-abc-123", "worker_1", "A"] {
            assert!(is_valid_id(good), "{good}");
        }
        assert!(is_valid_id(&new_id("w")));
    }

    #[test]
    fn sessions_serialize_with_the_spec_field_names() {
        let mut session = Session {
            id: "s-1".into(),
            kind: SessionType::Worktree {
                repository_id: "repo-1".into(),
                worktree_id: "wt".into(),
            },
            location_path: "/tmp".into(),
            status: SessionStatus::Active,
            created_at: "2025-01-01T00:00:00.000Z".into(),
            server_pid: None,
            workers: vec![],
        };
        session.workers.push(Worker::new(
            "w-1".into(),
            "Claude".into(),
            WorkerKind::Agent {
                agent_id: "shell".into(),
            },
        ));
        let json = serde_json::to_value(&session).unwrap();
        assert_eq!(json["type"], "worktree");
        assert_eq!(json["repositoryId"], "repo-1");
        assert_eq!(json["locationPath"], "/tmp");
        assert_eq!(json["workers"][0]["type"], "agent");
        assert_eq!(json["workers"][0]["agentId"], "shell");
        let back: Session = serde_json::from_value(json).unwrap();
        assert_eq!(back, session);
    }

    /// Regression (issue 24 item 15): `repositoryId` and `worktreeId` had no length limit.
    #[test]
    fn repository_and_worktree_ids_are_capped_like_names() {
        let worktree = |repository: &str, worktree: &str| SessionType::Worktree {
            repository_id: repository.into(),
            worktree_id: worktree.into(),
        };
        let long = "é".repeat(MAX_REFERENCE_LEN + 1);
        let fits = "é".repeat(MAX_REFERENCE_LEN);
        assert!(worktree(&fits, &fits).check().is_ok());
        assert!(SessionType::Quick.check().is_ok());
        for (kind, key) in [
            (worktree(&long, "wt"), "repositoryId is longer than 256"),
            (worktree("repo", &long), "worktreeId is longer than 256"),
            (worktree("", "wt"), "repositoryId must not be empty"),
        ] {
            let err = kind.check().unwrap_err();
            assert_eq!(err.code(), "bad_request");
            assert!(err.to_string().contains(key), "{err}");
        }
    }

    #[test]
    fn worker_requests_parse_both_kinds() {
        let agent: CreateWorkerRequest =
            serde_json::from_str(r#"{"type":"agent","agentId":"shell","name":"A"}"#).unwrap();
        assert_eq!(
            agent.kind,
            WorkerKind::Agent {
                agent_id: "shell".into()
            }
        );
        let terminal: CreateWorkerRequest = serde_json::from_str(r#"{"type":"terminal"}"#).unwrap();
        assert_eq!(terminal.kind, WorkerKind::Terminal);
        assert!(serde_json::from_str::<CreateWorkerRequest>(r#"{"type":"nope"}"#).is_err());
    }
}
