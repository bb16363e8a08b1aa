//! metadata (placeholder until its module lands).
