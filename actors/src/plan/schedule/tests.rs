//! Unit tests of the scheduler without an actor system: a [`Driver`] plays the executor
//! (expands stages with the real `expand_stage` over inline items, answers submissions,
//! keeps what was recorded and emitted), and each test finishes runs as it likes.
//! Resume and edge cases are in `resume_tests.rs`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::plan::expand::expand_stage;
use crate::plan::model::{LlmLimits, OnFailure, OutputKind, PlanFile};
use crate::plan::resolved::{ResolvedForeach, ResolvedStage};
use crate::plan::state::{OrchestrationStatus, StageSummary};
use crate::protocol::{RunStatus, TokenUsage};

pub(super) const ID: &str = "o";

/// A stage of `items` runs (none = a single run) that needs `needs`.
pub(super) fn stage(id: &str, needs: &[&str], items: Option<usize>) -> ResolvedStage {
    ResolvedStage {
        id: id.to_owned(),
        agent: PathBuf::from("/plan/agents/worker"),
        message: "item {{ item }}".to_owned(),
        output: OutputKind::Text,
        foreach: items.map(|n| ResolvedForeach::Items((0..n).map(|i| json!(i)).collect())),
        needs: needs.iter().map(|n| (*n).to_owned()).collect(),
        on_failure: OnFailure::Stop,
        isolate: false,
        max_iterations: None,
        timeout: None,
        retries: 0,
        budget: None,
    }
}

pub(super) fn plan(stages: Vec<ResolvedStage>) -> Arc<ResolvedPlan> {
    Arc::new(ResolvedPlan {
        file: PathBuf::from("/plan/plan.yaml"),
        dir: PathBuf::from("/plan"),
        name: None,
        max_parallel: 8,
        workspace: None,
        vars: BTreeMap::new(),
        llm: LlmLimits::default(),
        llm_timeouts: Default::default(),
        stages,
        sandbox: None,
        budget: None,
        source: PlanFile::default(),
    })
}

/// Plays the orchestration actor: carries out effects in the same order and keeps them.
pub(super) struct Driver {
    pub scheduler: Scheduler,
    plan: Arc<ResolvedPlan>,
    /// What each run's files say when its stage expands (default: nothing).
    pub on_disk: HashMap<String, OnDisk>,
    /// Stages whose expansion fails with this message.
    pub expand_errors: HashMap<String, String>,
    pub expanded: Vec<String>,
    pub submitted: Vec<(String, Launch)>,
    /// Submitted and not finished, in submission order.
    pub in_flight: Vec<String>,
    pub most_in_flight: usize,
    pub messages: HashMap<String, String>,
    pub cancelled: Vec<String>,
    pub records: Vec<SchedulingEvent>,
    pub emitted: Vec<OrchestrationEvent>,
    pub conclusion: Option<Conclusion>,
}

impl Driver {
    pub fn new(plan: Arc<ResolvedPlan>, max_parallel: usize) -> Driver {
        Driver {
            scheduler: Scheduler::new(plan.clone(), ID, Path::new("/ws"), max_parallel),
            plan,
            on_disk: HashMap::new(),
            expand_errors: HashMap::new(),
            expanded: Vec::new(),
            submitted: Vec::new(),
            in_flight: Vec::new(),
            most_in_flight: 0,
            messages: HashMap::new(),
            cancelled: Vec::new(),
            records: Vec::new(),
            emitted: Vec::new(),
            conclusion: None,
        }
    }

    /// Starts a new orchestration (nothing recorded before).
    pub fn start(plan: Arc<ResolvedPlan>, max_parallel: usize) -> Driver {
        let mut driver = Driver::new(plan, max_parallel);
        driver.apply(Event::Started {
            prior: Prior::default(),
        });
        driver
    }

    pub fn apply(&mut self, event: Event) {
        let mut effects: VecDeque<Effect> = self.scheduler.handle(event).into();
        while let Some(effect) = effects.pop_front() {
            assert!(self.conclusion.is_none(), "{effect:?} after Finish");
            if let Some(answer) = self.carry_out(effect) {
                for follow_up in self.scheduler.handle(answer).into_iter().rev() {
                    effects.push_front(follow_up);
                }
            }
        }
    }

