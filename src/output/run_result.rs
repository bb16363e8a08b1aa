//! Renders a RunResult in the three formats of spec §2.6.5: `json` (the schema 2.0 object),
//! `text` (the original engine's summary layout, plus the next command to type), `raw` (the answer alone).

use delta_actors::RunErrorKind;
use delta_actors::RunResult;
use delta_actors::RunStatus;

use super::{emit, emit_json, Format};

const RULE: &str =
    "────────────────────────────────────────────────────────────────────────────────";

/// Prints `result`; the text format suggests the next `delta continue`, completed with
/// `continue_flags` (the model flags this command was given, e.g. `--llm-script`).
pub fn print(result: &RunResult, format: Format, continue_flags: &[String]) {
    match format {
        Format::Json => emit_json(result),
        Format::Raw => {
            if let (RunStatus::Completed, Some(text)) = (result.status, &result.result) {
                emit(&format!("{text}\n"));
            }
        }
        Format::Text => emit(&render_text(result, continue_flags)),
    }
}

/// Dollars as the summaries show them: `$0.000123` below a cent (so a cheap call is not
/// shown as free), `$1.23` above.
pub fn format_usd(usd: f64) -> String {
    if usd != 0.0 && usd.abs() < 0.01 {
        format!("${usd:.6}")
    } else {
        format!("${usd:.2}")
    }
}

/// The text summary. Its layout follows the original engine's (reference §3.5): the id and
/// status between rules, then an `Execution Summary:` block, then the outcome with the
/// exact `delta continue` command (with `continue_flags`) that goes on from there.
pub fn render_text(r: &RunResult, continue_flags: &[String]) -> String {
    let mut s = String::new();
    s.push_str(RULE);
    s.push('\n');
    s.push_str(&format!("Run ID: {}\n", r.run_id));
    s.push_str(&format!("Status: {}\n", r.status));
    s.push_str(RULE);
    s.push_str("\n\nExecution Summary:\n");
    s.push_str(&format!("  • Iterations: {}\n", r.metrics.iterations));
    s.push_str(&format!(
        "  • Duration:   {:.2}s\n",
        r.metrics.duration_ms as f64 / 1000.0
    ));
    s.push_str(&format!("  • Start Time: {}\n", r.metrics.start_time));
    s.push_str(&format!("  • End Time:   {}\n", r.metrics.end_time));
    s.push_str(&format!("  • Workspace:  {}\n", r.metadata.workspace_path));
    if r.metrics.usage.input_tokens > 0 || r.metrics.usage.output_tokens > 0 {
        s.push_str(&format!(
            "  • Tokens:     {} in / {} out{}\n",
            r.metrics.usage.input_tokens,
            r.metrics.usage.output_tokens,
            estimated_note(r.metrics.usage.estimated)
        ));
    }
    if r.metrics.usage.input_tokens > 0 || r.metrics.usage.output_tokens > 0 {
        match (r.metrics.usage.total_cost_usd, &r.metrics.usage.cost_note) {
            (Some(usd), _) => s.push_str(&format!("  • Cost:       {}\n", format_usd(usd))),
            (None, Some(note)) => s.push_str(&format!("  • Cost:       {note}\n")),
            (None, None) => s.push_str("  • Cost:       unknown\n"),
        }
    }
    let total = &r.metrics.cumulative_usage;
    if total.input_tokens > r.metrics.usage.input_tokens
        || total.output_tokens > r.metrics.usage.output_tokens
    {
        // A continued run: what its earlier starts spent is billed too.
        let cost = match r.metrics.cumulative_cost_usd {
            Some(usd) => format!("; {}", format_usd(usd)),
            None => "; cost unknown".to_owned(),
        };
        s.push_str(&format!(
            "  • Run total:  {} in / {} out (every start){}{cost}\n",
            total.input_tokens,
            total.output_tokens,
            estimated_note(total.estimated)
        ));
    }
    s.push('\n');
    let resume = super::hints::continue_command(
        &r.run_id,
        std::path::Path::new(&r.metadata.workspace_path),
        continue_flags,
    );
    match r.status {
        RunStatus::Completed if r.empty_answer => {
            s.push_str("Final Response: (empty: the model answered with no text; see the WARNING in the journal)\n");
        }
        RunStatus::Completed => {
            s.push_str("Final Response:\n");
            s.push_str(RULE);
            s.push('\n');
            s.push_str(r.result.as_deref().unwrap_or(""));
            s.push('\n');
        }
        RunStatus::WaitingForInput => {
            if let Some(i) = &r.interaction {
                s.push_str(&format!(
                    "The agent asks ({}): {}\n",
                    i.input_type, i.prompt
                ));
            }
            s.push_str(&format!("Answer with:  {resume} -m \"<answer>\"\n"));
        }
        RunStatus::Interrupted => {
            if let Some(e) = &r.error {
                s.push_str(&format!("Interrupted: {}\n", e.message));
            }
            s.push_str(&format!("Resume with:  {resume}\n"));
        }
        RunStatus::Failed | RunStatus::Running => {
            if let Some(e) = &r.error {
                s.push_str(&format!("Error ({}): {}\n", e.kind, e.message));
            }
            s.push_str(&format!(
                "Journal:      {}/journal.jsonl\n",
                r.metadata.run_dir
            ));
            // The same conversation again (a connection error, a timeout), or with a hint;
            // after the model's own (empty) answer only a hint can change the outcome.
            let answered = r
                .error
                .as_ref()
                .is_some_and(|e| e.kind == RunErrorKind::EmptyAnswer);
            if answered {
                s.push_str(&format!(
                    "Retry with:   {resume} -m \"<what to do differently>\"\n"
                ));
            } else {
                s.push_str(&format!("Retry with:   {resume}\n"));
                s.push_str(&format!(
                    "          or: {resume} -m \"<what to do differently>\"\n"
                ));
            }
        }
    }
    s.push_str(RULE);
    s.push('\n');
    s
}

