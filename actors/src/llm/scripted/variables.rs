//! The variables a script template may use: [`TemplateContext`], filled per request by
//! `respond.rs`, their names for error hints, and a sample with every variable set that
//! `load.rs` renders each template with, so a template naming an unknown variable is refused
//! at load time.
//!
//! Must not: render templates or know rules and steps.

use serde::Serialize;

/// The variables a template may use, for error hints.
pub const TEMPLATE_VARIABLES: &str =
    "task, last_observation, last_user, step, agent, run_id, model";

/// What a template sees for one request.
#[derive(Serialize)]
pub(super) struct TemplateContext<'a> {
    pub(super) task: &'a str,
    pub(super) last_observation: &'a str,
    pub(super) last_user: &'a str,
    pub(super) step: usize,
    pub(super) agent: &'a str,
    pub(super) run_id: &'a str,
    pub(super) model: &'a str,
}

/// A context with every variable set, used to check templates at load time.
pub(super) fn sample_context() -> TemplateContext<'static> {
    TemplateContext {
        task: "task",
        last_observation: "observation",
        last_user: "user",
        step: 0,
        agent: "agent",
        run_id: "run",
        model: "model",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_names_exactly_the_context_fields() {
        let sample = serde_json::to_value(sample_context()).unwrap();
        let fields: Vec<&str> = sample
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut hinted: Vec<&str> = TEMPLATE_VARIABLES.split(", ").collect();
        let mut fields = fields;
        fields.sort_unstable();
        hinted.sort_unstable();
        assert_eq!(fields, hinted);
    }
}