    fn carry_out(&mut self, effect: Effect) -> Option<Event> {
        match effect {
            Effect::ExpandStage { stage } => {
                self.expanded.push(stage.clone());
                let runs = match self.expand_errors.get(&stage) {
                    Some(error) => Err(error.clone()),
                    None => Ok(expand_stage(&self.plan, &stage, self.scheduler.context())
                        .unwrap()
                        .into_iter()
                        .map(|planned| FoundRun {
                            on_disk: self
                                .on_disk
                                .get(&planned.run_id)
                                .cloned()
                                .unwrap_or(OnDisk::Nothing),
                            planned,
                        })
                        .collect()),
                };
                Some(Event::StageExpanded { stage, runs })
            }
            Effect::SubmitRun { run, launch, .. } => {
                self.messages
                    .insert(run.run_id.clone(), run.message.clone());
                self.submitted.push((run.run_id.clone(), launch));
                self.in_flight.push(run.run_id.clone());
                self.most_in_flight = self.most_in_flight.max(self.in_flight.len());
                Some(Event::RunSubmitted { run_id: run.run_id })
            }
            Effect::CancelRun { run_id, .. } => {
                self.cancelled.push(run_id);
                None
            }
            Effect::Record(event) => {
                self.records.push(event);
                None
            }
            Effect::SyncJournal => None,
            Effect::Emit(event) => {
                self.emitted.push(event);
                None
            }
            Effect::Finish(conclusion) => {
                self.conclusion = Some(conclusion);
                None
            }
        }
    }

    pub fn end(
        &mut self,
        run_id: &str,
        status: RunStatus,
        result: Option<&str>,
        error: Option<&str>,
    ) {
        self.end_with(run_id, status, result, error, true);
    }

    pub fn end_with(
        &mut self,
        run_id: &str,
        status: RunStatus,
        result: Option<&str>,
        error: Option<&str>,
        metadata_written: bool,
    ) {
        let at = self.in_flight.iter().position(|r| r == run_id);
        assert!(
            at.is_some(),
            "{run_id} is not in flight: {:?}",
            self.in_flight
        );
        self.in_flight.retain(|r| r != run_id);
        self.apply(Event::RunFinished {
            run_id: run_id.to_owned(),
            end: RunEnd::Finished(RunOutcome {
                tokens_saved: 0,
                run_id: run_id.to_owned(),
                status,
                result: result.map(str::to_owned),
                error: error.map(str::to_owned),
                duration_ms: 5,
                iterations: 1,
                usage: TokenUsage::default(),
                cost: Default::default(),
                empty_answer: false,
                metadata_written,
            }),
        });
    }

    pub fn complete(&mut self, run_id: &str, answer: &str) {
        self.end(run_id, RunStatus::Completed, Some(answer), None);
    }

    pub fn fail(&mut self, run_id: &str, error: &str) {
        self.end(run_id, RunStatus::Failed, None, Some(error));
    }

    /// Completes every run in flight (answer = run id) until none is left.
    pub fn complete_all(&mut self) {
        for _ in 0..1000 {
            let Some(run_id) = self.in_flight.first().cloned() else {
                return;
            };
            self.complete(&run_id, &run_id);
        }
        panic!("runs keep coming: {:?}", self.in_flight);
    }

    pub fn submitted_ids(&self) -> Vec<&str> {
        self.submitted.iter().map(|(id, _)| id.as_str()).collect()
    }

    pub fn conclusion(&self) -> &Conclusion {
        self.conclusion
            .as_ref()
            .expect("the orchestration has not finished")
    }

    pub fn stage_summary(&self, id: &str) -> &StageSummary {
        self.conclusion()
            .stages
            .iter()
            .find(|s| s.id == id)
            .unwrap()
    }
}

