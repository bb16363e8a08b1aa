//! Reading a journal file: the FATAL refusals of reference §8.1 (JSON array, pretty-printed
//! JSON, wrong file name), one event per line with line-numbered parse errors, original-engine
//! lines via [`LegacyConverter`], lines of event types nobody here knows (hand-written by the
//! original engine's tests, e.g. `task_start`) skipped and reported, and torn-tail detection.
//! Only the last line may be incomplete; deciding to repair it, and journaling a WARNING for
//! each skipped line, is the writer's job — this file never writes.

use std::path::Path;

use serde_json::Value;

use super::event::{Event, JournalEvent, EVENT_TYPES};
use super::legacy::{LegacyConverter, ORIGINAL_TYPES};
use super::{JournalError, JOURNAL_FILE};

/// How the file ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Empty file, or the last line ends with `\n`.
    Clean,
    /// The last line is a complete event but has no `\n` yet.
    Unterminated,
    /// The last `bytes` bytes are an incomplete line (a write cut short by a crash).
    Torn { bytes: usize },
}

/// A line left out because its event type is unknown to delta and to the original engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkippedLine {
    /// 1-based line number in the file.
    pub(crate) line: usize,
    pub(crate) kind: String,
    pub(crate) seq: Option<u64>,
}

impl SkippedLine {
    /// The text of the WARNING event journaled for this line (stable, so a line is warned
    /// about once however often the journal is reopened).
    pub(crate) fn warning(&self) -> String {
        let seq = self.seq.map(|s| format!(", seq {s}")).unwrap_or_default();
        format!(
            "journal line {}{seq} has event type '{}', which delta does not know; the line was \
             skipped (kept in the file, never sent to the model)",
            self.line, self.kind
        )
    }
}

/// A parsed journal file.
#[derive(Debug)]
pub(crate) struct ParsedJournal {
    pub(crate) events: Vec<JournalEvent>,
    /// Lines of unknown event types, in file order.
    pub(crate) skipped: Vec<SkippedLine>,
    pub(crate) tail: Tail,
    /// Length of the file without a torn tail.
    pub(crate) valid_len: usize,
}

impl ParsedJournal {
    /// The `seq` for the next appended event: after the highest one in the file, skipped
    /// lines included.
    pub(crate) fn next_seq(&self) -> u64 {
        self.events
            .iter()
            .map(|e| e.seq)
            .chain(self.skipped.iter().filter_map(|s| s.seq))
            .max()
            .map_or(1, |seq| seq.saturating_add(1))
    }

    /// WARNING events still to journal: one per skipped line not already warned about.
    pub(crate) fn pending_skip_warnings(&self) -> Vec<Event> {
        self.skipped
            .iter()
            .map(SkippedLine::warning)
            .filter(|message| {
                !self
                    .events
                    .iter()
                    .any(|e| matches!(&e.event, Event::Warning { message: m } if m == message))
            })
            .map(|message| Event::Warning { message })
            .collect()
    }
}

/// One line, read. (The event is the large variant since CONTEXT_COMPACTED: a line is moved
/// straight into the replayed events, so boxing it would only add an allocation per event.)
#[allow(clippy::large_enum_variant)]
pub(super) enum Line {
    Event(JournalEvent),
    /// A JSON object whose `type` is neither ours nor the original engine's.
    Unknown {
        kind: String,
        seq: Option<u64>,
    },
}

/// Refuses any file not named `journal.jsonl`.
pub(crate) fn check_file_name(path: &Path) -> Result<(), JournalError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == JOURNAL_FILE {
        return Ok(());
    }
    Err(JournalError::fatal(
        path,
        format!(
            "FATAL: Journal filename is '{name}' ({}), expected '{JOURNAL_FILE}'. It may have been \
             renamed by hand or by an editor (e.g. a VSCode plugin). Rename it back to \
             {JOURNAL_FILE}, or restore the run directory from a backup.",
            path.display()
        ),
    ))
}

fn array_error(path: &Path) -> JournalError {
    JournalError::fatal(
        path,
        format!(
            "FATAL: journal {} is in JSON array format (it starts with '['), not JSONL. It was \
             probably rewritten by an editor such as a VSCode JSONL viewer. Restore from backup \
             or delete corrupted run directory; never open journals with JSON editors (use cat, \
             less or jq).",
            path.display()
        ),
    )
}

