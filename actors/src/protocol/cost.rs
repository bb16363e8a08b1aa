//! A run's spending as the engine reports it ([`CostTally`]): the dollars of its priced
//! model calls, unknown — never `0.0` — once one call had no price, and how that is written
//! to metadata.json and summaries. What a price is and how a call is priced is
//! `llm::price`'s.
//!
//! Must not: price anything, or import another module of the engine (protocol is the
//! ground floor).

use serde::{Deserialize, Serialize};

/// The message that stands for an unknown cost.
pub fn unknown_cost_note(model: &str) -> String {
    format!("cost unknown (no price for model {model}: set llm.price)")
}

/// A run's spending so far: the dollars of its priced calls, and the first model that had
/// no price (then the total is unknown: a partial sum would understate it). Written as
/// `{"total_cost_usd": 0.0123}`, or `{"total_cost_usd": null, "unpriced_model": "X"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "CostWire", into = "CostWire")]
pub struct CostTally {
    /// Dollars of the calls priced so far (finite, saturating at `f64::MAX`).
    pub usd: f64,
    /// A model a call went to that had no price: the total is unknown.
    pub unpriced_model: Option<String>,
}

/// [`CostTally`] as metadata.json holds it: no partial sum where the total is unknown.
#[derive(Serialize, Deserialize)]
struct CostWire {
    #[serde(default)]
    total_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unpriced_model: Option<String>,
}

impl From<CostWire> for CostTally {
    fn from(wire: CostWire) -> CostTally {
        let usd = wire
            .total_cost_usd
            .filter(|usd| usd.is_finite() && *usd >= 0.0);
        let unpriced_model = match (usd, wire.unpriced_model) {
            (_, Some(model)) => Some(model),
            // A total nobody can read is unknown, not zero.
            (None, None) => Some("(unrecorded)".to_string()),
            (Some(_), None) => None,
        };
        CostTally {
            usd: usd.unwrap_or(0.0),
            unpriced_model,
        }
    }
}

impl From<CostTally> for CostWire {
    fn from(tally: CostTally) -> CostWire {
        CostWire {
            total_cost_usd: tally.total_usd(),
            unpriced_model: tally.unpriced_model,
        }
    }
}

// `usd` is always finite (sums saturate, NaN is never added), so equality is reflexive.
impl Eq for CostTally {}

impl CostTally {
    /// A tally whose total is unknown because nothing priced `model`.
    pub fn unknown(model: &str) -> CostTally {
        CostTally {
            usd: 0.0,
            unpriced_model: Some(model.to_string()),
        }
    }

    /// The tally a RunResult reports: `total_usd`, or unknown with the model its
    /// `cost_note` names (see [`unknown_cost_note`]).
    pub fn from_reported(total_usd: Option<f64>, note: Option<&str>) -> CostTally {
        match total_usd {
            Some(usd) if usd.is_finite() && usd >= 0.0 => CostTally {
                usd,
                unpriced_model: None,
            },
            _ => {
                let model = note
                    .and_then(|n| n.strip_prefix("cost unknown (no price for model "))
                    .and_then(|n| n.strip_suffix(": set llm.price)"))
                    .unwrap_or("(unreported)");
                CostTally::unknown(model)
            }
        }
    }

    /// Adds one call: its dollars, or `Err(model)` when the model had no price.
    pub fn add_call(&mut self, cost: Result<f64, &str>) {
        match cost {
            Ok(dollars) => self.usd = saturating_sum(self.usd, dollars),
            Err(model) => {
                if self.unpriced_model.is_none() {
                    self.unpriced_model = Some(model.to_string());
                }
            }
        }
    }

    /// Adds another tally (an earlier driving, another run of a stage).
    pub fn add(&mut self, other: &CostTally) {
        self.usd = saturating_sum(self.usd, other.usd);
        if self.unpriced_model.is_none() {
            self.unpriced_model.clone_from(&other.unpriced_model);
        }
    }

    /// The total in dollars, `None` when some call had no price.
    pub fn total_usd(&self) -> Option<f64> {
        self.unpriced_model.is_none().then_some(self.usd)
    }

    /// "cost unknown (no price for model X: set llm.price)" when the total is unknown.
    pub fn note(&self) -> Option<String> {
        self.unpriced_model.as_deref().map(unknown_cost_note)
    }
}

/// `a + b`, finite: a sum that would overflow stays at `f64::MAX`, anything not finite or
/// negative counts as nothing.
fn saturating_sum(a: f64, b: f64) -> f64 {
    let b = if b.is_finite() && b > 0.0 { b } else { 0.0 };
    let sum = a + b;
    if sum.is_finite() {
        sum
    } else {
        f64::MAX
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn one_unpriced_call_makes_the_total_unknown() {
        let mut tally = CostTally::default();
        tally.add_call(Ok(0.25));
        assert_eq!(tally.total_usd(), Some(0.25));
        tally.add_call(Err("mystery"));
        tally.add_call(Ok(0.25));
        assert_eq!(tally.total_usd(), None);
        assert_eq!(
            tally.note().unwrap(),
            "cost unknown (no price for model mystery: set llm.price)"
        );
    }

    #[test]
    fn an_unknown_total_is_written_null_and_read_back_unknown() {
        let mut tally = CostTally::default();
        tally.add_call(Ok(0.5));
        tally.add_call(Err("mystery"));
        let json = serde_json::to_value(&tally).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"total_cost_usd": null, "unpriced_model": "mystery"})
        );
        let back: CostTally = serde_json::from_value(json).unwrap();
        assert_eq!(back.total_usd(), None);
        let known: CostTally =
            serde_json::from_value(serde_json::json!({"total_cost_usd": 0.25})).unwrap();
        assert_eq!(known.total_usd(), Some(0.25));
        let unreadable: CostTally =
            serde_json::from_value(serde_json::json!({"total_cost_usd": -1.0})).unwrap();
        assert_eq!(unreadable.total_usd(), None);
    }

    #[test]
    fn sums_stay_finite() {
        let mut tally = CostTally::default();
        tally.add_call(Ok(f64::MAX));
        tally.add_call(Ok(f64::MAX));
        tally.add_call(Ok(f64::NAN));
        tally.add_call(Ok(-3.0));
        assert_eq!(tally.total_usd(), Some(f64::MAX));
        let mut other = CostTally::default();
        other.add(&CostTally::unknown("x"));
        other.add(&tally);
        assert_eq!(other.total_usd(), None);
        assert_eq!(other.unpriced_model.as_deref(), Some("x"));
    }
}