#[test]
fn independent_stages_start_at_once_and_a_stage_waits_for_all_its_needs() {
    let mut needs_both = stage("c", &["a", "b"], None);
    needs_both.message = "{{ stages.a.output | join(',') }}+{{ stages.b.output }}".to_owned();
    let mut d = Driver::start(
        plan(vec![
            stage("a", &[], Some(2)),
            stage("b", &[], None),
            needs_both,
        ]),
        8,
    );
    assert_eq!(d.expanded, ["a", "b"]);
    assert_eq!(d.submitted_ids(), ["o-a-0", "o-a-1", "o-b-0"]);
    d.complete("o-a-0", "x");
    d.complete("o-a-1", "y");
    assert_eq!(d.expanded, ["a", "b"], "c must wait for b too");
    d.complete("o-b-0", "z");
    assert_eq!(d.expanded, ["a", "b", "c"]);
    assert_eq!(d.messages["o-c-0"], "x,y+z", "c sees its needs' outputs");
    d.complete("o-c-0", "done");
    assert_eq!(d.conclusion().status, OrchestrationStatus::Completed);
    assert_eq!(d.conclusion().totals.counts.completed, 4);
}

#[test]
fn a_stage_whose_needs_are_unfinished_is_not_expanded_while_others_run() {
    let mut d = Driver::start(
        plan(vec![
            stage("a", &[], None),
            stage("b", &["a"], None),
            stage("c", &["b"], None),
        ]),
        8,
    );
    assert_eq!(d.expanded, ["a"]);
    d.complete("o-a-0", "1");
    assert_eq!(d.expanded, ["a", "b"]);
    d.complete("o-b-0", "2");
    d.complete("o-c-0", "3");
    assert_eq!(d.expanded, ["a", "b", "c"]);
    assert!(d.conclusion.is_some());
}

#[test]
fn max_parallel_bounds_the_runs_in_flight_across_stages() {
    let mut d = Driver::start(
        plan(vec![stage("a", &[], Some(5)), stage("b", &[], Some(3))]),
        2,
    );
    assert_eq!(d.submitted_ids(), ["o-a-0", "o-a-1"]);
    d.complete("o-a-1", "r");
    assert_eq!(d.submitted_ids(), ["o-a-0", "o-a-1", "o-a-2"]);
    d.complete_all();
    assert_eq!(d.most_in_flight, 2);
    assert_eq!(d.submitted.len(), 8);
    assert_eq!(d.conclusion().status, OrchestrationStatus::Completed);
}

#[test]
fn a_failed_run_is_continued_with_the_error_until_its_retries_are_spent() {
    let mut s = stage("a", &[], None);
    s.retries = 2;
    let mut d = Driver::start(plan(vec![s, stage("b", &["a"], None)]), 4);
    d.fail("o-a-0", "tool_error: first");
    d.fail("o-a-0", "tool_error: second");
    d.fail("o-a-0", "tool_error: third");
    let launches: Vec<&Launch> = d.submitted.iter().map(|(_, launch)| launch).collect();
    assert_eq!(launches.len(), 3, "one run and two retries: {launches:?}");
    assert_eq!(launches[0], &Launch::New);
    for (launch, error) in launches[1..].iter().zip(["first", "second"]) {
        let Launch::Continue(Some(message)) = launch else {
            panic!("a retry continues the run: {launch:?}");
        };
        assert!(
            message.contains(&format!("tool_error: {error}")),
            "{message}"
        );
    }
    let row = &d.stage_summary("a").runs[0];
    assert_eq!((row.status, row.attempts), (RunStatus::Failed, 3));
    assert_eq!(
        row.error.as_deref(),
        Some("tool_error: third (first failure: tool_error: first)")
    );
    assert_eq!(d.stage_summary("a").status, StageStatus::Failed);
    assert_eq!(d.stage_summary("b").status, StageStatus::Skipped);
    assert_eq!(d.conclusion().status, OrchestrationStatus::Failed);
    let attempts: Vec<u32> = d
        .records
        .iter()
        .filter_map(|r| match r {
            SchedulingEvent::RunSubmitted {
                attempt, resume, ..
            } => Some(*attempt * 10 + u32::from(*resume)),
            _ => None,
        })
        .collect();
    assert_eq!(
        attempts,
        [10, 21, 31],
        "attempt numbers and resume flags as journaled"
    );
}

