//! workspace (placeholder until its module lands).
