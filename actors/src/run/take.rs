//! Taking a run: creating a new run's files, or reopening an existing run for `continue`
//! under its lock, repairing what a crash left behind, and applying the continue state table
//! (spec §2.6.2). Runs before the first iteration, at the top of [`super::RunLoop::drive`],
//! as one blocking call on the blocking pool (`crate::blocking::run_to_end`): it creates
//! folders and files and fsyncs them, which must not stall the other runs of the arbiter.
//!
//! Must not: talk to the model, run tools, or need the actor system (it runs on a pool
//! thread).

use std::path::Path;

use crate::context::INTERRUPTED_OBSERVATION;
use crate::journal::{
    pending_ask_human, recorded_final_answer, unanswered_calls, ActionStatus, Event, Journal,
    JournalEvent, JournalOptions,
};
use crate::metadata::{
    current_process_identity, read_metadata, try_take_over, write_metadata_with, RunLock,
    RunMetadata, Takeover, LOCK_FILE,
};
use crate::protocol::RunStatus;
use crate::redact::Redactor;
use crate::request::{RunRequest, RunStart};
use crate::workspace::{
    create_run_dir, create_run_dir_in_control_dir, open_run_dir, CreationLock, LockWait, RunPaths,
    WorkspaceError,
};

/// A run, taken and ready for its first iteration.
pub struct TakenRun {
    pub paths: RunPaths,
    pub journal: Journal,
    pub events: Vec<JournalEvent>,
    pub meta: RunMetadata,
    pub lock: RunLock,
    pub resumed: bool,
    /// The span of the run's previous start as its metadata recorded it (a continuation).
    pub previous_trace: Option<crate::protocol::TraceSpan>,
    /// The context builder's folders, resolved on the same trip to the blocking pool as the
    /// take (see `drive.rs`), so the first build reads its files inline.
    pub context_folders: crate::context::ContextFolders,
}

/// Why a run could not be taken. The run's files are left as they were.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Io(String),
    /// A stop request (Ctrl-C, a time limit) ended a wait before the run was created.
    #[error("{0}")]
    Stopped(String),
}

fn io<E: std::fmt::Display>(e: E) -> SetupError {
    SetupError::Io(e.to_string())
}

/// A journal that cannot be used as it is (FATAL shapes, a bad line, a second name of
/// another file) is refused like bad input; only a failing read or write is an I/O error.
fn journal_refusal(e: crate::journal::JournalError) -> SetupError {
    match &e {
        crate::journal::JournalError::Io { source, .. }
            if source.kind() != std::io::ErrorKind::NotFound
                && !crate::private_file::is_other_names(source) =>
        {
            SetupError::Io(e.to_string())
        }
        _ => SetupError::Refused(e.to_string()),
    }
}

/// A run lock that cannot be taken because its file is not the run's own (a second name of
/// another file) is refused like bad input; any other failure is an I/O error.
fn lock_refusal(e: crate::metadata::MetadataError) -> SetupError {
    match e {
        e @ crate::metadata::MetadataError::NotOwn { .. } => SetupError::Refused(e.to_string()),
        e => io(e),
    }
}

/// A run folder without metadata.json is what a process killed while creating the run
/// leaves behind (the metadata is written last). Nothing can continue it, so a new run may
/// reuse the id: the folder is removed when its lock is free. Returns whether it was.
///
/// Judged under the workspace's creation lock, exclusive ([`CreationLock`]): a creator
/// holds it shared from its `mkdir` until its journal is locked, so a folder another
/// process is creating right now is seen either not yet made or locked, never as a
/// leftover. The wait for it is `wait`'s (bounded, and ended by a stop request).
fn reclaim_unstarted_run_dir(
    work_dir: &Path,
    run_id: &str,
    wait: &mut LockWait,
) -> Result<bool, WorkspaceError> {
    let paths = RunPaths::new(work_dir, run_id);
    let unstarted = || paths.run_dir.is_dir() && !paths.run_dir.join("metadata.json").exists();
    if !unstarted() {
        return Ok(false);
    }
    let _judging = CreationLock::judging(work_dir, wait)?;
    if !unstarted() {
        return Ok(false);
    }
    Ok(
        match RunLock::try_acquire_unstarted(&paths.run_dir, &paths.journal) {
            Ok(Some(lock)) => {
                let removed = std::fs::remove_dir_all(&paths.run_dir).is_ok();
                drop(lock);
                removed
            }
            _ => false,
        },
    )
}

