//! Workspaces and run directories: run-id rules and generation, the `<work>/.delta` control
//! directory, the layout of one run directory ([`RunPaths`]), agent workspaces
//! (`<agent>/workspaces/W001…`), io/ audit file names and the `list-runs` scan. The check
//! before a run is listed or continued is the janitor's ([`crate::janitor::prepare_continue`]).
//!
//! This module only does path math and directory/file creation. It must not interpret
//! journal contents (that is [`crate::journal`]) or decide run ownership (that is
//! [`crate::metadata`] and [`crate::janitor`]). Every id or name that becomes a path segment is validated here, so
//! nothing from a user or a model can escape its folder (reference §19 item 8).

mod agent_workspaces;
mod audit;
mod creation;
pub mod live_reply;
mod runs;

/// The private-file writer lives in [`crate::private_file`] (metadata needs it too, and
/// `workspace` reads metadata); re-exported for the callers that reach it through here.
pub(crate) use crate::private_file::write_private_file;
pub use agent_workspaces::{
    create_workspace, last_used_workspace, list_workspaces, next_workspace_name,
};
pub(crate) use audit::{
    hook_record_path, write_attempt_record, write_invocation_record, write_redacted_json_file,
    ToolRecordName, ToolRecordNames,
};
pub use creation::{
    CreationLock, LockWait, CREATION_LOCK_FILE, DEFAULT_CREATION_LOCK_WAIT, SLOW_LOCK_NOTICE,
};
pub use runs::{list_runs, list_runs_with_warnings, RunListing, RunSummary, SkippedRun};

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Name of the control directory inside a work dir.
pub const CONTROL_DIR: &str = ".delta";
/// Content we write to `.delta/VERSION` (the original wrote `1.2`; readers accept any value).
pub const CONTROL_VERSION: &str = "2\n";
/// Longest accepted run id, in bytes.
pub const MAX_RUN_ID_LEN: usize = 128;
/// Names inside `.delta/` that are not runs (the version marker, orchestration records),
/// so they can never be used as run ids.
pub const RESERVED_CONTROL_NAMES: [&str; 2] = ["VERSION", "orchestrations"];

/// Errors of the workspace layer. Every message names the id or path and gives a hint.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// A run id that cannot be a folder name under `.delta/`.
    #[error(
        "invalid run id '{id}': {reason}; hint: a run id is 1-128 characters from [A-Za-z0-9._-] \
         and starts with a letter or digit (e.g. 20261122_014234_915ade)"
    )]
    InvalidRunId {
        /// The id as given.
        id: String,
        /// What is wrong with it (empty, too long, a character outside `[A-Za-z0-9._-]`,
        /// a reserved name).
        reason: String,
    },
    /// A new run's folder exists already (the run id is taken).
    #[error(
        "run '{run_id}' already exists in {}; hint: choose a different id (--run-id), continue it with \
         `delta continue --run-id {run_id} -w {}`, or list runs with `delta list-runs -w {}`",
        control_dir(work_dir).display(), work_dir.display(), work_dir.display()
    )]
    AlreadyExists {
        /// The run id asked for.
        run_id: String,
        /// The workspace it was asked in.
        work_dir: PathBuf,
    },
    /// The run to open has no folder under `<work_dir>/.delta/`.
    #[error(
        "run '{run_id}' not found in {}; hint: list the runs of this work dir with \
         `delta list-runs -w {}`",
        control_dir(work_dir).display(), work_dir.display()
    )]
    NotFound {
        /// The run id asked for.
        run_id: String,
        /// The workspace it was looked for in.
        work_dir: PathBuf,
    },
    /// The workspace has no `.delta/` folder: no run was ever started in it.
    #[error(
        "no .delta directory found in work directory {}; hint: runs live in <work-dir>/.delta — \
         pass the work dir a run used (`delta list-runs -w <dir>`)",
        work_dir.display()
    )]
    NoControlDir {
        /// The workspace given.
        work_dir: PathBuf,
    },
    /// An agent workspace name (`W001`) that cannot be a folder name.
    #[error(
        "invalid workspace name '{name}': {reason}; hint: use a plain folder name such as W004 \
         (no '/', no '..', not starting with '.')"
    )]
    InvalidWorkspaceName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A folder of a run (the run folder itself, `io/` and its subfolders, `secrets/`) is a
    /// symbolic link or not a folder: someone other than delta replaced it, and writing
    /// through it would put the run's records (or answers) wherever it points.
    #[error(
        "{} is {what}, not the run's own folder; delta does not write through links inside a \
         run (hint: something other than delta replaced it; remove it and restore the \
         folder, or start a new run)",
        path.display()
    )]
    NotOwnFolder {
        /// The folder.
        path: PathBuf,
        /// What it is instead ("a symbolic link", "a FIFO (named pipe)"...).
        what: String,
    },
    /// A file delta keeps in `.delta/` (the creation lock, a run's records) is a symbolic
    /// link, not a regular file, or a second name (hard link) of another file: something
    /// other than delta put it there.
    #[error(
        "{} is {what}, not delta's own file; delta does not open links or special files in \
         its control folder (hint: remove it, delta makes it again)",
        path.display()
    )]
    NotOwnFile {
        /// The file.
        path: PathBuf,
        /// What it is instead ("a symbolic link", "a folder", "not a regular file").
        what: String,
    },
    /// The workspace's creation lock stayed held by another process for the whole wait: no
    /// run can be created in the workspace until it lets go.
    #[error(
        "{} has been held by {holder} for {waited_secs:.0} s: no new run can be created in {} \
         while it is held; hint: stop that process (or let it finish) and start the run again; \
         delta creates runs under this lock for a few milliseconds only, so a long hold is not \
         delta's own",
        path.display(), work_dir.display()
    )]
    CreationLockHeld {
        /// The lock file (`<work>/.delta/.creating.lock`).
        path: PathBuf,
        /// Who holds it, in words (`process 1234 (flock)`, from `/proc/locks`).
        holder: String,
        /// How long the run waited, in seconds.
        waited_secs: f64,
        /// The workspace.
        work_dir: PathBuf,
    },
    /// A stop request (Ctrl-C, a run's time limit) ended the wait for the creation lock:
    /// the run was never created.
    #[error(
        "stopped while waiting for the workspace's creation lock {}, held by {holder}: no run \
         was created",
        path.display()
    )]
    CreationLockWaitStopped {
        /// The lock file.
        path: PathBuf,
        /// Who held it, in words.
        holder: String,
    },
    /// A folder or file could not be created, read or written.
    #[error("cannot {action} {}: {source}; hint: check that the path exists and is writable", path.display())]
    Io {
        /// What was being done, as a verb phrase (`create`, `read`, `write`...).
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}

