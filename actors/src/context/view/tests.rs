//! Tests of the conversation view: compactions applied, calls and results paired, and the
//! run's cache equal to the whole-journal view at every step.

use proptest::prelude::*;

use super::*;
use crate::journal::{ActionStatus, CutResult};

fn ev(seq: u64, event: Event) -> JournalEvent {
    JournalEvent {
        seq,
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        event,
    }
}

fn task(seq: u64, text: &str) -> JournalEvent {
    ev(
        seq,
        Event::UserMessage {
            content: text.into(),
        },
    )
}

fn thought(seq: u64, iteration: u32, calls: &[&str]) -> JournalEvent {
    ev(
        seq,
        Event::Thought {
            iteration,
            content: None,
            tool_calls: calls
                .iter()
                .map(|id| ToolCallRecord {
                    id: id.to_string(),
                    name: "read_page".into(),
                    arguments: "{}".into(),
                })
                .collect(),
            llm_invocation_ref: None,
            finish_reason: None,
            usage: None,
            prompt: None,
        },
    )
}

fn answer(seq: u64, iteration: u32, text: &str) -> JournalEvent {
    ev(
        seq,
        Event::Thought {
            iteration,
            content: Some(text.into()),
            tool_calls: vec![],
            llm_invocation_ref: None,
            finish_reason: None,
            usage: None,
            prompt: None,
        },
    )
}

fn result(seq: u64, id: &str, text: &str) -> JournalEvent {
    ev(
        seq,
        Event::ActionResult {
            iteration: 1,
            action_id: id.into(),
            tool_name: "read_page".into(),
            status: ActionStatus::Success,
            observation_content: text.into(),
            exit_code: Some(0),
            execution_ref: Some(format!("io/tool_executions/{id}.json")),
        },
    )
}

fn compacted(
    seq: u64,
    masked: &[&str],
    cut: &[(&str, u64)],
    dropped_through: Option<u64>,
    summary: Option<&str>,
) -> JournalEvent {
    ev(
        seq,
        Event::ContextCompacted {
            iteration: 0,
            strategy: "mask".into(),
            reason: "budget".into(),
            masked: masked.iter().map(|s| s.to_string()).collect(),
            cut: cut
                .iter()
                .map(|(id, kept)| CutResult {
                    action_id: id.to_string(),
                    kept_bytes: *kept,
                })
                .collect(),
            dropped_through,
            summary: summary.map(str::to_string),
            tokens_before: 0,
            tokens_after: 0,
            budget: 0,
            window: None,
            refused: None,
        },
    )
}

/// A task and `n` iterations of one call each, results of 100 bytes (seqs from 1).
fn pages(n: u32) -> Vec<JournalEvent> {
    let mut events = vec![task(1, "Read the book.")];
    for i in 1..=n {
        let id = format!("c{i}");
        events.push(thought(u64::from(2 * i), i, &[id.as_str()]));
        events.push(result(u64::from(2 * i + 1), &id, &"x".repeat(100)));
    }
    events
}

fn view(events: &[JournalEvent]) -> View {
    conversation_view(events, None, &SecretSet::default())
}

#[test]
fn a_masked_result_is_a_stub_naming_the_tool_its_size_and_its_record() {
    let mut events = pages(3);
    events.push(compacted(8, &["c1"], &[], None, None));
    let view = view(&events);
    crate::llm::validate_history(&view.messages).unwrap();
    let first = view.messages[2].content.as_deref().unwrap();
    assert_eq!(
        first,
        "[read_page result left out to fit the context window: 100 bytes; full text in io/tool_executions/c1.json]"
    );
    assert!(matches!(
        &view.meta[2].kind,
        MessageKind::ToolResult {
            masked: true,
            full_bytes: 100,
            ..
        }
    ));
    // The call stays; the other results are whole.
    assert_eq!(view.messages[1].tool_calls().len(), 1);
    assert_eq!(view.messages[4].content.as_deref().unwrap().len(), 100);
    assert_eq!(view.bytes(), view.meta.iter().map(|m| m.bytes).sum::<u64>());
}

#[test]
fn a_cut_result_keeps_its_head_and_tail_around_a_line_naming_the_record() {
    let mut events = vec![task(1, "go"), thought(2, 1, &["big"])];
    let text = format!("{}{}", "h".repeat(5000), "t".repeat(5000));
    events.push(result(3, "big", &text));
    events.push(compacted(4, &[], &[("big", 1000)], None, None));
    let shown = view(&events).messages[2].content.clone().unwrap();
    assert!(shown.starts_with(&"h".repeat(500)), "{shown}");
    assert!(shown.ends_with(&"t".repeat(500)), "{shown}");
    assert!(
        shown.contains("9000 bytes of this result cut to fit the context window; full text in io/tool_executions/big.json"),
        "{shown}"
    );
    assert!(shown.len() < 1200);
}