/// A failure to take the creation lock as a [`SetupError`]: a wait a stop request ended is
/// [`SetupError::Stopped`]; a lock file that cannot be made is an I/O error (a full disk);
/// anything else (a planted link, a holder that never lets go) is a refusal.
fn lock_failure(e: WorkspaceError) -> SetupError {
    match e {
        WorkspaceError::Io { .. } => io(e),
        e @ WorkspaceError::CreationLockWaitStopped { .. } => SetupError::Stopped(e.to_string()),
        e => SetupError::Refused(e.to_string()),
    }
}

/// `durable`: fsync the run's first metadata record (the engine's `journal_fsync`).
/// `wait`: how a new run waits for its workspace's creation lock.
pub fn take_run(
    run_id: &str,
    request: &RunRequest,
    max_iterations: u32,
    (fsync_every_event, durable): (bool, bool),
    secrets: &Redactor,
    wait: &mut LockWait,
) -> Result<TakenRun, SetupError> {
    let opts = JournalOptions { fsync_every_event };
    match &request.start {
        RunStart::New { task } => take_new_run(
            run_id,
            request,
            task,
            max_iterations,
            (opts, durable),
            secrets,
            wait,
        ),
        RunStart::Continue { message, force } => {
            let start = (message, force);
            take_continued_run(
                run_id,
                request,
                start,
                max_iterations,
                (opts, durable),
                secrets,
            )
        }
    }
}

/// A new run: its folder created under the workspace's creation lock, its journal locked
/// and started with the task, then its first metadata record.
fn take_new_run(
    run_id: &str,
    request: &RunRequest,
    task: &str,
    max_iterations: u32,
    (opts, durable): (JournalOptions, bool),
    secrets: &Redactor,
    wait: &mut LockWait,
) -> Result<TakenRun, SetupError> {
    // Held from the mkdir until the journal is locked (see reclaim_unstarted_run_dir).
    let mut creating = CreationLock::creating(&request.work_dir, wait).map_err(lock_failure)?;
    let paths = match create_run_dir(&request.work_dir, run_id) {
        Ok(paths) => paths,
        Err(e @ WorkspaceError::Io { .. }) => return Err(io(e)),
        Err(e) => {
            drop(creating);
            if !reclaim_unstarted_run_dir(&request.work_dir, run_id, wait).map_err(lock_failure)? {
                return Err(SetupError::Refused(e.to_string()));
            }
            creating = CreationLock::creating(&request.work_dir, wait).map_err(lock_failure)?;
            create_run_dir_in_control_dir(&request.work_dir, run_id)
                .map_err(|_| SetupError::Refused(e.to_string()))?
        }
    };
    let mut journal = Journal::create(&paths.run_dir, opts).map_err(io)?;
    let lock = lock_new_run(&paths, &journal)?.ok_or_else(|| {
        SetupError::Refused(format!(
            "run '{run_id}' is locked by another process (lock file {})",
            paths.run_dir.join(LOCK_FILE).display()
        ))
    })?;
    drop(creating);
    journal.set_secrets(secrets.clone());
    let mut meta = RunMetadata::new_running(
        run_id,
        &request.agent.name,
        task,
        &request.agent.home,
        &request.work_dir,
        max_iterations,
    );
    meta.workspace_id = request.workspace_id.clone();
    meta.orchestration_id = request.orchestration_id.clone();
    meta.max_iterations_requested = request.max_iterations;
    meta.trace = request.trace.clone();
    let mut events = Vec::with_capacity(16);
    events.push(
        journal
            .append(Event::EngineStart {
                run_id: run_id.to_string(),
                agent_home: meta.agent_home.clone(),
                work_dir: meta.work_dir.clone(),
                agent_name: meta.agent_name.clone(),
                task: task.to_owned(),
            })
            .map_err(io)?,
    );
    events.push(
        journal
            .append(Event::UserMessage {
                content: task.to_owned(),
            })
            .map_err(io)?,
    );
    // Metadata last: a run folder with metadata.json always has a journal holding
    // the task, and one without it never started (see reclaim_unstarted_run_dir).
    write_metadata_with(&paths.run_dir, &meta, durable).map_err(io)?;
    Ok(TakenRun {
        paths,
        journal,
        events,
        meta,
        lock,
        resumed: false,
        previous_trace: None,
        context_folders: Default::default(),
    })
}

