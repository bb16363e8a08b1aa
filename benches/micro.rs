//! Criterion micro benchmarks of the public API.
fn main() {}
