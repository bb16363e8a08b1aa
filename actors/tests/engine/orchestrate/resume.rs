//! Resume: after `cancel_all`, after each state a `kill -9` can leave between two writes,
//! with retries and `output: json` checks carried across invocations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;

use delta_actors::janitor::{prepare_continue, ContinueReadiness};
use delta_actors::metadata::{read_metadata, write_metadata};
use delta_actors::plan::state::{OrchestrationState, OrchestrationStatus, StageStatus};
use delta_actors::workspace::RunPaths;
use delta_actors::RunStatus;
use delta_actors::{LlmTarget, OrchestrationEvent, Supervisor};

use super::*;

#[test]
fn resume_after_cancel_all_reuses_completed_runs_and_finishes_the_rest() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "max_parallel: 2\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: \"{{ range(6) | list }}\"\n    message: \"item {{ item }}\"\n  - id: combine\n    needs: [work]\n    message: \"{{ stages.work.results | join(',') }}\"\n",
    );
    let model = script("default_latency: 150\nsteps:\n  - answer: \"{{ task }}\"\n");
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let mut handle = supervisor
        .orchestrate_blocking(p.request(
            plan.clone(),
            "t",
            LlmTarget::Scripted(model.clone()),
            false,
        ))
        .unwrap();
    let mut events = take_events(&mut handle);
    let mut completed = 0;
    while completed < 2 {
        match events.blocking_recv().unwrap() {
            OrchestrationEvent::RunFinished {
                status: RunStatus::Completed,
                ..
            } => completed += 1,
            OrchestrationEvent::Finished { .. } => panic!("finished before the cancel"),
            _ => {}
        }
    }
    supervisor.cancel_all("test interrupt");
    let first = handle.wait_blocking().unwrap();
    assert_eq!(first.status, OrchestrationStatus::Interrupted, "{first:#?}");
    assert_eq!(first.exit_code(), 130);
    let done_before: Vec<String> = stage(&first, "work")
        .runs
        .iter()
        .filter(|r| r.status == RunStatus::Completed)
        .map(|r| r.run_id.clone())
        .collect();
    assert!(
        done_before.len() >= 2 && done_before.len() < 6,
        "{first:#?}"
    );
    let journals_before: HashMap<String, Vec<u8>> = done_before
        .iter()
        .map(|id| {
            let bytes = std::fs::read(RunPaths::new(p.ws(), id).journal).unwrap();
            (id.clone(), bytes)
        })
        .collect();
    drop(supervisor);

    let supervisor = Supervisor::start(fast_config()).unwrap();
    let (second, _) = orchestrate(
        &supervisor,
        p.request(plan, "t", LlmTarget::Scripted(model), true),
    );
    assert_eq!(second.status, OrchestrationStatus::Completed, "{second:#?}");
    let work = stage(&second, "work");
    assert_eq!(work.counts.completed, 6);
    for row in &work.runs {
        assert_eq!(row.reused, done_before.contains(&row.run_id), "{row:?}");
        assert_eq!(
            completed_ends(&run_journal(p.ws(), &row.run_id)),
            1,
            "{row:?}"
        );
    }
    for (id, bytes) in &journals_before {
        let after = std::fs::read(RunPaths::new(p.ws(), id).journal).unwrap();
        assert_eq!(&after, bytes, "{id} was run again");
    }
    assert_eq!(
        results(&second, "combine"),
        ["item 0,item 1,item 2,item 3,item 4,item 5"]
    );
}

fn set_status(work_dir: &Path, run_id: &str, status: RunStatus) {
    let run_dir = RunPaths::new(work_dir, run_id).run_dir;
    let mut meta = read_metadata(&run_dir).unwrap();
    meta.status = status;
    write_metadata(&run_dir, &meta).unwrap();
}

