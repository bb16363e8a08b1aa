//! Engine-level tests of the plan domain: every bad-plan fixture fails with its file and key,
//! good plans resolve with their defaults, every `foreach` form expands, run ids are padded,
//! messages see vars / item / index / stages.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use delta_actors::plan::{
    expand_stage, load_plan, load_plan_str, ready_stages, topo_order, OnFailure, OutputKind,
    PlanError, ResolvedForeach, RunRecord, StageContext,
};
use delta_actors::protocol::RunStatus;
use serde_json::json;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The bad-plan corpus, shared with the CLI test that runs each through `delta orchestrate`.
fn bad_plans() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/bad-plans")
}

/// Reads the `# key:` and `# expect:` header lines of a bad-plan fixture.
fn expectations(path: &Path) -> (String, String) {
    let text = std::fs::read_to_string(path).unwrap();
    let header = |prefix: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("{} lacks `{prefix}`", path.display()))
            .trim()
            .to_owned()
    };
    (header("# key:"), header("# expect:"))
}

#[test]
fn every_bad_plan_names_its_file_and_key() {
    let dir = bad_plans();
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let (key, expected) = expectations(&path);
        let error =
            load_plan(&path, &[]).expect_err(&format!("{} should be refused", path.display()));
        let text = error.to_string();
        let file_name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            text.contains(file_name),
            "{file_name}: error does not name the file: {text}"
        );
        assert!(
            error.key().starts_with(&key),
            "{file_name}: key {:?} is not {key:?}: {text}",
            error.key()
        );
        assert!(
            text.contains(&expected),
            "{file_name}: {text:?} lacks {expected:?}"
        );
        assert!(text.contains("(hint: "), "{file_name}: no hint: {text}");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} bad-plan fixtures");
}

#[test]
fn template_errors_name_stage_key_and_expression() {
    let error = load_plan(&bad_plans().join("unknown-var.yaml"), &[]).unwrap_err();
    match error {
        PlanError::Template {
            key, expression, ..
        } => {
            assert_eq!(key, "stages.work.message");
            assert_eq!(expression, "vars.reop");
        }
        other => panic!("expected a template error, got {other}"),
    }
}

#[test]
fn missing_plan_file_is_a_read_error() {
    let error = load_plan(Path::new("/nonexistent/plan.yaml"), &[]).unwrap_err();
    assert!(matches!(error, PlanError::Read { .. }));
    assert!(error
        .to_string()
        .starts_with("/nonexistent/plan.yaml: cannot read the plan"));
}

#[test]
fn plan_resolves_defaults_paths_and_needs() {
    let dir = fixtures().join("plans");
    let plan = load_plan(
        &dir.join("plan-execute.yaml"),
        &[("repo".into(), "acme/web".into())],
    )
    .unwrap();
    assert_eq!(plan.name.as_deref(), Some("review"));
    assert_eq!(plan.max_parallel, 16);
    assert_eq!(plan.workspace, Some(dir.join("./ws")));
    assert_eq!(plan.vars["repo"], json!("acme/web"));
    assert_eq!(plan.llm.requests_per_minute, Some(600));
    let ids: Vec<&str> = plan.stages.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["plan", "work", "summary"]);
    let [planner, work, summary] = &plan.stages[..] else {
        panic!()
    };
    assert_eq!(planner.agent, dir.join("./agents/planner"));
    assert_eq!(planner.output, OutputKind::Json);
    assert_eq!(planner.needs, Vec::<String>::new());
    assert_eq!(planner.timeout, Some(Duration::from_secs(900)));
    assert_eq!(planner.retries, 1);
    assert_eq!(planner.max_iterations, Some(30));
    assert_eq!(work.agent, dir.join("./agents/worker"));
    assert_eq!(work.needs, ["plan"], "`needs: previous` is the stage above");
    assert_eq!(work.on_failure, OnFailure::Continue);
    assert_eq!(work.timeout, Some(Duration::from_secs(90)));
    assert_eq!(work.retries, 0);
    assert!(matches!(work.foreach, Some(ResolvedForeach::Template(_))));
    assert_eq!(summary.needs, ["work"]);
    assert_eq!(summary.on_failure, OnFailure::Stop);
}

fn completed(run_id: &str, result: &str) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        status: RunStatus::Completed,
        result: Some(result.into()),
        error: None,
    }
}

