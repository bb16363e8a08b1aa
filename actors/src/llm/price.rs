//! What a model's tokens cost: the price a run uses ([`price_of`]: agent.yaml's `llm.price`
//! first, then delta's model catalogue), the dollars of one call's tokens ([`call_cost_usd`],
//! cached prompt tokens at their own price where the provider reported them). A run's
//! running total, unknown — never `0.0` — as soon as one call had no price, is
//! [`crate::protocol::CostTally`], a protocol value.
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

/// [`price_of`] for one run's `llm.price` and endpoint (which do not change while it runs),
/// kept per model name: a run asks at every model call, and a catalogue lookup lower-cases
/// the name and tries up to four keys.
#[derive(Debug, Default)]
pub struct PriceMemo {
    configured: Option<Price>,
    base_url: Option<String>,
    seen: std::cell::RefCell<Vec<(String, Option<Price>)>>,
}

/// Model names a run's memo keeps (a run calls one or two).
const PRICE_MEMO_MAX: usize = 8;

impl PriceMemo {
    /// The memo of a run priced by `configured` (agent.yaml's `llm.price`) and calling the
    /// endpoint at `base_url`.
    pub fn new(configured: Option<Price>, base_url: Option<&str>) -> PriceMemo {
        PriceMemo {
            configured,
            base_url: base_url.map(str::to_owned),
            seen: Default::default(),
        }
    }

    /// [`price_of`]`(configured, model, base_url)`'s price.
    pub fn price_of(&self, model: &str) -> Option<Price> {
        if let Some((_, price)) = self.seen.borrow().iter().find(|(name, _)| name == model) {
            return *price;
        }
        let found = price_of(self.configured.as_ref(), model, self.base_url.as_deref());
        let price = found.map(|found| found.price);
        let mut memo = self.seen.borrow_mut();
        if memo.len() < PRICE_MEMO_MAX {
            memo.push((model.to_owned(), price));
        }
        price
    }
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
    fn a_memo_answers_as_price_of_for_each_model() {
        let memo = PriceMemo::default();
        for _ in 0..2 {
            assert_eq!(
                memo.price_of("gpt-4o-mini"),
                price_of(None, "gpt-4o-mini", None).map(|found| found.price)
            );
            assert_eq!(memo.price_of("scripted-model-nobody-sells"), None);
        }
        assert_eq!(memo.seen.borrow().len(), 2);
        let configured = Price {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
            cached_input_per_mtok: None,
        };
        let agent_priced = PriceMemo::new(Some(configured), Some("http://127.0.0.1:1/v1"));
        assert_eq!(
            agent_priced.price_of("scripted-model-nobody-sells"),
            Some(configured)
        );
    }

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
}