/// Each state a `kill -9` can leave between two writes, made by hand: a run that finished
/// but whose metadata still says RUNNING (or INTERRUPTED, after a janitor), a run directory
/// created without metadata, and a run killed before its task reached the journal.
#[test]
fn resume_repairs_what_a_kill_leaves_between_two_writes() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "max_parallel: 4\ndefaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b, c, d] }\n    message: \"item {{ item }}\"\n",
    );
    let model = script(ECHO_TASK);
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let request = p.request(plan.clone(), "t", LlmTarget::Scripted(model.clone()), false);
    let (first, _) = orchestrate(&supervisor, request);
    assert_eq!(first.status, OrchestrationStatus::Completed, "{first:#?}");
    let ws = p.ws();

    set_status(ws, "t-work-0", RunStatus::Running);
    set_status(ws, "t-work-1", RunStatus::Interrupted);
    let finished_journals: Vec<Vec<u8>> = ["t-work-0", "t-work-1"]
        .iter()
        .map(|id| std::fs::read(RunPaths::new(ws, id).journal).unwrap())
        .collect();
    let unstarted = RunPaths::new(ws, "t-work-2");
    std::fs::remove_dir_all(&unstarted.run_dir).unwrap();
    std::fs::create_dir_all(&unstarted.run_dir).unwrap();
    std::fs::write(&unstarted.journal, "").unwrap();
    let taskless = RunPaths::new(ws, "t-work-3");
    let text = std::fs::read_to_string(&taskless.journal).unwrap();
    let first_line = text.lines().next().unwrap();
    assert!(first_line.contains("ENGINE_START"), "{first_line}");
    std::fs::write(&taskless.journal, format!("{first_line}\n")).unwrap();
    set_status(ws, "t-work-3", RunStatus::Running);

    let request = p.request(plan, "t", LlmTarget::Scripted(model), true);
    let (second, _) = orchestrate(&supervisor, request);
    assert_eq!(second.status, OrchestrationStatus::Completed, "{second:#?}");
    assert_eq!(
        results(&second, "work"),
        ["item a", "item b", "item c", "item d"]
    );
    let reused: Vec<bool> = stage(&second, "work")
        .runs
        .iter()
        .map(|r| r.reused)
        .collect();
    assert_eq!(reused, [true, true, false, false]);
    for (id, before) in ["t-work-0", "t-work-1"].iter().zip(&finished_journals) {
        let after = std::fs::read(RunPaths::new(ws, id).journal).unwrap();
        assert_eq!(&after, before, "{id} was run again");
    }
    for id in ["t-work-2", "t-work-3"] {
        assert_eq!(completed_ends(&run_journal(ws, id)), 1, "{id}");
    }
    for id in ["t-work-0", "t-work-1", "t-work-2", "t-work-3"] {
        let meta = read_metadata(&RunPaths::new(ws, id).run_dir).unwrap();
        assert_eq!(
            meta.status,
            RunStatus::Completed,
            "{id}: the metadata was settled"
        );
        assert!(meta.result.is_some(), "{id}");
    }
}

/// The janitor (`delta list-runs`, `delta continue`) settles a run that finished in its
/// journal but not in its metadata instead of calling it INTERRUPTED; a continue without a
/// message reports that outcome. (Settling an INTERRUPTED record is in
/// `resume_repairs_what_a_kill_leaves_between_two_writes`.)
#[test]
fn the_janitor_settles_a_run_finished_in_its_journal() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let (summary, _) = run_plan(
        &p,
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: one, message: go }\n",
        ECHO_TASK,
    );
    assert_eq!(summary.status, OrchestrationStatus::Completed);
    let ws = p.ws();
    let run_dir = RunPaths::new(ws, "t-one-0").run_dir;
    set_status(ws, "t-one-0", RunStatus::Running);
    let Ok(ContinueReadiness::Finished { status, result }) =
        prepare_continue(ws, "t-one-0", None, false)
    else {
        panic!("a run finished in its journal is reported as finished");
    };
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(result.result.as_deref(), Some("go"));
    let meta = read_metadata(&run_dir).unwrap();
    assert_eq!(meta.status, RunStatus::Completed);
    assert_eq!(meta.result.as_deref(), Some("go"));
    assert!(meta.end_time.is_some());
    assert_eq!(completed_ends(&run_journal(ws, "t-one-0")), 1);
}

#[test]
fn the_orchestration_folder_exists_once_orchestrate_returns() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan =
        p.plan("defaults: { agent: ./agents/worker }\nstages:\n  - { id: one, message: go }\n");
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let model = script("default_latency: 100\nsteps: [{ answer: done }]\n");
    let handle = supervisor
        .orchestrate_blocking(p.request(plan, "t", LlmTarget::Scripted(model), false))
        .unwrap();
    // The caller may print the id and be killed now: `--resume` must find the folder.
    let dir = OrchestrationState::dir_for(p.ws(), "t").unwrap();
    let journal = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
    assert!(journal.contains("ORCHESTRATION_STARTED"), "{journal}");
    assert!(dir.join("plan.yaml").is_file());
    assert_eq!(
        handle.wait_blocking().unwrap().status,
        OrchestrationStatus::Completed
    );
}

