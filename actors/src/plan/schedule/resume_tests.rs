//! Unit tests of the scheduler's resume decisions (runs found on disk, retry budgets carried
//! across invocations) and of its failure paths (setup, expansion, lost runs).

use super::tests::{plan, stage, Driver};
use super::*;
use crate::plan::model::OutputKind;
use crate::plan::state::OrchestrationStatus;
use crate::protocol::{RunStatus, TokenUsage};

fn recorded(status: RunStatus, result: Option<&str>, error: Option<&str>) -> OnDisk {
    OnDisk::Recorded(RecordedRun {
        status,
        result: result.map(str::to_owned),
        error: error.map(str::to_owned),
        iterations: 2,
        duration_ms: 1234,
        usage: TokenUsage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            estimated: false,
        },
        cost: Default::default(),
    })
}

fn resume(driver: &mut Driver, prior: Prior) {
    driver.apply(Event::Started { prior });
}

#[test]
fn resume_reuses_completed_runs_and_continues_the_rest() {
    let mut work = stage("work", &[], Some(5));
    work.retries = 1;
    work.on_failure = crate::plan::model::OnFailure::Continue;
    let mut combine = stage("combine", &["work"], None);
    combine.message = "{{ stages.work.results | join(',') }}".to_owned();
    let mut d = Driver::new(plan(vec![work, combine]), 8);
    for (run_id, on_disk) in [
        ("o-work-0", recorded(RunStatus::Completed, Some("r0"), None)),
        (
            "o-work-1",
            recorded(RunStatus::Interrupted, None, Some("interrupted: signal")),
        ),
        ("o-work-2", OnDisk::Nothing),
        ("o-work-3", recorded(RunStatus::Running, None, None)),
        (
            "o-work-4",
            recorded(RunStatus::Failed, None, Some("tool_error: x")),
        ),
    ] {
        d.on_disk.insert(run_id.to_owned(), on_disk);
    }
    let mut prior = Prior::default();
    prior.attempts.insert("o-work-0".to_owned(), 1);
    // Failed, then failed its one retry.
    prior.attempts.insert("o-work-4".to_owned(), 2);
    prior.failures.insert("o-work-4".to_owned(), 2);
    resume(&mut d, prior);
    assert_eq!(
        d.submitted,
        [
            ("o-work-1".to_owned(), Launch::Continue(None)),
            ("o-work-2".to_owned(), Launch::New),
            ("o-work-3".to_owned(), Launch::Continue(None)),
        ],
        "the COMPLETED run is reused, the FAILED one has no retry left"
    );
    let Some(OrchestrationEvent::StageStarted { already_done, .. }) = d.emitted.first() else {
        panic!("{:?}", d.emitted);
    };
    assert_eq!((already_done.completed, already_done.failed), (1, 1));
    d.complete("o-work-1", "r1");
    d.complete("o-work-2", "r2");
    d.complete("o-work-3", "r3");
    assert_eq!(
        d.messages["o-combine-0"], "r0,r1,r2,r3,None",
        "the reused result feeds later stages"
    );
    d.complete("o-combine-0", "all");
    let runs = &d.stage_summary("work").runs;
    assert!(runs[0].reused && runs[0].status == RunStatus::Completed);
    assert_eq!((runs[0].attempts, runs[0].usage.input_tokens), (1, 10));
    assert_eq!((runs[4].status, runs[4].attempts), (RunStatus::Failed, 2));
    assert_eq!(runs[4].error.as_deref(), Some("tool_error: x"));
    assert_eq!(d.conclusion().status, OrchestrationStatus::Failed);
}

#[test]
fn resume_gives_a_failed_run_its_remaining_retries_counting_the_failure_on_disk() {
    let mut s = stage("a", &[], Some(2));
    s.retries = 1;
    let mut d = Driver::new(plan(vec![s]), 8);
    d.on_disk.insert(
        "o-a-0".to_owned(),
        recorded(RunStatus::Failed, None, Some("tool_error: x")),
    );
    // Killed before its RUN_FINISHED was journaled: no failure recorded, still one on disk.
    d.on_disk.insert(
        "o-a-1".to_owned(),
        recorded(RunStatus::Failed, None, Some("tool_error: y")),
    );
    let mut prior = Prior::default();
    prior.attempts.insert("o-a-0".to_owned(), 1);
    prior.failures.insert("o-a-0".to_owned(), 1);
    resume(&mut d, prior);
    assert_eq!(d.submitted.len(), 2);
    for (_, launch) in &d.submitted {
        let Launch::Continue(Some(message)) = launch else {
            panic!("{launch:?}");
        };
        assert!(message.contains("tool_error:"), "{message}");
    }
    d.fail("o-a-0", "tool_error: again");
    assert_eq!(d.submitted.len(), 2, "that was o-a-0's one retry");
    d.complete("o-a-1", "fine");
    let runs = &d.stage_summary("a").runs;
    assert_eq!((runs[0].status, runs[0].attempts), (RunStatus::Failed, 2));
    assert_eq!(
        (runs[1].status, runs[1].attempts),
        (RunStatus::Completed, 1)
    );
}

#[test]
fn resume_checks_a_completed_output_json_answer_again() {
    let mut s = stage("a", &[], Some(2));
    s.output = OutputKind::Json;
    let mut d = Driver::new(plan(vec![s]), 8);
    d.on_disk.insert(
        "o-a-0".to_owned(),
        recorded(RunStatus::Completed, Some("{}"), None),
    );
    d.on_disk.insert(
        "o-a-1".to_owned(),
        recorded(RunStatus::Completed, Some("nah"), None),
    );
    resume(&mut d, Prior::default());
    assert!(d.submitted.is_empty());
    let runs = &d.stage_summary("a").runs;
    assert_eq!(runs[0].status, RunStatus::Completed);
    assert_eq!(runs[1].status, RunStatus::Failed);
    assert!(runs[1].error.as_deref().unwrap().contains("not valid JSON"));
}