fn pretty_error(path: &Path, line: usize) -> JournalError {
    JournalError::fatal(
        path,
        format!(
            "FATAL: journal {} contains pretty-printed JSON (line {line} is not a complete JSON \
             object), probably reformatted by a JSON formatter. A journal needs exactly one \
             compact JSON object per line. Restore from backup or delete corrupted run \
             directory.",
            path.display()
        ),
    )
}

/// A fragment of a multi-line JSON document: indented, or a lone bracket.
fn looks_pretty_printed(line: &[u8]) -> bool {
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return true;
    }
    let trimmed = line.trim_ascii();
    matches!(trimmed, b"{" | b"}" | b"}," | b"[" | b"]" | b"],")
}

/// Parses one line: our flat shape first (the common case, one parse), then the original
/// engine's `payload` shape; an object of an unknown `type` is reported, not refused.
pub(super) fn parse_line(line: &[u8], converter: &mut LegacyConverter) -> Result<Line, String> {
    let ours_error = match serde_json::from_slice::<JournalEvent>(line) {
        Ok(event) => {
            converter.observe(&event.event);
            return Ok(Line::Event(event));
        }
        Err(e) => e,
    };
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(object)) => {
            if let Some(kind) = object.get("type").and_then(Value::as_str) {
                if !EVENT_TYPES.contains(&kind) && !ORIGINAL_TYPES.contains(&kind) {
                    return Ok(Line::Unknown {
                        kind: kind.to_string(),
                        seq: object.get("seq").and_then(Value::as_u64),
                    });
                }
            }
            if object.get("payload").is_some_and(Value::is_object) {
                converter.convert(&object).map(Line::Event)
            } else {
                Err(ours_error.to_string())
            }
        }
        Ok(_) => Err("expected a JSON object".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Parses a whole journal held in `bytes` (read from `path`).
pub(crate) fn parse_journal(path: &Path, bytes: &[u8]) -> Result<ParsedJournal, JournalError> {
    if bytes.trim_ascii_start().first() == Some(&b'[') {
        return Err(array_error(path));
    }
    let mut converter = LegacyConverter::new(path);
    let mut events = Vec::new();
    let mut skipped = Vec::new();
    let (complete, tail_bytes) = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(last_newline) => bytes.split_at(last_newline + 1),
        None => bytes.split_at(0),
    };
    let mut line_number = 0;
    for line in complete.split_inclusive(|b| *b == b'\n') {
        line_number += 1;
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if line.trim_ascii().is_empty() {
            continue;
        }
        match parse_line(line, &mut converter) {
            Ok(Line::Event(event)) => events.push(event),
            Ok(Line::Unknown { kind, seq }) => skipped.push(SkippedLine {
                line: line_number,
                kind,
                seq,
            }),
            Err(_) if looks_pretty_printed(line) => return Err(pretty_error(path, line_number)),
            Err(message) => {
                return Err(JournalError::Parse {
                    path: path.to_path_buf(),
                    line: line_number,
                    message,
                })
            }
        }
    }
    let tail = if tail_bytes.is_empty() {
        Tail::Clean
    } else if tail_bytes.trim_ascii().is_empty() {
        Tail::Torn {
            bytes: tail_bytes.len(),
        }
    } else {
        match parse_line(tail_bytes, &mut converter) {
            Ok(Line::Event(event)) => {
                events.push(event);
                Tail::Unterminated
            }
            Ok(Line::Unknown { kind, seq }) => {
                skipped.push(SkippedLine {
                    line: line_number + 1,
                    kind,
                    seq,
                });
                Tail::Unterminated
            }
            Err(_) => Tail::Torn {
                bytes: tail_bytes.len(),
            },
        }
    };
    let valid_len = match tail {
        Tail::Torn { .. } => complete.len(),
        Tail::Clean | Tail::Unterminated => bytes.len(),
    };
    Ok(ParsedJournal {
        events,
        skipped,
        tail,
        valid_len,
    })
}

