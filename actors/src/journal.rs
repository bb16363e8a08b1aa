//! journal (placeholder until its module lands).
