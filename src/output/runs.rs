//! Renders `delta list-runs`: aligned text lines under a header row, a JSON array, or bare
//! ids. Unreadable run
//! folders are rows with status `UNREADABLE` and their reason (text, json); raw output keeps
//! only ids `continue` can take, and names the unreadable ones on stderr.

use delta_actors::workspace::{RunSummary, SkippedRun};

use super::{emit, emit_json, Format};

/// The status shown for a run folder whose metadata cannot be read.
pub const UNREADABLE: &str = "UNREADABLE";

/// One JSON row: delta's names plus the original engine's (`start_time`, `task`,
/// `iterations_completed`), so scripts written for either keep working.
fn json_row(r: &RunSummary) -> serde_json::Value {
    serde_json::json!({
        "run_id": r.run_id,
        "status": r.status,
        "task_summary": r.task_summary,
        "task": r.task,
        "created_at": r.created_at,
        "start_time": r.created_at,
        "last_updated": r.last_updated,
        "end_time": r.end_time,
        "iterations": r.iterations,
        "iterations_completed": r.iterations,
        "usage": r.usage,
        "total_cost_usd": r.total_cost_usd,
    })
}

fn unreadable_json_row(s: &SkippedRun) -> serde_json::Value {
    serde_json::json!({
        "run_id": s.run_id,
        "status": UNREADABLE,
        "error": s.reason,
    })
}

pub fn print(runs: &[RunSummary], unreadable: &[SkippedRun], format: Format) {
    match format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = runs
                .iter()
                .map(json_row)
                .chain(unreadable.iter().map(unreadable_json_row))
                .collect();
            emit_json(&rows);
        }
        Format::Raw => {
            let mut out = String::new();
            for r in runs {
                out.push_str(&r.run_id);
                out.push('\n');
            }
            emit(&out);
            for s in unreadable {
                eprintln!("warning: run {} is {UNREADABLE}: {}", s.run_id, s.reason);
            }
        }
        Format::Text => emit(&render_text(runs, unreadable, chrono::Utc::now())),
    }
}

fn render_text(
    runs: &[RunSummary],
    unreadable: &[SkippedRun],
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    if runs.is_empty() && unreadable.is_empty() {
        return "No runs found.\n".to_string();
    }
    let id_w = runs
        .iter()
        .map(|r| r.run_id.len())
        .chain(unreadable.iter().map(|s| s.run_id.len()))
        .max()
        .unwrap_or(6);
    // The task as one line (no tab or newline can shift the next column), cut to fit.
    let tasks: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "\"{}\"",
                super::orchestration::one_line(&r.task_summary, 62)
            )
        })
        .collect();
    let id_w = id_w.max("ID".len());
    let task_w = tasks
        .iter()
        .map(|t| t.chars().count())
        .max()
        .unwrap_or(4)
        .max("TASK".len());
    let tokens: Vec<String> = runs
        .iter()
        .map(|r| format!("{}/{}", r.usage.input_tokens, r.usage.output_tokens))
        .collect();
    let tokens_w = tokens
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max("TOKENS".len());
    let costs: Vec<String> = runs.iter().map(|r| cost_cell(r.total_cost_usd)).collect();
    let cost_w = costs
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0)
        .max("COST".len());
    let mut out = format!(
        "{:<id_w$}  {:<17}  {:<task_w$}  {:<tokens_w$}  {:<cost_w$}  UPDATED\n",
        "ID", "STATUS", "TASK", "TOKENS", "COST"
    );
    for ((r, task), (tokens, cost)) in runs.iter().zip(&tasks).zip(tokens.iter().zip(&costs)) {
        out.push_str(&format!(
            "{:<id_w$}  {:<17}  {task:<task_w$}  {tokens:<tokens_w$}  {cost:<cost_w$}  {}\n",
            r.run_id,
            r.status.as_str(),
            relative_age(&r.last_updated, now),
        ));
    }
    for s in unreadable {
        out.push_str(&format!(
            "{:<id_w$}  {:<17}  {}\n",
            s.run_id, UNREADABLE, s.reason
        ));
    }
    out
}

/// A cost column's cell: `$0.0123`, or `—` when unknown (no price for a model).
pub(super) fn cost_cell(total_cost_usd: Option<f64>) -> String {
    match total_cost_usd {
        Some(usd) => super::run_result::format_usd(usd),
        None => "—".to_owned(),
    }
}

pub(super) fn relative_age(timestamp: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(timestamp) else {
        return timestamp.to_string();
    };
    let secs = (now - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
    match secs {
        s if s < 60 => format!("{s}s ago"),
        s if s < 3600 => format!("{}m ago", s / 60),
        s if s < 86_400 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use delta_actors::RunStatus;

    fn run(id: &str) -> RunSummary {
        RunSummary {
            run_id: id.into(),
            status: RunStatus::Completed,
            task_summary: "do it".into(),
            task: "do it\nin detail".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            last_updated: "2026-01-01T00:00:00Z".into(),
            end_time: Some("2026-01-01T00:00:05Z".into()),
            iterations: 2,
            usage: delta_actors::TokenUsage {
                input_tokens: 1200,
                output_tokens: 30,
                total_tokens: 1230,
                estimated: false,
            },
            total_cost_usd: None,
        }
    }

    #[test]
    fn json_rows_carry_the_original_engines_field_names() {
        let row = json_row(&run("r1"));
        assert_eq!(row["start_time"], row["created_at"]);
        assert_eq!(row["task"], "do it\nin detail");
        assert_eq!(row["iterations_completed"], 2);
        assert_eq!(row["iterations"], 2);
        assert_eq!(row["total_cost_usd"], serde_json::Value::Null);
        assert_eq!(row["usage"]["input_tokens"], 1200);
    }

    /// Issue 33: a cost column next to the tokens, `—` where no price is known.
    #[test]
    fn text_rows_show_tokens_and_cost() {
        let mut priced = run("priced");
        priced.total_cost_usd = Some(0.0042);
        let now = chrono::Utc::now();
        let text = render_text(&[priced, run("unpriced")], &[], now);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("TOKENS") && lines[0].contains("COST"),
            "{text}"
        );
        assert!(lines[1].contains("1200/30  $0.004200"), "{text}");
        assert!(lines[2].contains("1200/30  —"), "{text}");
    }

    #[test]
    fn unreadable_runs_are_rows_with_their_reason() {
        let skipped = SkippedRun {
            run_id: "broken".into(),
            reason: "metadata file x not found".into(),
        };
        let now = chrono::Utc::now();
        let text = render_text(&[run("r1")], std::slice::from_ref(&skipped), now);
        let last = text.lines().last().unwrap_or_default();
        assert!(last.starts_with("broken"), "{text}");
        assert!(
            last.contains("UNREADABLE") && last.contains("not found"),
            "{text}"
        );
        let alone = render_text(&[], std::slice::from_ref(&skipped), now);
        assert!(!alone.contains("No runs found"), "{alone}");
        let row = unreadable_json_row(&skipped);
        assert_eq!(row["status"], "UNREADABLE");
        assert_eq!(row["error"], "metadata file x not found");
    }
}
