//! Renders `delta list-runs`: aligned text lines, a JSON array, or bare ids.

use delta_actors::workspace::RunSummary;

use super::{emit, emit_json, Format};

pub fn print(runs: &[RunSummary], format: Format) {
    match format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = runs
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "run_id": r.run_id,
                        "status": r.status,
                        "task_summary": r.task_summary,
                        "created_at": r.created_at,
                        "last_updated": r.last_updated,
                        "iterations": r.iterations,
                    })
                })
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
        }
        Format::Text => {
            if runs.is_empty() {
                emit("No runs found.\n");
                return;
            }
            let id_w = runs.iter().map(|r| r.run_id.len()).max().unwrap_or(6);
            let task_w = runs
                .iter()
                .map(|r| r.task_summary.chars().count() + 2)
                .max()
                .unwrap_or(4)
                .min(64);
            let now = chrono::Utc::now();
            let mut out = String::new();
            for r in runs {
                let task = format!("\"{}\"", r.task_summary);
                out.push_str(&format!(
                    "{:<id_w$}  {:<17}  {:<task_w$}  {}\n",
                    r.run_id,
                    r.status.as_str(),
                    task,
                    relative_age(&r.last_updated, now),
                ));
            }
            emit(&out);
        }
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
