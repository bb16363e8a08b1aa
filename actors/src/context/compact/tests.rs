//! Tests of the compaction decision on views built from journals.

use super::*;
use crate::journal::{ActionStatus, Event, JournalEvent, ToolCallRecord};
use crate::redact::SecretSet;

fn ev(seq: u64, event: Event) -> JournalEvent {
    JournalEvent {
        seq,
        timestamp: String::new(),
        event,
    }
}

/// A task and `n` iterations of one `read_page` call each, with results of `size` bytes.
fn pages(n: u32, size: usize) -> Vec<JournalEvent> {
    let mut events = vec![ev(
        1,
        Event::UserMessage {
            content: "Read the book.".into(),
        },
    )];
    for i in 1..=n {
        let id = format!("c{i}");
        events.push(ev(
            u64::from(2 * i),
            Event::Thought {
                iteration: i,
                content: None,
                tool_calls: vec![ToolCallRecord {
                    id: id.clone(),
                    name: "read_page".into(),
                    arguments: format!("{{\"page\":\"{i}\"}}"),
                }],
                llm_invocation_ref: None,
                finish_reason: None,
                usage: None,
                prompt: None,
            },
        ));
        events.push(ev(
            u64::from(2 * i + 1),
            Event::ActionResult {
                iteration: i,
                action_id: id.clone(),
                tool_name: "read_page".into(),
                status: ActionStatus::Success,
                observation_content: "p".repeat(size),
                exit_code: Some(0),
                execution_ref: Some(format!("io/tool_executions/{id}.json")),
            },
        ));
    }
    events
}

fn view_of(events: &[JournalEvent]) -> View {
    super::super::view::conversation_view(events, None, &SecretSet::default())
}

fn settings(strategy: CompactionStrategy) -> Compaction {
    Compaction {
        strategy,
        ..Compaction::default()
    }
}

fn decide_for(view: &View, budget: u64, settings: &Compaction, refused: bool) -> Option<Plan> {
    decide(&Request {
        view,
        other_bytes: 400,
        budget,
        settings,
        calibration: None,
        refusals: u32::from(refused),
    })
}

#[test]
fn a_request_that_fits_is_left_alone() {
    let view = view_of(&pages(5, 1800));
    let tokens = estimate(None, 400 + view.bytes());
    let settings = settings(CompactionStrategy::Mask);
    assert_eq!(decide_for(&view, tokens, &settings, false), None);
    assert!(decide_for(&view, tokens - 1, &settings, false).is_some());
    let off = self::settings(CompactionStrategy::Off);
    assert_eq!(decide_for(&view, 10, &off, true), None);
}

#[test]
fn masking_takes_the_oldest_results_down_to_the_target_and_spares_the_last_iterations() {
    let view = view_of(&pages(10, 1800));
    let settings = settings(CompactionStrategy::Mask);
    let budget = estimate(None, 400 + view.bytes()) - 10;
    let plan = decide_for(&view, budget, &settings, false).unwrap();
    assert!(plan.tokens_after <= budget * 50 / 100, "{plan:?}");
    assert!(plan.tokens_before > budget);
    // Oldest first, and never the last two iterations.
    let masked: Vec<&str> = plan.masked.iter().map(String::as_str).collect();
    assert_eq!(masked[..2], ["c1", "c2"]);
    assert!(
        !masked.contains(&"c9") && !masked.contains(&"c10"),
        "{masked:?}"
    );
    assert_eq!((plan.dropped_through, plan.summarize.clone()), (None, None));
    assert!(plan.cut.is_empty());
}

#[test]
fn when_masking_is_not_enough_mask_leaves_out_the_oldest_iterations_whole() {
    // Stubs of 300 iterations are more than a small budget holds.
    let view = view_of(&pages(300, 200));
    let settings = settings(CompactionStrategy::Mask);
    let plan = decide_for(&view, 2000, &settings, false).unwrap();
    let through = plan.dropped_through.unwrap();
    assert!(plan.tokens_after <= 1000, "{plan:?}");
    // The kept part starts at a reply: its seq is through + 1.
    assert_eq!(through % 2, 1, "{through}");
    // No stub is kept for a result that is left out anyway.
    assert!(plan
        .masked
        .iter()
        .all(|id| id[1..].parse::<u64>().unwrap() * 2 > through));
}

#[test]
fn summarize_replaces_every_iteration_but_the_last_ones() {
    let view = view_of(&pages(10, 1800));
    let settings = settings(CompactionStrategy::Summarize);
    let budget = estimate(None, 400 + view.bytes()) - 10;
    let plan = decide_for(&view, budget, &settings, false).unwrap();
    let span = plan.summarize.clone().unwrap();
    // Iterations 1..=8 (seqs 2..=17) go; iteration 9's reply is seq 18.
    assert_eq!(span.through, 17);
    assert_eq!(plan.dropped_through, Some(17));
    assert_eq!(span.messages, 1..17);
    assert!(plan.masked.is_empty());
    // mask_then_summarize masks first, and summarizes only when that is not enough.
    let both = self::settings(CompactionStrategy::MaskThenSummarize);
    let plan = decide_for(&view, budget, &both, false).unwrap();
    assert!(
        plan.summarize.is_none() && !plan.masked.is_empty(),
        "{plan:?}"
    );
    let view = view_of(&pages(300, 200));
    let plan = decide_for(&view, 2000, &both, false).unwrap();
    assert!(plan.summarize.is_some(), "{plan:?}");
}

