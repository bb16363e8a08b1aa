//! Taking a run: creating a new run's files, or reopening an existing run for `continue`
//! under its lock, repairing what a crash left behind, and applying the continue state table
//! (spec §2.6.2). Runs before the first iteration, synchronously, inside the RunActor.
//!
//! Must not: talk to the model or run tools.

use std::collections::HashMap;
use std::path::Path;

use crate::api::{RunRequest, RunStart};
use crate::context::INTERRUPTED_OBSERVATION;
use crate::journal::{ActionStatus, Event, Journal, JournalEvent, JournalOptions};
use crate::metadata::{
    current_process_identity, read_metadata, write_metadata, RunLock, RunMetadata,
};
use crate::protocol::{RunStatus, TokenUsage};
use crate::workspace::{create_run_dir, ensure_control_dir, now_rfc3339, open_run_dir, RunPaths};

/// A run, taken and ready for its first iteration.
pub struct TakenRun {
    pub paths: RunPaths,
    pub journal: Journal,
    pub events: Vec<JournalEvent>,
    pub meta: RunMetadata,
    pub lock: RunLock,
    pub resumed: bool,
    /// Sensitive ask_human answers by action id (substituted only into model requests).
    pub secrets: HashMap<String, String>,
}

/// Why a run could not be taken. The run's files are left as they were.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Io(String),
}

fn io<E: std::fmt::Display>(e: E) -> SetupError {
    SetupError::Io(e.to_string())
}