#[test]
fn a_retry_that_succeeds_completes_the_stage() {
    let mut s = stage("a", &[], None);
    s.retries = 1;
    let mut d = Driver::start(plan(vec![s]), 4);
    d.fail("o-a-0", "llm_error: boom");
    d.complete("o-a-0", "fine");
    let row = &d.stage_summary("a").runs[0];
    assert_eq!((row.status, row.attempts), (RunStatus::Completed, 2));
    assert_eq!(d.conclusion().status, OrchestrationStatus::Completed);
}

#[test]
fn an_output_json_answer_that_does_not_parse_is_retried_then_counts_as_failed() {
    let mut s = stage("a", &[], Some(2));
    s.output = OutputKind::Json;
    s.retries = 1;
    let mut d = Driver::start(plan(vec![s]), 4);
    d.complete("o-a-0", "not json");
    let (_, retry) = d.submitted.last().unwrap();
    let Launch::Continue(Some(message)) = retry else {
        panic!("{retry:?}");
    };
    assert!(message.contains("not valid JSON"), "{message}");
    d.complete("o-a-0", "```json\n{\"ok\": true}\n```");
    d.complete("o-a-1", "still not json");
    d.complete("o-a-1", "nope");
    let runs = &d.stage_summary("a").runs;
    assert_eq!(runs[0].status, RunStatus::Completed);
    assert_eq!(runs[1].status, RunStatus::Failed);
    assert!(runs[1]
        .error
        .as_deref()
        .unwrap()
        .starts_with("the result is not valid JSON"));
    assert_eq!(d.conclusion().status, OrchestrationStatus::Failed);
}

/// Issue 31 item 15: a stage none of whose runs completed was "Completed with failures"
/// under `on_failure: continue`, and its dependants started on nothing. It failed.
#[test]
fn a_stage_with_no_completed_run_fails_even_under_on_failure_continue() {
    let mut s = stage("a", &[], Some(5));
    s.on_failure = OnFailure::Continue;
    let mut d = Driver::start(plan(vec![s, stage("b", &["a"], None)]), 8);
    for index in 0..5 {
        d.fail(&format!("o-a-{index}"), "llm_timeout: no answer");
    }
    assert_eq!(d.stage_summary("a").status, StageStatus::Failed);
    assert_eq!(d.stage_summary("a").counts.completed, 0);
    assert_eq!(d.stage_summary("b").status, StageStatus::Skipped);
    assert_eq!(d.conclusion().status, OrchestrationStatus::Failed);
}

/// Issue 31 item 15: progress counted every attempt's end as a finished run (`read 9/5`).
/// The scheduler says which ends are followed by a retry.
#[test]
fn a_run_end_followed_by_a_retry_is_marked_retried_and_the_last_is_not() {
    let mut s = stage("a", &[], None);
    s.retries = 2;
    let mut d = Driver::start(plan(vec![s]), 4);
    d.fail("o-a-0", "tool_error: first");
    d.fail("o-a-0", "tool_error: second");
    d.complete("o-a-0", "third time lucky");
    let retried: Vec<bool> = d
        .emitted
        .iter()
        .filter_map(|event| match event {
            OrchestrationEvent::RunFinished { retried, .. } => Some(*retried),
            _ => None,
        })
        .collect();
    assert_eq!(retried, [true, true, false]);
}

#[test]
fn on_failure_stop_skips_the_dependants_and_continue_lets_them_start() {
    for (on_failure, dependant, stage_status) in [
        (OnFailure::Stop, StageStatus::Skipped, StageStatus::Failed),
        (
            OnFailure::Continue,
            StageStatus::Completed,
            StageStatus::CompletedWithFailures,
        ),
    ] {
        let mut s = stage("a", &[], Some(2));
        s.on_failure = on_failure;
        let mut d = Driver::start(plan(vec![s, stage("b", &["a"], None)]), 4);
        d.fail("o-a-0", "tool_error: no");
        d.complete("o-a-1", "yes");
        d.complete_all();
        assert_eq!(d.stage_summary("a").status, stage_status, "{on_failure:?}");
        assert_eq!(d.stage_summary("b").status, dependant, "{on_failure:?}");
        assert_eq!(
            d.conclusion().status,
            OrchestrationStatus::Failed,
            "{on_failure:?}"
        );
    }
}

