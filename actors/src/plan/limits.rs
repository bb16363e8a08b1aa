//! plan::limits — the allowed range of every number a plan (or `delta orchestrate`'s flags)
//! can set, and the bounds on the work a plan can ask for while it is loaded and expanded:
//! file size and nesting, template work, `foreach` item counts and glob scans.
//!
//! Why: a number taken from input reaches a semaphore, a timer or an allocation; out of
//! range it panics (`--max-parallel 2305843009213693952` did), overflows `Instant +
//! Duration`, or hangs. Every limit is checked when the plan is loaded, `--dry-run`
//! included, and named in the error with its key, the value and the range.
//!
//! Owns: the ranges, and `check_numbers` applying them to a plan model.
//! Must not: apply defaults or resolve anything (`validate.rs`).

use std::ops::RangeInclusive;
use std::path::Path;
use std::time::Duration;

use super::model::PlanFile;
use super::PlanError;

/// Runs in flight across a plan (`max_parallel`, `--max-parallel`).
pub const MAX_PARALLEL: RangeInclusive<u64> = 1..=10_000;
/// Model requests in flight per endpoint (`llm.max_in_flight`).
pub const MAX_IN_FLIGHT: RangeInclusive<u64> = 1..=10_000;
/// `llm.requests_per_minute`.
pub const REQUESTS_PER_MINUTE: RangeInclusive<u64> = 1..=1_000_000;
/// `retries` (per run).
pub const RETRIES: RangeInclusive<u64> = 0..=100;
/// `max_iterations` (per run).
pub const MAX_ITERATIONS: RangeInclusive<u64> = 1..=100_000;
/// `timeout` (per run): up to 30 days, far below where a deadline could overflow.
pub const TIMEOUT_MS: RangeInclusive<u64> = 1..=30 * 24 * 3_600_000;
/// Items one `foreach` may expand to (run ids stay within their 128-character limit).
pub const FOREACH_ITEMS: usize = 100_000;
/// Longest plan `name` (it starts every orchestration and run id).
pub const NAME_LEN: usize = 48;

/// Largest plan file, in bytes.
pub const PLAN_BYTES: u64 = 1024 * 1024;
/// Deepest nesting of flow collections in a plan file.
pub const PLAN_DEPTH: usize = 64;

/// Directory entries a `foreach: {files: ...}` glob may look at.
pub const GLOB_ENTRIES: usize = 200_000;
/// Time a `foreach: {files: ...}` glob may take.
pub const GLOB_TIME: Duration = Duration::from_secs(5);
/// Time expanding one stage (all its items' messages) may take.
pub const EXPANSION_TIME: Duration = Duration::from_secs(60);

/// Every number of `model` (ids already checked) against its range; the first one out of
/// range is the error, naming its key, value and range.
pub(crate) fn check_numbers(model: &PlanFile, file: &Path) -> Result<(), PlanError> {
    let mut numbers: Vec<(String, Option<u64>, &RangeInclusive<u64>)> = vec![
        (
            "max_parallel".into(),
            model.max_parallel.map(|v| v as u64),
            &MAX_PARALLEL,
        ),
        (
            "llm.max_in_flight".into(),
            model.llm.max_in_flight.map(|v| v as u64),
            &MAX_IN_FLIGHT,
        ),
        (
            "llm.requests_per_minute".into(),
            model.llm.requests_per_minute.map(u64::from),
            &REQUESTS_PER_MINUTE,
        ),
        (
            "defaults.retries".into(),
            model.defaults.retries.map(u64::from),
            &RETRIES,
        ),
        (
            "defaults.max_iterations".into(),
            model.defaults.max_iterations.map(u64::from),
            &MAX_ITERATIONS,
        ),
    ];
    for stage in &model.stages {
        numbers.push((
            format!("stages.{}.retries", stage.id),
            stage.retries.map(u64::from),
            &RETRIES,
        ));
        numbers.push((
            format!("stages.{}.max_iterations", stage.id),
            stage.max_iterations.map(u64::from),
            &MAX_ITERATIONS,
        ));
    }
    if let Some(price) = &model.llm.price {
        let prices = [
            ("input_per_mtok", Some(price.input_per_mtok)),
            ("output_per_mtok", Some(price.output_per_mtok)),
            ("cached_input_per_mtok", price.cached_input_per_mtok),
        ];
        for (key, value) in prices {
            if let Some(value) = value.filter(|v| !crate::llm::price::valid_price(*v)) {
                return Err(PlanError::invalid(
                    file,
                    format!("llm.price.{key}"),
                    format!(
                        "{value} is out of range (allowed 0..={})",
                        crate::llm::price::MAX_PRICE_PER_MTOK
                    ),
                    "give dollars per million tokens, e.g. `price: {input_per_mtok: 0.15, output_per_mtok: 0.6}` (docs/cost.md)",
                ));
            }
        }
    }
    let budgets = std::iter::once(("budget".to_string(), model.budget.as_ref())).chain(
        model
            .stages
            .iter()
            .map(|stage| (format!("stages.{}.budget", stage.id), stage.budget.as_ref())),
    );
    for (key, budget) in budgets {
        if let Some((field, message)) = budget.and_then(|budget| budget.invalid()) {
            return Err(PlanError::invalid(
                file,
                format!("{key}.{field}"),
                message,
                "give dollars (`usd: 5`) and/or tokens (`tokens: 2000000`), each above 0 (docs/cost.md)",
            ));
        }
    }
    for (key, value, range) in numbers {
        if let Some(message) = value.and_then(|value| out_of_range(value, range)) {
            return Err(PlanError::invalid(
                file,
                key,
                message,
                "omit the key for its default; the ranges are listed in docs/plan.md",
            ));
        }
    }
    Ok(())
}

/// The message when `value` is outside `range`: the value and the allowed range (the error
/// around it names the key).
pub fn out_of_range(value: u64, range: &RangeInclusive<u64>) -> Option<String> {
    (!range.contains(&value)).then(|| {
        format!(
            "{value} is out of range (allowed {}..={})",
            range.start(),
            range.end()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_names_value_and_range() {
        assert_eq!(out_of_range(8, &MAX_PARALLEL), None);
        assert_eq!(
            out_of_range(2_305_843_009_213_693_952, &MAX_PARALLEL).as_deref(),
            Some("2305843009213693952 is out of range (allowed 1..=10000)")
        );
        assert!(out_of_range(0, &RETRIES).is_none());
        // Run ids: name + 21 (timestamp, random) + stage + 2 dashes + item index digits.
        let longest_run_id =
            NAME_LEN + 21 + 1 + crate::protocol::STAGE_ID_LEN + 1 + FOREACH_ITEMS.to_string().len();
        assert!(
            longest_run_id <= crate::workspace::MAX_RUN_ID_LEN,
            "{longest_run_id}"
        );
    }
}
