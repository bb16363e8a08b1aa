//! `delta orchestrate` output: the summary (text or JSON) on stdout, the dry-run stage graph,
//! and the live progress on stderr (one indicatif bar per stage on a terminal; otherwise a
//! plain line when something changed, at most every [`PROGRESS_INTERVAL`]).
//!
//! Text that comes from runs (answers, errors) is flattened to one line without control
//! characters before it goes into a column, so a tab or a newline in an answer cannot shift
//! the columns after it.

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use delta_actors::agent::ResolvedAgent;
use delta_actors::llm::timeouts::describe_duration;
use delta_actors::plan::state::{OrchestrationSummary, RunCounts, RunRow, StageStatus};
use delta_actors::plan::{planned_runs, topo_order, ResolvedForeach, ResolvedPlan};
use delta_actors::protocol::CostTally;
use delta_actors::OrchestrationEvent;
use delta_actors::RunStatus;
use delta_actors::TokenUsage;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{emit, emit_json, Format};

/// A stage with at most this many runs lists every run in the text summary; a larger one
/// lists its runs that did not complete, at most this many (a 10,000-run batch printed
/// 10,007 lines on the terminal).
pub const SUMMARY_RUN_LINES: usize = 20;

/// The summary on stdout. `resume_hint` (an interrupted orchestration) is the command that
/// finishes it: part of the text summary, on stderr for the machine formats. `all_runs`
/// (`--all-runs`) lists every run in the text summary, however many.
pub fn print_summary(
    summary: &OrchestrationSummary,
    format: Format,
    resume_hint: Option<&str>,
    all_runs: bool,
) {
    match format {
        Format::Json => emit_json(summary),
        Format::Raw => {
            let mut out = String::new();
            for stage in &summary.stages {
                for run in &stage.runs {
                    out.push_str(&format!("{}\t{}\n", run.run_id, run.status));
                }
            }
            emit(&out);
        }
        Format::Text => emit(&render_summary(summary, resume_hint, all_runs)),
    }
    if let (Some(hint), Format::Json | Format::Raw) = (resume_hint, format) {
        eprintln!("Resume with: {hint}");
    }
}

fn render_summary(s: &OrchestrationSummary, resume_hint: Option<&str>, all_runs: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Orchestration {}  {}\n",
        s.orchestration_id, s.status
    ));
    out.push_str(&format!("Plan:      {}\n", s.plan));
    out.push_str(&format!("Workspace: {}\n", s.workspace));
    let all_rows = s.stages.iter().flat_map(|stage| &stage.runs);
    out.push_str(&format!(
        "Runs:      {} in {:.1}s; tokens {} in / {} out (every attempt){}{}\n",
        s.totals.counts.describe(),
        s.duration_ms as f64 / 1000.0,
        s.totals.input_tokens,
        s.totals.output_tokens,
        cost_text(&s.totals.cost),
        empty_answers(all_rows)
    ));
    if let Some(e) = &s.error {
        out.push_str(&format!("Note:      {e}\n"));
    }
    for stage in &s.stages {
        // A stage that never expanded plans no runs: its counts say nothing.
        let counts = if stage.counts.total > 0 {
            format!("  ({})", stage.counts.describe())
        } else {
            String::new()
        };
        out.push_str(&format!(
            "\nstage {}  {}{counts}{}{}\n",
            stage.id,
            stage.status.label(),
            tokens(&stage.usage, &stage.cost),
            empty_answers(&stage.runs)
        ));
        let listed = listed_runs(&stage.runs, all_runs);
        for run in &listed.rows {
            let detail = match run.status {
                RunStatus::Completed if run.empty_answer => "(empty answer)".to_owned(),
                RunStatus::Completed => one_line(run.result.as_deref().unwrap_or(""), 70),
                _ => one_line(run.error.as_deref().unwrap_or(""), 70),
            };
            out.push_str(&format!(
                "  {:<40} {:<17} {:>6.1}s {:>3} it{} {}\n",
                run.run_id,
                run.status.as_str(),
                run.duration_ms as f64 / 1000.0,
                run.iterations,
                if run.attempts > 1 {
                    format!(" ×{}", run.attempts)
                } else {
                    String::new()
                },
                detail
            ));
        }
        if listed.more_unsuccessful > 0 {
            out.push_str(&format!(
                "  … and {} more that did not complete: `--format json` lists every run, `delta \
                 list-runs -w {} --status FAILED` the failed ones\n",
                listed.more_unsuccessful,
                shell_words::quote(&s.workspace)
            ));
        }
        if listed.completed_unlisted > 0 {
            out.push_str(&format!(
                "  ({} completed runs not listed: `--all-runs` lists every run, `--format json` \
                 gives them with their answers)\n",
                listed.completed_unlisted
            ));
        }
        if stage.counts.not_started > 0 {
            out.push_str(&format!(
                "  ({} more not started)\n",
                stage.counts.not_started
            ));
        }
    }
    if let Some(hint) = resume_hint {
        out.push_str(&format!("\nResume with: {hint}\n"));
    }
    out
}