/// An interruption (Ctrl-C, kill) is not a failure: continuing the run on resume must not
/// use up the retries the stage grants for failures.
#[test]
fn an_interrupted_attempt_does_not_use_up_the_retries() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "defaults: { agent: ./agents/worker, retries: 1 }\nstages:\n  - { id: solo, message: go }\n",
    );
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let slow = script("steps:\n  - answer: never\n    latency: 5000\n");
    let mut handle = supervisor
        .orchestrate_blocking(p.request(plan.clone(), "t", LlmTarget::Scripted(slow), false))
        .unwrap();
    let mut events = take_events(&mut handle);
    loop {
        if let OrchestrationEvent::RunStarted { .. } = events.blocking_recv().unwrap() {
            break;
        }
    }
    supervisor.cancel_all("test interrupt");
    let first = handle.wait_blocking().unwrap();
    assert_eq!(first.status, OrchestrationStatus::Interrupted, "{first:#?}");

    // On resume the continued attempt fails (3 model errors use up the call retries), and
    // the stage's one retry must still be there.
    let flaky =
        script("steps:\n  - fail: 500\n    times: 3\n    then: { answer: \"recovered\" }\n");
    let (second, _) = orchestrate(
        &supervisor,
        p.request(plan, "t", LlmTarget::Scripted(flaky), true),
    );
    assert_eq!(second.status, OrchestrationStatus::Completed, "{second:#?}");
    let row = &stage(&second, "solo").runs[0];
    assert_eq!(row.result.as_deref(), Some("recovered"));
}

/// A run that completed with an answer `output: json` rejects stays failed on resume.
#[test]
fn resume_checks_json_output_of_completed_runs_again() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "defaults: { agent: ./agents/worker }\nstages:\n  - { id: plan, output: json, message: plan }\n  - { id: work, needs: previous, message: \"{{ stages.plan.output }}\" }\n",
    );
    let model = script("steps: [{ answer: \"no json here\" }]\n");
    let supervisor = Supervisor::start(fast_config()).unwrap();
    for resume in [false, true] {
        let request = p.request(
            plan.clone(),
            "t",
            LlmTarget::Scripted(model.clone()),
            resume,
        );
        let (summary, _) = orchestrate(&supervisor, request);
        assert_eq!(summary.status, OrchestrationStatus::Failed, "{summary:#?}");
        let row = &stage(&summary, "plan").runs[0];
        assert_eq!(row.status, RunStatus::Failed, "resume {resume}: {row:?}");
        assert!(row.error.as_deref().unwrap().contains("not valid JSON"));
        assert_eq!(stage(&summary, "work").status, StageStatus::Skipped);
    }
}

/// Issue 24 item 23: runs kept from before a resume showed a duration of 0 s (and their
/// tokens were the last attempt's); they show what their record says.
#[test]
fn runs_kept_from_before_a_resume_show_their_real_duration_and_tokens() {
    let p = PlanDir::new();
    p.agent("worker", "");
    let plan = p.plan(
        "defaults: { agent: ./agents/worker }\nstages:\n  - id: work\n    foreach: { items: [a, b] }\n    message: \"item {{ item }}\"\n",
    );
    let model = script("default_latency: 80\nsteps:\n  - answer: \"{{ task }}\"\n");
    let supervisor = Supervisor::start(fast_config()).unwrap();
    let (first, _) = orchestrate(
        &supervisor,
        p.request(plan.clone(), "t", LlmTarget::Scripted(model.clone()), false),
    );
    assert_eq!(first.status, OrchestrationStatus::Completed, "{first:#?}");
    let (second, _) = orchestrate(
        &supervisor,
        p.request(plan, "t", LlmTarget::Scripted(model), true),
    );
    let before = &stage(&first, "work").runs;
    for (row, earlier) in stage(&second, "work").runs.iter().zip(before) {
        assert!(row.reused, "{row:?}");
        let meta = read_metadata(&RunPaths::new(p.ws(), &row.run_id).run_dir).unwrap();
        assert_eq!(Some(row.duration_ms), meta.duration_ms, "{row:?}");
        assert!(row.duration_ms >= 80, "the model alone took 80 ms: {row:?}");
        assert!(
            row.duration_ms <= earlier.duration_ms,
            "{row:?} {earlier:?}"
        );
        assert_eq!(row.usage, earlier.usage);
        assert!(row.usage.input_tokens > 0);
    }
}
