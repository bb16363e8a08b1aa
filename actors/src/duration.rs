//! Parses the human durations plans and agents use: `15m`, `30s`, `1h30m`, `250ms`,
//! `2d`, or a bare integer of milliseconds.
//!
//! Owns: the grammar and its error text. Must not: know about plan or agent keys (callers
//! add them), or import any other module of the engine: `plan` and `llm` both use it.

use std::time::Duration;

/// Why a duration did not parse; the text says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a duration: {reason}")]
pub struct DurationError {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// What a valid duration looks like, for hints.
pub const DURATION_HINT: &str =
    "write e.g. 30s, 15m, 1h30m, 250ms, or an integer number of milliseconds";

/// Parses `s` as a sum of `<number><unit>` parts (units `ms`, `s`, `m`, `h`, `d`, each at
/// most once, largest first) or a bare integer of milliseconds. Zero is refused: a zero
/// limit would fail every run at once.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let text = s.trim();
    let error = |reason: &str| DurationError {
        input: s.to_owned(),
        reason: reason.to_owned(),
    };
    if text.is_empty() {
        return Err(error("it is empty"));
    }
    if let Ok(millis) = text.parse::<u64>() {
        return positive(Duration::from_millis(millis)).ok_or_else(|| error("it is zero"));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    let mut last_rank = usize::MAX;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(error("expected a number before each unit"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| error("the number is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_len);
        let (rank, unit_millis) = match unit {
            "d" => (4, 86_400_000u64),
            "h" => (3, 3_600_000),
            "m" => (2, 60_000),
            "s" => (1, 1_000),
            "ms" => (0, 1),
            "" => {
                return Err(error(
                    "a number without a unit must be the whole value (milliseconds)",
                ))
            }
            _ => {
                return Err(error(&format!(
                    "unknown unit `{unit}` (use ms, s, m, h, d)"
                )))
            }
        };
        if rank >= last_rank {
            return Err(error(
                "units must each appear once, largest first (like 1h30m)",
            ));
        }
        last_rank = rank;
        let part = number
            .checked_mul(unit_millis)
            .ok_or_else(|| error("it is too large"))?;
        total = total
            .checked_add(Duration::from_millis(part))
            .ok_or_else(|| error("it is too large"))?;
        rest = after;
    }
    positive(total).ok_or_else(|| error("it is zero"))
}

fn positive(duration: Duration) -> Option<Duration> {
    (!duration.is_zero()).then_some(duration)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(
            parse_duration("1m30s500ms").unwrap(),
            Duration::from_millis(90_500)
        );
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        assert_eq!(parse_duration("1500").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration(" 5s ").unwrap(), Duration::from_secs(5));
    }

    proptest::proptest! {
        #[test]
        fn composed_durations_add_up(h in 0u64..100, m in 0u64..100, s in 0u64..100, ms in 1u64..1000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let expected = Duration::from_millis(((h * 60 + m) * 60 + s) * 1000 + ms);
            proptest::prop_assert_eq!(parse_duration(&text).unwrap(), expected);
        }
    }

    #[test]
    fn refuses_the_rest_with_a_reason() {
        for (input, reason) in [
            ("", "empty"),
            ("0", "zero"),
            ("0s", "zero"),
            ("15 minutes", "unknown unit"),
            ("m", "expected a number"),
            ("30m1h", "largest first"),
            ("1s1s", "largest first"),
            ("10x", "unknown unit `x`"),
            ("99999999999999999999s", "too large"),
            ("-5s", "expected a number"),
        ] {
            let error = parse_duration(input).unwrap_err();
            assert!(error.to_string().contains(reason), "{input}: {error}");
        }
    }
}
