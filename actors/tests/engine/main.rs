//! Engine-level integration tests (one binary).
mod session;
