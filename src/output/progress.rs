//! Live progress of runs on stderr, from the engine's event stream: iterations, thoughts,
//! tool calls and retries, and (on a terminal) a streamed reply as it arrives. Never stdout
//! (that is the result's contract).
#![allow(clippy::print_stderr)]

use std::io::Write;

use delta_actors::RunEvent;

/// Prints one run's events, showing a streamed reply as it grows when `live` (the engine
/// then sends `ReplyText` events: see `SupervisorConfig::reply_text_events`).
#[derive(Debug)]
pub struct EventPrinter {
    verbosity: Verbosity,
    /// The reply being shown as it arrives: its iteration and the text shown so far.
    live: Option<(u32, String)>,
}

impl EventPrinter {
    /// A printer for one run at a time.
    pub fn new(verbosity: Verbosity) -> EventPrinter {
        EventPrinter {
            verbosity,
            live: None,
        }
    }

    /// Prints `event`. A reply shown live ends with its `Thought` (only what the pieces had
    /// not shown yet is printed then) or with the next event.
    pub fn print(&mut self, event: &RunEvent) {
        if self.verbosity == Verbosity::Quiet {
            return;
        }
        match event {
            RunEvent::ReplyText {
                iteration,
                content,
                reasoning,
                ..
            } => {
                let mut err = std::io::stderr().lock();
                let shown = match &mut self.live {
                    Some((at, shown)) if at == iteration => shown,
                    _ => {
                        let _ = write!(err, "💭 ");
                        &mut self.live.insert((*iteration, String::new())).1
                    }
                };
                // Reasoning is shown as it comes but is not part of the reply's text.
                let _ = write!(err, "{reasoning}{content}");
                shown.push_str(content);
                let _ = err.flush();
            }
            RunEvent::Thought {
                iteration, text, ..
            } if matches!(&self.live, Some((at, _)) if at == iteration) => {
                let shown = self.live.take().map(|(_, shown)| shown).unwrap_or_default();
                let rest = text.strip_prefix(shown.as_str()).unwrap_or("");
                eprintln!("{rest}");
            }
            other => {
                if self.live.take().is_some() {
                    eprintln!();
                }
                print_event(other, self.verbosity, false);
            }
        }
    }
}

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
            // A call with no program (an MCP tool, a call a hook answered) has no exit code.
            let code = exit_code.map(|c| format!("exit {c}, ")).unwrap_or_default();
            format!(
                "  {mark} {tool_name} ({code}{duration_ms} ms): {}",
                shorten(&preview.replace('\n', " "), 100)
            )
        }
        RunEvent::ModelRetry {
            attempt,
            error,
            delay_ms,
            ..
        } => {
            // A provider's message can be pages long (a validation error lists every field):
            // the whole text is in the run's engine.log and io/invocations.
            let limit = if verbosity == Verbosity::Verbose {
                2000
            } else {
                300
            };
            let error = shorten(
                &error.split_whitespace().collect::<Vec<_>>().join(" "),
                limit,
            );
            format!("  ↻ model call attempt {attempt} failed ({error}); retrying in {delay_ms} ms")
        }
        // Shown only by an `EventPrinter` (one run on a terminal).
        RunEvent::ReplyText { .. } => return,
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
