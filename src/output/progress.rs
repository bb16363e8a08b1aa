//! Live progress of runs on stderr, from the engine's event stream: iterations, thoughts,
//! tool calls, retries and what an endpoint taught, and (on a terminal) a streamed reply as
//! it arrives and, while a model call is silent, one line updated in place that says it is
//! still going ("waiting for the model 1m42s, limit 10m"). Never stdout (that is the
//! result's contract), and the in-place line only on a terminal.

use std::io::Write;
use std::time::{Duration, Instant};

use delta_actors::RunEvent;

/// A model call silent for less than this shows nothing: most answer sooner.
pub const WAIT_SHOWN_AFTER: Duration = Duration::from_secs(3);

/// How often the waiting line is redrawn.
pub const WAIT_TICK: Duration = Duration::from_secs(1);

/// Back to the start of the line, and the line erased (a terminal's control sequence).
const CLEAR_LINE: &str = "\r\x1b[2K";

/// Prints one run's events, showing a streamed reply as it grows (the engine sends
/// `ReplyText` events when asked to: see `SupervisorConfig::reply_text_events`).
pub struct EventPrinter<W: Write = std::io::Stderr> {
    verbosity: Verbosity,
    out: W,
    /// The reply being shown as it arrives: its iteration and the text shown so far.
    live: Option<(u32, String)>,
    /// The run shown and the iteration at which its cap stops this start or continuation
    /// (see [`EventPrinter::iteration_line`]).
    last_iteration: Option<(String, u32)>,
    /// Show a silent model call's waiting line, updated in place (a terminal watches).
    live_status: bool,
    /// The model call being waited for, when `live_status`.
    waiting: Option<Waiting>,
}

/// A model call in progress, as the waiting line shows it.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    /// When the current attempt began (or begins, after a retry's wait).
    since: Instant,
    /// The attempt's whole-request limit.
    limit: Duration,
    /// The line is on screen now (to be erased before anything else is printed).
    shown: bool,
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
            last_iteration: None,
            live_status: false,
            waiting: None,
        }
    }

    /// Also show, updated in place, that a silent model call is still going: for a person
    /// watching stderr on a terminal, never for a log or a pipe.
    pub fn with_live_status(mut self, on: bool) -> EventPrinter<W> {
        self.live_status = on;
        self
    }

    /// A model call is being waited for (the driver then calls [`EventPrinter::tick`]).
    pub fn is_waiting(&self) -> bool {
        self.waiting.is_some()
    }

    /// Redraws the waiting line (see [`waiting_line`]), if a model call is silent.
    pub fn tick(&mut self) {
        self.tick_at(Instant::now());
    }

    /// [`EventPrinter::tick`] at `now`.
    pub fn tick_at(&mut self, now: Instant) {
        let Some(waiting) = self.waiting.as_mut() else {
            return;
        };
        let Some(line) = waiting_line(now.saturating_duration_since(waiting.since), waiting.limit)
        else {
            return;
        };
        waiting.shown = true;
        let _ = write!(self.out, "{CLEAR_LINE}  … {line}").and_then(|()| self.out.flush());
    }

    /// Erases the waiting line if it is on screen (before anything else is printed).
    fn clear_waiting_line(&mut self) {
        if let Some(waiting) = self.waiting.as_mut().filter(|w| w.shown) {
            waiting.shown = false;
            let _ = write!(self.out, "{CLEAR_LINE}");
        }
    }

    /// Follows the model call `event` tells of.
    fn follow_model_call(&mut self, event: &RunEvent) {
        let now = Instant::now();
        match event {
            RunEvent::ModelCallStarted {
                request_timeout_ms, ..
            } if self.live_status => {
                self.waiting = Some(Waiting {
                    since: now,
                    limit: Duration::from_millis(*request_timeout_ms),
                    shown: false,
                });
            }
            // The call goes on: a new attempt after the wait, or at once, written another
            // way.
            RunEvent::ModelRetry { delay_ms, .. } => {
                if let Some(waiting) = self.waiting.as_mut() {
                    waiting.since = now + Duration::from_millis(*delay_ms);
                }
            }
            RunEvent::ModelAdapted { .. } => {
                if let Some(waiting) = self.waiting.as_mut() {
                    waiting.since = now;
                }
            }
            // Anything else means the model answered (or the run moved on).
            _ => self.waiting = None,
        }
    }

    /// Prints `event`. A reply shown live ends with its `Thought` (only what the pieces had
    /// not shown yet is printed then) or with the next event.
    pub fn print(&mut self, event: &RunEvent) {
        if self.verbosity == Verbosity::Quiet {
            return;
        }
        self.clear_waiting_line();
        self.follow_model_call(event);
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
                if let RunEvent::IterationStarted {
                    run_id,
                    iteration,
                    max_iterations,
                } = other
                {
                    let line = Self::iteration_line(
                        &mut self.last_iteration,
                        run_id,
                        *iteration,
                        *max_iterations,
                    );
                    let _ = writeln!(out, "{line}");
                    return;
                }
                match event_line(other, self.verbosity) {
                    Some(line) => writeln!(out, "{line}"),
                    None => Ok(()),
                }
            }
        };
    }
}

