//! CLI-level integration tests against the built binaries (one binary).
mod sessions;
mod sessions_pty;
