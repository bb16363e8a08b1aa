//! How often a worker whose holder keeps disappearing is revived: at most
//! [`MAX_REVIVALS`] times within [`REVIVAL_WINDOW`], so a program that takes its holder down
//! (or a broken machine) cannot make the server restart it in a loop. Pure: the caller passes
//! the clock.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

pub const MAX_REVIVALS: usize = 3;
pub const REVIVAL_WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub struct RevivalBudget {
    recent: HashMap<String, VecDeque<Instant>>,
}

impl RevivalBudget {
    /// Records a revival of `worker` at `now` if the budget allows it.
    pub fn allow(&mut self, worker: &str, now: Instant) -> bool {
        let times = self.recent.entry(worker.to_string()).or_default();
        while times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= REVIVAL_WINDOW)
        {
            times.pop_front();
        }
        if times.len() >= MAX_REVIVALS {
            return false;
        }
        times.push_back(now);
        true
    }

    #[cfg(test)]
    pub fn forget(&mut self, worker: &str) {
        self.recent.remove(worker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_revived_at_most_three_times_a_minute() {
        let start = Instant::now();
        let mut budget = RevivalBudget::default();
        for second in 0..3 {
            assert!(budget.allow("w", start + Duration::from_secs(second)));
        }
        assert!(!budget.allow("w", start + Duration::from_secs(10)));
        assert!(budget.allow("other", start + Duration::from_secs(10)));
        assert!(budget.allow("w", start + Duration::from_secs(61)));
        budget.forget("w");
        assert!(budget.allow("w", start + Duration::from_secs(62)));
    }
}
