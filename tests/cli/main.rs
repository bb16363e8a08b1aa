//! CLI-level integration tests against the built binaries (one binary).
mod bench;
