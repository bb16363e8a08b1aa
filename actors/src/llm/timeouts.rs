//! How long one model call attempt may take: [`LlmTimeouts`] (the whole request, and the
//! silence allowed before the first byte and between body chunks), the layered settings they
//! are resolved from (`--llm-timeout` over plan `llm:` over agent.yaml `llm:` over the
//! engine default), and the accepted range.
//!
//! Why two limits: a provider that accepts the connection and never answers, or sends
//! headers and then stalls, would otherwise hold each attempt for as long as the whole-request
//! limit allows; the idle limit catches a dead stream early while a slow but steady
//! generation can still use the whole budget. The idle limit applies where silence means
//! trouble: a streamed reply (before its headers and between its chunks) and the body of
//! any reply once its headers came. A reply that is not streamed sends nothing until it is
//! generated, so its wait for the headers is bounded by the whole-request limit alone: a
//! slow model is not cut while it works.
//!
//! Why 600 s for the whole request: a long answer from a slow model (a CPU server, a
//! reasoning model) takes minutes; ten minutes is also what OpenAI's own SDKs allow a request.
//!
//! Must not: apply the limits (the gate and the HTTP backend do) or read the environment.

use std::time::Duration;

use crate::duration::parse_duration;

/// Default limit on one whole attempt (connect, send, wait, read the body).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Default limit on silence: before a streamed reply's headers, and between body chunks.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Shortest accepted limit: below it every real call would time out.
pub const MIN_LLM_TIMEOUT: Duration = Duration::from_millis(100);
/// Longest accepted limit (a day): beyond it a dead endpoint parks a run indefinitely.
pub const MAX_LLM_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The limits one attempt runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlmTimeouts {
    /// The whole attempt.
    pub request: Duration,
    /// Silence before a streamed reply's headers and between body chunks.
    pub idle: Duration,
}

impl Default for LlmTimeouts {
    fn default() -> Self {
        LlmTimeouts {
            request: DEFAULT_REQUEST_TIMEOUT,
            idle: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Which limit an attempt ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// The whole attempt took longer than `llm.request_timeout`.
    Request,
    /// Nothing came back (not even the response headers) within `llm.idle_timeout`.
    FirstByte,
    /// The response body stalled for `llm.idle_timeout`.
    Body,
}

impl TimeoutPhase {
    /// The limit and what hit it, e.g. "no response headers within 200 ms (llm.idle_timeout)".
    pub fn describe(self, limit: Duration) -> String {
        let limit = describe_duration(limit);
        match self {
            TimeoutPhase::Request => {
                format!("no complete answer within {limit} (llm.request_timeout)")
            }
            TimeoutPhase::FirstByte => format!(
                "no response within {limit} (llm.idle_timeout): the endpoint took the request but sent nothing back"
            ),
            TimeoutPhase::Body => format!(
                "the response stalled for {limit} (llm.idle_timeout) while its body was being read"
            ),
        }
    }
}

/// One configuration layer's timeouts; `None` = not set at this layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LlmTimeoutSettings {
    /// `request_timeout`: the whole attempt.
    pub request: Option<Duration>,
    /// `idle_timeout`: silence before the response headers and between body chunks.
    pub idle: Option<Duration>,
}

impl LlmTimeoutSettings {
    /// This layer's values where set, else `below`'s.
    pub fn over(self, below: LlmTimeoutSettings) -> LlmTimeoutSettings {
        LlmTimeoutSettings {
            request: self.request.or(below.request),
            idle: self.idle.or(below.idle),
        }
    }

    /// The limits to use: the values set, else `defaults`.
    pub fn resolve(self, defaults: LlmTimeouts) -> LlmTimeouts {
        LlmTimeouts {
            request: self.request.unwrap_or(defaults.request),
            idle: self.idle.unwrap_or(defaults.idle),
        }
    }

    /// Neither limit is set at this layer.
    pub fn is_empty(&self) -> bool {
        self.request.is_none() && self.idle.is_none()
    }
}

/// Refuses a limit outside [`MIN_LLM_TIMEOUT`]..=[`MAX_LLM_TIMEOUT`]; the text completes
/// "`<key>` is `<value>`: ...".
pub fn check_llm_timeout(value: Duration) -> Result<Duration, String> {
    if (MIN_LLM_TIMEOUT..=MAX_LLM_TIMEOUT).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{}, outside the accepted range 100ms..24h",
            describe_duration(value)
        ))
    }
}

/// Parses a limit written with a unit (`90s`, `2m`, `500ms`, `1h30m`) and checks its range.
/// A bare number is refused: `120` would be 120 milliseconds to the duration grammar, which
/// nobody means for a model call.
pub fn parse_llm_timeout(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{trimmed}` has no unit (write e.g. {trimmed}s, 2m or 500ms)"
        ));
    }
    let value = parse_duration(trimmed).map_err(|e| e.to_string())?;
    check_llm_timeout(value)
}

/// `1.5 s`, `250 ms`: for messages naming a limit.
pub fn describe_duration(value: Duration) -> String {
    if value < Duration::from_secs(1) {
        format!("{} ms", value.as_millis())
    } else {
        format!("{} s", value.as_secs_f64())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn layers_resolve_top_down_then_to_the_defaults() {
        let cli = LlmTimeoutSettings {
            request: Some(Duration::from_secs(5)),
            idle: None,
        };
        let agent = LlmTimeoutSettings {
            request: Some(Duration::from_secs(50)),
            idle: Some(Duration::from_secs(7)),
        };
        let resolved = cli.over(agent).resolve(LlmTimeouts::default());
        assert_eq!(resolved.request, Duration::from_secs(5));
        assert_eq!(resolved.idle, Duration::from_secs(7));
        assert_eq!(
            LlmTimeoutSettings::default().resolve(LlmTimeouts::default()),
            LlmTimeouts {
                request: DEFAULT_REQUEST_TIMEOUT,
                idle: DEFAULT_IDLE_TIMEOUT
            }
        );
    }

    #[test]
    fn limits_need_a_unit_and_a_sane_range() {
        assert_eq!(parse_llm_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_llm_timeout("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_llm_timeout("200ms"), Ok(Duration::from_millis(200)));
        for (bad, phrase) in [
            ("120", "no unit"),
            ("5ms", "outside the accepted range"),
            ("2d", "outside the accepted range"),
            ("soon", "not a duration"),
            ("", "not a duration"),
        ] {
            let err = parse_llm_timeout(bad).unwrap_err();
            assert!(err.contains(phrase), "{bad}: {err}");
        }
    }
}
