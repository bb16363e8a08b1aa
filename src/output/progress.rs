//! Live progress of runs on stderr, from the engine's event stream: iterations, thoughts,
//! tool calls and retries, and (on a terminal) a streamed reply as it arrives. Never stdout
//! (that is the result's contract).
#![allow(clippy::print_stderr)]

use std::io::Write;

use delta_actors::RunEvent;

/// Prints one run's events, showing a streamed reply as it grows (the engine sends
/// `ReplyText` events when asked to: see `SupervisorConfig::reply_text_events`).
pub struct EventPrinter<W: Write = std::io::Stderr> {
    verbosity: Verbosity,
    out: W,
    /// The reply being shown as it arrives: its iteration and the text shown so far.
    live: Option<(u32, String)>,
}

impl EventPrinter {
    /// A printer for one run at a time, on stderr.
    pub fn new(verbosity: Verbosity) -> EventPrinter {
        EventPrinter::to(verbosity, std::io::stderr())
    }
}

impl<W: Write> EventPrinter<W> {
    /// A printer writing to `out`.
    pub fn to(verbosity: Verbosity, out: W) -> EventPrinter<W> {
        EventPrinter {
            verbosity,
            out,
            live: None,
        }
    }

    /// Prints `event`. A reply shown live ends with its `Thought` (only what the pieces had
    /// not shown yet is printed then) or with the next event.
    pub fn print(&mut self, event: &RunEvent) {
        if self.verbosity == Verbosity::Quiet {
            return;
        }
        let out = &mut self.out;
        let _ = match event {
            RunEvent::ReplyText {
                iteration,
                content,
                reasoning,
                ..
            } => {
                let shown = match &mut self.live {
                    Some((at, shown)) if at == iteration => shown,
                    _ => {
                        let _ = write!(out, "» ");
                        &mut self.live.insert((*iteration, String::new())).1
                    }
                };
                // Reasoning is shown as it comes but is not part of the reply's text.
                shown.push_str(content);
                write!(out, "{reasoning}{content}").and_then(|()| out.flush())
            }
            RunEvent::Thought {
                iteration, text, ..
            } if matches!(&self.live, Some((at, _)) if at == iteration) => {
                let shown = self.live.take().map(|(_, shown)| shown).unwrap_or_default();
                let rest = text.strip_prefix(shown.as_str()).unwrap_or("");
                writeln!(out, "{rest}")
            }
            other => {
                if self.live.take().is_some() {
                    let _ = writeln!(out);
                }
                match event_line(other, self.verbosity) {
                    Some(line) => writeln!(out, "{line}"),
                    None => Ok(()),
                }
            }
        };
    }
}

/// How much progress to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

/// The line `event` prints as, or `None` for events only an [`EventPrinter`] shows.
fn event_line(event: &RunEvent, verbosity: Verbosity) -> Option<String> {
    Some(match event {
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
            format!("» {}", shorten(text, limit))
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
        RunEvent::ContextCompacted {
            tokens_before,
            tokens_after,
            strategy,
            reason,
            ..
        } => {
            let why = if reason == "refusal" {
                ", after the server refused the request as too long"
            } else {
                ""
            };
            format!(
                "  ⇣ compacted context: {} → {} tokens ({strategy}{why})",
                thousands(*tokens_before),
                thousands(*tokens_after)
            )
        }
        // Shown only by an `EventPrinter` (one run on a terminal).
        RunEvent::ReplyText { .. } => return None,
        RunEvent::RunFinished {
            status,
            duration_ms,
            error,
            ..
        } => match error {
            Some(e) => format!("■ {status} after {:.2}s: {e}", *duration_ms as f64 / 1000.0),
            None => format!("■ {status} after {:.2}s", *duration_ms as f64 / 1000.0),
        },
    })
}

/// `14200` as `14,200`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        text.to_string()
    } else {
        let cut: String = text.chars().take(limit).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn text(iteration: u32, content: &str) -> RunEvent {
        RunEvent::ReplyText {
            run_id: "r".into(),
            iteration,
            content: content.into(),
            reasoning: String::new(),
        }
    }

    /// A streamed reply is shown as it comes, once: its Thought adds only what the pieces
    /// had not shown (a redactor may hold the last bytes back), and the next event starts a
    /// new line.
    #[test]
    fn a_streamed_reply_is_shown_as_it_comes_and_once() {
        let mut printer = EventPrinter::to(Verbosity::Normal, Vec::new());
        printer.print(&text(1, "Hello, "));
        printer.print(&text(1, "wor"));
        printer.print(&RunEvent::Thought {
            run_id: "r".into(),
            iteration: 1,
            text: "Hello, world".into(),
        });
        printer.print(&text(2, "half"));
        printer.print(&RunEvent::IterationStarted {
            run_id: "r".into(),
            iteration: 3,
            max_iterations: 5,
        });
        let shown = String::from_utf8(printer.out).unwrap();
        assert_eq!(shown, "» Hello, world\n» half\n[iteration 3/5]\n");
    }

    /// Issue 32: a compaction says how many tokens it took out, and why.
    #[test]
    fn a_compaction_shows_its_tokens_before_and_after() {
        let compacted = |reason: &str| RunEvent::ContextCompacted {
            run_id: "r".into(),
            iteration: 9,
            strategy: "mask".into(),
            reason: reason.into(),
            tokens_before: 14_200,
            tokens_after: 6_100,
        };
        assert_eq!(
            event_line(&compacted("budget"), Verbosity::Normal).unwrap(),
            "  ⇣ compacted context: 14,200 → 6,100 tokens (mask)"
        );
        assert!(event_line(&compacted("refusal"), Verbosity::Normal)
            .unwrap()
            .ends_with("(mask, after the server refused the request as too long)"));
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