/// Said after token counts that are partly delta's estimate.
fn estimated_note(estimated: bool) -> &'static str {
    if estimated {
        " (estimated: the endpoint sent no usage)"
    } else {
        ""
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use delta_actors::{RunMetrics, RunResultMetadata};

    fn completed() -> RunResult {
        RunResult {
            schema_version: "2.0".into(),
            run_id: "r1".into(),
            status: RunStatus::Completed,
            empty_answer: false,
            result: Some("All done.".into()),
            error: None,
            interaction: None,
            metrics: RunMetrics {
                iterations: 3,
                duration_ms: 1500,
                model_time_ms: 0,
                queue_time_ms: 0,
                tool_time_ms: 0,
                start_time: "2026-01-01T00:00:00.000Z".into(),
                end_time: "2026-01-01T00:00:01.500Z".into(),
                usage: Default::default(),
                cumulative_usage: Default::default(),
                cumulative_cost_usd: None,
                tokens_saved: 0,
                compactions: 0,
            },
            metadata: RunResultMetadata {
                agent_name: "a".into(),
                workspace_path: "/ws".into(),
                run_dir: "/ws/.delta/r1".into(),
            },
        }
    }

    /// Issue 11 item 19: the text summary has the original engine's "Execution Summary:"
    /// heading and "Final Response:" block, which its users' scripts grep for.
    #[test]
    fn text_summary_has_the_original_engines_headings() {
        let text = render_text(&completed(), &[]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], RULE);
        assert_eq!(lines[1], "Run ID: r1");
        assert_eq!(lines[2], "Status: COMPLETED");
        assert_eq!(lines[3], RULE);
        assert_eq!(lines[5], "Execution Summary:");
        assert_eq!(lines[6], "  • Iterations: 3");
        assert_eq!(lines[7], "  • Duration:   1.50s");
        assert!(lines[8].starts_with("  • Start Time: 2026-01-01"), "{text}");
        assert!(lines[9].starts_with("  • End Time:   2026-01-01"), "{text}");
        let response = lines.iter().position(|l| *l == "Final Response:").unwrap();
        assert_eq!(lines[response + 1], RULE);
        assert_eq!(lines[response + 2], "All done.");
        assert_eq!(lines.last().copied(), Some(RULE));
    }

    /// Issue 25 items 5 and 7: a continued run shows what its earlier starts spent, and an
    /// empty final answer says so instead of printing nothing.
    #[test]
    fn text_summary_shows_the_run_total_and_an_empty_answer() {
        let mut result = completed();
        result.metrics.usage.input_tokens = 10;
        result.metrics.usage.output_tokens = 2;
        result.metrics.cumulative_usage = delta_actors::TokenUsage {
            input_tokens: 30,
            output_tokens: 7,
            total_tokens: 37,
            estimated: false,
        };
        result.metrics.cumulative_cost_usd = Some(0.0042);
        result.result = Some(String::new());
        result.empty_answer = true;
        let text = render_text(&result, &[]);
        assert!(text.contains("  • Tokens:     10 in / 2 out\n"), "{text}");
        assert!(
            text.contains("  • Run total:  30 in / 7 out (every start); $0.004200\n"),
            "{text}"
        );
        // Issue 33: a run whose earlier starts called an unpriced model has no total.
        result.metrics.cumulative_cost_usd = None;
        assert!(
            render_text(&result, &[])
                .contains("  • Run total:  30 in / 7 out (every start); cost unknown\n"),
            "{text}"
        );
        assert!(text.contains("Final Response: (empty"), "{text}");
        // A first start shows no separate total.
        assert!(!render_text(&completed(), &[]).contains("Run total"));
        result.metrics.usage.estimated = true;
        let text = render_text(&result, &[]);
        assert!(
            text.contains(
                "  • Tokens:     10 in / 2 out (estimated: the endpoint sent no usage)\n"
            ),
            "{text}"
        );
    }
}