pub fn take_run(
    run_id: &str,
    request: &RunRequest,
    max_iterations: u32,
    fsync_every_event: bool,
) -> Result<TakenRun, SetupError> {
    let opts = JournalOptions { fsync_every_event };
    match &request.start {
        RunStart::New { task } => {
            ensure_control_dir(&request.work_dir).map_err(io)?;
            reclaim_unstarted_run_dir(&request.work_dir, run_id);
            let paths = create_run_dir(&request.work_dir, run_id)
                .map_err(|e| SetupError::Refused(e.to_string()))?;
            let lock = RunLock::try_acquire(&paths.run_dir)
                .map_err(io)?
                .ok_or_else(|| {
                    SetupError::Refused(format!("run '{run_id}' is locked by another process"))
                })?;
            let mut journal = Journal::create(&paths.run_dir, opts).map_err(io)?;
            let now = now_rfc3339();
            let identity = current_process_identity();
            let meta = RunMetadata {
                run_id: run_id.to_string(),
                workspace_id: request.workspace_id.clone(),
                agent_name: request.agent.name.clone(),
                status: RunStatus::Running,
                created_at: now.clone(),
                updated_at: now,
                end_time: None,
                initial_message: task.clone(),
                iterations: 0,
                max_iterations,
                error: None,
                agent_home: request.agent.home.to_string_lossy().into_owned(),
                work_dir: request.work_dir.to_string_lossy().into_owned(),
                pid: identity.pid,
                hostname: identity.hostname,
                start_time_unix: identity.start_time_unix,
                process_name: identity.process_name,
                result: None,
                usage: TokenUsage::default(),
                orchestration_id: request.orchestration_id.clone(),
            };
            write_metadata(&paths.run_dir, &meta).map_err(io)?;
            let mut events = Vec::with_capacity(16);
            events.push(
                journal
                    .append(Event::EngineStart {
                        run_id: run_id.to_string(),
                        agent_home: meta.agent_home.clone(),
                        work_dir: meta.work_dir.clone(),
                        agent_name: meta.agent_name.clone(),
                        task: task.clone(),
                    })
                    .map_err(io)?,
            );
            events.push(
                journal
                    .append(Event::UserMessage {
                        content: task.clone(),
                    })
                    .map_err(io)?,
            );
            Ok(TakenRun {
                paths,
                journal,
                events,
                meta,
                lock,
                resumed: false,
                secrets: HashMap::new(),
            })
        }
        RunStart::Continue { message, force } => {
            let paths = open_run_dir(&request.work_dir, run_id)
                .map_err(|e| SetupError::Refused(e.to_string()))?;
            let mut meta =
                read_metadata(&paths.run_dir).map_err(|e| SetupError::Refused(e.to_string()))?;
            let lock = match RunLock::try_acquire(&paths.run_dir).map_err(io)? {
                Some(lock) => lock,
                None => {
                    return Err(SetupError::Refused(format!(
                        "run '{run_id}' is being driven by another process (pid {} on host '{}'); wait for it to finish or stop it first",
                        meta.pid, meta.hostname
                    )))
                }
            };
            let (mut journal, mut events) = Journal::open(&paths.run_dir, opts).map_err(io)?;
            restore_task(run_id, &meta, &mut journal, &mut events).map_err(io)?;
            let mut status = meta.status;
            if status == RunStatus::Running {
                // We hold the lock, so whoever recorded RUNNING no longer drives the run. Across
                // hosts the lock may not be shared (network file systems): only with --force.
                let here = current_process_identity().hostname;
                if meta.hostname != here && !*force {
                    return Err(SetupError::Refused(format!(
                        "run '{run_id}' was started on host '{}'. Its process cannot be checked from here.\nIf you are sure the original process is dead, use --force.",
                        meta.hostname
                    )));
                }
                let reason = format!(
                    "the run lock was free: process {} on host '{}' no longer drives the run",
                    meta.pid, meta.hostname
                );
                events.push(
                    journal
                        .append(Event::Interrupted {
                            reason: format!("janitor: {reason}"),
                        })
                        .map_err(io)?,
                );
                status = RunStatus::Interrupted;
            }
            let secrets = load_secrets(&paths.secrets_dir);
            let pending_question = pending_ask_human(&events);
            match status {
                RunStatus::WaitingForInput => {
                    let response_file = paths.interaction_dir.join("response.txt");
                    let answer = match message {
                        Some(m) => Some(m.clone()),
                        None => std::fs::read_to_string(&response_file)
                            .ok()
                            .map(|s| s.trim_end_matches(['\n', '\r']).to_string()),
                    };
                    let Some(answer) = answer else {
                        return Err(SetupError::Refused(format!(
                            "run '{run_id}' is WAITING_FOR_INPUT: give the answer with -m \"...\" or write it to {}",
                            response_file.display()
                        )));
                    };
                    if let Some(q) = &pending_question {
                        let recorded =
                            super::human::record_answer(&mut journal, &paths, q, &answer)
                                .map_err(io)?;
                        events.extend(recorded);
                    }
                    let _ = std::fs::remove_file(paths.interaction_dir.join("request.json"));
                    let _ = std::fs::remove_file(&response_file);
                }
                RunStatus::Interrupted => {}
                RunStatus::Completed | RunStatus::Failed => {
                    if message.is_none() {
                        return Err(SetupError::Refused(format!(
                            "run '{run_id}' is {status}: to continue it, give a message with -m \"...\""
                        )));
                    }
                }
                RunStatus::Running => {}
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
            let identity = current_process_identity();
            meta.status = RunStatus::Running;
            meta.updated_at = now_rfc3339();
            meta.end_time = None;
            meta.error = None;
            meta.result = None;
            meta.max_iterations = max_iterations;
            meta.pid = identity.pid;
            meta.hostname = identity.hostname;
            meta.process_name = identity.process_name;
            meta.start_time_unix = identity.start_time_unix;
            meta.agent_home = request.agent.home.to_string_lossy().into_owned();
            write_metadata(&paths.run_dir, &meta).map_err(io)?;
            Ok(TakenRun {
                paths,
                journal,
                events,
                meta,
                lock,
                resumed: true,
                secrets,
            })
        }
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

/// A process killed between creating a run directory and writing its metadata leaves a
/// directory without `metadata.json` and with an empty journal: nothing ran (metadata is
/// written before the first event). Such a directory, when its lock is free, is removed so
/// the run can start under the same id (a resumed orchestration reuses its run ids).
fn reclaim_unstarted_run_dir(work_dir: &Path, run_id: &str) {
    let paths = RunPaths::new(work_dir, run_id);
    if !paths.run_dir.is_dir() || paths.metadata.exists() {
        return;
    }
    if std::fs::metadata(&paths.journal).is_ok_and(|m| m.len() > 0) {
        return;
    }
    if let Ok(Some(_lock)) = RunLock::try_acquire(&paths.run_dir) {
        let _ = std::fs::remove_dir_all(&paths.run_dir);
    }
}

/// The ask_human call still waiting for its answer, if any.
pub struct PendingQuestion {
    pub iteration: u32,
    pub action_id: String,
    pub sensitive: bool,
}

fn pending_ask_human(events: &[JournalEvent]) -> Option<PendingQuestion> {
    let answered = answered_ids(events);
    events.iter().rev().find_map(|e| match &e.event {
        Event::HumanInputRequest {
            iteration,
            action_id,
            sensitive,
            input_type,
            ..
        } if !answered.contains(action_id.as_str()) => Some(PendingQuestion {
            iteration: *iteration,
            action_id: action_id.clone(),
            sensitive: *sensitive || input_type == "password",
        }),
        _ => None,
    })
}

fn answered_ids(events: &[JournalEvent]) -> std::collections::HashSet<&str> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ActionResult { action_id, .. } => Some(action_id.as_str()),
            _ => None,
        })
        .collect()
}

/// Calls requested by the model (THOUGHT tool_calls) that have no ACTION_RESULT.
pub fn unanswered_calls(events: &[JournalEvent]) -> Vec<(u32, String, String)> {
    let answered = answered_ids(events);
    let mut out = Vec::new();
    for e in events {
        if let Event::Thought {
            iteration,
            tool_calls,
            ..
        } = &e.event
        {
            for call in tool_calls {
                if !answered.contains(call.id.as_str()) {
                    out.push((*iteration, call.id.clone(), call.name.clone()));
                }
            }
        }
    }
    out
}

fn load_secrets(dir: &Path) -> HashMap<String, String> {
    let mut secrets = HashMap::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if let (Some(name), Ok(value)) = (
                entry.file_name().to_str().map(str::to_string),
                std::fs::read_to_string(entry.path()),
            ) {
                secrets.insert(name, value);
            }
        }
    }
    secrets
}