impl<W: Write> EventPrinter<W> {
    /// `[iteration 7/12]`: the run's iteration (counted over its whole life) out of the
    /// iteration at which this start or continuation reaches its cap. The cap counts from
    /// where a continuation starts, so `7/6` (the cap alone) read as past the limit.
    fn iteration_line(
        last: &mut Option<(String, u32)>,
        run_id: &str,
        iteration: u32,
        max_iterations: u32,
    ) -> String {
        let limit = match last {
            Some((shown, limit)) if shown == run_id => *limit,
            _ => {
                let limit = iteration.saturating_sub(1).saturating_add(max_iterations);
                *last = Some((run_id.to_owned(), limit));
                limit
            }
        };
        format!("[iteration {iteration}/{limit}]")
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
            ..
        } => format!(
            "{} run {run_id} (agent {agent_name}) in {work_dir}",
            if *resumed { "Resuming" } else { "Starting" }
        ),
        // Shown by an `EventPrinter`, which knows where this start's cap stops.
        RunEvent::IterationStarted { .. } => return None,
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
        // The waiting line shows a call in progress, on a terminal only.
        RunEvent::ModelCallStarted { .. } => return None,
        RunEvent::ModelAdapted { message, .. } => format!("  · {message}"),
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
        // The run waits for another process (its workspace's creation lock): the message
        // names the file, the holder and the limit.
        RunEvent::Waiting { message, .. } => format!("  … {message}"),
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
        // For exporters: the reply's Thought (or the failure) says what a person needs.
        RunEvent::ModelCallFinished { .. } => return None,
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

/// The line that says a model call is still going, `elapsed` into an attempt limited to
/// `limit`: "waiting for the model 1m42s, limit 10m"; `None` before [`WAIT_SHOWN_AFTER`].
pub fn waiting_line(elapsed: Duration, limit: Duration) -> Option<String> {
    (elapsed >= WAIT_SHOWN_AFTER).then(|| {
        format!(
            "waiting for the model {}, limit {}",
            clock(elapsed),
            clock(limit)
        )
    })
}

/// `42s`, `1m42s`, `10m`, `1h05m`, `2h`: whole seconds, the largest units first, a unit
/// left out when it is zero at the end.
fn clock(duration: Duration) -> String {
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
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
        assert_eq!(shown, "» Hello, world\n» half\n[iteration 3/7]\n");
    }

    /// Issue 31 item 15: a continued run printed `[iteration 7/6]` (its whole-life
    /// iteration over the continuation's own cap). The second number is the iteration at
    /// which this continuation stops.
    #[test]
    fn a_continuation_counts_its_cap_from_where_it_starts() {
        let mut printer = EventPrinter::to(Verbosity::Normal, Vec::new());
        for iteration in [7, 8] {
            printer.print(&RunEvent::IterationStarted {
                run_id: "r".into(),
                iteration,
                max_iterations: 6,
            });
        }
        printer.print(&RunEvent::IterationStarted {
            run_id: "other".into(),
            iteration: 1,
            max_iterations: 6,
        });
        let shown = String::from_utf8(printer.out).unwrap();
        assert_eq!(
            shown,
            "[iteration 7/12]\n[iteration 8/12]\n[iteration 1/6]\n"
        );
    }

    #[test]
    fn the_waiting_line_says_how_long_and_the_limit() {
        let s = Duration::from_secs;
        assert_eq!(
            waiting_line(s(2), s(600)),
            None,
            "a quick call shows nothing"
        );
        assert_eq!(
            waiting_line(s(102), s(600)).as_deref(),
            Some("waiting for the model 1m42s, limit 10m")
        );
        assert_eq!(
            waiting_line(s(3), s(90)).as_deref(),
            Some("waiting for the model 3s, limit 1m30s")
        );
        assert_eq!(
            waiting_line(s(3_900), s(7_200)).as_deref(),
            Some("waiting for the model 1h05m, limit 2h")
        );
        assert_eq!(clock(Duration::from_millis(59_999)), "59s");
        assert_eq!(clock(s(120)), "2m");
    }

    fn started(limit_ms: u64) -> RunEvent {
        RunEvent::ModelCallStarted {
            run_id: "r".into(),
            iteration: 1,
            streamed: false,
            request_timeout_ms: limit_ms,
        }
    }

    /// Regression: a model call that was not streamed showed nothing for minutes. On a
    /// terminal the waiting line is drawn in place (no newline, redrawn over itself) and
    /// erased before the next event's line.
    #[test]
    fn a_silent_model_call_is_shown_in_place_and_erased_by_the_answer() {
        let mut printer = EventPrinter::to(Verbosity::Normal, Vec::new()).with_live_status(true);
        printer.print(&started(600_000));
        assert!(printer.is_waiting());
        let now = Instant::now();
        printer.tick_at(now);
        assert!(printer.out.is_empty(), "nothing in the first seconds");
        printer.tick_at(now + Duration::from_secs(100));
        printer.tick_at(now + Duration::from_secs(102));
        printer.print(&RunEvent::Thought {
            run_id: "r".into(),
            iteration: 1,
            text: "done".into(),
        });
        assert!(!printer.is_waiting());
        let shown = String::from_utf8(printer.out).unwrap();
        assert_eq!(
            shown,
            "\r\x1b[2K  … waiting for the model 1m40s, limit 10m\r\x1b[2K  … waiting for the model 1m42s, limit 10m\r\x1b[2K» done\n"
        );
    }

    /// Not on a terminal (a pipe, a log, `--format json`): no waiting line, ever; and a
    /// lesson about the endpoint is one calm line.
    #[test]
    fn no_waiting_line_off_a_terminal() {
        let mut printer = EventPrinter::to(Verbosity::Normal, Vec::new());
        printer.print(&started(600_000));
        assert!(!printer.is_waiting());
        printer.tick_at(Instant::now() + Duration::from_secs(100));
        printer.print(&RunEvent::ModelAdapted {
            run_id: "r".into(),
            message: "http://127.0.0.1:1/v1 (m) refused `content: null` on a tool-call turn (HTTP 500): calls are sent with ...".into(),
        });
        let shown = String::from_utf8(printer.out).unwrap();
        assert_eq!(
            shown,
            "  · http://127.0.0.1:1/v1 (m) refused `content: null` on a tool-call turn (HTTP 500): calls are sent with ...\n"
        );
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