impl WorkspaceError {
    pub(crate) fn io(action: &'static str, path: &Path, source: io::Error) -> WorkspaceError {
        if let Some(refused) = crate::private_file::other_names(&source) {
            return WorkspaceError::NotOwnFile {
                path: path.to_path_buf(),
                what: format!(
                    "one of {} names (hard links) of one file, so a write would change it \
                     under its other name too",
                    refused.links
                ),
            };
        }
        WorkspaceError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `<work>/.delta`.
pub fn control_dir(work_dir: &Path) -> PathBuf {
    work_dir.join(CONTROL_DIR)
}

/// Checks that `id` is safe as a single path segment: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`.
pub fn validate_run_id(id: &str) -> Result<(), WorkspaceError> {
    let invalid = |reason: &str| {
        Err(WorkspaceError::InvalidRunId {
            id: id.to_string(),
            reason: reason.to_string(),
        })
    };
    let Some(first) = id.chars().next() else {
        return invalid("it is empty");
    };
    if id.len() > MAX_RUN_ID_LEN {
        return invalid(&format!(
            "it is {} bytes long (at most {MAX_RUN_ID_LEN})",
            id.len()
        ));
    }
    if !first.is_ascii_alphanumeric() {
        return invalid(&format!("it starts with '{first}'"));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return invalid(&format!("it contains '{}'", bad.escape_default()));
    }
    if RESERVED_CONTROL_NAMES.contains(&id) {
        return invalid("it is reserved for the engine's own files in .delta");
    }
    Ok(())
}

/// A fresh run id `YYYYMMDD_HHMMSS_xxxxxx`: local time plus 6 hex digits of a v4 UUID
/// (the original engine's format, so ids sort chronologically).
pub(crate) fn generate_run_id() -> String {
    let stamp = chrono::Local::now().format("%Y%m%d_%H%M%S");
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{stamp}_{}", &random[..6])
}

/// Creates `<work>/.delta` (mode 0700; the work dir too if missing) and writes `VERSION`
/// only when it is missing, so concurrent runs never rewrite it. Returns the control dir.
pub(crate) fn ensure_control_dir(work_dir: &Path) -> Result<PathBuf, WorkspaceError> {
    std::fs::create_dir_all(work_dir)
        .map_err(|e| WorkspaceError::io("create work directory", work_dir, e))?;
    let control = control_dir(work_dir);
    match DirBuilder::new().mode(0o700).create(&control) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && control.is_dir() => {}
        Err(e) => return Err(WorkspaceError::io("create control directory", &control, e)),
    }
    let version = control.join("VERSION");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&version)
    {
        Ok(mut file) => {
            use std::io::Write;
            file.write_all(CONTROL_VERSION.as_bytes())
                .map_err(|e| WorkspaceError::io("write", &version, e))?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(WorkspaceError::io("create", &version, e)),
    }
    Ok(control)
}

/// Every path of one run directory `<work>/.delta/<run_id>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPaths {
    /// `<work>/.delta/<run_id>`.
    pub run_dir: PathBuf,
    /// `journal.jsonl`: the run's append-only event log, its source of truth.
    pub journal: PathBuf,
    /// `metadata.json`: the run's status record.
    pub metadata: PathBuf,
    /// `engine.log`: the engine's own log lines for this run, for people.
    pub engine_log: PathBuf,
    /// `lock`: held (flock) by the process driving the run.
    pub lock: PathBuf,
    /// `io/invocations/`: one record per model call (request, response, timings).
    pub invocations_dir: PathBuf,
    /// `io/tool_executions/`: one record per tool call, with its full output.
    pub tool_executions_dir: PathBuf,
    /// `io/hooks/`: one record per lifecycle hook run.
    pub hooks_dir: PathBuf,
    /// Async ask_human exchange; created only while a question is pending.
    pub interaction_dir: PathBuf,
    /// Where sensitive material would go (0700); not created by [`create_run_dir`].
    pub secrets_dir: PathBuf,
}