#[test]
fn plan_execute_expands_from_the_planner_output() {
    let plan = load_plan(&fixtures().join("plans/plan-execute.yaml"), &[]).unwrap();
    let mut ctx = StageContext::new("review-20260101-000000-abcd");

    let planner_runs = expand_stage(&plan, "plan", &ctx).unwrap();
    assert_eq!(planner_runs.len(), 1);
    assert_eq!(planner_runs[0].run_id, "review-20260101-000000-abcd-plan-0");
    assert_eq!(planner_runs[0].item, json!(null));
    assert!(planner_runs[0]
        .message
        .starts_with("Split the review of acme/api into steps."));
    assert_eq!(planner_runs[0].work_dir_suffix, None);

    let steps: Vec<String> = (0..11).map(|i| format!("step {i}")).collect();
    let answer = format!("```json\n{}\n```", json!({ "steps": steps }));
    ctx.record_stage(
        plan.stage("plan").unwrap(),
        &[completed(&planner_runs[0].run_id, &answer)],
    );
    assert_eq!(
        ctx.stage("plan").unwrap()["output"]["steps"][3],
        json!("step 3")
    );

    let work_runs = expand_stage(&plan, "work", &ctx).unwrap();
    assert_eq!(work_runs.len(), 11);
    assert_eq!(work_runs[0].run_id, "review-20260101-000000-abcd-work-00");
    assert_eq!(work_runs[10].run_id, "review-20260101-000000-abcd-work-10");
    assert_eq!(work_runs[7].message, "Step 7 of acme/api: step 7");
    assert_eq!(work_runs[7].item, json!("step 7"));
    assert_eq!(work_runs[7].work_dir_suffix, Some(PathBuf::from("work/7")));
    assert_eq!(work_runs[7].timeout, Some(Duration::from_secs(90)));
    assert_eq!(work_runs[7].max_iterations, Some(30));

    let mut records: Vec<RunRecord> = work_runs
        .iter()
        .map(|run| completed(&run.run_id, &format!("done {}", run.index)))
        .collect();
    records[1] = RunRecord {
        status: RunStatus::Failed,
        result: None,
        error: Some("boom".into()),
        ..records[1].clone()
    };
    ctx.record_stage(plan.stage("work").unwrap(), &records);
    let summary = expand_stage(&plan, "summary", &ctx).unwrap();
    assert_eq!(summary.len(), 1);
    assert!(
        summary[0]
            .message
            .starts_with("Combine these results:\n[\"done 0\",null,\"done 2\""),
        "{}",
        summary[0].message
    );
    assert_eq!(
        ctx.stage("work").unwrap()["runs"][1],
        json!({
            "run_id": "review-20260101-000000-abcd-work-01", "status": "FAILED", "result": null, "error": "boom"
        })
    );
}

#[test]
fn every_foreach_form_expands() {
    let dir = fixtures().join("plans");
    let plan = load_plan(&dir.join("forms.yaml"), &[]).unwrap();
    let ctx = StageContext::new("o");

    let items = expand_stage(&plan, "items", &ctx).unwrap();
    let messages: Vec<&str> = items.iter().map(|r| r.message.as_str()).collect();
    assert_eq!(messages, ["0=\"red\"", "1={\"shade\":\"blue\"}", "2=3"]);
    assert_eq!(items[1].item, json!({"shade": "blue"}));

    let files = expand_stage(&plan, "files", &ctx).unwrap();
    let expected: Vec<serde_json::Value> = ["a", "b", "c"]
        .iter()
        .map(|n| json!(dir.join(format!("data/{n}.json")).to_string_lossy()))
        .collect();
    assert_eq!(
        files.iter().map(|r| r.item.clone()).collect::<Vec<_>>(),
        expected,
        "sorted, glob-filtered"
    );

    let lines = expand_stage(&plan, "lines", &ctx).unwrap();
    let messages: Vec<&str> = lines.iter().map(|r| r.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "line 0: first line",
            "line 1:   second line",
            "line 2: third"
        ]
    );

    let many = expand_stage(&plan, "many", &ctx).unwrap();
    assert_eq!(many.len(), 12);
    assert_eq!(many[11].message, "n11");
    assert_eq!(many[3].run_id, "o-many-03");
}

#[test]
fn fan_in_sees_statuses_of_continued_failures() {
    let plan = load_plan(&fixtures().join("plans/forms.yaml"), &[]).unwrap();
    let mut ctx = StageContext::new("o");
    for id in ["items", "files", "lines"] {
        let runs = expand_stage(&plan, id, &ctx).unwrap();
        let records: Vec<RunRecord> = runs
            .iter()
            .map(|run| match run.index {
                1 => RunRecord {
                    run_id: run.run_id.clone(),
                    status: RunStatus::Failed,
                    result: None,
                    error: Some("timed out".into()),
                },
                _ => completed(&run.run_id, "ok"),
            })
            .collect();
        ctx.record_stage(plan.stage(id).unwrap(), &records);
    }
    let fanin = expand_stage(&plan, "fanin", &ctx).unwrap();
    assert_eq!(fanin[0].message, "3 FAILED timed out");
}