#[test]
fn dropped_iterations_leave_the_task_a_summary_and_whole_pairs() {
    let mut events = pages(4);
    // Iterations 1 and 2 (seqs 2..=5) left out, with a summary.
    events.push(compacted(
        10,
        &[],
        &[],
        Some(5),
        Some("Pages 1 and 2 are about a fox."),
    ));
    let view = view(&events);
    crate::llm::validate_history(&view.messages).unwrap();
    let roles: Vec<Role> = view.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool
        ]
    );
    let preface = view.messages[0].content.as_deref().unwrap();
    assert!(preface.contains("(iterations 1 to 2)"), "{preface}");
    assert!(
        preface.ends_with("Pages 1 and 2 are about a fox."),
        "{preface}"
    );
    assert_eq!(view.messages[1].content.as_deref(), Some("Read the book."));
    assert_eq!(view.meta[1].kind, MessageKind::Task);
    assert_eq!(view.messages[2].tool_calls()[0].id, "c3");
    // Without a summary, a note says what happened.
    let mut events = pages(4);
    events.push(compacted(10, &[], &[], Some(5), None));
    let note = view_text(&events, 0);
    assert!(
        note.contains("was left out to fit the model's context window"),
        "{note}"
    );
}

fn view_text(events: &[JournalEvent], index: usize) -> String {
    view(events).messages[index].content.clone().unwrap()
}

#[test]
fn a_call_whose_result_lies_in_the_dropped_part_keeps_it() {
    let events = vec![
        task(1, "go"),
        thought(2, 1, &["a"]),
        task(3, "more"),
        thought(4, 2, &["b"]),
        result(5, "b", "rb"),
        result(6, "a", "ra"),
        compacted(7, &[], &[], Some(3), None),
    ];
    let view = view(&events);
    crate::llm::validate_history(&view.messages).unwrap();
    let ids: Vec<&str> = view
        .messages
        .iter()
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    assert_eq!(ids, ["b"]);
}

/// The run's cache, fed the journal one event at a time, equals the whole-journal view at
/// each step, compactions and a continuation included.
#[test]
fn the_cache_equals_the_whole_view_at_every_step() {
    let mut events = pages(6);
    events.push(compacted(14, &["c1", "c2"], &[("c3", 40)], None, None));
    events.push(thought(15, 7, &["c7"]));
    events.push(result(16, "c7", "seven"));
    events.push(compacted(17, &["c4"], &[], Some(9), Some("Summary.")));
    events.push(task(18, "a continue message"));
    events.push(answer(19, 8, "Done."));
    let mut cache = ConversationCache::default();
    for end in 0..=events.len() {
        let prefix = &events[..end];
        let cached = cache.update(prefix, None, &SecretSet::default()).clone();
        assert_eq!(cached, view(prefix), "after {end} events");
    }
}

#[test]
fn the_cache_converts_only_new_events_between_compactions() {
    let events = pages(40);
    let mut cache = ConversationCache::default();
    cache.update(&events[..3], None, &SecretSet::default());
    assert!(cache.state.is_some(), "an answered journal is cached");
    // A request is built once a reply's results are all in: after each iteration.
    for end in (5..=events.len()).step_by(2) {
        cache.update(&events[..end], None, &SecretSet::default());
        assert!(cache.state.is_some(), "after {end} events");
        assert_eq!(cache.consumed, end);
    }
    assert_eq!(cache.view.messages.len(), 81);
}

/// A journal the run loop could write: replies of 0 to 2 calls, each answered at once, user
/// messages, and compactions of earlier results.
fn arb_journal() -> impl Strategy<Value = Vec<JournalEvent>> {
    let step = prop_oneof![
        4 => (0u8..3, 1usize..300).prop_map(|(calls, size)| (0u8, calls, size)),
        1 => Just((1u8, 0u8, 0usize)),
        1 => (0u8..3, 1usize..200).prop_map(|(mask, kept)| (2u8, mask, kept)),
    ];
    proptest::collection::vec(step, 0..40).prop_map(|steps| {
        let mut events = vec![task(1, "the task")];
        let mut seq = 1;
        let mut iteration = 0;
        let mut ids: Vec<String> = Vec::new();
        for (kind, a, b) in steps {
            seq += 1;
            match kind {
                0 => {
                    iteration += 1;
                    let calls: Vec<String> = (0..a).map(|k| format!("c{iteration}_{k}")).collect();
                    let refs: Vec<&str> = calls.iter().map(String::as_str).collect();
                    if calls.is_empty() {
                        events.push(answer(seq, iteration, "thinking"));
                    } else {
                        events.push(thought(seq, iteration, &refs));
                        for id in &calls {
                            seq += 1;
                            events.push(result(seq, id, &"r".repeat(b)));
                        }
                    }
                    ids.extend(calls);
                }
                1 => events.push(task(seq, "continue")),
                _ => {
                    let masked: Vec<&str> =
                        ids.iter().take(a as usize).map(String::as_str).collect();
                    let cut: Vec<(&str, u64)> = ids
                        .iter()
                        .skip(a as usize)
                        .take(1)
                        .map(|id| (id.as_str(), b as u64))
                        .collect();
                    let through = (b % 3 == 0).then_some(seq / 2);
                    let summary = (b % 2 == 0).then_some("sum");
                    events.push(compacted(seq, &masked, &cut, through, summary));
                }
            }
        }
        events
    })
}

proptest! {
    #[test]
    fn the_cache_matches_the_whole_view_for_any_journal(events in arb_journal()) {
        let mut cache = ConversationCache::default();
        for end in 0..=events.len() {
            let prefix = &events[..end];
            let cached = cache.update(prefix, None, &SecretSet::default()).clone();
            prop_assert_eq!(&cached, &view(prefix));
            if end > 0 {
                prop_assert!(crate::llm::validate_history(&cached.messages).is_ok());
            }
        }
    }
}
