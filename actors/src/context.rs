//! context (placeholder until its module lands).
