//! On-disk contracts end to end: journals and metadata written by the original TypeScript
//! engine read back (and continued in our format), the bad-journal fixtures refused or
//! repaired, and a run directory's life cycle (create, lock, journal, metadata, janitor view,
//! list-runs). Fixtures are copied to a temp dir before anything may write to them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use delta_actors::journal::{
    read_journal, ActionStatus, Event, Journal, JournalError, JournalOptions,
};
use delta_actors::metadata::{
    assess_liveness, current_process_identity, read_metadata, write_metadata, Liveness, RunLock,
    RunMetadata,
};
use delta_actors::workspace::{create_run_dir, list_runs, list_runs_with_warnings, open_run_dir};
use delta_actors::RunStatus;

const COMPLETED_RUN: &str = "20261122_014234_915ade";
const WAITING_RUN: &str = "20261122_015010_0c4b1e";

fn original_work_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/engine/fixtures/original-engine/work")
}

fn bad_journal_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/journals")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn fatal_message(result: Result<impl std::fmt::Debug, JournalError>) -> String {
    match result.unwrap_err() {
        JournalError::Fatal { message, .. } => message,
        other => panic!("expected a FATAL refusal, got {other:?}"),
    }
}

#[test]
fn original_engine_journal_reads_back_as_our_events() {
    let journal = original_work_fixture()
        .join(".delta")
        .join(COMPLETED_RUN)
        .join("journal.jsonl");
    let events = read_journal(&journal).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    let types: Vec<&str> = events.iter().map(|e| e.event.type_name()).collect();
    assert_eq!(
        types,
        [
            "ENGINE_START",
            "USER_MESSAGE",
            "HOOK_EXECUTED",
            "THOUGHT",
            "ACTION_REQUEST",
            "ACTION_RESULT",
            "THOUGHT",
            "ENGINE_END"
        ]
    );
    let Event::EngineStart {
        run_id,
        agent_name,
        work_dir,
        ..
    } = &events[0].event
    else {
        unreachable!()
    };
    assert_eq!(run_id, COMPLETED_RUN);
    assert_eq!(agent_name, "file-helper");
    assert_eq!(Path::new(work_dir), original_work_fixture());
    let Event::Thought {
        iteration,
        content,
        tool_calls,
        ..
    } = &events[3].event
    else {
        unreachable!()
    };
    assert_eq!((*iteration, content.as_deref()), (1, None));
    assert_eq!(tool_calls[0].id, "call_Q1w2E3r4");
    assert_eq!(tool_calls[0].name, "list_files");
    let Event::ActionResult {
        tool_name,
        status,
        exit_code,
        iteration,
        ..
    } = &events[5].event
    else {
        unreachable!()
    };
    assert_eq!(
        (tool_name.as_str(), *status, *exit_code, *iteration),
        ("list_files", ActionStatus::Success, Some(0), 1)
    );
    let Event::Thought {
        iteration: 2,
        content: Some(answer),
        tool_calls,
        ..
    } = &events[6].event
    else {
        panic!("{:?}", events[6]);
    };
    assert!(answer.contains("notes.txt") && tool_calls.is_empty());
    assert!(matches!(
        events[7].event,
        Event::EngineEnd {
            status: RunStatus::Completed,
            final_iteration: 2,
            ..
        }
    ));
}

#[test]
fn original_engine_paused_run_keeps_errors_and_pending_question() {
    let journal = original_work_fixture()
        .join(".delta")
        .join(WAITING_RUN)
        .join("journal.jsonl");
    let events = read_journal(&journal).unwrap();
    assert!(matches!(
        &events[3].event,
        Event::Error { error_message, .. } if error_message == "Tool not found: rm_tmp"
    ));
    // A result without a request takes its tool name from the THOUGHT's tool call.
    assert!(matches!(
        &events[4].event,
        Event::ActionResult { tool_name, status: ActionStatus::Error, execution_ref: None, .. }
            if tool_name == "rm_tmp"
    ));
    assert!(matches!(
        &events[6].event,
        Event::ActionRequest { iteration: 2, tool_name, .. } if tool_name == "ask_human"
    ));
    assert_eq!(
        events[7].event,
        Event::Warning {
            message: "Agent pausing for human input".into()
        }
    );
}

