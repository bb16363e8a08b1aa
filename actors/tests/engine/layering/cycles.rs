//! Finding import cycles in a file graph: Tarjan's strongly connected components, then one
//! shortest cycle per component, written out with the line that makes each edge.
//!
//! Must not: decide which cycles are allowed (the caller removes those edges first).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::scan::Graph;

/// Groups of files that all reach each other through imports (components of one file are
/// left out: a file is not a cycle with itself).
pub fn strongly_connected(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct Tarjan<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        components: Vec<BTreeSet<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, node: &'g str) {
            let number = self.index.len();
            self.index.insert(node, number);
            self.low.insert(node, number);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self
                .graph
                .get(node)
                .into_iter()
                .flat_map(|edges| edges.keys())
            {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = BTreeSet::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    component.insert(member.to_owned());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.components.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for node in graph.keys() {
        if !tarjan.index.contains_key(node.as_str()) {
            tarjan.visit(node);
        }
    }
    tarjan.components.sort();
    tarjan.components
}

/// A shortest cycle through the first file of `component`, staying inside it.
pub fn shortest_cycle(graph: &Graph, component: &BTreeSet<String>) -> Vec<String> {
    let Some(start) = component.iter().next() else {
        return Vec::new();
    };
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start.as_str()]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flat_map(|edges| edges.keys()) {
            if !component.contains(next) {
                continue;
            }
            if next == start {
                let mut cycle = vec![node.to_owned()];
                let mut at = node;
                while let Some(previous) = came_from.get(at) {
                    cycle.push((*previous).to_owned());
                    at = previous;
                }
                cycle.reverse();
                return cycle;
            }
            if !came_from.contains_key(next.as_str()) && next != start {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    Vec::new()
}

/// `a.rs:12 uses crate::b::X` lines for each step of `cycle`, ending back at its start.
pub fn describe(graph: &Graph, cycle: &[String]) -> String {
    let mut text = String::new();
    for (i, from) in cycle.iter().enumerate() {
        let to = &cycle[(i + 1) % cycle.len()];
        if let Some(evidence) = graph.get(from).and_then(|edges| edges.get(to)) {
            text.push_str(&format!(
                "  {from}:{} uses `{}` ({to})\n",
                evidence.line, evidence.path
            ));
        }
    }
    text
}

/// Every cycle of `graph` (one per component), described; empty when there is none.
pub fn report(graph: &Graph) -> Vec<String> {
    strongly_connected(graph)
        .iter()
        .map(|component| {
            let files: Vec<&str> = component.iter().map(String::as_str).collect();
            format!(
                "import cycle among {}:\n{}",
                files.join(", "),
                describe(graph, &shortest_cycle(graph, component))
            )
        })
        .collect()
}
