//! Renders a RunResult in the three formats of spec §2.6.5: `json` (the schema 2.0 object),
//! `text` (a summary with the next command to type), `raw` (the answer alone).

use delta_actors::api::RunResult;
use delta_actors::RunStatus;

use super::{emit, emit_json, Format};

const RULE: &str =
    "────────────────────────────────────────────────────────────────────────────────";

pub fn print(result: &RunResult, format: Format) {
    match format {
        Format::Json => emit_json(result),
        Format::Raw => {
            if let (RunStatus::Completed, Some(text)) = (result.status, &result.result) {
                emit(&format!("{text}\n"));
            }
        }
        Format::Text => emit(&render_text(result)),
    }
}

pub fn render_text(r: &RunResult) -> String {
    let mut s = String::new();
    s.push_str(RULE);
    s.push('\n');
    s.push_str(&format!("Run ID:     {}\n", r.run_id));
    s.push_str(&format!("Status:     {}\n", r.status));
    s.push_str(&format!("Iterations: {}\n", r.metrics.iterations));
    s.push_str(&format!(
        "Duration:   {:.2}s\n",
        r.metrics.duration_ms as f64 / 1000.0
    ));
    s.push_str(&format!("Workspace:  {}\n", r.metadata.workspace_path));
    if r.metrics.usage.input_tokens + r.metrics.usage.output_tokens > 0 {
        s.push_str(&format!(
            "Tokens:     {} in / {} out\n",
            r.metrics.usage.input_tokens, r.metrics.usage.output_tokens
        ));
    }
    s.push_str(RULE);
    s.push('\n');
    let resume = format!(
        "delta continue --run-id {} -w {}",
        r.run_id,
        shell_quote(&r.metadata.workspace_path)
    );
    match r.status {
        RunStatus::Completed => {
            s.push_str("Result:\n");
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
            s.push_str(&format!(
                "Retry with:   {resume} -m \"<what to do differently>\"\n"
            ));
        }
    }
    s.push_str(RULE);
    s.push('\n');
    s
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
