//! W3C trace context as plain values: [`TraceSpan`] names one span of a distributed trace
//! (its trace id, its own span id, its parent's, whether it is sampled, the vendor
//! `tracestate`), parses and writes the `traceparent` header / `TRACEPARENT` variable, and
//! derives the ids of child spans.
//!
//! Child ids are a pure function of the parent and a key ([`TraceSpan::child`]): the run loop
//! (which hands `TRACEPARENT` to a tool before the tool's span exists) and the exporter
//! (which builds the span from the tool's events afterwards) compute the same id without
//! telling each other. The engine carries these values whether or not anything is exported:
//! they cost nothing when a request has none.
//!
//! Must not: import another module of the engine, read the environment, or export anything
//! (export is `crate::telemetry`'s).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest `tracestate` kept (the W3C limit is 32 members of at most 256 bytes each; 512
/// bytes is what the specification asks vendors to propagate at least).
pub const TRACE_STATE_MAX_LEN: usize = 512;

/// One span of a trace, as W3C trace context describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceSpan {
    /// The trace's id: 16 bytes, never all zero (32 lower-case hex digits in JSON).
    #[serde(with = "hex16")]
    pub trace_id: [u8; 16],
    /// This span's id: 8 bytes, never all zero (16 hex digits).
    #[serde(with = "hex8")]
    pub span_id: [u8; 8],
    /// The parent span's id; `None` for a trace's root (or a span parsed from a
    /// `traceparent`, whose own parent is not told).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex8_opt")]
    pub parent_span_id: Option<[u8; 8]>,
    /// Whether the trace is recorded (the `sampled` flag): spans of an unsampled trace are
    /// propagated but not exported.
    pub sampled: bool,
    /// The vendor-specific `tracestate` received with the trace, passed on unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_state: Option<String>,
}

impl TraceSpan {
    /// The span a `traceparent` value names (`00-<trace id>-<span id>-<flags>`), with the
    /// `tracestate` received beside it; `None` for a malformed value, a zero id or version
    /// `ff` (the W3C rules: such a header is ignored and a new trace starts).
    pub fn from_traceparent(traceparent: &str, tracestate: Option<&str>) -> Option<TraceSpan> {
        let mut parts = traceparent.trim().split('-');
        let version = parts.next()?;
        let (trace_hex, span_hex, flags_hex) = (parts.next()?, parts.next()?, parts.next()?);
        // Version 00 has exactly four parts; a later version may append more.
        if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        parse_hex::<1>(version)?;
        let trace_id = parse_hex::<16>(trace_hex)?;
        let span_id = parse_hex::<8>(span_hex)?;
        let flags = parse_hex::<1>(flags_hex)?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        let trace_state = tracestate
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= TRACE_STATE_MAX_LEN && s.is_ascii())
            .map(str::to_string);
        Some(TraceSpan {
            trace_id,
            span_id,
            parent_span_id: None,
            sampled: flags & 1 == 1,
            trace_state,
        })
    }

    /// A new root span of a new trace, its ids from `random` (16 + 8 bytes; an all-zero
    /// part is replaced, as the ids must not be zero).
    pub fn root(random: [u8; 24], sampled: bool) -> TraceSpan {
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        trace_id.copy_from_slice(&random[..16]);
        span_id.copy_from_slice(&random[16..]);
        if trace_id == [0; 16] {
            trace_id[15] = 1;
        }
        if span_id == [0; 8] {
            span_id[7] = 1;
        }
        TraceSpan {
            trace_id,
            span_id,
            parent_span_id: None,
            sampled,
            trace_state: None,
        }
    }

    /// A child of this span with an id of its own from `random` (a new span under a remote
    /// parent, or a plan's run, whose every submission is a span of its own).
    pub fn child_with_id(&self, random: [u8; 8]) -> TraceSpan {
        let span_id = if random == [0; 8] {
            [0, 0, 0, 0, 0, 0, 0, 1]
        } else {
            random
        };
        TraceSpan {
            trace_id: self.trace_id,
            span_id,
            parent_span_id: Some(self.span_id),
            sampled: self.sampled,
            trace_state: self.trace_state.clone(),
        }
    }

    /// The child of this span that `kind` and `key` name (`("stage", "review")`,
    /// `("chat", "3")`, `("tool", "call_1")`): the same id whoever computes it, different
    /// for another kind, key or parent (FNV-1a over all three, 64 bits).
    pub fn child(&self, kind: &str, key: &str) -> TraceSpan {
        let mut hash = Fnv::new();
        hash.write(&self.trace_id);
        hash.write(&self.span_id);
        hash.write(kind.as_bytes());
        hash.write(&[0xff]);
        hash.write(key.as_bytes());
        self.child_with_id(hash.finish().to_be_bytes())
    }

    /// The `traceparent` value naming this span (`00-<trace>-<span>-<01|00>`).
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{}",
            HexBytes(&self.trace_id),
            HexBytes(&self.span_id),
            if self.sampled { "01" } else { "00" }
        )
    }

    /// The trace id as 32 hex digits (how collectors' APIs and UIs show it).
    pub fn trace_id_hex(&self) -> String {
        HexBytes(&self.trace_id).to_string()
    }

    /// The span id as 16 hex digits.
    pub fn span_id_hex(&self) -> String {
        HexBytes(&self.span_id).to_string()
    }

    /// The variables a child process reads the context from: `TRACEPARENT`, and
    /// `TRACESTATE` when there is one.
    pub fn environment(&self) -> Vec<(String, String)> {
        let mut vars = vec![("TRACEPARENT".to_string(), self.traceparent())];
        if let Some(state) = &self.trace_state {
            vars.push(("TRACESTATE".to_string(), state.clone()));
        }
        vars
    }
}