/// A run continued from its journal: taken over under its lock, with the answer, the
/// interruption and the unanswered calls recorded, and `message` appended; refused (the
/// run left as it was) when its status does not allow the continue.
fn take_continued_run(
    run_id: &str,
    request: &RunRequest,
    (message, force): (&Option<String>, &bool),
    max_iterations: u32,
    (opts, durable): (JournalOptions, bool),
    secrets: &Redactor,
) -> Result<TakenRun, SetupError> {
    let paths =
        open_run_dir(&request.work_dir, run_id).map_err(|e| SetupError::Refused(e.to_string()))?;
    let meta = read_metadata(&paths.run_dir).map_err(|e| SetupError::Refused(e.to_string()))?;
    let (lock, takeover_reason) = take_lock(run_id, &paths, &meta, *force)?;
    // Re-read under the lock: the previous owner may have finished in between.
    let mut meta = read_metadata(&paths.run_dir).map_err(|e| SetupError::Refused(e.to_string()))?;
    let (mut journal, mut events) = Journal::open_with_secrets(
        &paths.run_dir,
        opts,
        secrets.clone(),
        lock.shares_file_with(&paths.journal),
    )
    .map_err(journal_refusal)?;
    // Decide everything first: a refusal below must leave the run as it was.
    let interrupted = (meta.status == RunStatus::Running).then(|| {
        // We hold the lock, so whoever recorded RUNNING no longer drives the run.
        takeover_reason.unwrap_or_else(|| {
            format!(
                "the run lock was free: process {} on host '{}' no longer drives the run",
                meta.pid, meta.hostname
            )
        })
    });
    let status = if interrupted.is_some() {
        RunStatus::Interrupted
    } else {
        meta.status
    };
    let response_file = paths.interaction_dir.join("response.txt");
    let answer = continue_answer(run_id, status, message, &events, &response_file)?;
    // The record first: when metadata.json cannot be written (a full disk, an
    // unwritable spare) the continue fails here with that cause and the journal is
    // untouched, so a retry does not send the message twice.
    meta.claim(&current_process_identity());
    meta.status = RunStatus::Running;
    meta.end_time = None;
    meta.error = None;
    meta.result = None;
    meta.max_iterations = max_iterations;
    // A continuation given a cap keeps it for the next one; one without keeps the
    // cap the run was given before (the caller applied it: see the field).
    if request.max_iterations.is_some() {
        meta.max_iterations_requested = request.max_iterations;
    }
    meta.agent_home = request.agent.home.to_string_lossy().into_owned();
    // This start's span replaces the last one's, which its span links to.
    let previous_trace = std::mem::replace(&mut meta.trace, request.trace.clone());
    write_metadata_with(&paths.run_dir, &meta, durable).map_err(io)?;
    crate::workspace::mark_runs_changed(&request.work_dir);
    restore_task(run_id, &meta, &mut journal, &mut events).map_err(io)?;
    if let Some(reason) = interrupted {
        events.push(
            journal
                .append(Event::Interrupted {
                    reason: format!("janitor: {reason}"),
                })
                .map_err(io)?,
        );
    }
    if let Some(answer) = &answer {
        if let Some(q) = pending_ask_human(&events) {
            let recorded =
                crate::run::human::record_answer(&mut journal, &paths, &q, answer, secrets)
                    .map_err(io)?;
            events.extend(recorded);
        }
        let _ = std::fs::remove_file(paths.interaction_dir.join("request.json"));
        let _ = std::fs::remove_file(&response_file);
    }
    // Every call a crash left without a result gets one, so the history stays valid.
    for (iteration, action_id, tool_name) in unanswered_calls(&events) {
        events.push(
            journal
                .append(Event::ActionResult {
                    iteration,
                    action_id,
                    tool_name,
                    status: ActionStatus::Error,
                    observation_content: INTERRUPTED_OBSERVATION.to_string(),
                    exit_code: None,
                    execution_ref: None,
                })
                .map_err(io)?,
        );
    }
    if status != RunStatus::WaitingForInput {
        if let Some(m) = message {
            events.push(
                journal
                    .append(Event::UserMessage { content: m.clone() })
                    .map_err(io)?,
            );
        }
    }
    Ok(TakenRun {
        paths,
        journal,
        events,
        meta,
        lock,
        resumed: true,
        previous_trace,
        context_folders: Default::default(),
    })
}

