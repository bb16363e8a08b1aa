//! What a model's tokens cost: the price a run uses ([`price_of`]: agent.yaml's `llm.price`
//! first, then delta's model catalogue), the dollars of one call's tokens ([`call_cost_usd`],
//! cached prompt tokens at their own price where the provider reported them), and a run's
//! running total ([`CostTally`]), which is unknown — never `0.0` — as soon as one call had no
//! price.
//!
//! Must not: do I/O, or invent a price for a model nobody priced.

use serde::{Deserialize, Serialize};

use super::catalogue::catalogue;
use super::types::Usage;

/// The most dollars per million tokens `llm.price` accepts: well above any price offered
/// today (the dearest models cost a few hundred), low enough that no sum can overflow.
pub const MAX_PRICE_PER_MTOK: f64 = 100_000.0;

/// The keys of `llm.price` (agent.yaml and a plan's `llm:`).
pub const PRICE_KEYS: [&str; 3] = ["input_per_mtok", "output_per_mtok", "cached_input_per_mtok"];

/// Whether `value` is a price `llm.price` accepts: finite, in `0..=MAX_PRICE_PER_MTOK`.
pub fn valid_price(value: f64) -> bool {
    (0.0..=MAX_PRICE_PER_MTOK).contains(&value)
}

/// Dollars per million tokens of one model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// A prompt token.
    pub input_per_mtok: f64,
    /// A completion token.
    pub output_per_mtok: f64,
    /// A prompt token the provider served from its cache; unset, such tokens cost
    /// `input_per_mtok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
}

// Prices are validated finite where they are read (agent.yaml, plan.yaml), and JSON holds
// no NaN, so equality is reflexive.
impl Eq for Price {}

/// Where a run's price came from.
#[derive(Debug, Clone, PartialEq)]
pub enum PriceSource {
    /// agent.yaml's `llm.price`.
    Agent,
    /// delta's model catalogue: the row `entry`, taken from `catalogue` (litellm version, date).
    Catalogue {
        /// The catalogue's name of the model.
        entry: String,
        /// Where the catalogue's rows come from.
        catalogue: String,
    },
}

/// A price and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPrice {
    /// Dollars per million tokens.
    pub price: Price,
    /// agent.yaml or the catalogue.
    pub source: PriceSource,
}

/// The price of `model` as sent to the endpoint at `base_url`: `configured` (agent.yaml's
/// `llm.price`) when set, else the catalogue's row when it has both an input and an output
/// price; `None` when nobody priced the model.
pub fn price_of(
    configured: Option<&Price>,
    model: &str,
    base_url: Option<&str>,
) -> Option<ModelPrice> {
    if let Some(price) = configured {
        return Some(ModelPrice {
            price: *price,
            source: PriceSource::Agent,
        });
    }
    let table = catalogue();
    let info = table.lookup(model, base_url)?;
    Some(ModelPrice {
        price: Price {
            input_per_mtok: info.input_per_mtok?,
            output_per_mtok: info.output_per_mtok?,
            cached_input_per_mtok: info.cached_input_per_mtok,
        },
        source: PriceSource::Catalogue {
            entry: info.name.clone(),
            catalogue: table.source().to_string(),
        },
    })
}

/// Dollars of `usage` at `price`: uncached prompt tokens at the input price, cached ones
/// (`usage.cached_prompt_tokens`, never more than the prompt) at the cached price, completion
/// tokens at the output price. Always finite and ≥ 0 for prices `llm.price` accepts.
pub fn call_cost_usd(usage: &Usage, price: &Price) -> f64 {
    let cached = usage.cached_prompt_tokens.min(usage.prompt_tokens);
    let uncached = usage.prompt_tokens - cached;
    let cached_price = price.cached_input_per_mtok.unwrap_or(price.input_per_mtok);
    let dollars = (uncached as f64 * price.input_per_mtok
        + cached as f64 * cached_price
        + usage.completion_tokens as f64 * price.output_per_mtok)
        / 1_000_000.0;
    if dollars.is_finite() && dollars >= 0.0 {
        dollars
    } else {
        f64::MAX
    }
}

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

    fn usage(prompt: u64, cached: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            cached_prompt_tokens: cached,
        }
    }

    const PRICE: Price = Price {
        input_per_mtok: 2.0,
        output_per_mtok: 8.0,
        cached_input_per_mtok: Some(0.5),
    };

    #[test]
    fn agent_price_wins_over_the_catalogue() {
        let configured = Price {
            input_per_mtok: 1.0,
            output_per_mtok: 3.0,
            cached_input_per_mtok: None,
        };
        let found = price_of(Some(&configured), "gpt-4o-mini", None).unwrap();
        assert_eq!(found.price, configured);
        assert_eq!(found.source, PriceSource::Agent);
    }

    #[test]
    fn catalogue_prices_a_model_it_lists() {
        let found = price_of(None, "gpt-4o-mini", None).unwrap();
        let row = catalogue().lookup("gpt-4o-mini", None).unwrap();
        assert_eq!(Some(found.price.input_per_mtok), row.input_per_mtok);
        assert_eq!(Some(found.price.output_per_mtok), row.output_per_mtok);
        assert!(found.price.input_per_mtok > 0.0);
        match found.source {
            PriceSource::Catalogue { entry, catalogue } => {
                assert_eq!(entry, row.name);
                assert!(catalogue.contains("litellm"), "{catalogue}");
            }
            other => panic!("expected the catalogue, got {other:?}"),
        }
    }

    #[test]
    fn a_model_nobody_priced_has_no_price() {
        assert_eq!(price_of(None, "scripted-model-nobody-sells", None), None);
    }

    #[test]
    fn cached_prompt_tokens_cost_the_cached_price() {
        let cost = call_cost_usd(&usage(1_000, 400, 200), &PRICE);
        let expected = (600.0 * 2.0 + 400.0 * 0.5 + 200.0 * 8.0) / 1e6;
        assert!((cost - expected).abs() < 1e-15, "{cost} != {expected}");
    }

    #[test]
    fn cached_tokens_without_a_cached_price_cost_the_input_price() {
        let price = Price {
            cached_input_per_mtok: None,
            ..PRICE
        };
        let cost = call_cost_usd(&usage(1_000, 400, 0), &price);
        assert!((cost - 1_000.0 * 2.0 / 1e6).abs() < 1e-15);
    }

    #[test]
    fn more_cached_tokens_than_prompt_tokens_are_capped() {
        let cost = call_cost_usd(&usage(100, 5_000, 0), &PRICE);
        assert!((cost - 100.0 * 0.5 / 1e6).abs() < 1e-15);
    }

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
