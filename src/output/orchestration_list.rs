//! Renders `delta list-orchestrations`: aligned text lines or a JSON array.

use std::path::Path;

use delta_actors::plan::state::{ListedStatus, OrchestrationListing};

use super::runs::relative_age;
use super::{emit, emit_json};

/// Output format of `list-orchestrations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum ListFormat {
    /// One aligned line per orchestration.
    #[default]
    Text,
    /// A JSON array of objects (orchestration_id, status, counts, started_at, error, ...).
    Json,
}

pub fn print(workspace: &Path, listings: &[OrchestrationListing], format: ListFormat) {
    let now = chrono::Utc::now();
    match format {
        ListFormat::Json => {
            let rows: Vec<serde_json::Value> = listings
                .iter()
                .map(|listing| {
                    let mut row = serde_json::to_value(listing).unwrap_or_default();
                    row["age_seconds"] = listing
                        .started_at
                        .as_deref()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map(|t| (now - t.with_timezone(&chrono::Utc)).num_seconds().max(0))
                        .into();
                    row
                })
                .collect();
            emit_json(&rows);
        }
        ListFormat::Text => {
            if listings.is_empty() {
                emit(&format!(
                    "No orchestrations in {}.\n",
                    workspace.join(".delta/orchestrations").display()
                ));
                return;
            }
            let id_w = listings
                .iter()
                .map(|l| l.orchestration_id.len())
                .max()
                .unwrap_or(2);
            let runs: Vec<String> = listings
                .iter()
                .map(|l| match l.status {
                    ListedStatus::Unreadable => "-".to_owned(),
                    _ => l.counts.describe(),
                })
                .collect();
            let runs_w = runs.iter().map(String::len).max().unwrap_or(4);
            // Every attempt's tokens (a retry continues its run, whose total carries them).
            let tokens: Vec<String> = listings
                .iter()
                .map(|l| match l.status {
                    ListedStatus::Unreadable => "-".to_owned(),
                    _ => format!(
                        "{} in / {} out",
                        l.usage.input_tokens, l.usage.output_tokens
                    ),
                })
                .collect();
            let tokens_w = tokens.iter().map(String::len).max().unwrap_or(6).max(6);
            let costs: Vec<String> = listings
                .iter()
                .map(|l| match l.status {
                    ListedStatus::Unreadable => "-".to_owned(),
                    _ => super::runs::cost_cell(l.total_cost_usd),
                })
                .collect();
            let cost_w = costs
                .iter()
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(4)
                .max(4);
            let mut out = format!(
                "{:<id_w$}  {:<11}  {:<8}  {:<runs_w$}  {:<tokens_w$}  {:<cost_w$}  PLAN\n",
                "ID", "STATUS", "AGE", "RUNS", "TOKENS", "COST"
            );
            for (((listing, runs), tokens), cost) in
                listings.iter().zip(&runs).zip(&tokens).zip(&costs)
            {
                let age = listing
                    .started_at
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |t| relative_age(t, now));
                let plan = match (&listing.plan, &listing.error) {
                    (_, Some(error)) if listing.status == ListedStatus::Unreadable => {
                        format!("({error})")
                    }
                    (Some(plan), Some(note)) => format!("{plan}  ({note})"),
                    (Some(plan), None) => plan.clone(),
                    (None, _) => "-".to_owned(),
                };
                out.push_str(&format!(
                    "{:<id_w$}  {:<11}  {:<8}  {:<runs_w$}  {:<tokens_w$}  {:<cost_w$}  {plan}\n",
                    listing.orchestration_id,
                    listing.status.as_str(),
                    age,
                    runs,
                    tokens,
                    cost,
                ));
            }
            emit(&out);
        }
    }
}