impl RunPaths {
    /// Pure path math; does not validate `run_id` or touch the disk.
    pub fn new(work_dir: &Path, run_id: &str) -> RunPaths {
        let run_dir = control_dir(work_dir).join(run_id);
        let io_dir = run_dir.join("io");
        RunPaths {
            journal: run_dir.join("journal.jsonl"),
            metadata: run_dir.join("metadata.json"),
            engine_log: run_dir.join("engine.log"),
            lock: run_dir.join("lock"),
            invocations_dir: io_dir.join("invocations"),
            tool_executions_dir: io_dir.join("tool_executions"),
            hooks_dir: io_dir.join("hooks"),
            interaction_dir: run_dir.join("interaction"),
            secrets_dir: run_dir.join("secrets"),
            run_dir,
        }
    }
}

/// Creates a new run directory (mode 0700) with `io/invocations/`, `io/tool_executions/` and
/// `io/hooks/` (0700 too). The run directory is
/// made with one `mkdir`, so two processes racing on one id cannot both succeed: the loser
/// gets [`WorkspaceError::AlreadyExists`].
///
/// The control folder is made (with its `VERSION`) only when that `mkdir` finds it missing.
/// Every part of delta that makes `.delta` does so through one helper
/// (`ensure_control_dir`), so an existing one has its `VERSION` already; probing it before
/// every run cost four system calls, each walking the whole path (3.4 % of the engine's CPU
/// at 1,000 @ 1,000).
pub fn create_run_dir(work_dir: &Path, run_id: &str) -> Result<RunPaths, WorkspaceError> {
    validate_run_id(run_id)?;
    match create_run_dir_in_control_dir(work_dir, run_id) {
        Err(WorkspaceError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            ensure_control_dir(work_dir)?;
            create_run_dir_in_control_dir(work_dir, run_id)
        }
        created => created,
    }
}

/// [`create_run_dir`] without the control folder: for a caller that knows it exists.
pub(crate) fn create_run_dir_in_control_dir(
    work_dir: &Path,
    run_id: &str,
) -> Result<RunPaths, WorkspaceError> {
    validate_run_id(run_id)?;
    let paths = RunPaths::new(work_dir, run_id);
    match DirBuilder::new().mode(0o700).create(&paths.run_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(WorkspaceError::AlreadyExists {
                run_id: run_id.to_string(),
                work_dir: work_dir.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(WorkspaceError::io(
                "create run directory",
                &paths.run_dir,
                e,
            ))
        }
    }
    // All three audit folders from the start, as the original engine made them (its tests
    // look for each): up to two more mkdirs per run than making them with their first
    // record, ≈ 75 µs of CPU for a run without tools, lost in the noise of a 6-call run
    // (BENCHMARKS.md, "A run's io/ folders from its start").
    let io_dir = paths.run_dir.join("io");
    for dir in [
        &io_dir,
        &paths.invocations_dir,
        &paths.tool_executions_dir,
        &paths.hooks_dir,
    ] {
        DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| WorkspaceError::io("create directory", dir, e))?;
    }
    Ok(paths)
}

