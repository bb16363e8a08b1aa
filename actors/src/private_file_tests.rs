//! Every writer of delta's own files against a hard link planted in a file's place (issue
//! 31, item 6): a tool that links `journal.jsonl`, `io/reply.partial`, the metadata spare...
//! to another file of the user's made delta write that file. One table, one row per writer:
//! the planted name is a second name of "the user's file", the writer is called, and it must
//! refuse (naming the file where its error carries a path) and leave the user's file as it
//! was. Each row's user file holds what that writer would accept, so that without the check
//! the write goes through and the row fails.

use std::path::{Path, PathBuf};

use crate::journal::{Event, Journal, JournalOptions};
use crate::metadata::{write_metadata, RunLock, RunMetadata, METADATA_SPARE};
use crate::workspace::live_reply::{write_partial_reply, PartialReply};

/// One writer: where a hard link is planted, what the user's file holds, and the write.
struct Row {
    what: &'static str,
    /// The planted name, from the test's root.
    planted: &'static str,
    /// Prepares the root (a run folder...) and returns the user's file's text.
    prepare: fn(&Path) -> Vec<u8>,
    /// The write; its error's text (the io::Error's own for writers that return one).
    write: fn(&Path) -> Result<(), String>,
    /// Whether the writer's error names the file (an `io::Error` writer leaves that to its
    /// caller, whose error type adds the path).
    names_the_file: bool,
}

/// A user's file of plain text (for writers that take any file).
fn plain_text(_: &Path) -> Vec<u8> {
    b"the user's own text\n".to_vec()
}

fn meta(root: &Path) -> RunMetadata {
    RunMetadata::new_running("r1", "agent", "task", root, root, 3)
}