/// The rows of a stage the text summary lists, and what it leaves out.
struct ListedRuns<'a> {
    rows: Vec<&'a RunRow>,
    /// Runs that did not complete beyond the [`SUMMARY_RUN_LINES`] listed.
    more_unsuccessful: usize,
    /// Completed runs not listed (a stage over [`SUMMARY_RUN_LINES`] runs).
    completed_unlisted: usize,
}

/// Every row of a small stage (or with `all_runs`); of a larger one, the first
/// [`SUMMARY_RUN_LINES`] rows that did not complete, in fan-out order.
fn listed_runs(rows: &[RunRow], all_runs: bool) -> ListedRuns<'_> {
    if all_runs || rows.len() <= SUMMARY_RUN_LINES {
        return ListedRuns {
            rows: rows.iter().collect(),
            more_unsuccessful: 0,
            completed_unlisted: 0,
        };
    }
    let unsuccessful: Vec<&RunRow> = rows
        .iter()
        .filter(|r| r.status != RunStatus::Completed)
        .collect();
    ListedRuns {
        more_unsuccessful: unsuccessful.len().saturating_sub(SUMMARY_RUN_LINES),
        completed_unlisted: rows.len() - unsuccessful.len(),
        rows: unsuccessful.into_iter().take(SUMMARY_RUN_LINES).collect(),
    }
}

/// `; tokens 12 in / 3 out; cost $0.000051` when the stage used any.
fn tokens(usage: &TokenUsage, cost: &CostTally) -> String {
    if usage.is_zero() {
        String::new()
    } else {
        format!(
            "; tokens {} in / {} out{}",
            usage.input_tokens,
            usage.output_tokens,
            cost_text(cost)
        )
    }
}

/// `; cost $0.000051`, or `; cost unknown (no price for model X: set llm.price)`.
fn cost_text(cost: &CostTally) -> String {
    match (cost.total_usd(), cost.note()) {
        (Some(usd), _) => format!("; cost {}", super::run_result::format_usd(usd)),
        (None, Some(note)) => format!("; {note}"),
        (None, None) => "; cost unknown".to_owned(),
    }
}

/// `; 2 empty answers` when runs completed with an empty final answer.
fn empty_answers<'a>(rows: impl IntoIterator<Item = &'a RunRow>) -> String {
    match rows.into_iter().filter(|r| r.empty_answer).count() {
        0 => String::new(),
        1 => "; 1 empty answer".to_owned(),
        n => format!("; {n} empty answers"),
    }
}

