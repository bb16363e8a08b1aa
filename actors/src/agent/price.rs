//! agent.yaml `llm.price: {input_per_mtok, output_per_mtok, cached_input_per_mtok}`: the
//! dollars per million tokens a run's cost is computed at, in place of delta's model
//! catalogue (see [`crate::llm::price`]).
//!
//! Must not: look the model up in the catalogue (that is [`crate::llm::price::price_of`]'s
//! decision), or accept a price that is not a finite number in `0..=MAX_PRICE_PER_MTOK`.

use super::error::AgentError;
use crate::llm::price::{Price, MAX_PRICE_PER_MTOK, PRICE_KEYS};
use crate::yaml::{Fields, UnknownKeys};

/// `llm.price`, or `None` when unset. Unknown keys are refused whatever `strict:` says: a
/// misspelt price would silently fall back to the catalogue's.
pub(crate) fn parse_price(llm: &Fields<'_>) -> Result<Option<Price>, AgentError> {
    let Some(value) = llm.get("price") else {
        return Ok(None);
    };
    let price = Fields::new(llm.file(), &llm.key_path("price"), value)?;
    let mut ignored = Vec::new();
    price.check_keys(&PRICE_KEYS, UnknownKeys::Refuse, &mut ignored)?;
    let required = |key: &str| -> Result<f64, AgentError> {
        price
            .number_in(key, 0.0, MAX_PRICE_PER_MTOK)?
            .ok_or_else(|| {
                AgentError::invalid(
                    llm.file(),
                    format!("`{}` is required when `{}` is set", price.key_path(key), llm.key_path("price")),
                    "give both prices in dollars per million tokens, e.g.\nprice:\n  input_per_mtok: 0.15\n  output_per_mtok: 0.60",
                )
            })
    };
    Ok(Some(Price {
        input_per_mtok: required("input_per_mtok")?,
        output_per_mtok: required("output_per_mtok")?,
        cached_input_per_mtok: price.number_in("cached_input_per_mtok", 0.0, MAX_PRICE_PER_MTOK)?,
    }))
}
