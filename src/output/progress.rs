//! Live progress of runs on stderr, from the engine's event stream: iterations, thoughts,
//! tool calls and retries. Never stdout (that is the result's contract).
#![allow(clippy::print_stderr)]

use delta_actors::RunEvent;

/// How much progress to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

/// Prints one event. `prefix_run_id` adds the run id to each line (many runs at once).
pub fn print_event(event: &RunEvent, verbosity: Verbosity, prefix_run_id: bool) {
    if verbosity == Verbosity::Quiet {
        return;
    }
    let prefix = if prefix_run_id {
        format!("[{}] ", event.run_id())
    } else {
        String::new()
    };
    let line = match event {
        RunEvent::RunStarted {
            run_id,
            agent_name,
            work_dir,
            resumed,
        } => format!(
            "{} run {run_id} (agent {agent_name}) in {work_dir}",
            if *resumed { "Resuming" } else { "Starting" }
        ),
        RunEvent::IterationStarted {
            iteration,
            max_iterations,
            ..
        } => format!("[iteration {iteration}/{max_iterations}]"),
        RunEvent::Thought { text, .. } => {
            let limit = if verbosity == Verbosity::Verbose {
                2000
            } else {
                300
            };
            format!("💭 {}", shorten(text, limit))
        }
        RunEvent::ToolStarted {
            tool_name, summary, ..
        } => {
            if verbosity == Verbosity::Verbose {
                format!("  → {tool_name}: {summary}")
            } else {
                format!("  → {tool_name}")
            }
        }
        RunEvent::ToolFinished {
            tool_name,
            success,
            exit_code,
            duration_ms,
            preview,
            ..
        } => {
            let mark = if *success { "✓" } else { "✗" };
            let code = exit_code
                .map(|c| format!("exit {c}"))
                .unwrap_or_else(|| "no exit code".into());
            format!(
                "  {mark} {tool_name} ({code}, {duration_ms} ms): {}",
                shorten(&preview.replace('\n', " "), 100)
            )
        }
        RunEvent::ModelRetry {
            attempt,
            error,
            delay_ms,
            ..
        } => {
            format!("  ↻ model call attempt {attempt} failed ({error}); retrying in {delay_ms} ms")
        }
        RunEvent::RunFinished {
            status,
            duration_ms,
            error,
            ..
        } => match error {
            Some(e) => format!("■ {status} after {:.2}s: {e}", *duration_ms as f64 / 1000.0),
            None => format!("■ {status} after {:.2}s", *duration_ms as f64 / 1000.0),
        },
    };
    eprintln!("{prefix}{line}");
}

fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        text.to_string()
    } else {
        let cut: String = text.chars().take(limit).collect();
        format!("{cut}…")
    }
}