/// Reads every event of the journal at `path` without changing the file. A torn last line
/// is ignored (it is repaired by [`super::Journal::open`]); original-engine lines are
/// converted; lines of unknown event types are left out (the next [`super::Journal::open`]
/// journals a WARNING for each).
pub fn read_journal(path: &Path) -> Result<Vec<JournalEvent>, JournalError> {
    check_file_name(path)?;
    let bytes = crate::bounded_read::read(
        path,
        crate::bounded_read::JOURNAL,
        crate::bounded_read::Links::Refuse,
    )
    .map_err(|e| JournalError::read(path, e))?;
    parse_journal(path, &bytes).map(|parsed| parsed.events)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::journal::Event;

    const PATH: &str = "/w/.delta/r/journal.jsonl";

    fn parse(text: &str) -> Result<ParsedJournal, JournalError> {
        parse_journal(Path::new(PATH), text.as_bytes())
    }

    fn fatal_message(text: &str) -> String {
        match parse(text).unwrap_err() {
            JournalError::Fatal { message, path } => {
                assert_eq!(path, Path::new(PATH));
                message
            }
            other => panic!("expected FATAL, got {other:?}"),
        }
    }

    const LINE1: &str = r#"{"seq":1,"timestamp":"t","type":"USER_MESSAGE","content":"hi"}"#;
    const LINE2: &str = r#"{"seq":2,"timestamp":"t","type":"WARNING","message":"w"}"#;

    #[test]
    fn json_array_is_fatal() {
        let message = fatal_message(&format!("[{LINE1},\n{LINE2}]\n"));
        assert!(message.starts_with("FATAL"), "{message}");
        assert!(message.contains(PATH), "{message}");
        assert!(message.contains("JSON array format") && message.contains("starts with '['"));
        assert!(message.contains("Restore from backup or delete corrupted run directory"));
        assert!(fatal_message("  \n[]").contains("JSON array"));
    }

    #[test]
    fn pretty_printed_json_is_fatal() {
        let pretty = "{\n  \"seq\": 1,\n  \"type\": \"USER_MESSAGE\"\n}\n";
        let message = fatal_message(pretty);
        assert!(message.starts_with("FATAL"), "{message}");
        assert!(message.contains(PATH) && message.contains("pretty-printed JSON"));
        assert!(message.contains("line 1"), "{message}");
        // Pretty-printed events after valid compact ones are also caught.
        let message = fatal_message(&format!("{LINE1}\n{{\n  \"seq\": 2\n}}\n"));
        assert!(message.contains("line 2"), "{message}");
    }

    #[test]
    fn wrong_file_name_is_fatal() {
        let err = check_file_name(Path::new("/w/.delta/r/journal.json")).unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("FATAL: Journal filename is 'journal.json'"),
            "{message}"
        );
        assert!(message.contains("/w/.delta/r/journal.json"), "{message}");
        check_file_name(Path::new(PATH)).unwrap();
    }

    #[test]
    fn bad_middle_line_is_a_parse_error_with_its_number() {
        let text = format!("{LINE1}\n\n{{\"seq\":3,\"oops\n{LINE2}\n");
        match parse(&text).unwrap_err() {
            JournalError::Parse { line, message, .. } => {
                assert_eq!(line, 3);
                assert!(!message.is_empty());
            }
            other => panic!("expected Parse, got {other:?}"),
        }
        // A known type with bad fields is still refused, naming the line.
        let broken = r#"{"seq":2,"timestamp":"t","type":"THOUGHT","iteration":"x"}"#;
        let err = parse(&format!("{LINE1}\n{broken}\n")).unwrap_err();
        assert!(
            matches!(err, JournalError::Parse { line: 2, .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains(PATH) && message.contains("line 2"),
            "{message}"
        );
    }

    /// Regression (issue 11 item 18): a journal with an event type delta does not know (the
    /// original engine's tests hand-write `task_start`) was refused; the line is skipped and
    /// reported, in our shape, the original's and as an unterminated last line.
    #[test]
    fn unknown_event_types_are_skipped_and_reported() {
        let text = [
            r#"{"type":"task_start","timestamp":"t0","task":"hand-written"}"#,
            LINE1,
            r#"{"seq":7,"timestamp":"t","type":"custom_note","payload":{"x":1}}"#,
            LINE2,
            r#"{"seq":9,"timestamp":"t","type":"NOPE"}"#,
        ]
        .join("\n");
        let parsed = parse(&text).unwrap();
        let seqs: Vec<u64> = parsed.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(parsed.tail, Tail::Unterminated);
        let skipped: Vec<(usize, &str, Option<u64>)> = parsed
            .skipped
            .iter()
            .map(|s| (s.line, s.kind.as_str(), s.seq))
            .collect();
        assert_eq!(
            skipped,
            [
                (1, "task_start", None),
                (3, "custom_note", Some(7)),
                (5, "NOPE", Some(9))
            ]
        );
        assert_eq!(
            parsed.next_seq(),
            10,
            "numbering continues after skipped lines"
        );
        let warnings = parsed.pending_skip_warnings();
        assert_eq!(warnings.len(), 3);
        assert!(
            matches!(&warnings[0], Event::Warning { message } if message.contains("line 1") && message.contains("'task_start'")),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_skipped_line_already_warned_about_is_not_warned_again() {
        let unknown = r#"{"seq":1,"timestamp":"t","type":"task_start"}"#;
        let first = parse(&format!("{unknown}\n")).unwrap();
        let Event::Warning { message } = &first.pending_skip_warnings()[0] else {
            panic!("not a warning");
        };
        let warned =
            serde_json::json!({"seq": 2, "timestamp": "t", "type": "WARNING", "message": message});
        let again = parse(&format!("{unknown}\n{warned}\n")).unwrap();
        assert!(again.pending_skip_warnings().is_empty());
    }

    #[test]
    fn clean_unterminated_and_torn_tails() {
        let clean = parse(&format!("{LINE1}\n{LINE2}\n")).unwrap();
        assert_eq!((clean.events.len(), clean.tail), (2, Tail::Clean));

        let unterminated = parse(&format!("{LINE1}\n{LINE2}")).unwrap();
        assert_eq!(unterminated.tail, Tail::Unterminated);
        assert_eq!(unterminated.events.len(), 2);

        let torn_text = format!("{LINE1}\n{}", &LINE2[..20]);
        let torn = parse(&torn_text).unwrap();
        assert_eq!(torn.tail, Tail::Torn { bytes: 20 });
        assert_eq!(torn.valid_len, LINE1.len() + 1);
        assert_eq!(torn.events.len(), 1);

        let empty = parse("").unwrap();
        assert_eq!((empty.events.len(), empty.tail), (0, Tail::Clean));
    }

    #[test]
    fn torn_multibyte_character_is_a_torn_tail() {
        let line = r#"{"seq":2,"timestamp":"t","type":"USER_MESSAGE","content":"héllo"}"#;
        let cut = line.find('é').unwrap() + 1; // inside the two-byte 'é'
        let mut bytes = format!("{LINE1}\n").into_bytes();
        bytes.extend_from_slice(&line.as_bytes()[..cut]);
        let parsed = parse_journal(Path::new(PATH), &bytes).unwrap();
        assert_eq!(parsed.tail, Tail::Torn { bytes: cut });
    }

    #[test]
    fn mixed_original_and_flat_lines_read_in_order() {
        let text = [
            r#"{"seq":1,"timestamp":"t1","type":"RUN_START","payload":{"run_id":"r","task":"go","agent_ref":"/a/x"}}"#,
            r#"{"seq":2,"timestamp":"t2","type":"USER_MESSAGE","payload":{"content":"go"}}"#,
            r#"{"seq":3,"timestamp":"t3","type":"THOUGHT","payload":{"content":"done","llm_invocation_ref":"u"}}"#,
            r#"{"seq":4,"timestamp":"t4","type":"USER_MESSAGE","content":"more"}"#,
            r#"{"seq":5,"timestamp":"t5","type":"THOUGHT","iteration":2,"content":"ok","tool_calls":[]}"#,
        ]
        .join("\n")
            + "\n";
        let events = parse(&text).unwrap().events;
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
        assert_eq!(
            events[1].event,
            Event::UserMessage {
                content: "go".into()
            }
        );
        assert!(matches!(
            events[2].event,
            Event::Thought { iteration: 1, .. }
        ));
        assert_eq!(
            events[3].event,
            Event::UserMessage {
                content: "more".into()
            }
        );
        assert_eq!(events[0].timestamp, "t1");
    }

    #[test]
    fn our_events_with_a_payload_argument_are_not_mistaken_for_original_ones() {
        let line = r#"{"seq":1,"timestamp":"t","type":"ACTION_REQUEST","iteration":1,"action_id":"c","tool_name":"post","tool_args":{"payload":{"a":1}},"resolved_command":"post"}"#;
        let events = parse(&format!("{line}\n")).unwrap().events;
        assert!(matches!(events[0].event, Event::ActionRequest { .. }));
    }

    #[test]
    fn non_object_lines_are_parse_errors() {
        let err = parse("42\n").unwrap_err();
        assert!(
            matches!(err, JournalError::Parse { line: 1, ref message, .. } if message.contains("JSON object"))
        );
    }
}