#[test]
fn a_result_larger_than_the_budget_is_cut_head_and_tail() {
    let view = view_of(&pages(1, 400_000));
    let settings = settings(CompactionStrategy::Mask);
    let plan = decide_for(&view, 3000, &settings, false).unwrap();
    assert_eq!(plan.cut.len(), 1, "{plan:?}");
    assert_eq!(plan.cut[0].action_id, "c1");
    assert!(plan.cut[0].kept_bytes >= MIN_CUT_KEEP_BYTES);
    assert!(plan.tokens_after <= 3000, "{plan:?}");
}

/// A server that refuses again after a compaction counts what the estimate does not (a
/// template that leaves tool results out of the prompt, so masking them frees nothing): the
/// second compaction leaves out every iteration but the last `keep_last`.
#[test]
fn a_second_refusal_leaves_out_every_iteration_but_the_last_ones() {
    let view = view_of(&pages(10, 1800));
    let settings = settings(CompactionStrategy::Mask);
    let budget = estimate(None, 400 + view.bytes()) + 100;
    let plan = decide(&Request {
        view: &view,
        other_bytes: 400,
        budget,
        settings: &settings,
        calibration: None,
        refusals: 2,
    })
    .unwrap();
    assert!(plan.masked.is_empty(), "{plan:?}");
    // Iterations 1..=8 go: iteration 9's reply is seq 18.
    assert_eq!(plan.dropped_through, Some(17));
}

/// Refused again when only the last `keep_last` iterations are left (a continuation of a run
/// that had outgrown the window: the first refusal already left the rest out): the older of
/// them goes too, the last one stays.
#[test]
fn a_second_refusal_with_only_the_last_ones_left_keeps_the_last_iteration() {
    let mut events = pages(10, 1800);
    events.push(ev(
        22,
        Event::ContextCompacted {
            iteration: 10,
            strategy: "mask".into(),
            reason: "refusal".into(),
            masked: Vec::new(),
            cut: Vec::new(),
            dropped_through: Some(17),
            summary: None,
            tokens_before: 5000,
            tokens_after: 900,
            budget: 1000,
            window: None,
            refused: None,
        },
    ));
    let view = view_of(&events);
    let settings = settings(CompactionStrategy::Mask);
    let request = |refusals| Request {
        view: &view,
        other_bytes: 400,
        budget: estimate(None, 400 + view.bytes()) + 100,
        settings: &settings,
        calibration: None,
        refusals,
    };
    let plan = decide(&request(2)).unwrap();
    // Iteration 9 goes: iteration 10's reply is seq 20.
    assert_eq!(plan.dropped_through, Some(19), "{plan:?}");
    // A first refusal still only masks what is outside the last `keep_last`: nothing here.
    assert_eq!(decide(&request(1)), None);
    // Refused once more with only iteration 10 left: it goes too (the task stays), and only
    // up to the last message there is (later ones are kept when they come).
    events.push(ev(
        23,
        Event::ContextCompacted {
            iteration: 10,
            strategy: "mask".into(),
            reason: "refusal".into(),
            masked: Vec::new(),
            cut: Vec::new(),
            dropped_through: Some(19),
            summary: None,
            tokens_before: 900,
            tokens_after: 500,
            budget: 1000,
            window: None,
            refused: None,
        },
    ));
    let view = view_of(&events);
    let plan = decide(&Request {
        view: &view,
        other_bytes: 400,
        budget: estimate(None, 400 + view.bytes()) + 100,
        settings: &settings,
        calibration: None,
        refusals: 3,
    })
    .unwrap();
    // Through iteration 10's reply (seq 20; its result shows only beneath it).
    assert_eq!(plan.dropped_through, Some(20), "{plan:?}");
}

#[test]
fn a_refused_request_is_compacted_even_when_the_estimate_says_it_fits() {
    let view = view_of(&pages(10, 1800));
    let settings = settings(CompactionStrategy::Mask);
    let budget = estimate(None, 400 + view.bytes()) + 100;
    assert_eq!(decide_for(&view, budget, &settings, false), None);
    let plan = decide_for(&view, budget, &settings, true).unwrap();
    assert!(!plan.masked.is_empty());
}

/// The decision is a function of its inputs: the same view, budget and calibration give the
/// same plan (what a continued run relies on to send what an uninterrupted one would).
#[test]
fn the_same_inputs_give_the_same_plan() {
    let view = view_of(&pages(30, 1855));
    let settings = settings(CompactionStrategy::Mask);
    let calibration = Some(Calibration {
        bytes: 40_000,
        tokens: 9_900,
        growth: None,
    });
    let request = Request {
        view: &view,
        other_bytes: 600,
        budget: 3774,
        settings: &settings,
        calibration,
        refusals: 0,
    };
    assert_eq!(decide(&request), decide(&request));
}
