//! Activity detection for agent workers: `active` when output keeps coming (at least
//! `active_chunks` chunks within `window`), `idle` after `silence` without output, `asking`
//! when, after that silence, an agent's asking pattern matches the rendered bottom rows of its
//! screen. Typing suppresses detection for `typing_suppression` (the echo is not the agent
//! working). Pure: the caller passes the clock and the rows.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use regex_lite::Regex;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActivityState {
    Active,
    Idle,
    Asking,
    #[default]
    Unknown,
}

/// What decided a state: an asking pattern or the output-rate heuristic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActivitySource {
    Pattern,
    Heuristic,
}

#[derive(Debug, Clone, Copy)]
pub struct ActivityConfig {
    pub active_chunks: usize,
    pub window: Duration,
    pub silence: Duration,
    pub typing_suppression: Duration,
}

impl Default for ActivityConfig {
    fn default() -> Self {
        ActivityConfig {
            active_chunks: 3,
            window: Duration::from_secs(2),
            silence: Duration::from_secs(2),
            typing_suppression: Duration::from_secs(3),
        }
    }
}

#[derive(Debug)]
pub struct ActivityDetector {
    config: ActivityConfig,
    recent: VecDeque<Instant>,
    last_output: Option<Instant>,
    typed_at: Option<Instant>,
    state: ActivityState,
    /// The silence after the last output was already judged.
    settled: bool,
}

pub type ActivityChange = (ActivityState, ActivitySource);

impl ActivityDetector {
    pub fn new(config: ActivityConfig) -> Self {
        ActivityDetector {
            config,
            recent: VecDeque::new(),
            last_output: None,
            typed_at: None,
            state: ActivityState::Unknown,
            settled: true,
        }
    }

    fn suppressed(&self, now: Instant) -> bool {
        self.typed_at.is_some_and(|typed| {
            now.saturating_duration_since(typed) < self.config.typing_suppression
        })
    }

    fn change(&mut self, state: ActivityState, source: ActivitySource) -> Option<ActivityChange> {
        if self.state == state {
            return None;
        }
        self.state = state;
        Some((state, source))
    }

    pub fn on_input(&mut self, now: Instant) {
        self.typed_at = Some(now);
    }

    pub fn on_output(&mut self, now: Instant) -> Option<ActivityChange> {
        self.last_output = Some(now);
        self.settled = false;
        self.recent.push_back(now);
        while self
            .recent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > self.config.window)
        {
            self.recent.pop_front();
        }
        // Bounded: only the count within the window matters.
        while self.recent.len() > self.config.active_chunks {
            self.recent.pop_front();
        }
        if self.suppressed(now) || self.recent.len() < self.config.active_chunks {
            return None;
        }
        self.change(ActivityState::Active, ActivitySource::Heuristic)
    }

    /// Called periodically; `bottom_rows` renders the last rows of the screen when needed.
    pub fn on_tick(
        &mut self,
        now: Instant,
        patterns: &[Regex],
        bottom_rows: impl FnOnce() -> String,
    ) -> Option<ActivityChange> {
        let last = self.last_output?;
        if self.settled || now.saturating_duration_since(last) < self.config.silence {
            return None;
        }
        if self.suppressed(now) {
            return None;
        }
        self.settled = true;
        self.recent.clear();
        let rows = bottom_rows();
        if patterns.iter().any(|p| p.is_match(&rows)) {
            self.change(ActivityState::Asking, ActivitySource::Pattern)
        } else {
            self.change(ActivityState::Idle, ActivitySource::Heuristic)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn output_bursts_are_active_silence_is_idle_and_a_question_is_asking() {
        let start = Instant::now();
        let patterns = [Regex::new(r"(?m)Proceed\? \[y/n\]\s*$").unwrap()];
        let mut detector = ActivityDetector::new(ActivityConfig::default());
        assert_eq!(detector.on_output(at(start, 0)), None);
        assert_eq!(detector.on_output(at(start, 100)), None);
        assert_eq!(
            detector.on_output(at(start, 200)),
            Some((ActivityState::Active, ActivitySource::Heuristic))
        );
        assert_eq!(
            detector.on_tick(at(start, 1000), &patterns, || unreachable!()),
            None
        );
        assert_eq!(
            detector.on_tick(at(start, 2300), &patterns, || "working...".into()),
            Some((ActivityState::Idle, ActivitySource::Heuristic))
        );
        assert_eq!(detector.on_output(at(start, 3000)), None);
        assert_eq!(
            detector.on_tick(at(start, 5100), &patterns, || "Proceed? [y/n] ".into()),
            Some((ActivityState::Asking, ActivitySource::Pattern))
        );
        // Judged once per silence.
        assert_eq!(
            detector.on_tick(at(start, 6000), &patterns, || unreachable!()),
            None
        );
    }

    #[test]
    fn typing_suppresses_detection_for_a_while() {
        let start = Instant::now();
        let mut detector = ActivityDetector::new(ActivityConfig::default());
        detector.on_input(at(start, 0));
        for ms in [10, 20, 30, 40] {
            assert_eq!(detector.on_output(at(start, ms)), None);
        }
        assert_eq!(detector.on_tick(at(start, 2500), &[], || "x".into()), None);
        assert_eq!(
            detector.on_tick(at(start, 3100), &[], || "x".into()),
            Some((ActivityState::Idle, ActivitySource::Heuristic))
        );
    }
}
