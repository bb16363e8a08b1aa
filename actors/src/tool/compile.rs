//! tool::compile (placeholder until its module lands).