/// A run's journal with one event, as bytes (what a journal holds).
fn journal_bytes(root: &Path) -> Vec<u8> {
    let mut journal = Journal::create(root, JournalOptions::default()).unwrap();
    journal
        .append(Event::UserMessage {
            content: "hello".into(),
        })
        .unwrap();
    drop(journal);
    std::fs::read(root.join("journal.jsonl")).unwrap()
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            what: "write_private_file (hook results, plan copies, handoffs, request.json)",
            planted: "record.json",
            prepare: plain_text,
            write: |root| {
                crate::private_file::write_private_file(&root.join("record.json"), b"{}").map_err(
                    |e| {
                        assert!(crate::private_file::is_other_names(&e), "{e}");
                        e.to_string()
                    },
                )
            },
            names_the_file: false,
        },
        Row {
            what: "io/ audit records",
            planted: "io/hooks/pre_llm_request_1.json",
            prepare: |root| {
                std::fs::create_dir_all(root.join("io/hooks")).unwrap();
                b"the user's own text\n".to_vec()
            },
            write: |root| {
                crate::workspace::write_redacted_json_file(
                    &root.join("io/hooks/pre_llm_request_1.json"),
                    &serde_json::json!({"a": 1}),
                    &crate::redact::SecretSet::default(),
                )
                .map_err(|e| e.to_string())
            },
            names_the_file: true,
        },
        Row {
            what: "metadata.json's spare",
            planted: METADATA_SPARE,
            prepare: plain_text,
            write: |root| write_metadata(root, &meta(root)).map_err(|e| e.to_string()),
            names_the_file: true,
        },
        Row {
            what: "metadata.json (it becomes the spare at the next exchange)",
            planted: "metadata.json",
            prepare: |root| serde_json::to_vec_pretty(&meta(root)).unwrap(),
            write: |root| {
                write_metadata(root, &meta(root)).unwrap();
                write_metadata(root, &meta(root)).map_err(|e| e.to_string())
            },
            names_the_file: false,
        },
        Row {
            what: "journal.jsonl (continue appends to it)",
            planted: "journal.jsonl",
            prepare: |root| {
                let bytes = journal_bytes(root);
                std::fs::remove_file(root.join("journal.jsonl")).unwrap();
                bytes
            },
            write: |root| {
                let (mut journal, _) =
                    Journal::open(root, JournalOptions::default()).map_err(|e| e.to_string())?;
                journal
                    .append(Event::UserMessage {
                        content: "more".into(),
                    })
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
            names_the_file: true,
        },
        Row {
            what: "the run's lock (continue appends the journal through it)",
            planted: "lock",
            prepare: plain_text,
            write: |root| match RunLock::try_acquire(root) {
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            },
            names_the_file: true,
        },
        Row {
            what: "io/reply.partial",
            planted: "io/reply.partial",
            prepare: |root| {
                std::fs::create_dir_all(root.join("io")).unwrap();
                b"the user's own text\n".to_vec()
            },
            write: |root| {
                write_partial_reply(&root.join("io/reply.partial"), &PartialReply::default())
                    .map_err(|e| {
                        assert!(crate::private_file::is_other_names(&e), "{e}");
                        e.to_string()
                    })
            },
            names_the_file: false,
        },
        Row {
            what: "an orchestration's journal",
            planted: ".delta/orchestrations/o1/journal.jsonl",
            prepare: |root| {
                std::fs::create_dir_all(root.join(".delta/orchestrations/o1")).unwrap();
                std::fs::write(root.join("plan.yaml"), "stages: []\n").unwrap();
                Vec::new()
            },
            write: |root| {
                crate::plan::state::OrchestrationState::open(
                    root,
                    "o1",
                    &root.join("plan.yaml"),
                    &serde_json::json!({}),
                    false,
                )
                .map(drop)
                .map_err(|e| e.to_string())
            },
            names_the_file: true,
        },
        Row {
            what: "LAST_USED of an agent's workspaces",
            planted: "workspaces/LAST_USED",
            prepare: |root| {
                std::fs::create_dir_all(root.join("workspaces")).unwrap();
                b"W001".to_vec()
            },
            write: |root| {
                crate::workspace::create_workspace(root, "W002")
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
            names_the_file: true,
        },
        Row {
            what: "a session's files (written new)",
            planted: "session.out",
            prepare: plain_text,
            write: |root| {
                crate::session::files::create_private_file(&root.join("session.out"))
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
            names_the_file: true,
        },
        Row {
            what: "a session's logs (appended)",
            planted: "output.log",
            prepare: plain_text,
            write: |root| {
                use std::io::Write;
                let mut log = crate::session::files::append_private_file(&root.join("output.log"))
                    .map_err(|e| e.to_string())?;
                log.write_all(b"more").map_err(|e| e.to_string())
            },
            names_the_file: true,
        },
        #[cfg(feature = "serve")]
        Row {
            what: "delta serve's state lock (its holder is written into it)",
            planted: crate::serve::state_lock::LOCK_FILE,
            prepare: plain_text,
            write: |root| {
                crate::serve::state_lock::StateLock::acquire(root)
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
            names_the_file: true,
        },
    ]
}

/// Regression: delta wrote through hard links a tool planted in its files' places (another
/// file of the user's was overwritten or appended to). Every writer now refuses them. Every
/// row is tried, and every failing row is reported.
#[test]
fn every_writer_refuses_a_hard_link_planted_in_its_files_place_and_the_other_file_is_untouched() {
    let failures: Vec<String> = rows().iter().filter_map(failure_of).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What went wrong with `row`, if anything.
fn failure_of(row: &Row) -> Option<String> {
    let root = tempfile::tempdir().unwrap();
    let users_text = (row.prepare)(root.path());
    let users_file = root.path().join("the-users-file");
    std::fs::write(&users_file, &users_text).unwrap();
    let planted: PathBuf = root.path().join(row.planted);
    let _ = std::fs::remove_file(&planted);
    std::fs::hard_link(&users_file, &planted).unwrap();

    let outcome = (row.write)(root.path());
    let changed = std::fs::read(&users_file).unwrap() != users_text;
    let what = row.what;
    match outcome {
        Ok(()) => Some(format!(
            "{what}: wrote through the hard link (changed: {changed})"
        )),
        Err(_) if changed => Some(format!("{what}: the user's file changed")),
        Err(error) if !error.contains("hard link") => {
            Some(format!("{what}: not refused as a hard link: {error}"))
        }
        Err(error) if row.names_the_file && !error.contains(&planted.display().to_string()) => {
            Some(format!(
                "{what}: the error does not name {}: {error}",
                planted.display()
            ))
        }
        Err(_) => None,
    }
}