#[test]
fn resume_retries_a_completed_answer_that_is_not_json_while_retries_are_left() {
    let mut s = stage("a", &[], None);
    s.output = OutputKind::Json;
    s.retries = 1;
    let mut d = Driver::new(plan(vec![s]), 8);
    d.on_disk.insert(
        "o-a-0".to_owned(),
        recorded(RunStatus::Completed, Some("nah"), None),
    );
    resume(&mut d, Prior::default());
    let [(_, Launch::Continue(Some(message)))] = d.submitted.as_slice() else {
        panic!("{:?}", d.submitted);
    };
    assert!(message.contains("not valid JSON"), "{message}");
}

#[test]
fn resume_leaves_a_run_waiting_for_a_human_and_says_how_to_answer() {
    let mut d = Driver::new(plan(vec![stage("a", &[], None)]), 8);
    d.on_disk.insert(
        "o-a-0".to_owned(),
        recorded(RunStatus::WaitingForInput, None, None),
    );
    d.on_disk.insert("unused".to_owned(), OnDisk::Unreadable);
    resume(&mut d, Prior::default());
    assert!(d.submitted.is_empty());
    let row = &d.stage_summary("a").runs[0];
    assert_eq!(row.status, RunStatus::WaitingForInput);
    let error = row.error.as_deref().unwrap();
    assert!(
        error.contains("delta continue --run-id o-a-0 -w /ws -m"),
        "{error}"
    );
    assert_eq!(d.conclusion().status, OrchestrationStatus::Failed);
}

#[test]
fn a_run_with_unreadable_metadata_is_continued() {
    let mut d = Driver::new(plan(vec![stage("a", &[], None)]), 8);
    d.on_disk.insert("o-a-0".to_owned(), OnDisk::Unreadable);
    resume(&mut d, Prior::default());
    assert_eq!(d.submitted, [("o-a-0".to_owned(), Launch::Continue(None))]);
}

#[test]
fn resume_of_a_finished_stage_starts_its_dependants_at_once() {
    let mut d = Driver::new(
        plan(vec![stage("a", &[], None), stage("b", &["a"], None)]),
        8,
    );
    d.on_disk.insert(
        "o-a-0".to_owned(),
        recorded(RunStatus::Completed, Some("x"), None),
    );
    resume(&mut d, Prior::default());
    assert_eq!(d.expanded, ["a", "b"]);
    assert_eq!(d.submitted_ids(), ["o-b-0"]);
}

#[test]
fn a_setup_failure_finishes_failed_with_every_stage_skipped() {
    let mut d = Driver::new(plan(vec![stage("a", &[], None)]), 8);
    d.apply(Event::SetupFailed {
        error: "orchestration 'o' is being driven by another process".to_owned(),
    });
    assert!(d.expanded.is_empty() && d.submitted.is_empty());
    let conclusion = d.conclusion();
    assert_eq!(conclusion.status, OrchestrationStatus::Failed);
    assert!(conclusion
        .error
        .as_deref()
        .unwrap()
        .contains("another process"));
    assert_eq!(d.stage_summary("a").status, StageStatus::Skipped);
}

#[test]
fn a_stage_that_cannot_expand_fails_and_stops_its_dependants() {
    let mut d = Driver::new(
        plan(vec![
            stage("a", &[], None),
            stage("b", &[], None),
            stage("c", &["a"], None),
        ]),
        8,
    );
    d.expand_errors.insert(
        "a".to_owned(),
        "plan.yaml: stages.a.message: boom".to_owned(),
    );
    resume(&mut d, Prior::default());
    assert_eq!(
        d.submitted_ids(),
        ["o-b-0"],
        "the independent stage still runs"
    );
    d.complete("o-b-0", "ok");
    let conclusion = d.conclusion();
    assert_eq!(conclusion.status, OrchestrationStatus::Failed);
    assert_eq!(
        conclusion.error.as_deref(),
        Some("plan.yaml: stages.a.message: boom")
    );
    assert_eq!(d.stage_summary("a").status, StageStatus::Failed);
    assert_eq!(d.stage_summary("c").status, StageStatus::Skipped);
}

#[test]
fn a_run_lost_before_it_answered_fails_without_a_retry() {
    let mut s = stage("a", &[], None);
    s.retries = 2;
    let mut d = Driver::start(plan(vec![s]), 8);
    d.in_flight.clear();
    d.apply(Event::RunFinished {
        run_id: "o-a-0".to_owned(),
        end: RunEnd::Lost("the engine stopped".to_owned()),
    });
    assert_eq!(d.submitted.len(), 1);
    let row = &d.stage_summary("a").runs[0];
    assert_eq!(
        (row.status, row.error.as_deref()),
        (RunStatus::Failed, Some("the engine stopped"))
    );
}

#[test]
fn nothing_follows_the_finish() {
    let mut d = Driver::start(plan(vec![stage("a", &[], None)]), 8);
    d.complete("o-a-0", "x");
    assert!(d.conclusion.is_some());
    let late = d.scheduler.handle(Event::CancelRequested {
        reason: "late".to_owned(),
    });
    assert!(late.is_empty(), "{late:?}");
}