#[test]
fn original_engine_metadata_and_list_runs() {
    let work = original_work_fixture();
    let meta = read_metadata(&work.join(".delta").join(WAITING_RUN)).unwrap();
    assert_eq!(meta.status, RunStatus::WaitingForInput);
    assert_eq!(meta.initial_message, "Delete the temporary files");
    assert_eq!((meta.pid, meta.hostname.as_str()), (48377, "devbox"));
    assert_eq!(meta.end_time, None);

    let listing = list_runs_with_warnings(&work).unwrap();
    assert!(listing.skipped.is_empty(), "{:?}", listing.skipped);
    let ids: Vec<&str> = listing.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, [WAITING_RUN, COMPLETED_RUN]);
    let completed = &listing.runs[1];
    assert_eq!(completed.status, RunStatus::Completed);
    assert_eq!(completed.task_summary, "List the files in the workspace");
    assert_eq!(completed.iterations, 1);
    assert_eq!(completed.last_updated, "2026-11-22T01:42:37.884Z");
}

#[test]
fn continuing_an_original_journal_appends_flat_lines_with_continued_seq() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&original_work_fixture(), tmp.path());
    let paths = open_run_dir(tmp.path(), COMPLETED_RUN).unwrap();
    let (mut journal, events) = Journal::open(&paths.run_dir, JournalOptions::default()).unwrap();
    assert_eq!(events.len(), 8);
    assert_eq!(journal.next_seq(), 9);
    journal
        .append(Event::UserMessage {
            content: "Now count them.".into(),
        })
        .unwrap();
    journal.sync().unwrap();

    let text = std::fs::read_to_string(&paths.journal).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with(r#"{"seq":9,"timestamp":""#)
            && last.contains(r#""type":"USER_MESSAGE","content":"Now count them.""#),
        "{last}"
    );
    assert!(!last.contains("payload"));
    let mixed = read_journal(&paths.journal).unwrap();
    assert_eq!(mixed.len(), 9);
    assert_eq!(mixed[..8], events[..]);

    // A second reopen of the mixed file continues again.
    drop(journal);
    let (journal, _) = Journal::open(&paths.run_dir, JournalOptions::default()).unwrap();
    assert_eq!(journal.next_seq(), 10);
}

#[test]
fn json_array_journal_is_refused() {
    let path = bad_journal_fixture("json-array").join("journal.jsonl");
    let message = fatal_message(read_journal(&path));
    assert!(message.starts_with("FATAL"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("JSON array"), "{message}");

    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&bad_journal_fixture("json-array"), tmp.path());
    let message = fatal_message(Journal::open(tmp.path(), JournalOptions::default()));
    assert!(message.contains("JSON array"), "{message}");
}

