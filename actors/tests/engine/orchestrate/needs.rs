//! The stage graph comes from `needs` alone (issue 11 item 10): stages without `needs` run
//! at the same time, `needs: previous` waits for the stage written just above. Overlap is
//! read from the orchestrator's own event order and the runs' journal timestamps; the
//! scripted model's latency keeps each run busy long enough to overlap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use delta_actors::plan::state::OrchestrationStatus;

use super::*;

#[test]
fn stages_without_needs_overlap_and_needs_previous_orders_them() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, events) = run_plan(
        &p,
        "max_parallel: 8\ndefaults: { agent: ./agents/worker }\nstages:\n  - { id: one, message: one }\n  - { id: two, message: two }\n  - { id: three, needs: previous, message: three }\n",
        "default_latency: 300\nsteps:\n  - answer: \"{{ task }}\"\n",
    );
    assert_eq!(
        summary.status,
        OrchestrationStatus::Completed,
        "{summary:#?}"
    );

    // Independent: each started before the other finished.
    let (one_start, two_start) = (
        position(&events, started("one")),
        position(&events, started("two")),
    );
    let (one_done, two_done) = (
        position(&events, finished("one")),
        position(&events, finished("two")),
    );
    assert!(
        one_start < two_done && two_start < one_done,
        "one and two did not overlap: {events:#?}"
    );
    // `needs: previous` is `two`: `three` starts only after it.
    let three_start = position(&events, started("three"));
    assert!(two_done < three_start, "{events:#?}");

    let ws = p.ws();
    let (one, two, three) = (
        interval(ws, "t-one-0"),
        interval(ws, "t-two-0"),
        interval(ws, "t-three-0"),
    );
    assert!(
        one.0 < two.1 && two.0 < one.1,
        "not overlapping in time: {one:?} {two:?}"
    );
    assert!(two.1 <= three.0, "{two:?} {three:?}");
}

#[test]
fn needs_previous_resolves_to_the_stage_above_and_may_be_mixed_with_ids() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: a, message: a }\n  - { id: b, message: b }\n  - { id: c, needs: [a, previous, a], message: c }\n  - { id: d, needs: c, message: d }\n",
    );
    let needs: Vec<(&str, Vec<String>)> = plan
        .stages
        .iter()
        .map(|s| (s.id.as_str(), s.needs.clone()))
        .collect();
    assert_eq!(
        needs,
        [
            ("a", vec![]),
            ("b", vec![]),
            ("c", vec!["a".to_owned(), "b".to_owned()]),
            ("d", vec!["c".to_owned()]),
        ]
    );
    assert_eq!(
        delta_actors::plan::topo_order(&plan),
        [vec!["a", "b"], vec!["c"], vec!["d"]]
    );
}
