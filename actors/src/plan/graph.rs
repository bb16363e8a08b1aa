//! plan::graph — stage ordering over `needs`: cycle detection (naming the cycle), layers for
//! display, and which stages may start now.
//!
//! Owns: graph algorithms over stage ids. Must not: decide failure policy (`on_failure` is
//! the supervisor's business) or touch templates.

use std::collections::{BTreeMap, HashSet};

use super::resolved::ResolvedPlan;

/// Finds a dependency cycle among `(id, needs)` pairs (needs already known to exist) and
/// returns it as `a -> b -> a`, in plan order of its first stage.
pub(crate) fn find_cycle(stages: &[(String, Vec<String>)]) -> Option<Vec<String>> {
    let needs: BTreeMap<&str, &[String]> = stages
        .iter()
        .map(|(id, needs)| (id.as_str(), needs.as_slice()))
        .collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    for (start, _) in stages {
        if marks.contains_key(start.as_str()) {
            continue;
        }
        // Iterative DFS: (node, index of the next need to visit); the stack is the path.
        let mut stack: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        marks.insert(start.as_str(), Mark::Visiting);
        while let Some((node, next)) = stack.last().copied() {
            let node_needs = needs.get(node).copied().unwrap_or(&[]);
            match node_needs.get(next) {
                None => {
                    marks.insert(node, Mark::Done);
                    stack.pop();
                }
                Some(need) => {
                    if let Some(top) = stack.last_mut() {
                        top.1 += 1;
                    }
                    match marks.get(need.as_str()) {
                        Some(Mark::Done) => {}
                        Some(Mark::Visiting) => {
                            let from = stack.iter().position(|(id, _)| *id == need.as_str())?;
                            let mut cycle: Vec<String> = stack[from..]
                                .iter()
                                .map(|(id, _)| (*id).to_owned())
                                .collect();
                            cycle.push(need.clone());
                            return Some(cycle);
                        }
                        None => {
                            marks.insert(need.as_str(), Mark::Visiting);
                            stack.push((need.as_str(), 0));
                        }
                    }
                }
            }
        }
    }
    None
}

/// The stages in layers: every stage of a layer only needs stages of earlier layers; a
/// layer's stages can run at the same time. Stages keep plan order inside a layer.
pub fn topo_order(plan: &ResolvedPlan) -> Vec<Vec<String>> {
    let mut placed: HashSet<&str> = HashSet::new();
    let mut layers = Vec::new();
    // Validation refused cycles, so every round places at least one stage; the bound is a
    // guard, not a limit that valid plans reach.
    for _ in 0..plan.stages.len() {
        let layer: Vec<String> = plan
            .stages
            .iter()
            .filter(|stage| !placed.contains(stage.id.as_str()))
            .filter(|stage| {
                stage
                    .needs
                    .iter()
                    .all(|need| placed.contains(need.as_str()))
            })
            .map(|stage| stage.id.clone())
            .collect();
        if layer.is_empty() {
            break;
        }
        for id in &layer {
            if let Some(stage) = plan.stage(id) {
                placed.insert(stage.id.as_str());
            }
        }
        layers.push(layer);
    }
    layers
}

/// Stages that are neither started nor finished and whose needs have all finished, in plan
/// order. `finished` holds the stages whose dependants may start (the caller applies
/// `on_failure`: a stopped stage is simply never put there).
pub fn ready_stages(
    plan: &ResolvedPlan,
    finished: &HashSet<String>,
    started: &HashSet<String>,
) -> Vec<String> {
    plan.stages
        .iter()
        .filter(|stage| !finished.contains(&stage.id) && !started.contains(&stage.id))
        .filter(|stage| stage.needs.iter().all(|need| finished.contains(need)))
        .map(|stage| stage.id.clone())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        edges
            .iter()
            .map(|(id, needs)| {
                (
                    (*id).to_owned(),
                    needs.iter().map(|n| (*n).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn names_the_cycle() {
        let cycle = find_cycle(&graph(&[
            ("a", &[]),
            ("b", &["a", "d"]),
            ("c", &["b"]),
            ("d", &["c"]),
        ]));
        assert_eq!(cycle.unwrap().join(" -> "), "b -> d -> c -> b");
    }

    #[test]
    fn self_need_is_a_cycle() {
        assert_eq!(find_cycle(&graph(&[("a", &["a"])])).unwrap(), ["a", "a"]);
    }

    #[test]
    fn diamonds_are_not_cycles() {
        assert_eq!(
            find_cycle(&graph(&[
                ("a", &[]),
                ("b", &["a"]),
                ("c", &["a"]),
                ("d", &["b", "c"])
            ])),
            None
        );
    }
}