/// `text` on one line for a column: every control character (newline, tab, carriage
/// return, escape...) becomes a space, and the result is cut at `limit` characters.
pub(crate) fn one_line(text: &str, limit: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() > limit {
        let cut: String = flat.chars().take(limit).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

pub fn print_dry_run(
    plan: &ResolvedPlan,
    agents: &BTreeMap<PathBuf, ResolvedAgent>,
    format: Format,
    sbatch: Option<&[SbatchPreview]>,
) {
    let layers = topo_order(plan);
    let stages: Vec<serde_json::Value> = plan
        .stages
        .iter()
        .map(|s| {
            let now = match planned_runs(plan, s) {
                Ok(Some(n)) => format!(" ({n} now)"),
                Ok(None) => " (known when its needs finish)".to_string(),
                Err(e) => format!(" (cannot count them yet: {e})"),
            };
            let fanout = match &s.foreach {
                None => "one run".to_string(),
                Some(ResolvedForeach::Items(items)) => format!("{} runs (items)", items.len()),
                Some(ResolvedForeach::Files { pattern }) => {
                    format!("one run per file matching {pattern}{now}")
                }
                Some(ResolvedForeach::Lines(path)) => {
                    format!("one run per line of {}{now}", path.display())
                }
                Some(ResolvedForeach::Template(t)) => format!("one run per item of {t}{now}"),
            };
            serde_json::json!({
                "id": s.id,
                "agent": agents.get(&s.agent).map(|a| a.name.clone()).unwrap_or_default(),
                "agent_path": s.agent,
                "needs": s.needs,
                "fan_out": fanout,
                "on_failure": format!("{:?}", s.on_failure).to_lowercase(),
                "isolate": s.isolate,
                "retries": s.retries,
                "timeout_ms": s.timeout.map(|t| t.as_millis() as u64),
                "message": s.message,
            })
        })
        .collect();
    match format {
        Format::Json | Format::Raw => {
            let mut value = serde_json::json!({
                "plan": plan.file,
                "valid": true,
                "max_parallel": plan.max_parallel,
                "layers": layers,
                "stages": stages,
            });
            if let Some(previews) = sbatch {
                value["sbatch"] = serde_json::json!(previews
                    .iter()
                    .map(|p| serde_json::json!({"stage": p.stage, "command": p.command}))
                    .collect::<Vec<_>>());
            }
            emit_json(&value)
        }
        Format::Text => {
            let mut out = format!("Plan {} is valid.\n", plan.file.display());
            out.push_str(&format!("max_parallel: {}\n", plan.max_parallel));
            out.push_str(
                "A stage starts when every stage in its `needs` has finished; a stage without \
                 `needs` starts at once.\n",
            );
            for (i, layer) in layers.iter().enumerate() {
                out.push_str(&format!(
                    "\nlayer {} (runs in parallel): {}\n",
                    i + 1,
                    layer.join(", ")
                ));
                for id in layer {
                    if let Some(s) = stages.iter().find(|s| s["id"] == id.as_str()) {
                        let needs: Vec<&str> = s["needs"]
                            .as_array()
                            .map(|n| n.iter().filter_map(|v| v.as_str()).collect())
                            .unwrap_or_default();
                        let needs = if needs.is_empty() {
                            "no needs: starts at once".to_owned()
                        } else {
                            format!("needs [{}]", needs.join(", "))
                        };
                        let timeout = s["timeout_ms"]
                            .as_u64()
                            .map(|ms| {
                                format!(
                                    "; timeout {} of each run's own time",
                                    describe_duration(Duration::from_millis(ms))
                                )
                            })
                            .unwrap_or_default();
                        out.push_str(&format!(
                            "  {id}: agent {} — {}; {needs}{timeout}\n",
                            s["agent"].as_str().unwrap_or(""),
                            s["fan_out"].as_str().unwrap_or(""),
                        ));
                    }
                }
            }
            if plan.stages.iter().any(|stage| stage.timeout.is_some()) {
                out.push_str(&format!("\n{TIMEOUT_NOTE}\n"));
            }
            if let Some(previews) = sbatch {
                out.push_str(
                    "\nsbatch commands (--executor slurm; the orchestration id and workspace are \
                     chosen when the plan starts, later stages are submitted as their needs finish):\n",
                );
                for preview in previews {
                    out.push_str(&format!("\n# stage {}\n{}", preview.stage, preview.command));
                }
            }
            emit(&out);
        }
    }
}

/// What a stage's `timeout` counts, as `--dry-run` says it (docs/plan.md says the same).
pub const TIMEOUT_NOTE: &str = "A stage's `timeout` counts each run's own time: its model \
calls, tools and hooks. Time a run waits for the endpoint (behind `llm.max_in_flight`, \
`llm.requests_per_minute` or a Retry-After) is not counted, so a small max_in_flight does \
not cut runs that are only queued.";

/// One `sbatch` a `--executor slurm` plan would run, as `--dry-run` shows it.
pub struct SbatchPreview {
    pub stage: String,
    /// A shell snippet: the command and its job script as a here-document (or why the
    /// stage's items are not known before the plan runs).
    pub command: String,
}

/// How often [`Progress::tick`] is called: on a non-terminal, the plain progress line is
/// printed at most this often, and only when it changed.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// One stage's live counts.
#[derive(Default)]
struct StageProgress {
    total: usize,
    done: usize,
    running: usize,
    /// Finished without completing and not interrupted (FAILED, waiting for input).
    failed: usize,
    /// Stopped by Ctrl-C, SIGTERM or a kill: resumable, not failed.
    interrupted: usize,
    /// Failed attempts that were retried (`retries:` in the plan); not outcomes.
    retries: usize,
}

impl StageProgress {
    /// `running 2, failed 1, interrupted 3, retries 4` (interrupted and retries only when
    /// there are some).
    fn describe(&self) -> String {
        let mut text = format!("running {}, failed {}", self.running, self.failed);
        if self.interrupted > 0 {
            text.push_str(&format!(", interrupted {}", self.interrupted));
        }
        if self.retries > 0 {
            text.push_str(&format!(", retries {}", self.retries));
        }
        text
    }
}

/// `stage work: Completed with failures (3 completed, 2 failed of 5)`: a stage's end as the
/// plain progress says it, with the status's label (never its Rust name).
fn stage_finished_line(stage: &str, status: StageStatus, counts: &RunCounts) -> String {
    format!("stage {stage}: {} ({})", status.label(), counts.describe())
}

/// `text` on one line, at most `limit` characters (`…` marks a cut).
fn shorten_line(text: &str, limit: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= limit {
        return line;
    }
    let mut cut: String = line.chars().take(limit).collect();
    cut.push('…');
    cut
}

/// Live progress on stderr.
pub struct Progress {
    bars: Option<(MultiProgress, HashMap<String, ProgressBar>)>,
    stages: BTreeMap<String, StageProgress>,
    /// The last plain line printed (a line is printed again only when it changed).
    last_line: Option<String>,
    /// Model-call retry lines printed since the last tick, and those held back.
    retries_shown: usize,
    retries_held: usize,
    /// A run's wait for another process (the workspace's creation lock) was shown: every
    /// run of the batch waits for the same holder, so it is shown once.
    waiting_shown: bool,
}

/// Retry lines printed per [`PROGRESS_INTERVAL`] at most: an endpoint that is down for a
/// thousand runs would otherwise print a thousand lines; the rest are counted in one line.
const RETRY_LINES_PER_TICK: usize = 5;

impl Progress {
    pub fn new() -> Progress {
        let bars = std::io::stderr().is_terminal().then(|| {
            (
                MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                HashMap::new(),
            )
        });
        Progress {
            bars,
            stages: BTreeMap::new(),
            last_line: None,
            retries_shown: 0,
            retries_held: 0,
            waiting_shown: false,
        }
    }

    /// A run waits for another process (the engine's `Waiting`): shown once per batch.
    pub fn on_waiting(&mut self, run_id: &str, message: &str) {
        if !std::mem::replace(&mut self.waiting_shown, true) {
            self.print_line(&format!("… {run_id}: {message}"));
        }
    }

    /// A run's model call failed and is retried (the engine's `ModelRetry`): a `↻` line, or
    /// counted for the next tick's summary when many come at once.
    pub fn on_retry(&mut self, run_id: &str, attempt: u32, error: &str, delay_ms: u64) {
        if self.retries_shown >= RETRY_LINES_PER_TICK {
            self.retries_held += 1;
            return;
        }
        self.retries_shown += 1;
        let error = shorten_line(error, 200);
        self.print_line(&format!(
            "↻ {run_id}: model call attempt {attempt} failed ({error}); retrying in {delay_ms} ms"
        ));
    }

    /// What an endpoint taught (the engine's `ModelAdapted`, once per lesson): one line.
    pub fn on_adapted(&self, message: &str) {
        self.print_line(&format!("· {}", shorten_line(message, 400)));
    }

    /// A line above the bars (or on stderr without them).
    fn print_line(&self, line: &str) {
        match &self.bars {
            Some((multi, _)) => {
                let _ = multi.println(line);
            }
            None => eprintln!("{line}"),
        }
    }

    pub fn on_event(&mut self, event: &OrchestrationEvent) {
        match event {
            OrchestrationEvent::StageStarted {
                stage,
                runs,
                already_done,
            } => {
                // A resume starts where the last invocation stopped.
                let done = already_done.finished();
                self.stages.insert(
                    stage.clone(),
                    StageProgress {
                        total: *runs,
                        done,
                        running: 0,
                        failed: already_done.unsuccessful() - already_done.interrupted,
                        interrupted: already_done.interrupted,
                        retries: 0,
                    },
                );
                match &mut self.bars {
                    Some((multi, bars)) => {
                        let bar = multi.add(ProgressBar::new(*runs as u64));
                        let style = ProgressStyle::with_template(
                            "{prefix:>12} [{bar:30}] {pos}/{len} {msg} eta {eta}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> ");
                        bar.set_style(style);
                        bar.set_prefix(stage.clone());
                        bar.set_position(done as u64);
                        // The eta counts from here, not from the runs done before.
                        bar.reset_eta();
                        bars.insert(stage.clone(), bar);
                    }
                    None if done > 0 => eprintln!(
                        "stage {stage}: {runs} run(s), {done} already done ({})",
                        already_done.describe()
                    ),
                    None => eprintln!("stage {stage}: {runs} run(s)"),
                }
            }
            OrchestrationEvent::RunStarted { stage, .. } => {
                if let Some(c) = self.stages.get_mut(stage) {
                    c.running += 1;
                }
                self.refresh(stage);
            }
            OrchestrationEvent::RunFinished {
                stage,
                status,
                retried,
                ..
            } => {
                if let Some(c) = self.stages.get_mut(stage) {
                    c.running = c.running.saturating_sub(1);
                    // An attempt that is retried is not an outcome: its run starts again
                    // (counting it made a stage of 5 read `9/5`).
                    if *retried {
                        c.retries += 1;
                        self.refresh(stage);
                        return;
                    }
                    c.done += 1;
                    match status {
                        RunStatus::Completed => {}
                        RunStatus::Interrupted => c.interrupted += 1,
                        _ => c.failed += 1,
                    }
                }
                self.refresh(stage);
            }
            OrchestrationEvent::StageFinished {
                stage,
                status,
                counts,
            } => {
                match &self.bars {
                    Some((_, bars)) => {
                        if let Some(bar) = bars.get(stage) {
                            bar.finish_with_message(format!(
                                "{}: {}",
                                status.label(),
                                counts.describe()
                            ));
                        }
                    }
                    None => eprintln!("{}", stage_finished_line(stage, *status, counts)),
                }
                if *status == StageStatus::Failed {
                    eprintln!("stage {stage} failed: dependants will not start");
                }
            }
            OrchestrationEvent::Budget { message, exhausted } => {
                let line = if *exhausted {
                    format!("{message}: no run starts any more; runs in flight stop at their next model call (resume with a bigger --budget-usd / --budget-tokens)")
                } else {
                    format!("warning: {message}")
                };
                match &self.bars {
                    Some((multi, _)) => {
                        let _ = multi.println(line);
                    }
                    None => eprintln!("{line}"),
                }
            }
            OrchestrationEvent::Progress { .. } | OrchestrationEvent::Finished { .. } => {}
        }
    }

    fn refresh(&self, stage: &str) {
        if let (Some((_, bars)), Some(c)) = (&self.bars, self.stages.get(stage)) {
            if let Some(bar) = bars.get(stage) {
                bar.set_position(c.done as u64);
                bar.set_message(c.describe());
            }
        }
    }

    /// Called every [`PROGRESS_INTERVAL`]: when stderr is not a terminal, prints the plain
    /// progress line if it changed since the last one printed.
    pub fn tick(&mut self) {
        if self.retries_held > 0 {
            self.print_line(&format!(
                "↻ {} more model call retries (each run's engine.log and io/invocations have them all)",
                self.retries_held
            ));
        }
        self.retries_shown = 0;
        self.retries_held = 0;
        if self.bars.is_some() {
            return;
        }
        if let Some(line) = self.changed_line() {
            eprintln!("{line}");
        }
    }

    /// The plain progress line, or `None` when there is nothing to say or it says what the
    /// last one said (a line repeated every few seconds is noise in a log).
    fn changed_line(&mut self) -> Option<String> {
        if self.stages.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .stages
            .iter()
            .map(|(stage, c)| format!("{stage} {}/{} ({})", c.done, c.total, c.describe()))
            .collect();
        let line = format!("progress: {}", parts.join("; "));
        if self.last_line.as_deref() == Some(line.as_str()) {
            return None;
        }
        self.last_line = Some(line.clone());
        Some(line)
    }

    pub fn done(&self) {
        if let Some((multi, _)) = &self.bars {
            let _ = multi.clear();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn plain() -> Progress {
        Progress {
            bars: None,
            stages: BTreeMap::new(),
            last_line: None,
            retries_shown: 0,
            retries_held: 0,
            waiting_shown: false,
        }
    }

    #[test]
    fn retry_lines_are_bounded_per_tick_and_the_rest_counted() {
        let mut progress = plain();
        for n in 0..12 {
            progress.on_retry("r", n, "HTTP 503", 10);
        }
        assert_eq!(
            (progress.retries_shown, progress.retries_held),
            (RETRY_LINES_PER_TICK, 12 - RETRY_LINES_PER_TICK)
        );
        progress.tick();
        assert_eq!((progress.retries_shown, progress.retries_held), (0, 0));
    }

    fn finished(status: RunStatus) -> OrchestrationEvent {
        OrchestrationEvent::RunFinished {
            stage: "work".into(),
            index: 0,
            run_id: "r".into(),
            status,
            duration_ms: 0,
            error: None,
            retried: false,
        }
    }

    /// Issue 25 item 10: the plain progress line repeated every 2 s unchanged.
    #[test]
    fn the_plain_progress_line_is_printed_only_when_it_changed() {
        let mut progress = plain();
        assert_eq!(progress.changed_line(), None, "nothing started yet");
        progress.on_event(&OrchestrationEvent::StageStarted {
            stage: "work".into(),
            runs: 3,
            already_done: RunCounts::default(),
        });
        let first = progress.changed_line().unwrap();
        assert_eq!(first, "progress: work 0/3 (running 0, failed 0)");
        assert_eq!(progress.changed_line(), None, "unchanged: no second line");
        assert_eq!(progress.changed_line(), None);
        progress.on_event(&OrchestrationEvent::RunStarted {
            stage: "work".into(),
            index: 0,
            run_id: "r".into(),
            attempt: 1,
        });
        assert_eq!(
            progress.changed_line().unwrap(),
            "progress: work 0/3 (running 1, failed 0)"
        );
        assert_eq!(progress.changed_line(), None);
    }

    /// Issue 25 item 10: INTERRUPTED runs were counted as failed.
    #[test]
    fn interrupted_runs_are_counted_as_interrupted_not_failed() {
        let mut progress = plain();
        progress.on_event(&OrchestrationEvent::StageStarted {
            stage: "work".into(),
            runs: 3,
            already_done: RunCounts {
                total: 3,
                interrupted: 1,
                not_started: 2,
                ..RunCounts::default()
            },
        });
        progress.on_event(&finished(RunStatus::Interrupted));
        progress.on_event(&finished(RunStatus::Failed));
        assert_eq!(
            progress.changed_line().unwrap(),
            "progress: work 3/3 (running 0, failed 1, interrupted 2)"
        );
    }

    /// Issue 31 item 15: every attempt's end was counted as a finished run, so a stage of
    /// five runs with retries read `9/5`.
    #[test]
    fn a_retried_attempt_is_not_counted_as_a_finished_run() {
        let mut progress = plain();
        progress.on_event(&OrchestrationEvent::StageStarted {
            stage: "read".into(),
            runs: 5,
            already_done: RunCounts::default(),
        });
        for index in 0..5 {
            for attempt in 1..=2 {
                progress.on_event(&OrchestrationEvent::RunStarted {
                    stage: "read".into(),
                    index,
                    run_id: format!("r{index}"),
                    attempt,
                });
                progress.on_event(&OrchestrationEvent::RunFinished {
                    stage: "read".into(),
                    index,
                    run_id: format!("r{index}"),
                    status: RunStatus::Failed,
                    duration_ms: 0,
                    error: None,
                    retried: attempt == 1 && index != 4,
                });
                if index == 4 {
                    break;
                }
            }
        }
        assert_eq!(
            progress.changed_line().unwrap(),
            "progress: read 5/5 (running 0, failed 5, retries 4)"
        );
    }

    /// Issue 31 item 15: `CompletedWithFailures` was printed raw on stderr.
    #[test]
    fn a_finished_stage_is_named_with_its_label() {
        let mut out = Vec::new();
        for status in [
            StageStatus::CompletedWithFailures,
            StageStatus::NotStarted,
            StageStatus::Failed,
        ] {
            out.push(stage_finished_line(
                "work",
                status,
                &RunCounts::tally(1, &[]),
            ));
        }
        assert_eq!(
            out,
            [
                "stage work: Completed with failures (0 completed, 0 failed, 1 not started of 1)",
                "stage work: Not started (0 completed, 0 failed, 1 not started of 1)",
                "stage work: Failed (0 completed, 0 failed, 1 not started of 1)",
            ]
        );
    }

    fn row(run_id: &str, status: RunStatus, result: &str, empty_answer: bool) -> RunRow {
        RunRow {
            tokens_saved: 0,
            run_id: run_id.into(),
            index: 0,
            status,
            result: Some(result.into()),
            error: None,
            duration_ms: 1500,
            iterations: 2,
            attempts: 1,
            usage: TokenUsage {
                input_tokens: 10,
                output_tokens: 4,
                total_tokens: 14,
                estimated: false,
            },
            cost: Default::default(),
            empty_answer,
            reused: false,
        }
    }

    /// Issue 24 item 23 (a stage that never started read "Interrupted (0 … of 0)", a tab in
    /// an answer broke the columns) and issue 25 items 5 and 7 (tokens per stage, empty
    /// answers flagged).
    #[test]
    fn the_summary_says_not_started_flags_empty_answers_and_counts_tokens_per_stage() {
        use delta_actors::plan::state::{OrchestrationStatus, StageSummary, Totals};
        let runs = vec![
            row("t-work-0", RunStatus::Completed, "a\tb", false),
            row("t-work-1", RunStatus::Completed, "", true),
        ];
        let summary = OrchestrationSummary {
            orchestration_id: "t".into(),
            status: OrchestrationStatus::Interrupted,
            plan: "plan.yaml".into(),
            workspace: "/ws".into(),
            started_at: String::new(),
            ended_at: String::new(),
            duration_ms: 2000,
            stages: vec![
                StageSummary {
                    id: "work".into(),
                    status: StageStatus::Completed,
                    counts: RunCounts::tally(2, &runs),
                    runs,
                    usage: TokenUsage {
                        input_tokens: 20,
                        output_tokens: 8,
                        total_tokens: 28,
                        estimated: false,
                    },
                    cost: CostTally {
                        usd: 0.000123,
                        unpriced_model: None,
                    },
                },
                StageSummary {
                    id: "combine".into(),
                    status: StageStatus::NotStarted,
                    counts: RunCounts::default(),
                    runs: Vec::new(),
                    usage: TokenUsage::default(),
                    cost: Default::default(),
                },
            ],
            totals: Totals {
                tokens_saved: 0,
                counts: RunCounts::tally(2, &[]),
                input_tokens: 20,
                output_tokens: 8,
                cost: CostTally::unknown("m"),
            },
            error: None,
        };
        let text = render_summary(&summary, None, false);
        assert!(!text.contains('\t'), "{text}");
        assert!(
            text.contains("\nstage combine  Not started\n"),
            "no `Interrupted (0 … of 0)`: {text}"
        );
        assert!(
            text.contains("stage work  Completed  (2 completed, 0 failed of 2); tokens 20 in / 8 out; cost $0.000123; 1 empty answer\n"),
            "{text}"
        );
        assert!(
            text.contains("tokens 20 in / 8 out (every attempt); cost unknown (no price for model m: set llm.price); 1 empty answer"),
            "{text}"
        );
        let empty_row = text.lines().find(|l| l.contains("t-work-1")).unwrap();
        assert!(empty_row.ends_with("(empty answer)"), "{empty_row}");
        let tabbed_row = text.lines().find(|l| l.contains("t-work-0")).unwrap();
        assert!(tabbed_row.ends_with(" a b"), "{tabbed_row}");
    }

    /// Issue 31 item 18: a 10,000-run batch printed 10,007 summary lines on the terminal.
    /// The text summary holds counts per stage and the runs that did not complete (20 at
    /// most, then how to get the rest); a small stage still lists every run.
    #[test]
    fn the_text_summary_of_a_big_batch_is_counts_and_the_first_failures() {
        use delta_actors::plan::state::{OrchestrationStatus, StageSummary, Totals};
        let map_runs: Vec<RunRow> = (0..10_000)
            .map(|index| {
                let (status, error) = match index % 250 {
                    7 => (
                        RunStatus::Failed,
                        Some(format!("llm_timeout: no answer in 600 s (item {index})")),
                    ),
                    99 if index < 2500 => (
                        RunStatus::Interrupted,
                        Some("timeout: the run exceeded its time limit of 300 s".to_owned()),
                    ),
                    _ => (RunStatus::Completed, None),
                };
                RunRow {
                    run_id: format!("nightly-map-{index}"),
                    index,
                    result: error.is_none().then(|| format!("summary of file {index}")),
                    error,
                    ..row("", status, "", false)
                }
            })
            .collect();
        let reduce_runs = vec![RunRow {
            run_id: "nightly-reduce-0".into(),
            ..row("", RunStatus::Completed, "the report", false)
        }];
        let stage = |id: &str, status, runs: Vec<RunRow>| StageSummary {
            id: id.into(),
            status,
            counts: RunCounts::tally(runs.len(), &runs),
            usage: TokenUsage {
                input_tokens: 10 * runs.len() as u64,
                output_tokens: 4 * runs.len() as u64,
                total_tokens: 14 * runs.len() as u64,
                estimated: false,
            },
            // $1 per million tokens either way.
            cost: CostTally {
                usd: 14e-6 * runs.len() as f64,
                unpriced_model: None,
            },
            runs,
        };
        let stages = vec![
            stage("map", StageStatus::CompletedWithFailures, map_runs),
            stage("reduce", StageStatus::Completed, reduce_runs),
        ];
        let mut counts = RunCounts::default();
        for s in &stages {
            counts.add(&s.counts);
        }
        let summary = OrchestrationSummary {
            orchestration_id: "nightly".into(),
            status: OrchestrationStatus::Completed,
            plan: "/plans/nightly/plan.yaml".into(),
            workspace: "/plans/nightly/workspaces/W001".into(),
            started_at: String::new(),
            ended_at: String::new(),
            duration_ms: 3_723_400,
            stages,
            totals: Totals {
                counts,
                input_tokens: 100_010,
                output_tokens: 40_004,
                tokens_saved: 0,
                cost: CostTally {
                    usd: 0.140014,
                    unpriced_model: None,
                },
            },
            error: None,
        };
        let text = render_summary(&summary, None, false);
        assert!(text.lines().count() < 40, "{} lines", text.lines().count());
        // Named without the crate: `delta` and `delta-bench` both compile this module.
        insta::with_settings!({ prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("orchestration_big_batch_summary", text);
        });
        let all = render_summary(&summary, None, true);
        assert_eq!(
            all.lines().filter(|l| l.contains("nightly-map-")).count(),
            10_000,
            "--all-runs lists every run"
        );
    }

    /// Issue 24 item 23: a tab or newline in an answer shifted the summary's columns.
    #[test]
    fn control_characters_in_answers_become_spaces() {
        assert_eq!(one_line("a\tb\nc\r\u{1b}[31md", 70), "a b c  [31md");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }
}
