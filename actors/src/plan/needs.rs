//! plan::needs — a stage's dependencies, from its `needs` alone: a stage without `needs`
//! starts at once (independent stages run in parallel), `needs: previous` names the stage
//! written just before, and cycles are refused naming the cycle.
//!
//! Owns: the `needs` forms and their errors. Must not: order or schedule stages (`graph.rs`,
//! the orchestrator).

use std::path::Path;

use super::graph::find_cycle;
use super::keys::suggest;
use super::model::{PlanFile, PREVIOUS};
use super::PlanError;

const NEEDS_HINT: &str = "write `needs: [<stage id>, ...]`, or `needs: previous` for the stage \
                          just above; a stage without `needs` starts at once";

/// Each stage's needs as stage ids, in plan order.
pub(crate) fn resolve_needs(
    model: &PlanFile,
    ids: &[&str],
    file: &Path,
) -> Result<Vec<Vec<String>>, PlanError> {
    let mut all = Vec::with_capacity(model.stages.len());
    for (index, stage) in model.stages.iter().enumerate() {
        let key = format!("stages.{}.needs", stage.id);
        let mut needs: Vec<String> = Vec::new();
        for name in stage.needs.as_ref().map(|n| n.names()).unwrap_or_default() {
            let need = if name == PREVIOUS {
                let Some(previous) = index.checked_sub(1) else {
                    return Err(PlanError::invalid(
                        file,
                        key,
                        "`previous` in the first stage: there is no stage before it",
                        NEEDS_HINT,
                    ));
                };
                model.stages[previous].id.clone()
            } else if ids.contains(&name.as_str()) {
                name
            } else {
                let mut known: Vec<&str> = ids.to_vec();
                known.push(PREVIOUS);
                return Err(PlanError::invalid(
                    file,
                    key,
                    format!("unknown stage `{name}`"),
                    suggest(&name, &known).replace("known keys here", "stage ids"),
                ));
            };
            if need == stage.id {
                return Err(PlanError::invalid(
                    file,
                    key,
                    format!("stage `{need}` needs itself"),
                    NEEDS_HINT,
                ));
            }
            if !needs.contains(&need) {
                needs.push(need);
            }
        }
        all.push(needs);
    }
    let graph: Vec<(String, Vec<String>)> = model
        .stages
        .iter()
        .zip(&all)
        .map(|(stage, needs)| (stage.id.clone(), needs.clone()))
        .collect();
    if let Some(cycle) = find_cycle(&graph) {
        return Err(PlanError::invalid(
            file,
            format!("stages.{}.needs", cycle[0]),
            format!("dependency cycle: {}", cycle.join(" -> ")),
            "stages form a DAG; remove one of these needs",
        ));
    }
    Ok(all)
}
