//! The metrics of `delta serve` (`GET /metrics`, behind its token): what the batches it
//! watches hold, read from the views its runs watcher keeps (no file is read for a scrape):
//! runs by workspace, orchestration and status, their tokens, orchestrations by status and
//! each stage's runs.
//!
//! Must not: read files (the watcher's last views are the truth here), or keep state.

use std::collections::BTreeMap;

use crate::openmetrics::{Kind, MetricsText};
use crate::serve::runs_view::WorkspaceView;

/// The OpenMetrics exposition of `views`.
pub fn serve_metrics_of(views: &[&WorkspaceView]) -> String {
    let mut runs: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    let mut tokens: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    let mut text = MetricsText::new();
    let names: Vec<String> = views
        .iter()
        .map(|v| v.path.to_string_lossy().into_owned())
        .collect();
    // Every run, not only the newest the page lists (`WorkspaceView::totals`).
    for (view, workspace) in views.iter().zip(&names) {
        for ((plan, status), n) in &view.totals.runs {
            runs.insert((workspace, plan, status), *n);
        }
        for (plan, sum) in &view.totals.tokens {
            tokens.insert((workspace, plan), *sum);
        }
    }
    text.family(
        "delta_serve_workspaces",
        Kind::Gauge,
        "Workspaces delta serve watches.",
    );
    text.sample("delta_serve_workspaces", &[], views.len() as f64);
    text.family("delta_serve_runs", Kind::Gauge, "Runs in the watched workspaces, by workspace, orchestration (empty for a lone run) and status.");
    for ((workspace, plan, status), n) in &runs {
        text.sample(
            "delta_serve_runs",
            &[
                ("workspace", workspace),
                ("orchestration", plan),
                ("status", status),
            ],
            *n as f64,
        );
    }
    text.family(
        "delta_serve_run_tokens",
        Kind::Gauge,
        "Tokens of those runs (every start of each), by workspace, orchestration and type.",
    );
    for ((workspace, plan), (input, output)) in &tokens {
        text.sample(
            "delta_serve_run_tokens",
            &[
                ("workspace", workspace),
                ("orchestration", plan),
                ("type", "input"),
            ],
            *input as f64,
        );
        text.sample(
            "delta_serve_run_tokens",
            &[
                ("workspace", workspace),
                ("orchestration", plan),
                ("type", "output"),
            ],
            *output as f64,
        );
    }
    text.family(
        "delta_serve_unreadable_runs",
        Kind::Gauge,
        "Run folders whose metadata cannot be read, by workspace.",
    );
    for (view, workspace) in views.iter().zip(&names) {
        text.sample(
            "delta_serve_unreadable_runs",
            &[("workspace", workspace)],
            view.unreadable.len() as f64,
        );
    }
    text.family(
        "delta_serve_orchestrations",
        Kind::Gauge,
        "Orchestrations in the watched workspaces, by workspace, id and status (1 each).",
    );
    text.family(
        "delta_serve_stage_runs",
        Kind::Gauge,
        "Each stage's runs: total, completed, failed.",
    );
    let mut stages = Vec::new();
    for (view, workspace) in views.iter().zip(&names) {
        for plan in &view.orchestrations {
            text.sample(
                "delta_serve_orchestrations",
                &[
                    ("workspace", workspace),
                    ("orchestration", &plan.id),
                    ("status", plan.status.as_str()),
                ],
                1.0,
            );
            for stage in &plan.stages {
                for (state, n) in [
                    ("total", stage.total),
                    ("completed", stage.completed),
                    ("failed", stage.failed),
                ] {
                    stages.push((
                        workspace.clone(),
                        plan.id.clone(),
                        stage.id.clone(),
                        state,
                        n,
                    ));
                }
            }
        }
    }
    // A family's samples stay together: the stages' after every orchestration's.
    for (workspace, plan, stage, state, n) in &stages {
        text.sample(
            "delta_serve_stage_runs",
            &[
                ("workspace", workspace),
                ("orchestration", plan),
                ("stage", stage),
                ("state", state),
            ],
            *n as f64,
        );
    }
    text.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::protocol::RunStatus;
    use crate::serve::runs_view::MAX_RUNS;
    use crate::serve::workspace_scan::tests::add_run;
    use crate::serve::workspace_scan::WorkspaceScan;

    /// Regression (issue 33): `/metrics` counted only the newest [`MAX_RUNS`] runs the page
    /// lists: a 10,000-run batch read as 495 COMPLETED and 5 FAILED.
    #[test]
    fn metrics_count_every_run_though_the_page_lists_the_newest() {
        let ws = tempfile::tempdir().unwrap();
        let total = MAX_RUNS + 20;
        for i in 0..total {
            let status = if i % 10 == 0 {
                RunStatus::Failed
            } else {
                RunStatus::Completed
            };
            add_run(
                ws.path(),
                &format!("r{i:04}"),
                &format!("2026-11-26T10:{:02}:{:02}.000Z", i / 60, i % 60),
                status,
            );
        }
        let view = WorkspaceScan::new(ws.path()).scan();
        assert_eq!(view.runs.len(), MAX_RUNS);
        let text = serve_metrics_of(&[&view]);
        let count = |status: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with("delta_serve_runs{") && l.contains(status))
                .unwrap_or_else(|| panic!("no {status} line in {text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let failed = total.div_ceil(10);
        assert_eq!(count("\"FAILED\""), failed as f64, "{text}");
        assert_eq!(count("\"COMPLETED\""), (total - failed) as f64, "{text}");
    }
}
