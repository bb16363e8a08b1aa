//! Tests of the runs view: a run's journal as a timeline read from a line offset, a planted
//! FIFO, a running orchestration's progress from its scheduling journal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn a_journal_reads_as_a_timeline_from_an_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".delta/R1");
    std::fs::create_dir_all(&dir).unwrap();
    let lines = [
        r#"{"seq":1,"timestamp":"t","type":"ENGINE_START","run_id":"R1","agent_home":"a","work_dir":"w","agent_name":"demo","task":"do it"}"#,
        r#"{"seq":2,"timestamp":"t","type":"THOUGHT","iteration":1,"content":"thinking","tool_calls":[{"id":"c","name":"ls","arguments":"{}"}]}"#,
        r#"{"seq":3,"timestamp":"t","type":"ACTION_RESULT","iteration":1,"action_id":"c","tool_name":"ls","status":"SUCCESS","observation_content":"a.txt"}"#,
        r#"{"seq":4,"timestamp":"t","type":"ERROR","error_type":"x","error_message":"boom"}"#,
    ];
    std::fs::write(dir.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
    let all = timeline(tmp.path(), "R1", 0).unwrap();
    let kinds: Vec<_> = all.entries.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        ["start", "thought", "tool-call", "tool-result", "error"]
    );
    assert_eq!(all.next, 4);
    assert_eq!(all.entries[3].text, "a.txt");
    let rest = timeline(tmp.path(), "R1", 3).unwrap();
    assert_eq!(rest.entries.len(), 1);
    assert!(timeline(tmp.path(), "../x", 0).is_err());
    assert!(timeline(tmp.path(), "R2", 0).is_err());
}

/// Regression (issue 31 item 19): a FIFO planted as the journal was a 500 `io`; it is
/// said as unreadable (422), at once, without waiting for a writer.
#[test]
fn a_fifo_journal_is_unreadable_not_an_io_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".delta/R1");
    std::fs::create_dir_all(&dir).unwrap();
    nix::unistd::mkfifo(
        &dir.join("journal.jsonl"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let error = timeline(tmp.path(), "R1", 0).err().unwrap();
    assert_eq!(error.code(), "unreadable", "{error}");
    assert!(error.to_string().contains("FIFO"), "{error}");
}

#[test]
fn a_running_orchestration_shows_stage_progress_from_its_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".delta/orchestrations/o1");
    std::fs::create_dir_all(&dir).unwrap();
    let lines = [
        r#"{"timestamp":"t","type":"ORCHESTRATION_STARTED","plan":"p.yaml","workspace":"w","resumed":false}"#,
        r#"{"timestamp":"t","type":"STAGE_STARTED","stage":"map","runs":3}"#,
        r#"{"timestamp":"t","type":"RUN_FINISHED","stage":"map","index":0,"run_id":"a","status":"COMPLETED","attempt":1,"error":null}"#,
        r#"{"timestamp":"t","type":"RUN_FINISHED","stage":"map","index":1,"run_id":"b","status":"FAILED","attempt":1,"error":"x"}"#,
    ];
    std::fs::write(dir.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
    let orchestration = &orchestration_view(&dir).unwrap();
    assert_eq!(orchestration.status, OrchestrationStatus::Running);
    assert_eq!(orchestration.stages[0].id, "map");
    assert_eq!(
        (
            orchestration.stages[0].total,
            orchestration.stages[0].completed,
            orchestration.stages[0].failed
        ),
        (3, 1, 1)
    );
}

/// The timeline reads the journal's typed events: a line that is not one (a newer delta's
/// event) is passed over and the next read starts after it; a torn last line (a live run
/// mid-write) is read again next time.
#[test]
fn the_timeline_passes_over_unknown_lines_and_stops_at_a_torn_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".delta/R1");
    std::fs::create_dir_all(&dir).unwrap();
    let text = [
        r#"{"seq":1,"timestamp":"t","type":"USER_MESSAGE","content":"hi"}"#,
        r#"{"seq":2,"timestamp":"t","type":"CONTEXT_COMPACTED","kept":3}"#,
        r#"{"seq":3,"timestamp":"t","type":"ENGINE_END","run_id":"R1","status":"FAILED","final_iteration":0,"error":"llm_error: x"}"#,
        r#"{"seq":4,"timestamp":"t","type":"WARN"#,
    ]
    .join("\n");
    std::fs::write(dir.join("journal.jsonl"), text).unwrap();
    let read = timeline(tmp.path(), "R1", 0).unwrap();
    let titles: Vec<&str> = read.entries.iter().map(|e| e.title.as_str()).collect();
    assert_eq!(titles, ["Message", "Run ended: FAILED"]);
    assert_eq!(read.entries[1].text, "llm_error: x");
    assert_eq!(read.next, 3, "the torn line is read again next time");
    let again = timeline(tmp.path(), "R1", read.next).unwrap();
    assert_eq!((again.entries.len(), again.next), (0, 3));
}
