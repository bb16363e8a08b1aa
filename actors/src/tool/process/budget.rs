//! The descriptor budget of child processes: at most so many tools, hooks and context
//! generators hold their pipes in this process at once. Each holds two or three descriptors
//! until its output is read to the end; with thousands of runs reaching their tool step
//! together (and exited tools waiting for a busy thread to read their last bytes) those
//! pipes would otherwise exhaust the open-files limit and fail runs with `EMFILE`. A start
//! past the budget waits for a running one to finish instead.
//!
//! The default takes half of the open-files limit for tools (the runs' journals and model
//! connections need the rest); a host that knows its own arithmetic (the load benchmark)
//! sets it with [`set_max_tool_processes`].
//!
//! Must not: start or kill processes.

use std::sync::{Mutex, OnceLock, PoisonError};

use tokio::sync::{Semaphore, SemaphorePermit};

/// Descriptors one child holds in this process: stdout, stderr and (when fed) stdin pipes.
const FDS_PER_PROCESS: u64 = 3;
/// Descriptors kept for everything else (runtime, sockets, files being written).
const RESERVED_FDS: u64 = 1024;
/// The budget never goes below this, however small the open-files limit.
const MIN_PROCESSES: usize = 16;

/// A resizable count of places; the process-wide one is [`budget`].
struct Budget {
    permits: Semaphore,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    size: usize,
    /// Places to take out of circulation as they come back (the budget was lowered while
    /// they were held).
    retire: usize,
}

impl Budget {
    fn new(size: usize) -> Budget {
        Budget {
            permits: Semaphore::new(size),
            state: Mutex::new(State { size, retire: 0 }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn resize(&self, max: usize) {
        let max = max.clamp(MIN_PROCESSES, Semaphore::MAX_PERMITS);
        let mut state = self.state();
        if max >= state.size {
            let mut grow = max - state.size;
            let unretired = grow.min(state.retire);
            state.retire -= unretired;
            grow -= unretired;
            self.permits.add_permits(grow);
        } else {
            let shrink = state.size - max;
            let forgotten = self.permits.forget_permits(shrink);
            state.retire += shrink - forgotten;
        }
        state.size = max;
    }

    async fn acquire(&self) -> Slot<'_> {
        // The semaphore is never closed, so acquiring only waits.
        Slot {
            permit: self.permits.acquire().await.ok(),
            budget: self,
        }
    }
}

fn budget() -> &'static Budget {
    static BUDGET: OnceLock<Budget> = OnceLock::new();
    BUDGET.get_or_init(|| Budget::new(default_max_tool_processes()))
}

/// Half of what the open-files limit leaves after the descriptors reserved for the engine
/// itself (`RESERVED_FDS`), in processes of three pipe ends each.
pub fn default_max_tool_processes() -> usize {
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024);
    let processes = limit.saturating_sub(RESERVED_FDS) / 2 / FDS_PER_PROCESS;
    usize::try_from(processes)
        .unwrap_or(usize::MAX)
        .clamp(MIN_PROCESSES, Semaphore::MAX_PERMITS)
}

/// Sets how many child processes may hold their pipes at once (at least 16). Processes
/// already running keep their place; a smaller budget applies as they finish.
pub fn set_max_tool_processes(max: usize) {
    budget().resize(max);
}

/// The current budget.
pub fn max_tool_processes() -> usize {
    budget().state().size
}

/// A place in the budget, held while the process's pipes are open.
pub(crate) struct Slot<'a> {
    permit: Option<SemaphorePermit<'a>>,
    budget: &'a Budget,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let mut state = self.budget.state();
        if state.retire > 0 {
            state.retire -= 1;
            permit.forget();
        }
    }
}

/// Waits for a place in the process-wide budget.
pub(crate) async fn acquire() -> Slot<'static> {
    budget().acquire().await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn try_take(budget: &Budget) -> Option<Slot<'_>> {
        tokio::time::timeout(Duration::from_millis(20), budget.acquire())
            .await
            .ok()
    }

    #[tokio::test]
    async fn places_are_bounded_and_follow_a_resize_even_while_held() {
        let budget = Budget::new(MIN_PROCESSES + 2);
        let mut held = Vec::new();
        while let Some(slot) = try_take(&budget).await {
            held.push(slot);
            assert!(held.len() <= MIN_PROCESSES + 2);
        }
        assert_eq!(held.len(), MIN_PROCESSES + 2);
        // Lowered while every place is taken: two places retire as they come back.
        budget.resize(MIN_PROCESSES);
        held.pop();
        held.pop();
        assert!(try_take(&budget).await.is_none());
        held.pop();
        let slot = try_take(&budget).await;
        assert!(
            slot.is_some(),
            "a place freed under the new size is handed out"
        );
        drop(slot);
        drop(held);
        let mut again = Vec::new();
        while let Some(slot) = try_take(&budget).await {
            again.push(slot);
        }
        assert_eq!(again.len(), MIN_PROCESSES);
        drop(again);
        budget.resize(MIN_PROCESSES + 5);
        assert_eq!(budget.state().size, MIN_PROCESSES + 5);
        assert_eq!(budget.permits.available_permits(), MIN_PROCESSES + 5);
    }

    #[test]
    fn the_default_leaves_half_the_limit_to_the_runs() {
        let default = default_max_tool_processes();
        assert!(default >= MIN_PROCESSES);
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert!(default as u64 * FDS_PER_PROCESS <= soft.saturating_sub(RESERVED_FDS) / 2 + 64);
    }
}