/// The answer a continue brings to a run of `status`, or why the continue is refused: a run
/// WAITING_FOR_INPUT needs one (`message`, else its response file), a COMPLETED run or one
/// FAILED after the model's final answer needs a message.
fn continue_answer(
    run_id: &str,
    status: RunStatus,
    message: &Option<String>,
    events: &[JournalEvent],
    response_file: &Path,
) -> Result<Option<String>, SetupError> {
    Ok(match status {
        RunStatus::WaitingForInput => {
            let answer = match message {
                Some(m) => Some(m.clone()),
                None => read_response_file(response_file)?,
            };
            let Some(answer) = answer else {
                return Err(SetupError::Refused(format!(
                        "run '{run_id}' is WAITING_FOR_INPUT: give the answer with -m \"...\" or write it to {}",
                        response_file.display()
                    )));
            };
            Some(answer)
        }
        RunStatus::Completed if message.is_none() => {
            return Err(SetupError::Refused(format!(
                "run '{run_id}' is {status}: to continue it, give a message with -m \"...\""
            )));
        }
        // A FAILED run is retried without a message by sending the same conversation
        // again (a connection error, a timeout: issue 31 item 16), unless the model
        // had answered: the same history would only end the run the same way.
        RunStatus::Failed if message.is_none() && recorded_final_answer(events).is_some() => {
            return Err(SetupError::Refused(format!(
                "run '{run_id}' is FAILED after the model's final answer: to retry it, give \
                     a message with -m \"...\" saying what to do differently"
            )));
        }
        _ => None,
    })
}

/// Locks a new run through its journal's descriptor (one descriptor for both; see
/// `metadata::lock`), or through a plain `lock` file when one appeared first.
fn lock_new_run(paths: &RunPaths, journal: &Journal) -> Result<Option<RunLock>, SetupError> {
    match RunLock::on_new_journal(&paths.run_dir, journal.path(), journal.file_handle())
        .map_err(io)?
    {
        Some(lock) => Ok(Some(lock)),
        None => RunLock::try_acquire(&paths.run_dir).map_err(io),
    }
}

/// Takes the run's lock for `continue`. A RUNNING run goes through the janitor's race-free
/// rule ([`try_take_over`]): runs of the original engine (never locked) fall back to its
/// pid + process-name check instead of being treated as orphaned. Returns the lock and, for
/// a RUNNING run, why it was ownerless.
fn take_lock(
    run_id: &str,
    paths: &RunPaths,
    meta: &RunMetadata,
    force: bool,
) -> Result<(RunLock, Option<String>), SetupError> {
    let busy = |pid: u32, hostname: &str| {
        SetupError::Refused(format!(
            "run '{run_id}' is still active, driven by another process: its lock {} is held (pid {pid} on host '{hostname}').\nCannot continue while that process drives it: wait for it to finish or stop it first",
            paths.run_dir.join(LOCK_FILE).display()
        ))
    };
    if meta.status != RunStatus::Running {
        return match RunLock::try_acquire(&paths.run_dir).map_err(lock_refusal)? {
            Some(lock) => Ok((lock, None)),
            None => Err(busy(meta.pid, &meta.hostname)),
        };
    }
    let here = current_process_identity().hostname;
    match try_take_over(&paths.run_dir, meta, &here, force).map_err(lock_refusal)? {
        Takeover::Acquired { lock, reason } => Ok((lock, Some(reason))),
        Takeover::Alive { pid, hostname } => Err(busy(pid, &hostname)),
        // Across hosts the lock may not be shared (network file systems): only with --force.
        Takeover::OtherHost { hostname } => Err(SetupError::Refused(format!(
            "run '{run_id}' was started on host '{hostname}'. Cannot verify its process from host '{here}'.\nIf you are sure the original process is dead, use --force."
        ))),
    }
}

/// A process killed right after writing a new run's metadata leaves a journal without
/// ENGINE_START and/or the task's USER_MESSAGE; the model would see no task at all. Both
/// are written again from the metadata.
fn restore_task(
    run_id: &str,
    meta: &RunMetadata,
    journal: &mut Journal,
    events: &mut Vec<JournalEvent>,
) -> Result<(), crate::journal::JournalError> {
    if events
        .iter()
        .any(|e| matches!(e.event, Event::UserMessage { .. }))
    {
        return Ok(());
    }
    if !events
        .iter()
        .any(|e| matches!(e.event, Event::EngineStart { .. }))
    {
        events.push(journal.append(Event::EngineStart {
            run_id: run_id.to_string(),
            agent_home: meta.agent_home.clone(),
            work_dir: meta.work_dir.clone(),
            agent_name: meta.agent_name.clone(),
            task: meta.initial_message.clone(),
        })?);
    }
    events.push(journal.append(Event::UserMessage {
        content: meta.initial_message.clone(),
    })?);
    Ok(())
}

