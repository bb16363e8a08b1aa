//! Repeated journal lines: the same event under the same `seq` twice (a line pasted twice, a
//! replay bug) is replayed once, so the model never sees one tool call twice.
//!
//! Must not: change the file (the journal is append-only; [`super::Journal::open`] journals
//! a WARNING naming the repeats instead).

use super::event::JournalEvent;

/// Removes events that repeat an earlier event with the same `seq` (a line pasted twice, or
/// written again by a replay bug): replayed, they would send the model duplicate tool-call
/// ids, which providers refuse. Returns the seqs of the removed repeats. Two *different*
/// events under one seq are both kept: the original engine wrote such journals when two of
/// its processes drove one run, and both events happened.
pub(super) fn drop_repeated_lines(events: &mut Vec<JournalEvent>) -> Vec<u64> {
    let mut seen: std::collections::HashMap<u64, Vec<usize>> = std::collections::HashMap::new();
    let mut repeated = Vec::new();
    let mut kept: Vec<JournalEvent> = Vec::with_capacity(events.len());
    for event in events.drain(..) {
        let earlier = seen.entry(event.seq).or_default();
        if earlier.iter().any(|&i| kept[i].event == event.event) {
            repeated.push(event.seq);
            continue;
        }
        earlier.push(kept.len());
        kept.push(event);
    }
    *events = kept;
    repeated
}

/// `3, 4, 5` (at most 10, then `…`).
pub(super) fn seq_list(seqs: &[u64]) -> String {
    let mut shown: Vec<String> = seqs.iter().take(10).map(u64::to_string).collect();
    if seqs.len() > 10 {
        shown.push("…".to_string());
    }
    shown.join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use crate::journal::{Event, Journal, JournalOptions, JOURNAL_FILE};

    fn user(content: &str) -> Event {
        Event::UserMessage {
            content: content.to_string(),
        }
    }

    /// Regression: a journal with lines pasted twice replayed them, so the model got the
    /// same tool-call ids twice and the provider answered HTTP 400.
    #[test]
    fn duplicated_journal_lines_are_dropped_on_open_with_a_warning() {
        let tmp = tempfile::tempdir().unwrap();
        let mut journal = Journal::create(tmp.path(), JournalOptions::default()).unwrap();
        journal.append(user("task")).unwrap();
        journal.append(user("second")).unwrap();
        drop(journal);
        let path = tmp.path().join(JOURNAL_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        // Both lines again, then a different event under an existing seq (two processes of
        // the original engine on one run): that one is kept.
        let clash = text.lines().nth(1).unwrap().replace("second", "other");
        std::fs::write(&path, format!("{text}{text}{clash}\n")).unwrap();
        let (journal, events) = Journal::open(tmp.path(), JournalOptions::default()).unwrap();
        let contents: Vec<String> = events
            .iter()
            .map(|e| match &e.event {
                Event::UserMessage { content } => content.clone(),
                Event::Warning { message } => message.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(contents.len(), 4, "{contents:?}");
        assert_eq!(&contents[..3], ["task", "second", "other"]);
        assert!(
            contents[3].contains("repeats 2 earlier line(s) (seq 1, 2)"),
            "{contents:?}"
        );
        assert_eq!(journal.next_seq(), 4);
    }
}