#[test]
fn pretty_printed_journal_is_refused() {
    let path = bad_journal_fixture("pretty-printed").join("journal.jsonl");
    let message = fatal_message(read_journal(&path));
    assert!(message.starts_with("FATAL"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("pretty-printed JSON"), "{message}");
}

#[test]
fn wrongly_named_journal_is_refused() {
    let path = bad_journal_fixture("wrong-name").join("journal.json");
    let message = fatal_message(read_journal(&path));
    assert!(
        message.starts_with("FATAL: Journal filename is 'journal.json'"),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
}

#[test]
fn torn_tail_fixture_is_repaired_on_open() {
    let fixture = bad_journal_fixture("torn-tail").join("journal.jsonl");
    // Read-only readers skip the torn line and leave the file alone.
    let before = std::fs::read(&fixture).unwrap();
    assert_eq!(read_journal(&fixture).unwrap().len(), 2);
    assert_eq!(std::fs::read(&fixture).unwrap(), before);

    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&bad_journal_fixture("torn-tail"), tmp.path());
    let (mut journal, events) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
    assert_eq!(events.len(), 3);
    assert!(matches!(
        &events[2].event,
        Event::Warning { message } if message.contains("torn line of 41 bytes")
    ));
    journal
        .append(Event::UserMessage {
            content: "go on".into(),
        })
        .unwrap();
    let text = std::fs::read_to_string(journal.path()).unwrap();
    assert!(text.ends_with('\n'));
    assert!(!text.contains(r#"{"seq":3,"timestamp":"2026-11-22T02:00:01"#));
    let seqs: Vec<u64> = read_journal(journal.path())
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
}

#[test]
fn run_directory_life_cycle() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("W001");
    let paths = create_run_dir(&work, "run-1").unwrap();
    let lock = RunLock::try_acquire(&paths.run_dir)
        .unwrap()
        .expect("fresh run");
    let mut meta = RunMetadata::new_running(
        "run-1",
        "hello",
        "Say hello",
        Path::new("/agents/hello"),
        &work,
        10,
    );
    write_metadata(&paths.run_dir, &meta).unwrap();
    let mut journal = Journal::create(&paths.run_dir, JournalOptions::default()).unwrap();
    journal
        .append(Event::EngineStart {
            run_id: "run-1".into(),
            agent_home: "/agents/hello".into(),
            work_dir: work.display().to_string(),
            agent_name: "hello".into(),
            task: "Say hello".into(),
        })
        .unwrap();

    // While the lock is held the run is alive, whatever the metadata says about hosts.
    let me = current_process_identity();
    assert!(matches!(
        assess_liveness(&paths.run_dir, &meta, "elsewhere", false).unwrap(),
        Liveness::Alive { .. }
    ));
    // A crash drops the lock; the janitor may then interrupt the run.
    drop(journal);
    drop(lock);
    let Liveness::Orphaned { reason } =
        assess_liveness(&paths.run_dir, &meta, &me.hostname, false).unwrap()
    else {
        panic!("expected Orphaned");
    };
    assert!(reason.contains("is free"), "{reason}");

    // Continue: take the lock again, claim the run, append after the existing events.
    let _lock = RunLock::try_acquire(&paths.run_dir).unwrap().unwrap();
    meta.claim(&me);
    meta.status = RunStatus::Completed;
    meta.iterations = 1;
    write_metadata(&paths.run_dir, &meta).unwrap();
    let (mut journal, events) = Journal::open(&paths.run_dir, JournalOptions::default()).unwrap();
    assert_eq!(events.len(), 1);
    let end = journal
        .append(Event::EngineEnd {
            run_id: "run-1".into(),
            status: RunStatus::Completed,
            final_iteration: 1,
            result: Some("hello".into()),
            error: None,
        })
        .unwrap();
    assert_eq!(end.seq, 2);

    let runs = list_runs(&work).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run_id, "run-1");
    assert_eq!(runs[0].status, RunStatus::Completed);
    assert_eq!(read_metadata(&paths.run_dir).unwrap(), meta);
}

/// Kill the process at any instant: whatever prefix of the journal reached the disk, the
/// next open succeeds, keeps every complete event, and leaves a file that reads cleanly.
#[test]
fn journal_cut_at_every_byte_reopens_with_a_prefix_of_its_events() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    std::fs::create_dir(&source).unwrap();
    let mut journal = Journal::create(&source, JournalOptions::default()).unwrap();
    let mut written = Vec::new();
    for content in ["héllo wörld", "second\nline", "{\"not\":\"json\"}", "☃"] {
        written.push(
            journal
                .append(Event::UserMessage {
                    content: content.into(),
                })
                .unwrap(),
        );
    }
    drop(journal);
    let full = std::fs::read(source.join("journal.jsonl")).unwrap();
    let line_ends: Vec<usize> = full
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();

    let run_dir = tmp.path().join("cut");
    std::fs::create_dir(&run_dir).unwrap();
    for cut in 0..=full.len() {
        let path = run_dir.join("journal.jsonl");
        std::fs::write(&path, &full[..cut]).unwrap();
        let complete = line_ends.iter().filter(|end| **end <= cut).count();
        let (journal, events) = Journal::open(&run_dir, JournalOptions::default())
            .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(events[..complete], written[..complete], "cut at {cut}");
        let repaired = !line_ends.contains(&cut) && cut > 0;
        assert_eq!(
            events.len(),
            complete + usize::from(repaired),
            "cut at {cut}"
        );
        if line_ends.contains(&(cut + 1)) {
            // Cut just before a '\n': the last event is whole and is kept.
            assert_eq!(events[complete], written[complete], "cut at {cut}");
        } else if repaired {
            assert!(
                matches!(events[complete].event, Event::Warning { .. }),
                "cut at {cut}"
            );
        }
        assert_eq!(journal.next_seq(), events.len() as u64 + 1, "cut at {cut}");
        assert_eq!(read_journal(&path).unwrap(), events, "cut at {cut}");
    }
}