/// The answer left in `interaction/response.txt`, if any. Only a regular file is read: this
/// runs on the actor's thread, where a FIFO would block the whole arbiter.
fn read_response_file(path: &Path) -> Result<Option<String>, SetupError> {
    match std::fs::metadata(path) {
        Err(_) => return Ok(None),
        Ok(meta) if !meta.is_file() => {
            return Err(SetupError::Refused(format!(
                "{} is not a regular file; write the answer into a plain file, or give it with -m \"...\"",
                path.display()
            )))
        }
        Ok(_) => {}
    }
    // Within bounds, and checked again on the descriptor (a FIFO swapped in since the stat).
    match crate::bounded_read::read_to_string(
        path,
        crate::bounded_read::ANSWER,
        crate::bounded_read::Links::Follow,
    ) {
        Ok(text) => Ok(Some(text.trim_end_matches(['\n', '\r']).to_string())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(crate::bounded_read::ReadError::Io(_)) => Ok(None),
        Err(e) => Err(SetupError::Refused(format!(
            "cannot read {}: {e}; or give the answer with -m \"...\"",
            path.display()
        ))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::workspace::create_run_dir;
    use std::os::fd::AsRawFd;

    /// Regression: a second `delta run` with the same id removed the folder of a run still
    /// being created (journal created and locked, `lock` not yet linked to it), and the first
    /// run went on writing into files that were gone.
    #[test]
    fn a_run_still_being_created_is_not_reclaimed() {
        let work = tempfile::tempdir().unwrap();
        let paths = create_run_dir(work.path(), "same-id").unwrap();
        let journal = std::fs::File::create(&paths.journal).unwrap();
        // SAFETY: flock on a descriptor this test keeps open.
        assert_eq!(
            unsafe { libc::flock(journal.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        let mut wait = LockWait::default();
        assert!(!reclaim_unstarted_run_dir(work.path(), "same-id", &mut wait).unwrap());
        assert!(paths.journal.exists());
        drop(journal);
        // Its creator gone (the lock free), the unstarted folder is reclaimed.
        assert!(reclaim_unstarted_run_dir(work.path(), "same-id", &mut wait).unwrap());
        assert!(!paths.run_dir.exists());
    }

    /// Regression: a second creator given the same run id in the instant between the first
    /// one's `mkdir` and the lock on its journal took the folder for a killed creation's
    /// leftover and removed it (both runs then failed). The judge now waits for the
    /// creation to be locked, and leaves the folder alone.
    #[test]
    fn a_folder_being_created_this_instant_is_judged_only_once_its_creator_locked_it() {
        use std::time::Duration;
        let work = tempfile::tempdir().unwrap();
        let creating = CreationLock::creating(work.path(), &mut LockWait::default()).unwrap();
        let paths = create_run_dir(work.path(), "same-id").unwrap();
        let work_dir = work.path().to_path_buf();
        // The judge says the moment it finds the lock held (its wait's notice, given at once).
        let (waiting, waits) = std::sync::mpsc::channel();
        let mut wait = LockWait::up_to(Duration::from_secs(3600))
            .notice_after(Duration::ZERO)
            .telling(move |_| {
                let _ = waiting.send(());
            });
        let judge =
            std::thread::spawn(move || reclaim_unstarted_run_dir(&work_dir, "same-id", &mut wait));
        // Half-way: the folder is made, its journal not yet locked. Without the creation
        // lock the judge removes the folder now and returns.
        let waited = waits.recv_timeout(Duration::from_secs(20));
        assert!(
            waited.is_ok() || judge.is_finished(),
            "the judge neither waited nor ended"
        );
        assert!(
            !judge.is_finished() && paths.run_dir.exists(),
            "the judge did not wait for the creation under way"
        );
        let journal = std::fs::File::create(&paths.journal).unwrap();
        // SAFETY: flock on a descriptor this test keeps open.
        assert_eq!(
            unsafe { libc::flock(journal.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        drop(creating);
        assert!(
            !judge.join().unwrap().unwrap(),
            "a run being created was reclaimed"
        );
        assert!(paths.journal.exists());
    }
}