#[test]
fn foreach_template_errors_at_expansion_name_the_stage() {
    let plan = load_plan(&fixtures().join("plans/plan-execute.yaml"), &[]).unwrap();
    let mut ctx = StageContext::new("o");
    let planner = plan.stage("plan").unwrap();
    ctx.record_stage(planner, &[completed("o-plan-0", "{\"stepz\": []}")]);
    let error = expand_stage(&plan, "work", &ctx).unwrap_err().to_string();
    assert!(error.contains("stages.work.foreach"), "{error}");
    assert!(error.contains("stages.plan.output.steps"), "{error}");
}

#[test]
fn run_id_padding_follows_the_count() {
    let dir = fixtures().join("plans");
    for (count, first, last) in [
        (1, "o-s-0", "o-s-0"),
        (9, "o-s-0", "o-s-8"),
        (10, "o-s-00", "o-s-09"),
        (100, "o-s-000", "o-s-099"),
    ] {
        let yaml = format!(
            "defaults: {{ agent: ./agents/worker }}\nstages:\n  - {{ id: s, message: \"{{{{ item }}}}\", foreach: \"{{{{ range({count}) | list }}}}\" }}\n"
        );
        let plan = load_plan_str(&yaml, &dir.join("inline.yaml"), &[]).unwrap();
        let runs = expand_stage(&plan, "s", &StageContext::new("o")).unwrap();
        assert_eq!(runs.len(), count);
        assert_eq!(runs[0].run_id, first);
        assert_eq!(runs[count - 1].run_id, last);
    }
}

#[test]
fn graph_layers_and_ready_stages() {
    let plan = load_plan(&fixtures().join("plans/forms.yaml"), &[]).unwrap();
    assert_eq!(
        topo_order(&plan),
        vec![vec!["items", "files", "lines", "many"], vec!["fanin"]]
    );
    let none = HashSet::new();
    assert_eq!(
        ready_stages(&plan, &none, &none),
        ["items", "files", "lines", "many"]
    );
    let finished: HashSet<String> = ["items", "files"].map(String::from).into();
    let started: HashSet<String> = ["lines", "many"].map(String::from).into();
    assert!(ready_stages(&plan, &finished, &started).is_empty());
    let finished: HashSet<String> = ["items", "files", "lines"].map(String::from).into();
    assert_eq!(ready_stages(&plan, &finished, &started), ["fanin"]);
}

#[test]
fn unknown_stage_in_expand_is_an_error() {
    let plan = load_plan(&fixtures().join("plans/forms.yaml"), &[]).unwrap();
    let error = expand_stage(&plan, "nope", &StageContext::new("o")).unwrap_err();
    assert!(error.to_string().contains("no stage `nope`"));
}

/// docs/plan.md cannot drift from the loader: every key the loader accepts is documented.
#[test]
fn every_key_the_loader_accepts_is_in_the_plan_reference() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/plan.md"))
            .unwrap();
    let keys = delta_actors::plan::keys::known_key_paths();
    assert!(keys.len() >= 25, "{keys:?}");
    let missing: Vec<&String> = keys
        .iter()
        .filter(|key| !doc.contains(&format!("`{key}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "keys missing from docs/plan.md: {missing:?}"
    );
    let error = load_plan_str("stages: []\n", Path::new("/p/plan.yaml"), &[]).unwrap_err();
    assert!(
        error
            .to_string()
            .contains(delta_actors::plan::PLAN_REFERENCE),
        "plan errors point to the reference: {error}"
    );
}

#[test]
fn defaults_may_set_on_failure_isolate_and_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agent")).unwrap();
    let plan = load_plan_str(
        "defaults: { agent: agent, on_failure: continue, isolate: true, output: json }\nstages:\n  - { id: a, message: a }\n  - { id: b, message: b, on_failure: stop, isolate: false, output: text }\n",
        &dir.path().join("plan.yaml"),
        &[],
    )
    .unwrap();
    let [a, b] = &plan.stages[..] else { panic!() };
    assert_eq!(
        (a.on_failure, a.isolate, a.output),
        (OnFailure::Continue, true, OutputKind::Json)
    );
    assert_eq!(
        (b.on_failure, b.isolate, b.output),
        (OnFailure::Stop, false, OutputKind::Text)
    );
}
