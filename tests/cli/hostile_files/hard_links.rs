//! Hard links planted in a run's folder (issue 31, item 6): a tool that replaced
//! `journal.jsonl` or `io/reply.partial` by a second name of another file of the user's made
//! delta append the run's events to that file, or write the live reply over it. delta
//! already refused symbolic links there; a file with another name is now refused the same
//! way, naming it, and the other file is left as it was. (Every writer is held to this by
//! the library's table test, `private_file::every_writer`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use crate::harness::*;

/// Regression: `delta continue` appended the run's events to whatever file a hard link in
/// `journal.jsonl`'s place was a second name of. It is refused (126) naming the journal;
/// the other file, a journal-shaped copy the appends would have gone to, is unchanged.
#[test]
fn continue_refuses_a_journal_that_is_a_hard_link_to_another_file() {
    let case = super::case_with_a_run("hard-journal");
    let run_dir = case.run_dir("r1");
    let journal = run_dir.join("journal.jsonl");
    // Another file of the user's, journal-shaped so that it would be read and appended to.
    let other = case.path().join("users-notes.jsonl");
    std::fs::copy(&journal, &other).unwrap();
    let before = std::fs::read(&other).unwrap();
    std::fs::remove_file(&journal).unwrap();
    std::fs::hard_link(&other, &journal).unwrap();

    let out = case.continue_run("r1", &["-m", "more"]);
    assert_eq!(out.code, 126, "{out:?}");
    assert!(
        out.stderr.contains(&journal.display().to_string()) && out.stderr.contains("hard link"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read(&other).unwrap(),
        before,
        "the other file changed"
    );

    // The run's own journal back (its `lock` is the journal's other, own name), it goes on.
    std::fs::remove_file(&journal).unwrap();
    std::fs::hard_link(run_dir.join("lock"), &journal).unwrap();
    case.continue_run("r1", &["-m", "more"]).assert_code(0);
}

/// Regression: a streamed reply was written over the file a hard link in
/// `io/reply.partial`'s place was a second name of. The live copy is refused, with a
/// warning naming the file; the run itself completes, and the other file is unchanged.
#[test]
fn a_streamed_reply_is_not_written_through_a_hard_link_planted_as_reply_partial() {
    let case = Case::new(
        "hard-partial",
        "tools: []\n",
        // The second answer streams for a second in five pieces: long enough to be kept
        // in io/reply.partial as it grows.
        &json!({"steps": [
            {"answer": "done"},
            {"answer": "one two three four five", "chunks": 5, "latency": "1s"}
        ]}),
    );
    case.run("r1", "first", &[]).assert_code(0);
    let partial = case.run_dir("r1").join("io/reply.partial");
    let other = case.path().join("users-draft.txt");
    std::fs::write(&other, "the user's draft\n").unwrap();
    let _ = std::fs::remove_file(&partial);
    std::fs::hard_link(&other, &partial).unwrap();

    let out = case.continue_run("r1", &["-m", "more"]);
    out.assert_code(0);
    assert_eq!(out.json()["result"], "one two three four five", "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&other).unwrap(),
        "the user's draft\n",
        "the live reply was written over the other file"
    );
    assert!(
        out.stderr.contains(&partial.display().to_string()) && out.stderr.contains("hard link"),
        "{}",
        out.stderr
    );
}
