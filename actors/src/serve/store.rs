//! `sessions.json`: every session and worker (with the holder that keeps its PTY), replaced
//! atomically (temp file + rename, 0600, in a 0700 folder) after each change. Loading migrates
//! the old one-agent-per-session format of the spec's migration section and keeps the
//! original beside it (`sessions.json.pre-migration`). Knows nothing about processes.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::ServeError;
use super::model::{check_id, Session, SessionStatus, SessionType, Worker, WorkerKind};
use crate::bounded_read::{self, Links};
use crate::session::files::{create_private_dir, replace_private};

pub const SESSIONS_FILE: &str = "sessions.json";
pub const MIGRATION_BACKUP: &str = "sessions.json.pre-migration";
/// The agent the old format's single worker ran.
pub const LEGACY_AGENT_ID: &str = "claude-code-builtin";

/// What [`SessionStore::load`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    pub sessions: Vec<Session>,
    /// Where the original was kept when old-format entries were migrated.
    pub migrated_backup: Option<PathBuf>,
}

/// The server's state folder.
#[derive(Debug, Clone)]
pub struct SessionStore {
    dir: PathBuf,
}

impl SessionStore {
    /// Creates `dir` (0700) if needed.
    pub fn open(dir: &Path) -> Result<SessionStore, ServeError> {
        create_private_dir(dir).map_err(|e| ServeError::Config {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(SessionStore {
            dir: dir.to_path_buf(),
        })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(SESSIONS_FILE)
    }

    /// Reads `sessions.json` (none yet: no sessions), migrating old-format entries.
    pub fn load(&self) -> Result<Loaded, ServeError> {
        let path = self.path();
        // Within bounds: a FIFO or a link to /dev/zero here hung the server's start.
        let bytes = match bounded_read::read(&path, bounded_read::RECORD, Links::Refuse) {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => return Ok(Loaded::default()),
            Err(e) => return Err(ServeError::io("cannot read", &path, e.into())),
        };
        let corrupt = |reason: String| ServeError::Config {
            path: path.clone(),
            reason: format!(
                "{reason}; fix or move the file away (the server starts empty without it)"
            ),
        };
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not valid JSON: {e}")))?;
        let Value::Array(entries) = value else {
            return Err(corrupt("expected a JSON array of sessions".into()));
        };
        let mut sessions = Vec::with_capacity(entries.len());
        let mut migrated = false;
        for (index, entry) in entries.into_iter().enumerate() {
            let session = if is_old_format(&entry) {
                migrated = true;
                migrate_session(&entry)
            } else {
                serde_json::from_value::<Session>(entry).map_err(|e| e.to_string())
            }
            .map_err(|reason| corrupt(format!("session #{index}: {reason}")))?;
            check_session_ids(&session).map_err(|e| corrupt(format!("session #{index}: {e}")))?;
            sessions.push(session);
        }
        let mut loaded = Loaded {
            sessions,
            migrated_backup: None,
        };
        if migrated {
            let backup = self.dir.join(MIGRATION_BACKUP);
            replace_private(&backup, &bytes).map_err(|e| ServeError::Config {
                path: backup.clone(),
                reason: e.to_string(),
            })?;
            self.save(&loaded.sessions)?;
            loaded.migrated_backup = Some(backup);
        }
        Ok(loaded)
    }

    /// Replaces `sessions.json` atomically.
    pub fn save(&self, sessions: &[Session]) -> Result<(), ServeError> {
        let path = self.path();
        let bytes = serde_json::to_vec_pretty(sessions)
            .map_err(|e| ServeError::Worker(format!("cannot encode sessions: {e}")))?;
        replace_private(&path, &bytes).map_err(|e| ServeError::Config {
            path,
            reason: e.to_string(),
        })
    }
}

fn check_session_ids(session: &Session) -> Result<(), ServeError> {
    check_id("session id", &session.id)?;
    for worker in &session.workers {
        check_id("worker id", &worker.id)?;
    }
    Ok(())
}

/// The spec's detection: an entry without `type` or without `workers` is old-format.
pub fn is_old_format(entry: &Value) -> bool {
    entry.is_object() && (entry.get("type").is_none() || entry.get("workers").is_none())
}

/// `{id, worktreePath, pid, repositoryId?, serverPid?, createdAt}` → a session with one agent
/// worker, as in the spec's migration section.
fn migrate_session(old: &Value) -> Result<Session, String> {
    let text = |key: &str| old.get(key).and_then(Value::as_str).map(str::to_string);
    let id = text("id").ok_or("old-format entry without a string `id`")?;
    let location = text("worktreePath")
        .or_else(|| text("locationPath"))
        .ok_or("old-format entry without `worktreePath`")?;
    let created_at = text("createdAt").unwrap_or_else(crate::clock::now_rfc3339);
    let repository = text("repositoryId").filter(|r| r != "default");
    let kind = match repository {
        Some(repository_id) => SessionType::Worktree {
            repository_id,
            worktree_id: location.clone(),
        },
        None => SessionType::Quick,
    };
    let pid = old.get("pid").and_then(Value::as_u64).map(|p| p as u32);
    let server_pid = old
        .get("serverPid")
        .and_then(Value::as_u64)
        .map(|p| p as u32);
    let mut worker = Worker::new(
        format!("{id}-agent"),
        "Claude".into(),
        WorkerKind::Agent {
            agent_id: LEGACY_AGENT_ID.into(),
        },
    );
    worker.created_at = created_at.clone();
    worker.pid = pid;
    Ok(Session {
        id,
        kind,
        location_path: location.into(),
        status: SessionStatus::Inactive,
        created_at,
        server_pid,
        workers: vec![worker],
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const OLD: &str = r#"[
      {"id": "session-abc-123", "worktreePath": "/path/to/wt", "repositoryId": "repo-1",
       "pid": 23456, "serverPid": 12345, "createdAt": "2025-01-01T00:00:00.000Z"},
      {"id": "session-def-456", "worktreePath": "/some/dir", "repositoryId": "default",
       "pid": 34567, "createdAt": "2025-01-01T01:00:00.000Z"}
    ]"#;

    #[test]
    fn an_old_format_file_is_migrated_and_its_original_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let store = SessionStore::open(&tmp.path().join("state")).unwrap();
        fs::write(store.path(), OLD).unwrap();
        let loaded = store.load().unwrap();
        let backup = loaded.migrated_backup.expect("a backup");
        assert_eq!(fs::read_to_string(&backup).unwrap(), OLD);
        let [worktree, quick] = &loaded.sessions[..] else {
            panic!("two sessions")
        };
        assert_eq!(
            worktree.kind,
            SessionType::Worktree {
                repository_id: "repo-1".into(),
                worktree_id: "/path/to/wt".into()
            }
        );
        assert_eq!(worktree.location_path, PathBuf::from("/path/to/wt"));
        assert_eq!(worktree.server_pid, Some(12345));
        assert_eq!(worktree.workers[0].id, "session-abc-123-agent");
        assert_eq!(worktree.workers[0].agent_id(), Some(LEGACY_AGENT_ID));
        assert_eq!(worktree.workers[0].pid, Some(23456));
        assert_eq!(quick.kind, SessionType::Quick);
        assert_eq!(quick.workers[0].created_at, "2025-01-01T01:00:00.000Z");
        // Written back in the new format: the next load migrates nothing.
        let again = store.load().unwrap();
        assert!(again.migrated_backup.is_none());
        assert_eq!(again.sessions, loaded.sessions);
    }

    #[test]
    fn the_file_is_private_in_a_private_folder_and_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let store = SessionStore::open(&dir).unwrap();
        assert!(store.load().unwrap().sessions.is_empty());
        let session = Session {
            id: "s-1".into(),
            kind: SessionType::Quick,
            location_path: "/tmp".into(),
            status: SessionStatus::Active,
            created_at: "t".into(),
            server_pid: Some(1),
            workers: vec![Worker::new("w-1".into(), "T".into(), WorkerKind::Terminal)],
        };
        store.save(std::slice::from_ref(&session)).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&store.path()), 0o600);
        assert_eq!(store.load().unwrap().sessions, vec![session]);
    }

    #[test]
    fn a_corrupt_file_or_a_path_like_id_is_refused_with_the_file_named() {
        let tmp = tempfile::tempdir().unwrap();
        let store = SessionStore::open(&tmp.path().join("state")).unwrap();
        for (content, expected) in [
            ("{", "not valid JSON"),
            ("{}", "JSON array"),
            (
                r#"[{"id": "../x", "worktreePath": "/x"}]"#,
                "invalid session id",
            ),
        ] {
            fs::write(store.path(), content).unwrap();
            let err = store.load().unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
            assert!(err.contains("sessions.json"), "{err}");
        }
    }
}