#[test]
fn a_run_over_its_time_limit_counts_as_a_failure_and_is_not_retried() {
    let mut s = stage("a", &[], None);
    s.retries = 2;
    let mut d = Driver::start(plan(vec![s, stage("b", &["a"], None)]), 4);
    d.end(
        "o-a-0",
        RunStatus::Interrupted,
        None,
        Some("timeout: the run exceeded its time limit of 0.3 s"),
    );
    assert_eq!(d.submitted.len(), 1, "not retried");
    let a = d.stage_summary("a");
    assert_eq!(a.status, StageStatus::Failed);
    assert_eq!(a.runs[0].status, RunStatus::Interrupted);
    assert_eq!(a.counts.unsuccessful(), 1);
    assert_eq!(d.stage_summary("b").status, StageStatus::Skipped);
    assert_eq!(d.conclusion().status, OrchestrationStatus::Failed);
}

#[test]
fn a_run_that_failed_before_writing_its_metadata_is_retried_afresh() {
    let mut s = stage("a", &[], None);
    s.retries = 1;
    let mut d = Driver::start(plan(vec![s]), 4);
    d.end_with(
        "o-a-0",
        RunStatus::Failed,
        None,
        Some("setup_error: too many open files"),
        false,
    );
    assert_eq!(d.submitted[1], ("o-a-0".to_owned(), Launch::New));
    d.complete("o-a-0", "ok");
    assert_eq!(d.conclusion().status, OrchestrationStatus::Completed);
}

#[test]
fn cancel_interrupts_the_runs_in_flight_and_submits_nothing_more() {
    let mut d = Driver::start(
        plan(vec![stage("a", &[], Some(5)), stage("b", &["a"], None)]),
        2,
    );
    d.complete("o-a-0", "r");
    d.apply(Event::CancelRequested {
        reason: "interrupted by signal".to_owned(),
    });
    assert_eq!(d.cancelled, ["o-a-1", "o-a-2"]);
    assert!(d.conclusion.is_none(), "the runs in flight end first");
    d.end(
        "o-a-1",
        RunStatus::Interrupted,
        None,
        Some("interrupted: signal"),
    );
    d.end(
        "o-a-2",
        RunStatus::Interrupted,
        None,
        Some("interrupted: signal"),
    );
    assert_eq!(d.submitted.len(), 3, "nothing submitted after the cancel");
    let conclusion = d.conclusion();
    assert_eq!(conclusion.status, OrchestrationStatus::Interrupted);
    assert_eq!(conclusion.error.as_deref(), Some("interrupted by signal"));
    let a = d.stage_summary("a");
    assert_eq!(a.status, StageStatus::Interrupted);
    assert_eq!(
        (
            a.counts.completed,
            a.counts.interrupted,
            a.counts.not_started
        ),
        (1, 2, 2)
    );
    // Issue 24 item 23: a stage that never started was "Interrupted (0 … of 0)".
    let b = d.stage_summary("b");
    assert_eq!(b.status, StageStatus::NotStarted);
    assert_eq!(b.counts.total, 0);
}

#[test]
fn a_failure_during_cancel_is_not_retried() {
    let mut s = stage("a", &[], None);
    s.retries = 3;
    let mut d = Driver::start(plan(vec![s]), 2);
    d.apply(Event::CancelRequested {
        reason: "stop".to_owned(),
    });
    d.fail("o-a-0", "tool_error: killed");
    assert_eq!(d.submitted.len(), 1);
    assert_eq!(d.conclusion().status, OrchestrationStatus::Interrupted);
}