/// The names [`TraceSpan::environment`] sets, which a child must not inherit from the
/// engine's own environment when the engine sets its own.
pub const TRACE_ENV_VARS: [&str; 2] = ["TRACEPARENT", "TRACESTATE"];

/// Lower-case hex of a byte slice, written without an intermediate string.
struct HexBytes<'a>(&'a [u8]);

impl fmt::Display for HexBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// `N` bytes from exactly `2N` hex digits (either case).
fn parse_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let digits = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(digits, 16).ok()?;
    }
    Some(out)
}

/// FNV-1a, 64 bits: stable across Rust versions and processes (a Slurm job derives the
/// same ids as the process that planned it).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

fn serialize_hex<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&HexBytes(bytes))
}

fn deserialize_hex<'de, D: Deserializer<'de>, const N: usize>(d: D) -> Result<[u8; N], D::Error> {
    let text = String::deserialize(d)?;
    parse_hex::<N>(&text)
        .ok_or_else(|| serde::de::Error::custom(format!("expected {} hex digits", 2 * N)))
}

mod hex16 {
    pub fn serialize<S: serde::Serializer>(bytes: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        super::serialize_hex(bytes, s)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        super::deserialize_hex::<D, 16>(d)
    }
}

mod hex8 {
    pub fn serialize<S: serde::Serializer>(bytes: &[u8; 8], s: S) -> Result<S::Ok, S::Error> {
        super::serialize_hex(bytes, s)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[u8; 8], D::Error> {
        super::deserialize_hex::<D, 8>(d)
    }
}

mod hex8_opt {
    use serde::Deserialize;

    pub fn serialize<S: serde::Serializer>(
        bytes: &Option<[u8; 8]>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => super::serialize_hex(bytes, s),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<[u8; 8]>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| {
                super::parse_hex::<8>(&text)
                    .ok_or_else(|| serde::de::Error::custom("expected 16 hex digits"))
            })
            .transpose()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_w3c_example_round_trips() {
        let span = TraceSpan::from_traceparent(EXAMPLE, Some("congo=t61rcWkgMzE")).unwrap();
        assert!(span.sampled);
        assert_eq!(span.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(span.span_id_hex(), "00f067aa0ba902b7");
        assert_eq!(span.traceparent(), EXAMPLE);
        assert_eq!(
            span.environment(),
            vec![
                ("TRACEPARENT".to_string(), EXAMPLE.to_string()),
                ("TRACESTATE".to_string(), "congo=t61rcWkgMzE".to_string())
            ]
        );
    }

    #[test]
    fn malformed_or_zero_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceSpan::from_traceparent(bad, None), None, "{bad}");
        }
        // A later version may carry more fields: the first four are read.
        assert!(TraceSpan::from_traceparent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more",
            None
        )
        .is_some_and(|s| !s.sampled));
    }

    #[test]
    fn derived_children_agree_and_differ_by_kind_key_and_parent() {
        let root = TraceSpan::root([7; 24], true);
        let a = root.child("tool", "call_1");
        assert_eq!(a, root.child("tool", "call_1"));
        assert_eq!(a.parent_span_id, Some(root.span_id));
        assert_eq!(a.trace_id, root.trace_id);
        assert_ne!(a.span_id, root.child("tool", "call_2").span_id);
        assert_ne!(a.span_id, root.child("chat", "call_1").span_id);
        assert_ne!(a.span_id, a.child("tool", "call_1").span_id);
    }

    #[test]
    fn serialised_as_hex_and_read_back() {
        let span = TraceSpan::root([1; 24], false).child("stage", "s");
        let json = serde_json::to_string(&span).unwrap();
        assert!(
            json.contains("\"trace_id\":\"01010101010101010101010101010101\""),
            "{json}"
        );
        let back: TraceSpan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, span);
    }

    #[test]
    fn zero_random_ids_are_replaced() {
        let root = TraceSpan::root([0; 24], true);
        assert_ne!(root.trace_id, [0; 16]);
        assert_ne!(root.span_id, [0; 8]);
        assert_ne!(root.child_with_id([0; 8]).span_id, [0; 8]);
    }
}
