//! Tests of the batch view on orchestration folders as the engine writes them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::metadata::RunLock;
use crate::serve::batch_cache::BatchCache;
use crate::serve::batch_rows::ErrorKindCount;

const PLAN: &str = "name: t\nstages:\n  - id: map\n    agent: ./a\n    foreach: { items: [1, 2, 3] }\n    message: m\n  - id: combine\n    needs: previous\n    agent: ./a\n    message: c\n";

fn line(timestamp: &str, event: &str) -> String {
    format!("{{\"timestamp\":\"2026-11-26T10:00:{timestamp}Z\",{event}}}\n")
}

fn running_map_stage() -> String {
    [
        line("00.000", r#""type":"ORCHESTRATION_STARTED","plan":"p.yaml","workspace":"w","resumed":false"#),
        line("00.010", r#""type":"STAGE_STARTED","stage":"map","runs":3"#),
        line("00.020", r#""type":"RUN_SUBMITTED","stage":"map","index":0,"run_id":"t-map-0","attempt":1,"resume":false"#),
        line("00.020", r#""type":"RUN_SUBMITTED","stage":"map","index":1,"run_id":"t-map-1","attempt":1,"resume":false"#),
        line("00.020", r#""type":"RUN_SUBMITTED","stage":"map","index":2,"run_id":"t-map-2","attempt":1,"resume":false"#),
        line("01.020", r#""type":"RUN_FINISHED","stage":"map","index":0,"run_id":"t-map-0","status":"COMPLETED","attempt":1,"error":null,"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}"#),
        line("03.020", r#""type":"RUN_FINISHED","stage":"map","index":2,"run_id":"t-map-2","status":"FAILED","attempt":1,"error":"llm_error: HTTP 500 from the model","usage":{"input_tokens":7,"output_tokens":0,"total_tokens":7}"#),
    ]
    .concat()
}

fn orchestration(journal: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(".delta/orchestrations/t-1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plan.yaml"), PLAN).unwrap();
    std::fs::write(dir.join("journal.jsonl"), journal).unwrap();
    (tmp, dir)
}

fn statuses(page: &RowPage) -> Vec<(String, RowStatus)> {
    page.rows
        .iter()
        .map(|r| (r.run_id.clone(), r.status))
        .collect()
}

/// Regression (issue 27): a stage that has not started (`combine`) was not shown at all
/// while the batch ran.
#[test]
fn the_graph_has_every_stage_of_the_plan_with_its_needs_and_counts() {
    let (tmp, dir) = orchestration(&running_map_stage());
    let _driving = RunLock::try_acquire(&dir).unwrap().unwrap();
    let mut index = OrchestrationIndex::open(tmp.path(), "t-1").unwrap();
    index.refresh().unwrap();
    let detail = index.detail();
    assert_eq!(detail.status, OrchestrationStatus::Running);
    let graph: Vec<(&str, Vec<String>, StageStatus)> = detail
        .stages
        .iter()
        .map(|s| (s.id.as_str(), s.needs.clone(), s.status))
        .collect();
    assert_eq!(
        graph,
        [
            ("map", vec![], StageStatus::Running),
            ("combine", vec!["map".to_string()], StageStatus::Pending),
        ]
    );
    let map = &detail.stages[0];
    assert_eq!(
        (
            map.counts.planned,
            map.counts.completed,
            map.counts.failed,
            map.counts.queued
        ),
        (3, 1, 1, 1)
    );
    assert_eq!(map.tokens.total_tokens, 22);
    assert_eq!(detail.stages[1].counts.not_started, 0);
    assert_eq!(
        detail.error_kinds,
        [ErrorKindCount {
            kind: "llm_error".into(),
            count: 1
        }]
    );
}

#[test]
fn rows_are_filtered_sorted_and_paged() {
    let (tmp, dir) = orchestration(&running_map_stage());
    let _driving = RunLock::try_acquire(&dir).unwrap().unwrap();
    let mut index = OrchestrationIndex::open(tmp.path(), "t-1").unwrap();
    index.refresh().unwrap();
    let query = |json: serde_json::Value| serde_json::from_value::<RowQuery>(json).unwrap();
    let all = index.rows(&query(serde_json::json!({}))).unwrap();
    assert_eq!(
        statuses(&all),
        [
            ("t-map-0".to_string(), RowStatus::Completed),
            ("t-map-1".to_string(), RowStatus::Queued),
            ("t-map-2".to_string(), RowStatus::Failed),
        ]
    );
    let failed = index
        .rows(&query(serde_json::json!({"status": "failed"})))
        .unwrap();
    assert_eq!((failed.total, failed.matched), (3, 1));
    assert_eq!(failed.rows[0].error_kind.as_deref(), Some("llm_error"));
    let by_status = index
        .rows(&query(serde_json::json!({"sort": "status"})))
        .unwrap();
    assert_eq!(by_status.rows[0].run_id, "t-map-2", "failed first");
    let by_duration = index
        .rows(&query(
            serde_json::json!({"sort": "duration", "order": "desc", "limit": 1}),
        ))
        .unwrap();
    assert_eq!(
        (by_duration.rows.len(), by_duration.rows[0].run_id.as_str()),
        (1, "t-map-2")
    );
    assert_eq!(by_duration.rows[0].duration_ms, Some(3000));
    let second_page = index
        .rows(&query(serde_json::json!({"offset": 2, "limit": 2})))
        .unwrap();
    assert_eq!(statuses(&second_page).len(), 1);
    let searched = index
        .rows(&query(serde_json::json!({"q": "HTTP 500"})))
        .unwrap();
    assert_eq!(searched.matched, 1);
    for bad in [
        serde_json::json!({"sort": "age"}),
        serde_json::json!({"status": "done"}),
    ] {
        assert!(matches!(
            index.rows(&query(bad)),
            Err(InspectError::Invalid { .. })
        ));
    }
}

/// Regression (issue 31 item 19): `order=` took anything, and anything but `desc` meant
/// ascending; it is now refused naming the parameter and what it accepts.
#[test]
fn an_order_other_than_asc_or_desc_is_refused_naming_both() {
    let (tmp, dir) = orchestration(&running_map_stage());
    let _driving = RunLock::try_acquire(&dir).unwrap().unwrap();
    let mut index = OrchestrationIndex::open(tmp.path(), "t-1").unwrap();
    index.refresh().unwrap();
    let query = |json: serde_json::Value| serde_json::from_value::<RowQuery>(json).unwrap();
    let first = |json| index.rows(&query(json)).unwrap().rows[0].run_id.clone();
    assert_eq!(first(serde_json::json!({"order": "asc"})), "t-map-0");
    assert_eq!(first(serde_json::json!({"order": ""})), "t-map-0");
    assert_eq!(first(serde_json::json!({"order": "desc"})), "t-map-2");
    for bad in ["sideways", "DESC", "descending"] {
        let error = index
            .rows(&query(serde_json::json!({ "order": bad })))
            .err()
            .unwrap();
        let text = error.to_string();
        assert!(
            matches!(error, InspectError::Invalid { what: "order", .. }),
            "{text}"
        );
        assert!(
            text.contains("order") && text.contains("asc, desc"),
            "{text}"
        );
    }
}

#[test]
fn new_journal_lines_and_run_records_are_read_on_the_next_refresh() {
    let (tmp, dir) = orchestration(&running_map_stage());
    let _driving = RunLock::try_acquire(&dir).unwrap().unwrap();
    let mut index = OrchestrationIndex::open(tmp.path(), "t-1").unwrap();
    index.refresh().unwrap();
    // t-map-1 starts: its record appears.
    let run = tmp.path().join(".delta/t-map-1");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("metadata.json"),
        r#"{"status":"RUNNING","created_at":"2026-11-26T10:00:02.000Z","iterations":2,"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}"#,
    )
    .unwrap();
    index.refreshed = None;
    index.refresh().unwrap();
    let row = &index.rows[index.by_run["t-map-1"]];
    assert_eq!(
        (row.status, row.iterations, row.tokens),
        (RowStatus::Running, 2, 4)
    );
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("journal.jsonl"))
        .unwrap();
    std::io::Write::write_all(
        &mut journal,
        line("04.000", r#""type":"RUN_FINISHED","stage":"map","index":1,"run_id":"t-map-1","status":"COMPLETED","attempt":1,"error":null"#).as_bytes(),
    )
    .unwrap();
    // A half-written line is left for later.
    std::io::Write::write_all(&mut journal, b"{\"timestamp\":\"2026-11").unwrap();
    index.refreshed = None;
    index.refresh().unwrap();
    let row = &index.rows[index.by_run["t-map-1"]];
    assert_eq!(
        (row.status, row.duration_ms),
        (RowStatus::Completed, Some(2000))
    );
    let bars = index.timeline(Some("map"));
    assert_eq!(bars.bars.len(), 3);
    let (_, _, status, queued, started, ended) = bars.bars[1];
    assert_eq!(bars.statuses[status], RowStatus::Completed);
    assert_eq!(started.unwrap() - queued.unwrap(), 1980, "queued 1.98 s");
    assert_eq!(ended.unwrap() - started.unwrap(), 2000, "ran 2 s");
}

#[test]
fn an_orchestration_whose_process_died_is_interrupted_and_a_finished_one_reads_its_summary() {
    let (tmp, dir) = orchestration(&running_map_stage());
    let mut index = OrchestrationIndex::open(tmp.path(), "t-1").unwrap();
    index.refresh().unwrap();
    assert_eq!(
        index.detail().status,
        OrchestrationStatus::Interrupted,
        "no process holds its lock"
    );
    let summary = serde_json::json!({
        "orchestration_id": "t-1", "status": "FAILED", "plan": "p.yaml", "workspace": "w",
        "started_at": "s", "ended_at": "e", "duration_ms": 5000,
        "stages": [{"id": "map", "status": "FAILED", "total": 3, "completed": 2, "failed": 1,
            "runs": [
                {"run_id": "t-map-0", "index": 0, "status": "COMPLETED", "duration_ms": 900, "iterations": 4, "attempts": 1, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}},
                {"run_id": "t-map-1", "index": 1, "status": "COMPLETED", "duration_ms": 800, "iterations": 3, "attempts": 1, "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}},
                {"run_id": "t-map-2", "index": 2, "status": "FAILED", "error": "llm_error: HTTP 500", "duration_ms": 700, "iterations": 1, "attempts": 2, "usage": {"input_tokens": 7, "output_tokens": 0, "total_tokens": 7}}
            ], "usage": {"input_tokens": 18, "output_tokens": 6, "total_tokens": 24}},
            {"id": "combine", "status": "SKIPPED", "total": 0, "runs": []}],
        "totals": {"total": 3, "input_tokens": 18, "output_tokens": 6}
    });
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("journal.jsonl"))
        .unwrap();
    std::io::Write::write_all(
        &mut journal,
        [
            line("05.000", r#""type":"STAGE_FINISHED","stage":"map","status":"FAILED","completed":2,"failed":1"#),
            line("05.000", r#""type":"ORCHESTRATION_FINISHED","status":"FAILED""#),
        ]
        .concat()
        .as_bytes(),
    )
    .unwrap();
    index.refreshed = None;
    index.refresh().unwrap();
    let detail = index.detail();
    assert_eq!(detail.status, OrchestrationStatus::Failed);
    assert_eq!(detail.stages[1].status, StageStatus::Skipped);
    let row = &index.rows[index.by_run["t-map-0"]];
    assert_eq!((row.duration_ms, row.iterations), (Some(900), 4));
    assert_eq!(index.rows[index.by_run["t-map-2"]].attempts, 2);
}

#[test]
fn ids_are_checked_and_a_planted_fifo_is_not_waited_on() {
    let (tmp, dir) = orchestration(&running_map_stage());
    assert!(matches!(
        OrchestrationIndex::open(tmp.path(), "../x"),
        Err(InspectError::Invalid { .. })
    ));
    assert!(matches!(
        OrchestrationIndex::open(tmp.path(), "nope"),
        Err(InspectError::NotFound(_))
    ));
    std::fs::remove_file(dir.join("journal.jsonl")).unwrap();
    nix::unistd::mkfifo(&dir.join("journal.jsonl"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let cache = BatchCache::default();
    let error = cache
        .with(tmp.path(), "t-1", |index| Ok(index.detail()))
        .unwrap_err();
    assert!(error.to_string().contains("FIFO"), "{error}");
}

/// Issue 33: the page shows what a batch cost next to its tokens — per run, per stage and
/// for the orchestration — and a stage with one unpriced run is unknown (null), never a
/// partial sum.
#[test]
fn rows_stages_and_the_batch_carry_their_cost_and_one_unpriced_run_makes_it_unknown() {
    let priced = [
        line("00.000", r#""type":"ORCHESTRATION_STARTED","plan":"p.yaml","workspace":"w","resumed":false"#),
        line("00.010", r#""type":"STAGE_STARTED","stage":"map","runs":3"#),
        line("01.020", r#""type":"RUN_FINISHED","stage":"map","index":0,"run_id":"t-map-0","status":"COMPLETED","attempt":1,"error":null,"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15},"cost":{"total_cost_usd":0.25}"#),
        line("01.030", r#""type":"RUN_FINISHED","stage":"map","index":1,"run_id":"t-map-1","status":"COMPLETED","attempt":1,"error":null,"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15},"cost":{"total_cost_usd":0.5}"#),
    ]
    .concat();
    let (tmp, dir) = orchestration(&priced);
    let _driving = RunLock::try_acquire(&dir).unwrap().unwrap();
    let mut index = OrchestrationIndex::open(tmp.path(), "t-1").unwrap();
    index.refresh().unwrap();
    let detail = serde_json::to_value(index.detail()).unwrap();
    assert_eq!(detail["costUsd"], 0.75, "{detail}");
    assert_eq!(detail["stages"][0]["costUsd"], 0.75, "{detail}");
    let rows = serde_json::to_value(index.rows(&RowQuery::default()).unwrap()).unwrap();
    assert_eq!(rows["rows"][0]["costUsd"], 0.25, "{rows}");

    let unpriced = line(
        "02.000",
        r#""type":"RUN_FINISHED","stage":"map","index":2,"run_id":"t-map-2","status":"COMPLETED","attempt":1,"error":null,"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2},"cost":{"total_cost_usd":null,"unpriced_model":"mystery"}"#,
    );
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("journal.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut journal, unpriced.as_bytes()).unwrap();
    index.refreshed = None;
    index.refresh().unwrap();
    let detail = serde_json::to_value(index.detail()).unwrap();
    assert!(detail["costUsd"].is_null(), "{detail}");
    assert!(detail["stages"][0]["costUsd"].is_null(), "{detail}");
    let rows = serde_json::to_value(index.rows(&RowQuery::default()).unwrap()).unwrap();
    assert_eq!(rows["rows"][0]["costUsd"], 0.25, "{rows}");
    assert!(rows["rows"][2]["costUsd"].is_null(), "{rows}");
}