/// Tells whoever watches the workspace's runs (`delta serve`) that a run that had ended is
/// running again: the `.delta` folder's modification time is set to now. A new run's folder
/// changes it anyway; a continued run's does not, and a watcher re-reads settled runs only
/// when it changes (or now and then). Best effort: a watcher sees the run later otherwise.
pub fn mark_runs_changed(work_dir: &Path) {
    let _ = nix::sys::stat::utimensat(
        None,
        &control_dir(work_dir),
        &nix::sys::time::TimeSpec::UTIME_NOW,
        &nix::sys::time::TimeSpec::UTIME_NOW,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    );
}

/// The paths of an existing run; [`WorkspaceError::NotFound`] when its directory is missing.
pub fn open_run_dir(work_dir: &Path, run_id: &str) -> Result<RunPaths, WorkspaceError> {
    validate_run_id(run_id)?;
    let paths = RunPaths::new(work_dir, run_id);
    if !paths.run_dir.is_dir() {
        return Err(WorkspaceError::NotFound {
            run_id: run_id.to_string(),
            work_dir: work_dir.to_path_buf(),
        });
    }
    check_own_folders(&paths)?;
    Ok(paths)
}

/// Refuses a run whose folder, `io/` (and its three subfolders), `secrets/` or
/// `interaction/` is a symbolic link or not a folder (a missing one is fine: it is made when
/// needed). A tool can write the run folders of its workspace; `continue` must not then
/// append records or answers wherever a link it left points.
pub fn check_own_folders(paths: &RunPaths) -> Result<(), WorkspaceError> {
    let io_dir = paths.run_dir.join("io");
    let folders = [
        &paths.run_dir,
        &io_dir,
        &paths.invocations_dir,
        &paths.tool_executions_dir,
        &paths.hooks_dir,
        &paths.secrets_dir,
        &paths.interaction_dir,
    ];
    for folder in folders {
        match std::fs::symlink_metadata(folder) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) => {
                let file_type = meta.file_type();
                let what = if file_type.is_file() {
                    "a file".to_string()
                } else {
                    format!("a {}", crate::bounded_read::describe(&file_type))
                };
                return Err(WorkspaceError::NotOwnFolder {
                    path: folder.clone(),
                    what,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(WorkspaceError::io("inspect", folder, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn run_id_validation_table() {
        let long_ok = "a".repeat(128);
        let too_long = "a".repeat(129);
        let cases: &[(&str, bool)] = &[
            ("20261122_014234_915ade", true),
            ("a", true),
            ("Run-1.retry_2", true),
            ("9", true),
            (&long_ok, true),
            ("", false),
            (&too_long, false),
            ("../evil", false),
            ("..", false),
            (".", false),
            ("a/b", false),
            ("a\\b", false),
            ("-rf", false),
            ("_x", false),
            (".hidden", false),
            ("a b", false),
            ("a\0b", false),
            ("VERSION", false),
            ("orchestrations", false),
            ("orchestrations-2", true),
            ("été", false),
        ];
        for (id, ok) in cases {
            assert_eq!(validate_run_id(id).is_ok(), *ok, "id {id:?}");
        }
    }

    #[test]
    fn run_id_error_explains_the_rule() {
        let message = validate_run_id("../evil").unwrap_err().to_string();
        assert!(message.contains("'../evil'"), "{message}");
        assert!(message.contains("starts with '.'"), "{message}");
        assert!(message.contains("[A-Za-z0-9._-]"), "{message}");
        let message = validate_run_id("a/b").unwrap_err().to_string();
        assert!(message.contains("contains '/'"), "{message}");
        let message = validate_run_id(&"x".repeat(129)).unwrap_err().to_string();
        assert!(message.contains("129 bytes"), "{message}");
        assert!(validate_run_id("")
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }

    #[test]
    fn generated_run_ids_have_the_original_shape_and_are_valid() {
        let id = generate_run_id();
        assert_eq!(id.len(), 22, "{id}");
        let bytes = id.as_bytes();
        assert_eq!(bytes[8], b'_');
        assert_eq!(bytes[15], b'_');
        assert!(id[..8].chars().all(|c| c.is_ascii_digit()));
        assert!(id[9..15].chars().all(|c| c.is_ascii_digit()));
        assert!(id[16..].chars().all(|c| c.is_ascii_hexdigit()));
        validate_run_id(&id).unwrap();
        assert_ne!(generate_run_id()[16..], generate_run_id()[16..]);
    }

    #[test]
    fn now_rfc3339_is_utc_with_millis() {
        let ts = crate::clock::now_rfc3339();
        assert_eq!(ts.len(), 24, "{ts}");
        assert!(ts.ends_with('Z'));
        assert_eq!(&ts[19..20], ".");
        chrono::DateTime::parse_from_rfc3339(&ts).unwrap();
    }

    #[test]
    fn control_dir_is_private_and_version_is_written_once() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("new-work");
        let control = ensure_control_dir(&work).unwrap();
        assert_eq!(control, work.join(".delta"));
        let mode = std::fs::metadata(&control).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(
            std::fs::read_to_string(control.join("VERSION")).unwrap(),
            "2\n"
        );
        std::fs::write(control.join("VERSION"), "1.2\n").unwrap();
        ensure_control_dir(&work).unwrap();
        assert_eq!(
            std::fs::read_to_string(control.join("VERSION")).unwrap(),
            "1.2\n"
        );
    }

    #[test]
    fn a_new_run_makes_the_control_folder_only_when_it_is_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("missing").join("work");
        let first = create_run_dir(&work, "r1").unwrap();
        assert!(first.invocations_dir.is_dir());
        let control = control_dir(&work);
        assert_eq!(
            std::fs::read_to_string(control.join("VERSION")).unwrap(),
            "2\n"
        );
        // With the folder there, a run does not touch it: a VERSION taken away stays away.
        std::fs::remove_file(control.join("VERSION")).unwrap();
        create_run_dir(&work, "r2").unwrap();
        assert!(!control.join("VERSION").exists());
        assert!(matches!(
            create_run_dir(&work, "r2"),
            Err(WorkspaceError::AlreadyExists { .. })
        ));
    }

    #[test]
    fn run_paths_layout() {
        let paths = RunPaths::new(Path::new("/w"), "r1");
        assert_eq!(paths.run_dir, Path::new("/w/.delta/r1"));
        assert_eq!(paths.journal, Path::new("/w/.delta/r1/journal.jsonl"));
        assert_eq!(paths.metadata, Path::new("/w/.delta/r1/metadata.json"));
        assert_eq!(paths.engine_log, Path::new("/w/.delta/r1/engine.log"));
        assert_eq!(paths.lock, Path::new("/w/.delta/r1/lock"));
        assert_eq!(
            paths.invocations_dir,
            Path::new("/w/.delta/r1/io/invocations")
        );
        assert_eq!(
            paths.tool_executions_dir,
            Path::new("/w/.delta/r1/io/tool_executions")
        );
        assert_eq!(paths.hooks_dir, Path::new("/w/.delta/r1/io/hooks"));
        assert_eq!(paths.interaction_dir, Path::new("/w/.delta/r1/interaction"));
        assert_eq!(paths.secrets_dir, Path::new("/w/.delta/r1/secrets"));
    }

    #[test]
    fn create_run_dir_makes_private_dirs_and_refuses_a_second_time() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = create_run_dir(tmp.path(), "r1").unwrap();
        let mode = std::fs::metadata(&paths.run_dir)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(paths.invocations_dir.is_dir());
        assert!(paths.tool_executions_dir.is_dir());
        assert!(paths.hooks_dir.is_dir());
        assert!(!paths.interaction_dir.exists());

        let err = create_run_dir(tmp.path(), "r1").unwrap_err();
        assert!(
            matches!(err, WorkspaceError::AlreadyExists { .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("'r1'"), "{message}");
        assert!(message.contains("delta list-runs -w"), "{message}");
    }

    #[test]
    fn racing_creators_of_one_run_id_have_exactly_one_winner() {
        let tmp = tempfile::tempdir().unwrap();
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| create_run_dir(tmp.path(), "contested")))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
        assert!(results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| matches!(e, WorkspaceError::AlreadyExists { .. })));
    }

    #[test]
    fn create_run_dir_rejects_traversal_before_touching_disk() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        let err = create_run_dir(&work, "../evil").unwrap_err();
        assert!(matches!(err, WorkspaceError::InvalidRunId { .. }));
        assert!(!work.exists());
        assert!(!tmp.path().join("evil").exists());
    }

    #[test]
    fn open_run_dir_requires_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let err = open_run_dir(tmp.path(), "missing").unwrap_err();
        assert!(matches!(err, WorkspaceError::NotFound { .. }));
        let message = err.to_string();
        assert!(message.contains("'missing'") && message.contains("list-runs"));
        let created = create_run_dir(tmp.path(), "there").unwrap();
        assert_eq!(open_run_dir(tmp.path(), "there").unwrap(), created);
        assert!(matches!(
            open_run_dir(tmp.path(), "a/b").unwrap_err(),
            WorkspaceError::InvalidRunId { .. }
        ));
    }
}
