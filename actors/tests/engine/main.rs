//! Engine-level integration tests (one binary).
